"""The training input pipeline: the share of each step spent waiting for the next batch, and the data
loader's settings (num_workers, pin_memory, prefetch_factor, persistent_workers) with better ones."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import fmean as mean
from typing import Any

from dlperf._thirdparty import too_many_workers
from dlperf.errors import ProfileError
from dlperf.measure.stats import median
from dlperf.profile.analyzers import breakdown
from dlperf.profile.trace import TRAIN, ProfileTrace


@dataclass
class LoaderAnalysis:
    data_wait_s: float
    """Wait for the next batch in the median profiled step (the breakdown's `data_wait_s`); the mean over the
    profiled steps where loader workers feed them (`breakdown.fed_by_workers`)."""
    step_s: float
    """The median profiled step (the breakdown's `step_s`); the mean step where loader workers feed them."""
    wait_share: float
    compute_s: float
    """Step time outside the wait: what workers can overlap the loading with."""
    is_dataloader: bool
    num_workers: int | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    suggested: dict[str, Any] = field(default_factory=dict)
    """DataLoader keyword arguments worth trying (empty when the settings look right)."""
    notes: list[str] = field(default_factory=list)
    unprofiled_wait_share: float | None = None
    """Median wait over median step of the steps timed without the profiler; None when not recorded. The profiler
    (and a busy machine during the profiled steps) inflates the compute and so understates the wait's share."""
    core_share: float | None = None
    """The share of the loading's wall time it ran on a core or waited for one (`ProfileTrace.loader_core_share`);
    the rest it was blocked on I/O. None: not measured."""
    too_many_workers: str | None = None
    """More workers than usable CPUs: torch's warning, said once (the report's loader line), not at each build."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MAX_WORKERS = 16
"""The most loader workers dlperf proposes."""


def suggested_workers(usable_cores: int, current: int | None) -> int | None:
    """Workers to try: the usable cores (at least 2, at most 8), or double the current count (at most MAX_WORKERS);
    None where that is no more than the loader has (16 workers were proposed to a loader running 16)."""
    base = min(8, max(2, usable_cores))
    if current:
        more = min(max(base, current * 2), MAX_WORKERS)
        return more if more > current else None
    return base


def analyze(trace: ProfileTrace) -> LoaderAnalysis:
    trace.validate()
    if trace.mode != TRAIN:
        raise ProfileError("the data loader analysis needs a training-step trace (profile with --train)")
    # The wait and the step are the breakdown's (its median step), so the finding, the breakdown table and the
    # loader line of a report show one number.
    # (the mean step's where loader workers feed the steps: `breakdown.fed_by_workers`)
    b = breakdown.analyze(trace)
    wait = b.data_wait_s
    step = b.step_s
    average = breakdown.fed_by_workers(trace)
    compute = max(0.0, step - wait)
    info = trace.loader
    unprofiled_share = None
    if trace.unprofiled_data_wait_s and trace.unprofiled_step_s:
        center = mean if average else median
        unprofiled_share = min(1.0, center(trace.unprofiled_data_wait_s) / max(center(trace.unprofiled_step_s), 1e-12))
    suggested: dict[str, Any] = {}
    notes: list[str] = []
    cuda = trace.device.startswith("cuda")
    if info is None or not info.is_dataloader:
        name = info.type_name if info else "unknown"
        notes.append(f"the loader is a {name}, not a torch DataLoader: its settings cannot be read or changed")
        return LoaderAnalysis(wait, step, wait / step if step else 0.0, compute, False, None, None, None, None,
                              suggested, notes, unprofiled_share, core_share=trace.loader_core_share)
    # only what differs from the loader's own settings: the current ones are no fix
    if step > 0 and wait / step >= 0.1:
        workers = suggested_workers(trace.threads.usable_cores, info.num_workers)
        if workers is not None:
            suggested["num_workers"] = workers
        else:
            notes.append(f"the loader already runs {info.num_workers} workers, the most dlperf proposes "
                         f"({MAX_WORKERS}): more cannot be what is missing here; make each batch cheaper to load")
        if not info.persistent_workers:
            suggested["persistent_workers"] = True
    if cuda and not info.pin_memory:
        suggested["pin_memory"] = True
        notes.append("pin_memory=False on CUDA: host-to-device copies cannot be asynchronous")
    if info.num_workers and not info.persistent_workers:
        notes.append("workers are re-created every epoch (persistent_workers=False)")
        suggested["persistent_workers"] = True
    return LoaderAnalysis(
        data_wait_s=wait, step_s=step, wait_share=wait / step if step else 0.0, compute_s=compute,
        is_dataloader=True, num_workers=info.num_workers, pin_memory=info.pin_memory,
        prefetch_factor=info.prefetch_factor, persistent_workers=info.persistent_workers,
        suggested=suggested, notes=notes, unprofiled_wait_share=unprofiled_share, core_share=trace.loader_core_share,
        too_many_workers=too_many_workers(info.num_workers, trace.threads.usable_cores),
    )
