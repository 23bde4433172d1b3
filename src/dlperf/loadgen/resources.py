"""What the server used during a load level (perf_analyzer's --collect-metrics): its Prometheus page read
every interval while the level measures, reduced to the server process's CPU (cores busy on average) and
peak resident memory, and per GPU the mean utilization and power and the peak memory in use.

The GPU figures come from the `nv_gpu_*{gpu_uuid=...}` gauges that Triton exports and `dlperf serve`
exports in the same form; the process ones from the `process_cpu_seconds_total` and
`process_resident_memory_bytes` of prometheus_client's process collector (dlperf serve; a Triton server
has none, and those fields stay None). Pure parsing and reduction here; the sampling loop lives in
`generator.run_level`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GPU_GAUGES = {
    "nv_gpu_utilization": "utilization",
    "nv_gpu_power_usage": "power_w",
    "nv_gpu_memory_used_bytes": "memory_used_bytes",
    "nv_gpu_memory_total_bytes": "memory_total_bytes",
}
"""Triton's GPU gauges (utilization 0-1, watts, bytes) and what a sample calls them."""

CPU_SECONDS = "process_cpu_seconds_total"
RSS_BYTES = "process_resident_memory_bytes"
START_TIME = "process_start_time_seconds"


@dataclass
class Sample:
    """One reading of the metrics page: when (s, the generator's clock), the process CPU seconds and RSS,
    and each GPU's gauges by UUID."""

    t_s: float
    cpu_s: float | None = None
    rss_bytes: float | None = None
    started_s: float | None = None
    """The answering process's start time: readings from different processes (replicas behind a proxy)
    differ in it."""
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)


def parse_sample(text: str, t_s: float) -> Sample:
    """The figures of one Prometheus text page. ValueError if it is not Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    sample = Sample(t_s)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == CPU_SECONDS:
                sample.cpu_s = float(s.value)
            elif s.name == RSS_BYTES:
                sample.rss_bytes = float(s.value)
            elif s.name == START_TIME:
                sample.started_s = float(s.value)
            elif s.name in GPU_GAUGES and "gpu_uuid" in s.labels:
                sample.gpus.setdefault(s.labels["gpu_uuid"], {})[GPU_GAUGES[s.name]] = float(s.value)
    return sample


@dataclass
class GpuUsage:
    utilization: float | None
    """Mean of the readings, 0-1."""
    power_w: float | None
    """Mean of the readings, watts."""
    memory_used_max_bytes: float | None
    memory_total_bytes: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"utilization": self.utilization, "power_w": self.power_w,
                "memory_used_max_bytes": self.memory_used_max_bytes, "memory_total_bytes": self.memory_total_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuUsage:
        return cls(data.get("utilization"), data.get("power_w"), data.get("memory_used_max_bytes"),
                   data.get("memory_total_bytes"))


@dataclass
class Resources:
    """A level's server resources from `samples` readings of its metrics page."""

    samples: int
    interval_s: float
    cpu_cores: float | None = None
    """CPU seconds the server process used per second between the first and the last reading (2.0: two
    cores busy on average); None with fewer than two readings or no process metrics."""
    rss_max_bytes: float | None = None
    gpus: dict[str, GpuUsage] = field(default_factory=dict)
    processes: int = 1
    """Server processes that answered the readings: more than one (replicas behind a proxy, e.g. Ray Serve)
    leaves `cpu_cores` None, as their CPU counters cannot be differenced, and `rss_max_bytes` is one
    process's at a time."""

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "interval_s": self.interval_s, "cpu_cores": self.cpu_cores,
                "rss_max_bytes": self.rss_max_bytes, "gpus": {k: g.to_dict() for k, g in self.gpus.items()},
                "processes": self.processes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Resources:
        return cls(int(data["samples"]), float(data["interval_s"]), data.get("cpu_cores"), data.get("rss_max_bytes"),
                   {k: GpuUsage.from_dict(g) for k, g in (data.get("gpus") or {}).items()},
                   int(data.get("processes", 1)))


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(samples: Sequence[Sample], interval_s: float) -> Resources:
    """Reduce a level's readings: CPU from the first and last reading that have it, the peaks and means
    over all of them."""
    res = Resources(len(samples), interval_s)
    res.processes = max(1, len({s.started_s for s in samples if s.started_s is not None}))
    cpu = [s for s in samples if s.cpu_s is not None]
    if res.processes == 1 and len(cpu) >= 2 and cpu[-1].t_s > cpu[0].t_s:
        assert cpu[0].cpu_s is not None and cpu[-1].cpu_s is not None
        res.cpu_cores = (cpu[-1].cpu_s - cpu[0].cpu_s) / (cpu[-1].t_s - cpu[0].t_s)
    rss = [s.rss_bytes for s in samples if s.rss_bytes is not None]
    res.rss_max_bytes = max(rss) if rss else None
    for uuid in sorted({u for s in samples for u in s.gpus}):
        readings = [s.gpus[uuid] for s in samples if uuid in s.gpus]

        def values(key: str, readings: list[dict[str, float]] = readings) -> list[float]:
            return [r[key] for r in readings if key in r]

        used, total = values("memory_used_bytes"), values("memory_total_bytes")
        res.gpus[uuid] = GpuUsage(_mean(values("utilization")), _mean(values("power_w")),
                                  max(used) if used else None, total[-1] if total else None)
    return res


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.1f} GiB" if num_bytes >= 2**30 else f"{num_bytes / 2**20:.0f} MiB"


def describe(res: Resources) -> str:
    """'server CPU 1.62 cores, RSS max 412 MiB; GPU-1a2b: 37% busy, 50.9 W, 1.1 GiB of 15.0 GiB max (8 readings)'."""
    parts = []
    process = []
    if res.cpu_cores is not None:
        process.append(f"CPU {res.cpu_cores:.2f} cores")
    if res.rss_max_bytes is not None:
        process.append(f"RSS max {_gib(res.rss_max_bytes)}")
    if res.processes > 1:
        process.insert(0, f"{res.processes} processes answered (replicas?), so no CPU figure")
    if process:
        parts.append("server " + ", ".join(process))
    for uuid, gpu in res.gpus.items():
        figures = []
        if gpu.utilization is not None:
            figures.append(f"{gpu.utilization:.0%} busy")
        if gpu.power_w is not None:
            figures.append(f"{gpu.power_w:.1f} W")
        if gpu.memory_used_max_bytes is not None:
            total = f" of {_gib(gpu.memory_total_bytes)}" if gpu.memory_total_bytes else ""
            figures.append(f"{_gib(gpu.memory_used_max_bytes)}{total} max")
        parts.append(f"{uuid}: {', '.join(figures) or 'no readings'}")
    if not parts:
        parts.append("no process or GPU metrics on the page")
    return "; ".join(parts) + f" ({res.samples} reading{'s' if res.samples != 1 else ''})"
