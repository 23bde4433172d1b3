"""Benchmark a workload: for each batch size, build inputs, time the call, record memory and utilization."""

from __future__ import annotations

import bisect
import contextlib
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf._device import check_device
from dlperf.errors import ConfigError, MeasurementError
from dlperf.measure.clock import clock_for
from dlperf.measure.env import check_threads
from dlperf.measure.env import gpu_index as cuda_device_index
from dlperf.measure.memory import PeakRssSampler, cuda_peak, cuda_reset_peak, current_rss_bytes, parameter_bytes
from dlperf.measure.notes import bench_warnings
from dlperf.measure.scenarios import Scenario, scenario
from dlperf.measure.stats import (
    NOISE_IQR_RATIO,
    Measurement,
    calls_to_bound_within,
    percent_beside,
    percentile_upper_bound,
)
from dlperf.measure.system import UtilizationSampler
from dlperf.measure.timer import TimerConfig, time_callable
from dlperf.workload.base import Inputs, Workload, _user_frame, map_tensors_copied

PRECISIONS = ("fp32", "bf16", "fp16")
CONTENTION_PERCENT = 50.0
"""CPU (in % of one core) used by other processes during a measurement above which it is flagged."""
STARVED_WAIT_CORES = 0.25
"""Run-queue wait of the process's threads (cores' worth, `Utilization.run_queue_wait_cores`) from which its intra-op
threads count as starved: a CPU-bound model at 2 threads on a loaded 2-core VM waited 0.94, a call that sleeps 0.02."""
IDLE_PROCESS_PERCENT = 10.0
"""CPU (in % of one core) under which the measured process counts as waiting rather than computing (a 2-5 ms sleep
used 1.6-3.5 on a busy 2-core VM, a CPU-bound CNN 100 or more): other load then need not have slowed its calls."""


def other_load_percent(process_cpu_percent: float, system_cpu_percent: float) -> float:
    """CPU used by other processes while this one measured, in % of one core (100 = a core), from this process's
    CPU (% of one core) and the machine's (% of all cores)."""
    return max(0.0, system_cpu_percent * (os.cpu_count() or 1) - process_cpu_percent)


def contention_warning(process_cpu_percent: float, system_cpu_percent: float, torch_threads: int | None,
                       advice: str = "compare with `dlperf ab`", threads_option: bool = True) -> str | None:
    """What a measurement with other processes keeping half a core busy or more should say, None below that: the
    cores they kept, and where torch's `torch_threads` got fewer cores than threads, what that does to a call (and,
    with `threads_option`, the --threads that measures with fewer)."""
    others = other_load_percent(process_cpu_percent, system_cpu_percent)
    if others < CONTENTION_PERCENT:
        return None
    said = (f"other processes kept {others / 100:.1f} cores busy while measuring (this process: "
            f"{process_cpu_percent / 100:.1f}): expect slower, noisier numbers; {advice}")
    got = process_cpu_percent / 100
    if torch_threads is not None and torch_threads >= 2 and got < torch_threads - 0.5:
        # zoo:minilm at batch 1 on 2 cores, one busy elsewhere: 920 ms a call at 2 threads, 37 ms at 1
        free = max(1, int((os.cpu_count() or 1) - others / 100))
        said += (f"; its {torch_threads} intra-op threads got {got:.1f} cores: an operator split across them waits "
                 "for the descheduled one, which can make a call many times slower")
        said += (" (`dlperf profile` tells; "
                 f"--threads {min(free, torch_threads - 1)} measures with fewer)") if threads_option else ""
    return said


