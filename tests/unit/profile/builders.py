"""Hand-built traces for the analyzer and diagnosis tests: every number in them is known."""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.profile.trace import (
    INFERENCE,
    LoaderInfo,
    MemoryInfo,
    OpEvent,
    ProfileTrace,
    StepWindow,
    ThreadInfo,
)


@dataclass
class FakeCeilings:
    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float


CEILINGS = FakeCeilings({"fp32": 100e9, "int8": 400e9}, 10e9)
"""Ridge at 10 FLOP/B."""


def op(name: str, start_us: float, dur_us: float, *, step: int = 0, phase: str = "forward", depth: int = 0,
       self_us: float | None = None, flops: int = 0, shapes: tuple[tuple[int, ...], ...] = (),
       dtypes: tuple[str, ...] = (), mem: int = 0, leaf: bool = True) -> OpEvent:
    return OpEvent(name=name, start_us=start_us, dur_us=dur_us, self_us=dur_us if self_us is None else self_us,
                   thread=1, depth=depth, step=step, phase=phase, flops=flops, input_shapes=shapes,
                   input_dtypes=dtypes, self_memory_bytes=mem, is_leaf=leaf)


def threads(intra: int = 2, usable: int = 2, process_pct: float = 190.0, system_pct: float = 95.0,
            other_python: float = 0.0, workers: int = 0, workers_busy: float = 0.0) -> ThreadInfo:
    return ThreadInfo(intra_op_threads=intra, inter_op_threads=1, logical_cores=usable, physical_cores=usable,
                      usable_cores=usable, process_cpu_percent=process_pct, system_cpu_percent=system_pct,
                      load_average_1m=1.0, busy_threads=intra, other_python_threads_busy_cores=other_python,
                      loader_workers=workers, loader_workers_busy_cores=workers_busy)


def memory(peak: int = 1 << 30, budget: int = 16 << 30) -> MemoryInfo:
    return MemoryInfo(start_rss_bytes=1 << 29, peak_rss_bytes=peak, available_bytes=budget - (1 << 29),
                      total_bytes=budget, budget_bytes=budget)


def trace(ops: list[OpEvent], *, steps: int = 1, step_us: float = 10_000.0, mode: str = INFERENCE,
          data_wait_s: float = 0.0, phase_us: dict[str, float] | None = None, thread_info: ThreadInfo | None = None,
          mem: MemoryInfo | None = None, loader: LoaderInfo | None = None,
          unprofiled_s: float | None = None) -> ProfileTrace:
    """Steps of `step_us` each, back to back from t=0; the wall time equals the profiler range."""
    windows = [StepWindow(index=i, start_us=i * step_us, end_us=(i + 1) * step_us, wall_s=step_us * 1e-6,
                          data_wait_s=data_wait_s, phase_us=dict(phase_us or {"forward": step_us}))
               for i in range(steps)]
    return ProfileTrace(workload="synthetic", mode=mode, device="cpu", batch_size=8, steps=windows, ops=ops,
                        memory=mem or memory(), threads=thread_info or threads(), loader=loader,
                        unprofiled_step_s=[unprofiled_s or step_us * 1e-6] * 3)


def gemm(start_us: float, dur_us: float, m: int = 256, k: int = 512, n: int = 512, step: int = 0) -> OpEvent:
    return op("aten::addmm", start_us, dur_us, step=step, flops=2 * m * k * n,
              shapes=((n,), (m, k), (k, n), (), ()), dtypes=("float", "float", "float", "Scalar", "Scalar"))


def elementwise(start_us: float, dur_us: float, numel: int = 4 << 20, step: int = 0) -> OpEvent:
    return op("aten::mul", start_us, dur_us, step=step, shapes=((numel,), ()), dtypes=("float", "Scalar"))
