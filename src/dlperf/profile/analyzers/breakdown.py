"""Time breakdown of a step: waiting for data, host-to-device copies, forward, backward, optimizer,
framework overhead (wall time not covered by any operator), and on CUDA the host's wait in synchronize calls
and the device's idle time."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import fmean as mean
from typing import Any

from dlperf.measure.stats import median
from dlperf.profile.trace import TRAIN, OpEvent, ProfileTrace, StepWindow, merged_length

STALLED_CALL_FACTOR = 20.0
"""A top-level operator call over this many times its name's median call (and `STALLED_CALL_MIN_US` over it) stalled:
on a busy machine the process was descheduled inside it."""
STALLED_CALL_MIN_US = 1000.0


@dataclass
class TimeBreakdown:
    """Median seconds per profiled step for each part; `step_s` is the profiled step's wall time."""

    step_s: float
    data_wait_s: float
    h2d_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    other_s: float
    """Inside the step but outside every phase range (e.g. the loss on a custom step)."""
    operator_s: float
    """Time covered by top-level operators outside the data phase, less `stalled_op_s`."""
    framework_overhead_s: float
    """Step time outside the data phase not covered by any operator or device wait: Python, dispatch gaps,
    hooks."""
    device_sync_s: float | None
    """CUDA only: host time waiting in synchronize calls outside any operator (the device still working
    through what the host queued)."""
    device_idle_s: float | None
    """CUDA only: step time during which no kernel or copy ran on the device."""
    unprofiled_step_s: float | None
    profiling_overhead: float | None
    """Profiled step time over unprofiled step time (1.0 = no overhead)."""
    mean_step: bool = False
    """The figures are the mean step's (steps fed by loader workers), not the median one's."""
    stalled_op_s: float = 0.0
    """Of the operators' time, what calls that stalled (see `STALLED_CALL_FACTOR`) took beyond their name's median
    call: 200 calls of 5 µs and one of 8 ms in a descheduled step read "operators 5.24 ms (82%)" beside self times
    (medians over steps, per operator) adding up to 1.2 ms."""

    def share(self, part_s: float) -> float:
        return part_s / self.step_s if self.step_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def typical_call_us(trace: ProfileTrace) -> dict[str, float]:
    """Each top-level operator's median call (outside the data phase), over every profiled step."""
    calls: dict[str, list[float]] = {}
    for o in trace.ops:
        if o.step >= 0 and o.depth == 0 and o.phase != "data":
            calls.setdefault(o.name, []).append(o.dur_us)
    return {name: median(durations) for name, durations in calls.items()}


def stalled_us(top: list[OpEvent], typical_us: dict[str, float]) -> float:
    """What the stalled calls among top-level operators `top` took beyond their names' median calls (profiler µs)."""
    total = 0.0
    for o in top:
        typical = typical_us.get(o.name, o.dur_us)
        if o.dur_us - typical > STALLED_CALL_MIN_US and o.dur_us > STALLED_CALL_FACTOR * typical:
            total += o.dur_us - typical
    return total


def _per_step(trace: ProfileTrace, step: StepWindow, typical_us: dict[str, float]) -> dict[str, float]:
    ops = [o for o in trace.ops_in_step(step.index) if o.depth == 0 and o.phase != "data"]
    covered_us = merged_length([(o.start_us, o.end_us) for o in ops])
    stalled = stalled_us(ops, typical_us)
    # Profiler ranges are rescaled to the wall time dlperf measured around the same step.
    scale = step.wall_s / (step.dur_us * 1e-6) if step.dur_us > 0 else 1.0
    phase_s = {p: us * 1e-6 * scale for p, us in step.phase_us.items()}
    data_s = max(step.data_wait_s, phase_s.get("data", 0.0))
    in_phases = sum(phase_s.values()) - phase_s.get("data", 0.0)
    busy_s = step.wall_s - data_s
    sync_s = step.device_sync_us * 1e-6 * scale
    values = {
        "data_wait_s": data_s,
        "h2d_s": phase_s.get("h2d", 0.0),
        "forward_s": phase_s.get("forward", 0.0),
        "backward_s": phase_s.get("backward", 0.0),
        "optimizer_s": phase_s.get("optimizer", 0.0),
        "other_s": max(0.0, busy_s - in_phases),
        "operator_s": (covered_us - stalled) * 1e-6 * scale,
        "stalled_op_s": stalled * 1e-6 * scale,
        "framework_overhead_s": max(0.0, busy_s - covered_us * 1e-6 * scale - sync_s),
    }
    if trace.device.startswith("cuda"):
        values["device_sync_s"] = sync_s
        kernels = [(k.start_us, k.start_us + k.dur_us) for k in trace.kernels if k.step == step.index]
        values["device_idle_s"] = max(0.0, step.wall_s - merged_length(kernels) * 1e-6)
    return values


def fed_by_workers(trace: ProfileTrace) -> bool:
    """A training step whose batches come from DataLoader workers: its time is bimodal (a batch ready, or a wait for
    one), so its figures are means over steps, not the median step's."""
    return trace.mode == TRAIN and trace.loader is not None and bool(trace.loader.num_workers)


def analyze(trace: ProfileTrace) -> TimeBreakdown:
    """The breakdown of the median profiled step (by wall time; the lower one of two), so its parts add up; of the
    mean step where loader workers feed the steps (`fed_by_workers`: each part's mean over the steps, which add up
    as well, and the unprofiled steps' mean)."""
    trace.validate()
    typical = typical_call_us(trace)
    if fed_by_workers(trace):
        # a step fed by loader workers finds a batch ready or waits for one (160 ms, then 0): the median step of a
        # few such steps read 'waits 5.42 ms of 6.83 ms' and 'profiled 12x faster' of a right 79.9 ms mean
        rows = [_per_step(trace, s, typical) for s in trace.steps]
        row = {k: mean(r[k] for r in rows) for k in rows[0]}
        step_s = mean(s.wall_s for s in trace.steps)
        unprofiled = mean(trace.unprofiled_step_s) if trace.unprofiled_step_s else None
    else:
        ordered = sorted(trace.steps, key=lambda s: s.wall_s)
        step = ordered[(len(ordered) - 1) // 2]
        row, step_s = _per_step(trace, step, typical), step.wall_s
        unprofiled = median(trace.unprofiled_step_s) if trace.unprofiled_step_s else None
    return TimeBreakdown(
        step_s=step_s,
        data_wait_s=row["data_wait_s"],
        h2d_s=row["h2d_s"],
        forward_s=row["forward_s"],
        backward_s=row["backward_s"],
        optimizer_s=row["optimizer_s"],
        other_s=row["other_s"],
        operator_s=row["operator_s"],
        framework_overhead_s=row["framework_overhead_s"],
        device_sync_s=row.get("device_sync_s"),
        device_idle_s=row.get("device_idle_s"),
        unprofiled_step_s=unprofiled,
        profiling_overhead=step_s / unprofiled if unprofiled else None,
        mean_step=fed_by_workers(trace),
        stalled_op_s=row["stalled_op_s"],
    )