@dataclass(frozen=True)
class BenchConfig:
    batch_sizes: tuple[int, ...] | None = None
    scenario: str = "offline"
    device: str = "cpu"
    threads: int | None = None
    precision: str = "fp32"
    timer: TimerConfig = field(default_factory=TimerConfig)

    def __post_init__(self) -> None:
        # from Python (dlperf.bench) wrong types came out as TypeError/AttributeError from deep inside
        if not isinstance(self.device, str):
            raise ConfigError(f"device must be a string such as 'cpu' or 'cuda:0', got {self.device!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or isinstance(self.threads, bool)):
            raise ConfigError(f"threads must be an integer >= 1 or None, got {self.threads!r}")
        check_threads(self.threads)
        if self.batch_sizes is not None and (
                isinstance(self.batch_sizes, (str, int)) or not hasattr(self.batch_sizes, "__iter__")
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in self.batch_sizes)):
            raise ConfigError(f"batch sizes must be a tuple of integers, e.g. (1, 8), got {self.batch_sizes!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision '{self.precision}': choose one of {', '.join(PRECISIONS)}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"unknown device '{self.device}': use cpu, cuda or cuda:N")
        if self.batch_sizes is not None and any(b < 1 for b in self.batch_sizes):
            raise ConfigError(f"batch sizes must be >= 1, got {self.batch_sizes}")
        if self.batch_sizes is not None and len(set(self.batch_sizes)) < len(self.batch_sizes):
            repeated = sorted({b for b in self.batch_sizes if self.batch_sizes.count(b) > 1})
            raise ConfigError(f"batch sizes {', '.join(map(str, repeated))} given more than once: give each once "
                              "(each is measured once; compare repeated runs with `dlperf ab`)")
        scenario(self.scenario)  # raises ConfigError for an unknown name, before anything runs

    @property
    def scenario_obj(self) -> Scenario:
        return scenario(self.scenario)


@dataclass
class BenchPoint:
    batch_size: int
    measurement: Measurement
    peak_rss_bytes: int
    process_cpu_percent: float
    system_cpu_percent: float
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    gpu_util_percent: float | None = None
    torch_threads: int | None = None
    """torch's intra-op threads while measured; None where not known (an engine artifact runs threads of its own)."""
    run_queue_wait_cores: float | None = None
    """How many cores' worth of time the process's threads waited for a core (`Utilization.run_queue_wait_cores`);
    None where not known."""

    @property
    def other_load_percent(self) -> float:
        """CPU used by other processes while this point was measured, in % of one core (100 = a core)."""
        return other_load_percent(self.process_cpu_percent, self.system_cpu_percent)

    @property
    def contention_warning(self) -> str | None:
        """Other processes kept at least half a core busy: the numbers are slower and noisier than alone."""
        # a call that sleeps or waits (I/O, a GPU) uses little CPU without being starved: "its 2 intra-op threads got
        # 0.0 cores ... --threads 1" was said of a model that sleeps 2 ms a call, whose threads never waited for a core
        starved = self.run_queue_wait_cores is None or self.run_queue_wait_cores >= STARVED_WAIT_CORES
        m = self.measurement
        if (not starved and self.process_cpu_percent < IDLE_PROCESS_PERCENT and m.n >= 4
                and m.noise_ratio <= NOISE_IQR_RATIO):
            # a model that sleeps 5 ms a call (IQR 0.1% of the median) read "expect slower, noisier numbers": its
            # calls barely used a core, none waited for one, and they were not noisy; the load is the machine's, and
            # reached it only in the tail (batch 4's p90 8.0 ms beside a p50 of 5.14 ms)
            others = self.other_load_percent
            if others < CONTENTION_PERCENT:
                return None
            return (f"other processes kept {others / 100:.1f} cores busy while measuring; this process used "
                    f"{self.process_cpu_percent / 100:.2f} cores, its threads waited for none, and its calls' IQR was "
                    f"{percent_beside(m.noise_ratio)} of the median (p99 {m.p99_s / m.p50_s:.2f}x it): its calls wait "
                    "(a sleep, I/O, a device) more than they compute, so the load reaches them mostly as late "
                    "wake-ups, in the tail; a model computing on the CPU would measure slower and noisier on this "
                    "machine now")
        return contention_warning(self.process_cpu_percent, self.system_cpu_percent,
                                  self.torch_threads if starved else None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "summary": self.measurement.summary(),
            "measurement": self.measurement.to_dict(),
            "peak_rss_bytes": self.peak_rss_bytes,
            "process_cpu_percent": self.process_cpu_percent,
            "system_cpu_percent": self.system_cpu_percent,
            "cuda_max_allocated_bytes": self.cuda_max_allocated_bytes,
            "cuda_max_reserved_bytes": self.cuda_max_reserved_bytes,
            "gpu_util_percent": self.gpu_util_percent,
            "other_load_percent": self.other_load_percent,
            "torch_threads": self.torch_threads,
            "run_queue_wait_cores": self.run_queue_wait_cores,
            "contention_warning": self.contention_warning,
        }


@dataclass
class BenchResult:
    workload: str
    config: BenchConfig
    points: list[BenchPoint]
    model_bytes: int
    run_id: str | None = None
    """The stored run's id, when it was recorded (`dlperf.bench(..., store=...)`)."""
    model_bytes_of: str = "parameters + buffers"
    """What `model_bytes` counts: an exported engine artifact's are its files', a torch recipe's its rebuilt model's
    parameters and buffers (`optimize.artifact.artifact_workload`)."""
    rss_before_model_bytes: int | None = None
    """The process's RSS just before the model was built: what each point's `peak_rss_bytes` holds besides this
    model (Python, torch and what the caller had loaded; ~240 MiB for `dlperf bench` on CPU torch). In a
    long-lived process, memory it frees after this (an earlier model's) can leave a peak below it."""

    def __repr__(self) -> str:  # the default printed every sample: tens of KB in a notebook
        kpi, value, batch = self.headline
        shown = f"{value:,.1f} items/s" if kpi == "throughput" else f"{kpi.removesuffix('_s')} {value * 1e3:.4g} ms"
        warned = len(self.warnings)
        return (f"BenchResult({self.workload!r}, batch sizes {[p.batch_size for p in self.points]}, headline "
                f"{shown} at batch {batch}" + (f", run {self.run_id}" if self.run_id else "")
                + (f", {warned} warning{'s' if warned > 1 else ''} in .warnings" if warned else "") + ")")

    @property
    def warnings(self) -> list[str]:
        """The warnings `dlperf bench` prints under its table (noise, a slow start, a heavy tail, other load on the
        machine), one line each: a notebook's result showed a batch of 5 at 16 ms beside 0.02 ms at batch 16, other
        processes busy, with no word of it anywhere but each point's fields."""
        sc, loose = self.config.scenario_obj, []
        bound = self.headline_bound
        if bound is not None and self.points:  # what `dlperf bench` appends to its headline line
            value = float(getattr(self.points[0].measurement, sc.headline))
            if bound > LOOSE_BOUND_RATIO * value:
                loose = [f"headline: {loose_bound_note(sc, self.points[0], value, bound)}"]
        # the fields bench_warnings reads, not `to_dict`: its summary bootstraps each median's interval (0.5 s for
        # three points of 20,000 calls, on every repr)
        return loose + bench_warnings([
            {"batch_size": p.batch_size, "contention_warning": p.contention_warning,
             "other_load_percent": p.other_load_percent,
             "summary": {"noise_warning": p.measurement.noise_warning,
                         "stop_note": p.measurement.extra.get("stop_note"),
                         "slow_start_note": p.measurement.slow_start_note,
                         "heavy_tail_note": p.measurement.heavy_tail_note,
                         "throughput_gap_note": p.measurement.throughput_gap_note,
                         "speed_change_note": p.measurement.speed_change_note}}
            for p in self.points])

    @property
    def headline(self) -> tuple[str, float, int]:
        """(KPI name, value, batch size) per the scenario: p90/p99 latency (s) or best throughput."""
        return _headline(self.config, self.points)

    @property
    def headline_bound(self) -> float | None:
        """For a latency headline (p90/p99), MLPerf's early-stopping estimate of it: a latency that share
        of calls stays within at 99% confidence (None: too few samples, or a throughput headline)."""
        return _headline_bound(self.config, self.points)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "model_bytes": self.model_bytes,
            "model_bytes_of": self.model_bytes_of,
            "rss_before_model_bytes": self.rss_before_model_bytes,
            "headline": headline_record(self.config, self.points),
            "points": [p.to_dict() for p in self.points],
        }


