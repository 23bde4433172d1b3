"""Host threads: torch's intra/inter-op settings against the cores this process may use, and contention
(more busy threads than cores; the machine busy while this process is not)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf.profile.trace import ProfileTrace


@dataclass
class ThreadAnalysis:
    intra_op_threads: int
    inter_op_threads: int
    usable_cores: int
    physical_cores: int | None
    oversubscription: float
    """intra-op threads / usable cores; above 1 the threads of one op fight for cores."""
    process_busy_cores: float
    """Cores this process kept busy on average (process CPU time / wall time)."""
    machine_busy_cores: float
    """Cores busy on the whole machine on average."""
    other_busy_cores: float
    """Cores busy with other processes: machine minus this process and its loader workers, never negative."""
    load_average_1m: float | None
    busy_threads: int
    other_python_threads_busy_cores: float
    wanted_cores: int
    """Cores the step could keep busy: its intra-op threads, at most the usable cores and at most the threads of this
    process that were busy. A step that only ever runs one thread (Python calling operators too small for torch to
    split) can use one core however many intra-op threads it has: getting 0.9 of 2 cores does not starve it."""
    loader_workers: int = 0
    """This process's data-loader worker processes (training); 0 without."""
    loader_workers_busy_cores: float = 0.0
    """Cores those workers kept busy: counted as this process's load, not in `other_busy_cores`."""
    threads_set_by: str | None = None
    """Where the workload's own code set the thread count: 'build', 'step' (a count set from outside does not hold),
    None (see `ThreadInfo.threads_set_by`)."""
    threads_probed: bool | None = None
    """Whether a step was run under another thread count (see `ThreadInfo.threads_probed`)."""
    threads_asked: int | None = None
    """The thread count asked for with `--threads` (see `ThreadInfo.threads_asked`)."""
    issues: list[str] = field(default_factory=list)

    @property
    def others(self) -> str:
        """Who `other_busy_cores` are, for the findings' words: 'other processes', and where the loader has workers,
        that they are not among them (2 CPU-bound workers read as other processes' load)."""
        if not self.loader_workers:
            return "other processes"
        workers = f"{self.loader_workers} loader worker{'s' if self.loader_workers > 1 else ''}"
        return (f"other processes (not this process's {workers}, which kept {self.loader_workers_busy_cores:.1f} "
                f"cores busy)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyze(trace: ProfileTrace) -> ThreadAnalysis:
    trace.validate()
    t = trace.threads
    usable = max(1, t.usable_cores)
    process_busy = t.process_cpu_percent / 100.0
    machine_busy = t.system_cpu_percent / 100.0 * t.logical_cores
    # the loader's workers are this process's load: 2 CPU-bound ones read as "other processes kept 1.8 cores busy"
    other = max(0.0, machine_busy - process_busy - t.loader_workers_busy_cores)
    over = t.intra_op_threads / usable
    wanted = min(t.intra_op_threads, usable)
    if t.busy_threads > 0:  # 0: not measured (an older trace)
        wanted = min(wanted, t.busy_threads)
    issues = []
    if over > 1.0:
        issues.append(f"{t.intra_op_threads} intra-op threads on {usable} usable cores")
    if t.physical_cores and t.intra_op_threads > t.physical_cores and over <= 1.0:
        issues.append(f"{t.intra_op_threads} intra-op threads on {t.physical_cores} physical cores (SMT siblings)")
    if other >= 0.5:
        issues.append(f"other processes kept {other:.1f} of {t.logical_cores} cores busy"
                      + (f" (besides this process's loader workers, {t.loader_workers_busy_cores:.1f})"
                         if t.loader_workers else ""))
    if t.busy_threads > usable:
        issues.append(f"{t.busy_threads} busy threads in this process on {usable} usable cores")
    if t.other_python_threads_busy_cores >= 0.1:
        issues.append(f"other Python threads of this process used {t.other_python_threads_busy_cores:.1f} cores "
                      "(they share the GIL with the step)")
    return ThreadAnalysis(
        intra_op_threads=t.intra_op_threads,
        inter_op_threads=t.inter_op_threads,
        usable_cores=usable,
        physical_cores=t.physical_cores,
        oversubscription=over,
        process_busy_cores=process_busy,
        machine_busy_cores=machine_busy,
        other_busy_cores=other,
        load_average_1m=t.load_average_1m,
        busy_threads=t.busy_threads,
        other_python_threads_busy_cores=t.other_python_threads_busy_cores,
        wanted_cores=max(1, wanted),
        loader_workers=t.loader_workers,
        loader_workers_busy_cores=t.loader_workers_busy_cores,
        threads_set_by=t.threads_set_by,
        threads_probed=t.threads_probed,
        threads_asked=t.threads_asked,
        issues=issues,
    )
