"""The worker processes behind a training loader: a torch DataLoader's, or those of the DataLoader a loader of the
user's own wraps (a class whose __iter__ yields from it, moving batches to a device or prefetching them)."""

from __future__ import annotations

from typing import Any


def held_dataloader(loader: Any) -> Any | None:
    """The loader when it is a DataLoader, else the one DataLoader it holds as an attribute (the one
    `ignored_loader_kwargs` checks the keyword arguments on), else None."""
    from torch.utils.data import DataLoader

    if isinstance(loader, DataLoader):
        return loader
    inner = [v for v in getattr(loader, "__dict__", {}).values() if isinstance(v, DataLoader)]
    return inner[0] if len(inner) == 1 else None


class LoaderWorkers:
    """Finds the worker processes of a loader's current iterator.

    A DataLoader's iterator holds them (`_workers`); a wrapping loader's iterator is the user's (a generator), which
    holds the DataLoader's iterator out of reach (on its frame's stack, or in a thread of a prefetcher). So the held
    DataLoader's iterator factory is wrapped to keep the last iterator it made: without it, `dlperf train` read no
    workers behind a wrapper with num_workers=2 (memory 'could not be read', the A/B's idle side left loading).
    """

    def __init__(self, loader: Any) -> None:
        self.dataloader = held_dataloader(loader)
        self._last: Any = None
        inner = self.dataloader
        if inner is None or inner is loader or not callable(getattr(inner, "_get_iterator", None)):
            return
        make = inner._get_iterator

        def keeping() -> Any:
            self._last = make()
            return self._last

        inner._get_iterator = keeping

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
        self._last = None
        if getattr(self.dataloader, "_iterator", None) is not None:
            self.dataloader._iterator = None  # type: ignore[union-attr]