def _headline(config: BenchConfig, points: Sequence[BenchPoint]) -> tuple[str, float, int]:
    sc = config.scenario_obj
    if sc.headline == "throughput":
        best = max(points, key=lambda p: p.measurement.throughput)
        return "throughput", best.measurement.throughput, best.batch_size
    point = points[0]
    return sc.headline, float(point.measurement.summary()[sc.headline]), point.batch_size


def _headline_bound(config: BenchConfig, points: Sequence[BenchPoint]) -> float | None:
    q = config.scenario_obj.headline_percentile
    return None if q is None else percentile_upper_bound(sorted(points[0].measurement.samples_s), q)


def headline_record(config: BenchConfig, points: Sequence[BenchPoint]) -> dict[str, Any]:
    """The headline as a run records it, {kpi, value, unit, batch_size} and a latency headline's bound_99, of these
    points: all of a run's, or those an interrupted run measured (its record had no headline)."""
    name, value, batch = _headline(config, points)
    # 'throughput' named no unit in --json (the latency KPIs carry theirs in the name: p90_s)
    headline: dict[str, Any] = {"kpi": name, "value": value, "unit": "items/s" if name == "throughput" else "s",
                                "batch_size": batch}
    if name != "throughput":
        headline["bound_99"] = bound = _headline_bound(config, points)
        if bound is not None and bound > LOOSE_BOUND_RATIO * value:
            headline["bound_note"] = loose_bound_note(config.scenario_obj, points[0], value, bound)
    return headline


