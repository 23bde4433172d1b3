"""The worker processes behind a training loader: a torch DataLoader's, or those of the DataLoader a loader of the
user's own wraps (a class whose __iter__ yields from it, moving batches to a device or prefetching them)."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator
from typing import Any


def held_dataloader(loader: Any) -> Any | None:
    """The loader when it is a DataLoader, else the one DataLoader it holds as an attribute (the one
    `ignored_loader_kwargs` checks the keyword arguments on), else None."""
    from torch.utils.data import DataLoader

    if isinstance(loader, DataLoader):
        return loader
    inner = [v for v in getattr(loader, "__dict__", {}).values() if isinstance(v, DataLoader)]
    return inner[0] if len(inner) == 1 else None


@contextlib.contextmanager
def parent_objects_kept_from_workers() -> Iterator[None]:
    """Around the call that forks a DataLoader's worker processes: the objects alive now are left out of the workers'
    garbage collection (`gc.freeze`), and given back to this process's after (`gc.unfreeze`).

    A worker's collection otherwise finalizes this process's garbage in the child, where a thread it needs does not
    exist: a worker of `dlperf train`'s A/B hung for good inside gRPC's finalizer (`gc_collect_main` in cygrpc, a
    gRPC object a test of the same process had dropped), spinning on a lock a thread of the parent held at the
    fork, and the loop waited for its first batch forever. What the workers make themselves they still collect.
    Nothing is done where objects are frozen already (the caller's own `gc.freeze`, or a nested start)."""
    if gc.get_freeze_count() > 0:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def start_loader(loader: Any) -> Iterator[Any]:
    """`iter(loader)`, which forks a DataLoader's workers, with `parent_objects_kept_from_workers` and without
    torch's warning of more workers than it suggests (`quiet_worker_warning`: said once, as a note)."""
    from dlperf._thirdparty import quiet_worker_warning

    with quiet_worker_warning(), parent_objects_kept_from_workers():
        return iter(loader)


_KEPT = "_dlperf_last_iterator"
"""The attribute of a wrapped DataLoader that holds (a weak reference to) the last iterator it made."""


class LoaderWorkers:
    """Finds the worker processes of a loader's current iterator.

    A DataLoader's iterator holds them (`_workers`); a wrapping loader's iterator is the user's (a generator), which
    holds the DataLoader's iterator out of reach (on its frame's stack, or in a thread of a prefetcher). So the held
    DataLoader's iterator factory is wrapped to keep the last iterator it made: without it, `dlperf train` read no
    workers behind a wrapper with num_workers=2 (memory 'could not be read', the A/B's idle side left loading).

    The factory is wrapped once per DataLoader, however many loops read it (a make_loader that caches its loader
    gives every trial of `train --tune` the same one: each wrapped it again, one more call deep), and it keeps a weak
    reference: an iterator the user's loader dropped ends its workers as before.
    """

    def __init__(self, loader: Any) -> None:
        self.dataloader = held_dataloader(loader)
        self._wrapped = False
        inner = self.dataloader
        if inner is None or inner is loader or not callable(getattr(inner, "_get_iterator", None)):
            return
        self._wrapped = True
        if _KEPT in vars(inner):
            return
        make = inner._get_iterator

        def keeping() -> Any:  # called from the wrapper's generator, where the workers are forked
            with parent_objects_kept_from_workers():
                made = make()
            try:
                setattr(inner, _KEPT, weakref.ref(made))
            except TypeError:  # an iterator that takes no weak reference: kept while the DataLoader lives
                setattr(inner, _KEPT, lambda: made)
            return made

        setattr(inner, _KEPT, lambda: None)
        inner._get_iterator = keeping

    @property
    def _last(self) -> Any:
        """The last iterator the wrapped DataLoader made, while it lives; None unwrapped."""
        kept = getattr(self.dataloader, _KEPT, None) if self._wrapped else None
        return kept() if kept is not None else None

    def iterator(self, current: Any) -> Any:
        """The DataLoader iterator behind `current` (the loader's iterator now, or None before the first)."""
        if current is None or hasattr(current, "_workers"):
            return current
        return self._last

    def processes(self, current: Any) -> list[Any]:
        """The worker processes (multiprocessing.Process) behind `current`; none without workers."""
        return list(getattr(self.iterator(current), "_workers", None) or [])

    def pids(self, current: Any) -> list[int]:
        return [pid for pid in (getattr(w, "pid", None) for w in self.processes(current)) if pid is not None]

    def shutdown(self, current: Any) -> None:
        """Stop the workers behind `current` and the DataLoader's persistent ones, now rather than at collection."""
        for it in (current, self._last, getattr(self.dataloader, "_iterator", None)):
            stop = getattr(it, "_shutdown_workers", None)
            if callable(stop):
                stop()
        if self._wrapped:
            setattr(self.dataloader, _KEPT, lambda: None)
        if getattr(self.dataloader, "_iterator", None) is not None:
            self.dataloader._iterator = None  # type: ignore[union-attr]
