"""The captured trace as plain data: operator events, step windows, memory, threads, loader settings.

`capture.py` fills a `ProfileTrace` from torch.profiler; every analyzer reads only this model, so the
analyses are pure functions that tests can feed hand-built traces. Times are in microseconds (the
profiler's unit) on the profiler's clock; step wall times measured by dlperf are in seconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import ProfileError

PHASES = ("data", "h2d", "forward", "backward", "optimizer")
"""The step phases dlperf marks with record_function ranges named 'dlperf/<phase>'."""

INFERENCE = "inference"
TRAIN = "train"

DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::qint8": 1, "c10::quint8": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
"""Element size of the dtype names torch.profiler reports in `input_dtypes`."""

DTYPE_KIND = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "signed char": "int8",
              "unsigned char": "int8", "c10::qint8": "int8", "c10::quint8": "int8"}


@dataclass(frozen=True)
class OpEvent:
    """One operator call on the host (an aten op, an autograd node, ...), as the profiler saw it."""

    name: str
    start_us: float
    dur_us: float
    self_us: float
    thread: int
    depth: int
    """0 for a top-level operator (no operator above it, only dlperf/user ranges)."""
    step: int
    """Index of the profiled step it ran in; -1 outside any step."""
    phase: str
    """One of PHASES, or 'other' when outside every phase range."""
    flops: int = 0
    input_shapes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    input_strides: tuple[tuple[int, ...], ...] = ()
    """The inputs' strides where the profiler recorded them (() where not): a stride of 0 is a broadcast dimension
    (an `expand`ed tensor), read once however long it is."""
    self_memory_bytes: int = 0
    """Net host bytes allocated by this op itself (allocations minus frees), from profile_memory."""
    is_leaf: bool = True
    """True when no other operator ran inside it."""
    device_us: float = 0.0
    """CUDA: time of the device kernels this op launched itself (not those of nested ops); 0 on the CPU."""

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class KernelEvent:
    """One device kernel or memcpy (CUDA), on the device timeline."""

    name: str
    start_us: float
    dur_us: float
    step: int
    kind: str = "kernel"
    """'kernel', 'memcpy_h2d', 'memcpy_d2h', 'memcpy', 'memset'."""


@dataclass(frozen=True)
class StepWindow:
    """One profiled step: its range on the profiler clock, its wall time and its phase ranges."""

    index: int
    start_us: float
    end_us: float
    wall_s: float
    """Wall time of the step measured by dlperf around it (perf_counter)."""
    data_wait_s: float = 0.0
    """Time the step waited for its batch (next(loader)), measured by perf_counter."""
    phase_us: dict[str, float] = field(default_factory=dict)
    """Duration of each phase range in this step."""
    device_sync_us: float = 0.0
    """CUDA: host time in synchronize calls outside every operator (waiting for the device's queue)."""

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class MemoryInfo:
    """Host (and device) memory seen during the profiled steps."""

    start_rss_bytes: int
    peak_rss_bytes: int
    available_bytes: int
    """RAM available to the process when the capture started (psutil virtual_memory().available)."""
    total_bytes: int
    budget_bytes: int
    """What the process may use: --memory-budget, else RSS at start + RAM available."""
    budget_source: str = "available RAM"
    timeline: list[tuple[float, int]] = field(default_factory=list)
    """(time_us, bytes held: allocated minus freed since the first profiled step began), one point per allocation
    or free the profiler recorded (profile_memory); may go below 0 when the steps free what came before."""
    model_bytes: int = 0
    device_peak_allocated_bytes: int | None = None
    device_peak_reserved_bytes: int | None = None
    device_total_bytes: int | None = None


@dataclass
class ThreadInfo:
    """Thread settings and CPU use during the unprofiled measurement."""

    intra_op_threads: int
    inter_op_threads: int
    logical_cores: int
    physical_cores: int | None
    usable_cores: int
    """Cores this process may run on (sched_getaffinity)."""
    process_cpu_percent: float
    """Process CPU time / wall time, in percent of one core."""
    system_cpu_percent: float
    """Machine-wide busy share, percent of all cores."""
    load_average_1m: float | None = None
    busy_threads: int = 0
    """Native threads of this process that used at least 5% of a core (torch's pool included)."""
    other_python_threads_busy_cores: float = 0.0
    """CPU (in cores) used by this process's Python threads other than the main one and dlperf's samplers."""
    loader_workers: int = 0
    """The training loader's worker processes (the most seen at once); 0 without workers, inference, an older trace."""
    loader_workers_busy_cores: float = 0.0
    """CPU (in cores) those workers used: this process's load too, not other processes'."""
    threads_set_by: str | None = None
    """Where the workload's own code set torch's thread count: 'build' (a factory: dlperf's count, set before each
    step, overrides it), 'step' (each step, e.g. `torch.set_num_threads` in its forward: a count set from outside does
    not hold); None where it did not, or an older trace."""
    threads_asked: int | None = None
    """The intra-op thread count asked for from outside (`--threads`, `StepOptions.threads`); None where none was."""
    threads_probed: bool | None = None
    """Whether a step ran under another thread count than the one in place (inference: the untimed call that checks
    the model, always; training: the first warm-up step), which is how a step setting the count already in place is
    seen; False: no step did (training with no warm-up step), None: an older trace."""


@dataclass
class LoaderInfo:
    """The training data loader's settings (None fields when the loader is not a torch DataLoader)."""

    type_name: str
    is_dataloader: bool
    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None


@dataclass
class ProfileTrace:
    """Everything a profile captured; the only input of the analyzers."""

    workload: str
    mode: str
    device: str
    batch_size: int
    steps: list[StepWindow]
    ops: list[OpEvent]
    memory: MemoryInfo
    threads: ThreadInfo
    kernels: list[KernelEvent] = field(default_factory=list)
    loader: LoaderInfo | None = None
    unprofiled_step_s: list[float] = field(default_factory=list)
    """Per-step wall times of the same step measured without the profiler."""
    unprofiled_data_wait_s: list[float] = field(default_factory=list)
    """Per-step waits for the next batch in those unprofiled steps (training; empty for inference or an older
    trace)."""
    loader_core_share: float | None = None
    """Of the loading's wall time in those unprofiled steps (the main thread's waits without workers; the workers'
    lives with them), the share it ran on a core or waited in the run queue for one (Linux's schedstat); the rest it
    was blocked on I/O (disk, network, a sleep), which more workers overlap without needing free cores. None: not
    measured (not Linux, inference, an older trace)."""
    notes: list[str] = field(default_factory=list)
    cache_bytes: int | None = None
    """The cache an operator's data may stay in between operators: on CUDA the device's L2 (an H100's is
    50 MB); None: the CPU default of the roofline (operators.CACHE_RESIDENT_BYTES)."""

    def validate(self) -> ProfileTrace:
        """Raise ProfileError when the trace cannot be analysed (no steps, no operators, bad mode)."""
        if self.mode not in (INFERENCE, TRAIN):
            raise ProfileError(f"trace of '{self.workload}': unknown mode '{self.mode}' (inference or train)")
        if not self.steps:
            raise ProfileError(f"trace of '{self.workload}' has no profiled steps: profile at least one step")
        if not self.ops:
            raise ProfileError(
                f"trace of '{self.workload}' holds no operator events: was the step run inside the profiler?"
            )
        for s in self.steps:
            if s.end_us < s.start_us or s.wall_s <= 0:
                raise ProfileError(f"trace of '{self.workload}': step {s.index} has a negative or zero duration")
        return self

    @property
    def step_wall_s(self) -> list[float]:
        return [s.wall_s for s in self.steps]

    def ops_in_step(self, step: int) -> list[OpEvent]:
        return [o for o in self.ops if o.step == step]

    def summary(self) -> dict[str, Any]:
        """A small JSON-able summary (no per-event lists): for the store."""
        return {
            "workload": self.workload,
            "mode": self.mode,
            "device": self.device,
            "batch_size": self.batch_size,
            "steps": len(self.steps),
            "op_events": len(self.ops),
            "kernel_events": len(self.kernels),
            "profiled_step_s": self.step_wall_s,
            "unprofiled_step_s": self.unprofiled_step_s,
            "unprofiled_data_wait_s": self.unprofiled_data_wait_s,
            "loader_core_share": self.loader_core_share,
            "memory": {k: v for k, v in dataclasses.asdict(self.memory).items() if k != "timeline"},
            "threads": dataclasses.asdict(self.threads),
            "loader": dataclasses.asdict(self.loader) if self.loader else None,
            "notes": self.notes,
            "cache_bytes": self.cache_bytes,
        }


def dtype_kind(dtypes: tuple[str, ...]) -> str:
    """'fp32' | 'bf16' | 'fp16' | 'int8' from an op's input dtypes (first tensor dtype wins), 'fp32' default."""
    for d in dtypes:
        if d in DTYPE_KIND:
            return DTYPE_KIND[d]
    return "fp32"


def merged_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the union of (start, end) intervals."""
    total = 0.0
    cur_start: float | None = None
    cur_end = 0.0
    for start, end in sorted(intervals):
        if cur_start is None or start > cur_end:
            if cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_start is not None:
        total += cur_end - cur_start
    return total