LOOSE_BOUND_RATIO = 1.2
"""A latency headline's early-stopping bound above this many times the percentile gets `loose_bound_note`."""


def loose_bound_note(sc: Scenario, point: BenchPoint, value: float, bound: float) -> str:
    """What a latency headline whose 99%-confidence bound is far above its percentile should say: MLPerf reports the
    bound (its early-stopping estimate) as the scenario's result, not the sample percentile, so a run too short to pin
    the percentile down reads there as the bound; and about how many calls would bring the bound near the percentile.
    A model 10x slower on 5% of its calls, 288 calls: p90 2.59 ms, bound 20.1 ms (the slow calls' time)."""
    q = sc.headline_percentile or 0.0
    limit = LOOSE_BOUND_RATIO * value
    samples = sorted(point.measurement.samples_s)
    above = len(samples) - bisect.bisect_right(samples, limit)
    calls = calls_to_bound_within(samples, q, limit)
    share, within = above / len(samples), f"{limit * 1e3:.3g} ms"
    note = (f"the bound is {bound / value:.1f}x the p{q:g}: {len(samples):,} calls do not pin the p{q:g} down, and "
            f"MLPerf reports the bound ({sc.name}'s early-stopping estimate), not the sample p{q:g}; ")
    if calls is None:
        return note + (f"{share:.1%} of the calls took over {within}, so the true p{q:g} may be above that: no longer "
                       "run brings the bound down to it")
    return note + (f"about {calls:,} calls would bring it under {within} (1.2x the p{q:g}) if {share:.1%} "
                   f"of calls stay above that: raise --min-iters or --min-duration (min_iters=, min_duration_s=)")


def point_saver(handle: Any) -> Callable[[BenchPoint, BenchResult], None]:
    """An `on_point` for `run_bench` that keeps the result measured so far in `handle` (a store's run handle: its
    `result` and `save()`), marked partial with the headline of those points, so a run interrupted or failing at
    a later batch size keeps the batch sizes it finished (bench and check), and the model's size and the RSS before
    it was built (an interrupted run's record had neither, so `runs show` and the report left out its model size)."""

    def on_point(point: BenchPoint, so_far: BenchResult) -> None:
        handle.result = {**so_far.to_dict(), "partial": True}
        handle.save()

    return on_point


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Set torch's intra-op thread count for the block, and restore it after."""
    import torch

    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def to_device(inputs: Inputs, device: str, dtype: Any = None, *, non_blocking: bool = False) -> Inputs:
    """`inputs` on `device` (floating-point ones cast to `dtype` when given). `non_blocking`: a pinned tensor's copy
    is queued on the stream rather than waited for, as `dlperf train` copies a pinning loader's batches."""
    import torch

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            x = x.to(device, non_blocking=non_blocking and x.is_pinned())
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        return x

    return tuple(map_tensors_copied(x, move) for x in inputs)  # a dict or list of tensors as one input too


