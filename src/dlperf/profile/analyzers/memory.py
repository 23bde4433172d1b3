"""Memory: peak host RSS against the budget (headroom), the allocation timeline of the profiled steps, the
largest allocations, and device memory (CUDA) against the device's capacity."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf.errors import ProfileError
from dlperf.profile.trace import ProfileTrace

MAX_TIMELINE_POINTS = 200


@dataclass
class Allocation:
    op: str
    bytes: int
    phase: str
    step: int


@dataclass
class MemoryAnalysis:
    peak_rss_bytes: int
    start_rss_bytes: int
    budget_bytes: int
    budget_source: str
    used_fraction: float
    """Peak RSS / budget."""
    headroom_bytes: int
    total_bytes: int
    model_bytes: int
    step_allocated_peak_bytes: int
    """Most memory allocated within a profiled step and held at once (allocations minus frees, profile_memory)."""
    largest_allocations: list[Allocation] = field(default_factory=list)
    timeline: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the first profiled step, bytes held: allocated minus freed since then), at most 200
    points."""
    device_peak_allocated_bytes: int | None = None
    device_peak_reserved_bytes: int | None = None
    device_total_bytes: int | None = None
    device_used_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyze(trace: ProfileTrace, top_n: int = 5) -> MemoryAnalysis:
    trace.validate()
    m = trace.memory
    if m.budget_bytes <= 0:
        raise ProfileError(f"trace of '{trace.workload}': memory budget must be positive, got {m.budget_bytes}")
    t0 = trace.steps[0].start_us
    timeline = [((t - t0) * 1e-6, b) for t, b in m.timeline]
    # Peak held within a step: cumulative bytes minus the level the step started at.
    step_peak = 0
    for step in trace.steps:
        level_at_start = 0
        peak = 0
        for t, b in m.timeline:
            if t < step.start_us:
                level_at_start = b
            elif t <= step.end_us:
                peak = max(peak, b - level_at_start)
        step_peak = max(step_peak, peak)
    if len(timeline) > MAX_TIMELINE_POINTS:
        stride = len(timeline) / MAX_TIMELINE_POINTS
        timeline = [timeline[int(i * stride)] for i in range(MAX_TIMELINE_POINTS)]
    allocs = sorted((o for o in trace.ops if o.self_memory_bytes > 0 and o.step >= 0),
                    key=lambda o: o.self_memory_bytes, reverse=True)
    device_used = None
    if m.device_peak_reserved_bytes is not None and m.device_total_bytes:
        device_used = m.device_peak_reserved_bytes / m.device_total_bytes
    return MemoryAnalysis(
        peak_rss_bytes=m.peak_rss_bytes,
        start_rss_bytes=m.start_rss_bytes,
        budget_bytes=m.budget_bytes,
        budget_source=m.budget_source,
        used_fraction=m.peak_rss_bytes / m.budget_bytes,
        headroom_bytes=m.budget_bytes - m.peak_rss_bytes,
        total_bytes=m.total_bytes,
        model_bytes=m.model_bytes,
        step_allocated_peak_bytes=step_peak,
        largest_allocations=[Allocation(o.name, o.self_memory_bytes, o.phase, o.step) for o in allocs[:top_n]],
        timeline=timeline,
        device_peak_allocated_bytes=m.device_peak_allocated_bytes,
        device_peak_reserved_bytes=m.device_peak_reserved_bytes,
        device_total_bytes=m.device_total_bytes,
        device_used_fraction=device_used,
    )