def half_dtype(precision: str) -> Any:
    """torch.bfloat16 for 'bf16', torch.float16 for 'fp16', None for anything else ('fp32')."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def make_call(model: Any, inputs: Inputs, device: str, precision: str) -> Callable[[], Any]:
    """A zero-argument call of the model under inference_mode (and autocast for bf16/fp16)."""
    import torch

    dtype = half_dtype(precision)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if dtype is None:
        def call() -> Any:
            with torch.inference_mode():
                return model(*inputs)
    elif device_type == "cpu" and has_fused_attention(model):
        mha = torch.backends.mha

        def call() -> Any:
            before = mha.get_fastpath_enabled()
            mha.set_fastpath_enabled(False)
            try:
                with torch.inference_mode(), torch.autocast(device_type, dtype=dtype):
                    return model(*inputs)
            finally:
                mha.set_fastpath_enabled(before)
    else:
        def call() -> Any:
            with torch.inference_mode(), torch.autocast(device_type, dtype=dtype):
                return model(*inputs)
    return call


FUSED_ATTENTION = ("TransformerEncoderLayer", "TransformerDecoderLayer", "MultiheadAttention")


def has_fused_attention(model: Any) -> bool:
    """Whether the model holds a torch module with the fused attention fast path, which checks only CUDA's autocast:
    under CPU autocast it gets bf16/fp16 activations beside fp32 weights and fails ("expected scalar type Float but
    found BFloat16", nn.TransformerEncoder with a padding mask), so a CPU autocast call turns it off for itself."""
    modules = getattr(model, "modules", None)
    return modules is not None and any(type(m).__name__ in FUSED_ATTENTION for m in modules())


def run_bench(
    workload: Workload,
    config: BenchConfig,
    on_progress: Callable[[int, int, float], None] | None = None,
    on_point: Callable[[BenchPoint, BenchResult], None] | None = None,
) -> BenchResult:
    """Measure the workload at each batch size. on_progress(batch_size, iterations, seconds);
    on_point(point, result_so_far) after each batch size is done (so a caller can save partial results), and for
    the batch size an interrupt (Ctrl-C) stops, with the calls timed before it (its stop note says so), before the
    interrupt goes on."""
    import torch

    check_device(config.device)
    sc = config.scenario_obj
    batch_sizes = sc.batch_sizes(config.batch_sizes)
    points: list[BenchPoint] = []
    with torch_threads(config.threads):
        gc.collect()  # in a long-lived process (a notebook, a test run) garbage freed later made the peak read low
        rss_before_model = current_rss_bytes()
        model = workload.build_model().eval()
        if any(getattr(p, "is_meta", False) for p in model.parameters()):  # .to() failed: 'Cannot copy out of meta'
            from dlperf.errors import WorkloadError

            raise WorkloadError(f"workload '{workload.name}': its model's weights are on the 'meta' device, which "
                                "holds no data: build it on the CPU (or load its weights) before measuring")
        model = model.to(config.device)
        # an exported artifact (`artifact_workload`) says what its size counts
        size_of = str(getattr(model, "dlperf_size_of", "parameters + buffers"))
        own_threads = getattr(model, "dlperf_engine", "torch") != "torch"  # ONNX Runtime, OpenVINO: not torch's
        model_bytes: int | None = None  # after the first call, which gives lazy layers (nn.LazyLinear) their weights

        def so_far() -> BenchResult:
            return BenchResult(workload.name, config, list(points), model_bytes or 0,
                               model_bytes_of=size_of,
                               rss_before_model_bytes=rss_before_model)

        clock = clock_for(config.device)
        gpu_index = _gpu_index(config.device)
        for batch in batch_sizes:
            inputs = to_device(workload.example_inputs(batch), config.device)
            workload.check(model, inputs, batch, ran_batch=points[-1].batch_size if points else None)
            if model_bytes is None:
                model_bytes = parameter_bytes(model)
            call = make_call(model, inputs, config.device, config.precision)
            if gpu_index is not None:
                # a batch after a larger one: its reserved peak was at least what the larger one left cached
                cuda_reset_peak(config.device, release_cached=True)
            progress = (lambda n, s, b=batch: on_progress(b, n, s)) if on_progress else None
            interrupted: KeyboardInterrupt | None = None
            with PeakRssSampler() as rss, UtilizationSampler(gpu_index=gpu_index) as util:
                try:
                    m = time_callable(call, config.timer, clock, items_per_call=batch,
                                      label=f"{workload.name} bs={batch}", on_progress=progress)
                except KeyboardInterrupt as exc:  # the calls timed before it become this batch size's point
                    partial = getattr(exc, "dlperf_measured", None)
                    if partial is None or on_point is None:
                        raise
                    m, interrupted = partial, exc
                except MeasurementError as exc:
                    # a call that fails after the first (checked) one, e.g. every 1000th: where, in the user's code
                    where = _user_frame(exc.__cause__) if exc.__cause__ is not None else ""
                    raise MeasurementError(f"workload '{workload.name}' at batch {batch}: {exc}"
                                           + (f"\n{where}" if where else "")) from exc
            point = BenchPoint(batch, m, rss.peak_rss_bytes, util.result.process_cpu_percent,
                               util.result.system_cpu_percent, gpu_util_percent=util.result.gpu_util_percent,
                               torch_threads=None if own_threads else torch.get_num_threads(),
                               run_queue_wait_cores=util.result.run_queue_wait_cores)
            if gpu_index is not None:
                mem = cuda_peak(config.device)
                point.cuda_max_allocated_bytes = mem.max_allocated_bytes
                point.cuda_max_reserved_bytes = mem.max_reserved_bytes
            points.append(point)
            if on_point is not None:
                on_point(point, so_far())
            if interrupted is not None:
                raise interrupted
    return so_far()


def _gpu_index(device: str) -> int | None:
    """The CUDA device `device` runs on, None off CUDA: for plain 'cuda' torch's current device (it was always 0, so
    the utilization was sampled from GPU 0 while `torch.cuda.set_device(1)` ran the model on GPU 1)."""
    return cuda_device_index(device) if device.startswith("cuda") else None
