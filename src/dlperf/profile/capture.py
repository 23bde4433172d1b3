"""Capture: run a workload's inference call or training step under torch.profiler and build a ProfileTrace.

A step is marked with record_function ranges ('dlperf/step' around it, 'dlperf/data', 'dlperf/h2d',
'dlperf/forward', 'dlperf/backward', 'dlperf/optimizer' inside), so the analyzers can split its time.
The same step is first timed without the profiler (the measurement engine's timer), so the profiling
overhead is stated next to the result. Profiler options stay lean: shapes and FLOPs on, memory on,
Python stacks off, and only a few steps are profiled. The memory timeline comes from the profiler's own
allocation and free records, so it shows memory held, not allocations summed.
"""

from __future__ import annotations

import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from dlperf._device import check_device
from dlperf._thirdparty import quiet_worker_warning
from dlperf.errors import ConfigError, DlperfError, MeasurementError, ProfileError, WorkloadError
from dlperf.measure.bench import half_dtype, make_call, to_device, torch_threads
from dlperf.measure.env import check_threads, usable_cores
from dlperf.measure.memory import PeakRssSampler, cuda_peak, cuda_reset_peak, parameter_bytes
from dlperf.measure.system import ThreadCoreClock, UtilizationSampler, core_time_s
from dlperf.measure.timer import TimerConfig, time_callable
from dlperf.profile.trace import (
    INFERENCE,
    PHASES,
    TRAIN,
    KernelEvent,
    LoaderInfo,
    MemoryInfo,
    OpEvent,
    ProfileTrace,
    StepWindow,
    ThreadInfo,
)
from dlperf.workload.base import (
    Workload,
    _user_frame,
    call_loss,
    call_user_factory,
    error_text,
    ignored_loader_kwargs,
    loader_problem,
    loss_problem,
    optimizer_problem,
    split_batch,
    with_optimizer_impl,
)
from dlperf.workload.loader_workers import LoaderWorkers, start_loader

ProgressFn = Callable[[str], None]
"""on_progress(what is happening now)."""


def require_train_spec(workload: Workload) -> None:
    """WorkloadError for `profile --train` of a workload without a TrainSpec (asked before a run is recorded)."""
    if workload.train is None:
        raise WorkloadError(
            f"workload '{workload.name}' has no training spec (Workload.train): profile its inference "
            "without --train, or give it a TrainSpec(make_loader, loss_fn, make_optimizer)"
        )


@dataclass(frozen=True)
class StepOptions:
    """How one step is built: the knobs that fixes change (batch, loader, threads, layout, precision, compile,
    the optimizer's implementation)."""

    batch_size: int | None = None
    loader_kwargs: tuple[tuple[str, Any], ...] = ()
    threads: int | None = None
    channels_last: bool = False
    precision: str = "fp32"
    compile: bool = False
    optimizer_impl: str = "default"
    """'default' (what make_optimizer builds), 'foreach' or 'fused': the same optimizer rebuilt with that flag."""

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")
        check_threads(self.threads)
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise ConfigError(f"unknown precision '{self.precision}': use fp32, bf16 or fp16")
        if self.optimizer_impl not in ("default", "foreach", "fused"):
            raise ConfigError(f"unknown optimizer implementation '{self.optimizer_impl}': use default, foreach or "
                              "fused")


@dataclass(frozen=True)
class CaptureConfig:
    mode: str = INFERENCE
    device: str = "cpu"
    steps: int = 3
    warmup_steps: int = 2
    options: StepOptions = field(default_factory=StepOptions)
    record_memory: bool = True
    trace_path: str | None = None
    memory_budget_bytes: int | None = None
    unprofiled_min_duration_s: float = 0.5

    def __post_init__(self) -> None:
        if self.mode not in (INFERENCE, TRAIN):
            raise ConfigError(f"unknown profile mode '{self.mode}': inference or train")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"unknown device '{self.device}': use cpu, cuda or cuda:N")
        if not 1 <= self.steps <= 50:
            raise ConfigError(f"--steps must be between 1 and 50, got {self.steps}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warm-up steps must be >= 0, got {self.warmup_steps}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:
            raise ConfigError(f"--memory-budget must be positive, got {self.memory_budget_bytes}")


class Step:
    """One runnable step of a workload (inference call or training step), built per StepOptions.

    Calling it runs one step; `last_data_wait_s` holds how long that step waited for its batch.
    """

    def __init__(self, workload: Workload, mode: str, device: str, options: StepOptions) -> None:
        import torch

        self.workload = workload
        self.mode = mode
        self.device = device
        self.options = options
        self.last_data_wait_s = 0.0
        self.last_data_core_s: float | None = None
        """Of that wait, the time this thread ran on a core or waited for one (`core_time_s`; None: unreadable or not
        read): loading in the main process (no workers); the rest of the wait it was blocked on I/O."""
        self.read_loading_core = False
        """Read `last_data_core_s` (two reads of /proc a step: only for the unprofiled steps of a loader without
        workers)."""
        self._core_clock: tuple[int, ThreadCoreClock] | None = None
        """The calling thread's id and its `ThreadCoreClock`, made at the first read."""
        self.loader: Any = None
        self.workers = LoaderWorkers(None)
        self._iter: Iterator[Any] | None = None
        self._cuda = device.startswith("cuda")
        self._scaler: Any = None
        self.threads_set_by: str | None = None
        """Where the workload's own code changed torch's thread count: 'build' (its model, inputs, optimizer or loader
        factory), 'step' (the step itself: a `torch.set_num_threads` in its forward, which a count set from outside
        before each step cannot override), None where it did not (as far as seen so far)."""
        self.threads_probed = False
        """Whether a call ran under another thread count than the one in place (`probe_threads`)."""
        threads_before = torch.get_num_threads()
        if mode == TRAIN:
            require_train_spec(workload)
        default_batch = workload.train.batch_size if (mode == TRAIN and workload.train) else workload.default_batch_size
        self.batch_size = options.batch_size or default_batch
        model = workload.build_model().to(device)
        model = model.train() if mode == TRAIN else model.eval()
        if options.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model = model
        self.model_bytes = parameter_bytes(model)
        self._run_model: Any = torch.compile(model) if options.compile else model
        self._autocast_dtype = half_dtype(options.precision)
        if mode == INFERENCE:
            inputs = to_device(workload.example_inputs(self.batch_size), device)
            if options.channels_last:
                inputs = tuple(_channels_last(x) for x in inputs)
            # one call of the model, untimed: run under another count than the one in place (the probe the first
            # warm-up step makes for training), so a forward setting even the count in place is seen with no warm-up
            threads = torch.get_num_threads()
            probe = threads + 1 if threads == 1 else threads - 1
            torch.set_num_threads(probe)
            try:
                workload.check(model, inputs)
            finally:
                if torch.get_num_threads() != probe:
                    self.threads_set_by = "step"
                else:
                    torch.set_num_threads(threads)
            self.threads_probed = True
            self._call = make_call(self._run_model, inputs, device, options.precision)
        else:
            assert workload.train is not None
            self.optimizer = call_user_factory(workload.name, "its optimizer factory", workload.train.make_optimizer,
                                               model.parameters())
            with quiet_worker_warning():  # said once, by the loader analysis (torch said it at each build and iter)
                self.loader = call_user_factory(workload.name, "its loader factory", workload.train.make_loader,
                                                self.batch_size, **dict(options.loader_kwargs))
            # the checks and words of `dlperf train` (a step raised "'str' object has no attribute 'step'")
            # a make_loader that drops the fix's DataLoader arguments made --verify time the loader against itself
            # and report the input-pipeline fix as "the estimate did not hold"
            problem = (optimizer_problem(self.optimizer, model) or loader_problem(self.loader)
                       or ignored_loader_kwargs(self.loader, dict(options.loader_kwargs),
                                                "the DataLoader fix --verify measures acts through them"))
            if problem is not None:
                raise WorkloadError(f"workload '{workload.name}': {problem}")
            if options.optimizer_impl != "default":
                try:
                    self.optimizer = with_optimizer_impl(self.optimizer, options.optimizer_impl)
                except (TypeError, RuntimeError, ValueError) as exc:
                    raise WorkloadError(f"workload '{workload.name}': {type(self.optimizer).__name__} has no "
                                        f"{options.optimizer_impl} implementation here: {exc}") from exc
            self.workers = LoaderWorkers(self.loader)  # a wrapped DataLoader's too
            # fp16 training as `dlperf train` runs it: the loss scaled, gradients unscaled and checked for inf/NaN
            # (their kernels belong to the step's profile; without the scaler small gradients flushed to zero)
            self._scaler = (torch.amp.GradScaler("cuda") if self._cuda and self._autocast_dtype == torch.float16
                            else None)
        if self.threads_set_by is None and torch.get_num_threads() != threads_before:
            self.threads_set_by = "build"

    def recompile_guard(self) -> str | None:
        """For a compiled inference step, after its first call: the guard Dynamo failed when it would have
        recompiled the model for other rows of the same shape (`passes.compile.recompiles_on`), else None. The
        step's one fixed input would time the compiled code while every new input compiles again."""
        if not self.options.compile or self.mode != INFERENCE:
            return None
        from dlperf.passes.compile import other_inputs, recompiles_on

        others = other_inputs(self.workload, self.batch_size, self.device)
        if others is None:
            return None
        if self.options.channels_last:
            others = tuple(_channels_last(x) for x in others)
        return recompiles_on(make_call(self._run_model, others, self.device, self.options.precision))

    def __call__(self, probe_threads: bool = False) -> None:
        """One step. `probe_threads` (a warm-up step): run it under another thread count than the one in place, so
        that a step setting its own count is seen even where it sets the count already in place (a forward calling
        `torch.set_num_threads(2)` on 2 threads read as setting none, and got a `--threads` fix that could not hold);
        the count is put back where the step leaves the probe's."""
        import torch

        if self.options.threads is not None and torch.get_num_threads() != self.options.threads:
            torch.set_num_threads(self.options.threads)
        threads = torch.get_num_threads()
        expected = threads
        # under --threads too: a forward setting the count --threads sets would undo a --threads fix to another count
        if probe_threads and self.threads_set_by != "step":
            expected = threads + 1 if threads == 1 else threads - 1
            torch.set_num_threads(expected)
            self.threads_probed = True
        try:
            if self.mode == INFERENCE:
                with torch.profiler.record_function("dlperf/forward"):
                    self._call()
            else:
                self._train_step()
        finally:
            if torch.get_num_threads() != expected:
                self.threads_set_by = "step"
            elif expected != threads:
                torch.set_num_threads(threads)
        if self._cuda:
            torch.cuda.synchronize(self.device)

    def _next_batch(self) -> Any:
        if self._iter is None:
            self._iter = start_loader(self.loader)
        try:
            return next(self._iter)
        except StopIteration:
            self._iter = start_loader(self.loader)
            try:
                return next(self._iter)
            except StopIteration as exc:
                raise WorkloadError(
                    f"workload '{self.workload.name}': its loader yields no batch at batch size {self.batch_size}"
                ) from exc

    def _train_step(self) -> None:
        import torch

        train = self.workload.train
        assert train is not None
        record = torch.profiler.record_function
        clock = self._thread_core_clock() if self.read_loading_core else None
        core0 = clock.read() if clock is not None else None
        t0 = time.perf_counter()
        with record("dlperf/data"):
            batch = self._next_batch()
        self.last_data_wait_s = time.perf_counter() - t0
        core1 = clock.read() if clock is not None and core0 is not None else None
        self.last_data_core_s = None if core0 is None or core1 is None else core1 - core0
        pair = split_batch(batch)
        if isinstance(pair, str):
            raise WorkloadError(f"workload '{self.workload.name}': {pair}")
        inputs, target = pair
        with record("dlperf/h2d"):
            # a list too: the default collate makes a dataset's ((x, y), t) a [[X, Y], T] (dlperf train unpacks it;
            # profile --train passed the list as one argument: "forward() missing 1 required positional argument")
            inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
            # a pinning loader's batches copied as `dlperf train` copies them (non_blocking): copied blocking, the
            # pin_memory fix --verify measures gained less here than in training
            inputs = to_device(inputs, self.device, non_blocking=True)
            target = to_device((target,), self.device, non_blocking=True)[0]
            if self.options.channels_last:
                inputs = tuple(_channels_last(x) for x in inputs)
        autocast = (torch.autocast("cuda" if self._cuda else "cpu", dtype=self._autocast_dtype)
                    if self._autocast_dtype is not None else _null())
        with record("dlperf/forward"), autocast:
            out = self._run_model(*inputs)
            loss = call_loss(self.workload.name, train.loss_fn, out, target)
        problem = loss_problem(loss)
        if problem is not None:  # backward() raised "grad can be implicitly created only for scalar outputs"
            raise WorkloadError(f"workload '{self.workload.name}': {problem}")
        with record("dlperf/backward"):
            (loss if self._scaler is None else self._scaler.scale(loss)).backward()
        with record("dlperf/optimizer"):
            if self._scaler is None:
                self.optimizer.step()
            else:
                self._scaler.step(self.optimizer)
                self._scaler.update()
            # at the end of the step, not the start: gradients are freed by the step that made them, so the
            # profiler never sees a block freed that was allocated before it started (torch's CPUAllocator
            # warning in `profile --train` output)
            self.optimizer.zero_grad(set_to_none=True)

    def loader_info(self) -> LoaderInfo | None:
        if self.loader is None:
            return None
        # a loader of the user's own that wraps a DataLoader (moving batches to a device) is read, and fixed through
        # make_loader's arguments, on it, as `ignored_loader_kwargs` checks them: it read 'not a torch DataLoader'
        inner = self.workers.dataloader
        if inner is None:
            return LoaderInfo(type_name=type(self.loader).__name__, is_dataloader=False)
        return LoaderInfo(
            type_name="DataLoader", is_dataloader=True, num_workers=inner.num_workers,
            pin_memory=bool(inner.pin_memory), prefetch_factor=inner.prefetch_factor,
            persistent_workers=bool(inner.persistent_workers), batch_size=inner.batch_size,
        )

    def _thread_core_clock(self) -> ThreadCoreClock:
        """This thread's core-time clock (a file kept open: reads within the timed step cost 2 µs, not 25)."""
        me = threading.get_ident()
        if self._core_clock is None or self._core_clock[0] != me:
            if self._core_clock is not None:
                self._core_clock[1].close()
            self._core_clock = (me, ThreadCoreClock())
        return self._core_clock[1]

    def close(self) -> None:
        """Stop loader workers (persistent ones otherwise live until the loader is collected)."""
        current, self._iter = self._iter, None
        self.workers.shutdown(current)
        if self._core_clock is not None:
            self._core_clock[1].close()
            self._core_clock = None


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _channels_last(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def capture(workload: Workload, config: CaptureConfig, on_progress: ProgressFn | None = None) -> ProfileTrace:
    """Measure the step unprofiled, then profile `config.steps` steps; return the trace."""
    import psutil
    import torch

    check_device(config.device)
    progress = on_progress or (lambda _msg: None)
    vm = psutil.virtual_memory()
    start_rss = int(psutil.Process().memory_info().rss)
    budget = config.memory_budget_bytes or start_rss + int(vm.available)
    budget_source = "--memory-budget" if config.memory_budget_bytes else "RSS at start + available RAM"
    threads_before = torch.get_num_threads()
    try:
        trace, step, measurement, util, rss, busy_threads, other_python_busy, intra, workers_count, workers_busy = \
            _capture(workload, config, progress)
    finally:
        # The workload's own code may change the thread count (a model factory calling set_num_threads).
        torch.set_num_threads(threads_before)
    cpu_count = os.cpu_count() or 1
    usable = usable_cores()
    trace.threads = ThreadInfo(
        intra_op_threads=intra,
        inter_op_threads=torch.get_num_interop_threads(),
        logical_cores=cpu_count,
        physical_cores=psutil.cpu_count(logical=False),
        usable_cores=usable,
        process_cpu_percent=util.result.process_cpu_percent,
        system_cpu_percent=util.result.system_cpu_percent,
        load_average_1m=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        busy_threads=busy_threads,
        other_python_threads_busy_cores=other_python_busy,
        loader_workers=workers_count,
        loader_workers_busy_cores=workers_busy,
        threads_set_by=step.threads_set_by,
        threads_probed=step.threads_probed,
        threads_asked=config.options.threads,
    )
    trace.memory = replace(
        trace.memory, start_rss_bytes=start_rss, peak_rss_bytes=rss.peak_rss_bytes,
        available_bytes=int(vm.available), total_bytes=int(vm.total), budget_bytes=int(budget),
        budget_source=budget_source, model_bytes=step.model_bytes,
    )
    trace.unprofiled_step_s = measurement.samples_s
    trace.loader = step.loader_info()
    trace.batch_size = step.batch_size
    return trace.validate()


CAPTURE_STEPS = 4
"""The `on_progress` calls of a capture: building, warming up, timing unprofiled, profiling."""


def _capture(workload: Workload, config: CaptureConfig, progress: ProgressFn) -> tuple[Any, ...]:
    import torch

    with torch_threads(config.options.threads):
        progress("building the model and its inputs")
        with PeakRssSampler() as rss:
            step = Step(workload, config.mode, config.device, config.options)
            try:
                progress(f"warming up ({config.warmup_steps} steps)")
                for i in range(config.warmup_steps):
                    step(probe_threads=i == 0)
                progress("timing the step without the profiler")
                cpu_before = _thread_cpu_s()
                waits: list[float] = []
                cores: list[float | None] = []
                step.read_loading_core = config.mode == TRAIN and not step.workers.pids(step._iter)

                def timed_step() -> None:  # keeps each unprofiled step's wait for its batch (training)
                    step()
                    waits.append(step.last_data_wait_s)
                    cores.append(step.last_data_core_s)

                with UtilizationSampler(interval_s=0.05) as util, _WorkersCore(step) as workers_core:
                    measurement = time_callable(
                        timed_step,
                        TimerConfig(warmup_iters=0, min_iters=max(3, config.steps),
                                    min_duration_s=config.unprofiled_min_duration_s, max_duration_s=20.0),
                        label=f"{workload.name} unprofiled step",
                    )
                busy_threads, other_python_busy = _busy_threads(cpu_before, measurement.total_s)
                step.read_loading_core = False
            except WorkloadError:
                step.close()
                raise
            except Exception as exc:
                step.close()
                cause = exc.__cause__ if isinstance(exc, MeasurementError) and exc.__cause__ is not None else exc
                if isinstance(cause, DlperfError):  # a TrainError of the step: it names the user's line already
                    raise cause from None
                raise ProfileError(f"workload '{workload.name}': the step raised {error_text(cause)}\n"
                                   f"{_user_frame(cause)}") from exc
        intra = torch.get_num_threads()
        try:
            progress(f"profiling {config.steps} steps")
            trace = _profile_steps(step, config)
        finally:
            step.close()
    if config.mode == TRAIN:  # the timer's samples are the calls after its warm-up, if it has one: the last ones
        timed = len(waits) - len(measurement.samples_s)
        trace.unprofiled_data_wait_s = waits[timed:]
        trace.loader_core_share = (workers_core.share if workers_core.seen
                                   else _core_share(cores[timed:], waits[timed:]))
    return (trace, step, measurement, util, rss, busy_threads, other_python_busy, intra, workers_core.count,
            workers_core.busy_cores)


def _core_share(cores: list[float | None], waits: list[float]) -> float | None:
    """The share of the main thread's waits for a batch it spent on a core or waiting for one (loading without
    workers), None where a reading is missing or nothing was waited."""
    if not waits or any(c is None for c in cores) or sum(waits) <= 0:
        return None
    return min(1.0, max(0.0, sum(c or 0.0 for c in cores) / sum(waits)))


class _WorkersCore:
    """Context manager: the share of their lives the loader's worker processes ran on a core or waited for one
    (`core_time_s` of each, read by a thread every `interval_s` from its first sight to its last), None without
    workers or readings. Workers come and go (a new epoch's, without persistent_workers), so they are sampled rather
    than read at both ends; the share, not the total, is what the estimate needs.

    Also the cores the workers kept busy (`busy_cores`: their CPU time over the context's wall time), which are this
    process's own load: the machine's use less this process's counted them as other processes' (2 CPU-bound
    workers read as "other processes kept 1.8 of 2 cores busy"). A worker first seen after the start was born within
    it, so all its CPU time counts."""

    def __init__(self, step: Step, interval_s: float = 0.02) -> None:
        self.step = step
        self.interval_s = interval_s
        self.share: float | None = None
        self.seen = False
        self.busy_cores = 0.0
        self.count = 0
        """The most workers seen at once."""
        self._first: dict[int, tuple[float, float]] = {}
        self._last: dict[int, tuple[float, float]] = {}
        self._procs: dict[int, Any] = {}
        self._cpu_first: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._started = False
        self._wall0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlperf-loader-core", daemon=True)

    def _read(self) -> None:
        pids = self.step.workers.pids(self.step._iter)
        self.count = max(self.count, len(pids))
        # Two reads a worker, because no one read gives both figures. `share` needs the time on a core plus the time
        # waiting for one (schedstat's run-queue wait: CPU time alone reads a CPU-bound worker that other processes
        # keep off the cores as blocked on I/O); that is the main thread's only (/proc/PID/schedstat), which is the
        # worker's loop. `busy_cores` needs CPU time alone (the wait is no core kept busy) of all the worker's threads
        # (a decoder's own threads, such as OpenCV's, are this process's load too): psutil's, from /proc/PID/stat,
        # which has no run-queue wait. Together about 30 us a worker every 20 ms, measured on a 2-core machine.
        for pid in pids:
            self.seen = True
            core = core_time_s(f"/proc/{pid}/schedstat")
            if core is not None:
                self._first.setdefault(pid, (time.perf_counter(), core))
                self._last[pid] = (time.perf_counter(), core)
            cpu = self._cpu_s(pid)
            if cpu is not None:
                self._cpu_first.setdefault(pid, cpu if not self._started else 0.0)
                self._cpu_last[pid] = cpu

    def _cpu_s(self, pid: int) -> float | None:
        """A worker's CPU time, all its threads; None once it is gone."""
        import psutil

        try:
            proc = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
            times = proc.cpu_times()
        except (psutil.Error, OSError):
            return None
        return float(times.user + times.system)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> _WorkersCore:
        self._wall0 = time.perf_counter()
        self._read()
        self._started = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        wall_s = time.perf_counter() - self._wall0
        cpu_s = sum(self._cpu_last[pid] - c for pid, c in self._cpu_first.items())
        self.busy_cores = max(0.0, cpu_s / wall_s) if wall_s > 0 else 0.0
        wall = sum(self._last[pid][0] - t for pid, (t, _) in self._first.items())
        core = sum(self._last[pid][1] - c for pid, (_, c) in self._first.items())
        self.share = min(1.0, max(0.0, core / wall)) if wall > 0 else None


def _thread_cpu_s() -> dict[int, float]:
    import psutil

    return {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}


def _busy_threads(before: dict[int, float], wall_s: float) -> tuple[int, float]:
    """(native threads that used >= 5% of a core, or half an even share of what the threads that ran used, cores
    used by other Python threads) since `before`. The even share counts oversubscribed threads: 64 intra-op threads
    sharing 0.8 cores get about 1% each, and counting only the main thread read '1 thread of this process was busy'."""
    after = _thread_cpu_s()
    wall_s = max(wall_s, 1e-9)
    used = {tid: (cpu - before.get(tid, 0.0)) / wall_s for tid, cpu in after.items()}
    ran = [u for u in used.values() if u > 0]
    threshold = min(0.05, 0.5 * sum(ran) / len(ran)) if ran else 0.05
    busy = sum(1 for u in used.values() if u > 0 and u >= threshold)
    others = [
        t.native_id for t in threading.enumerate()
        if t is not threading.main_thread() and not t.name.startswith("dlperf-") and t.native_id is not None
    ]
    return busy, sum(used.get(tid, 0.0) for tid in others)


def _profile_steps(step: Step, config: CaptureConfig) -> ProfileTrace:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    cuda = config.device.startswith("cuda")
    if cuda:
        activities.append(ProfilerActivity.CUDA)
        cuda_reset_peak(config.device)
    else:
        # Kineto writes "USDT: ... profiler_start/stop" to stderr on every profile; only its level 6 (nothing)
        # hides them. Kept on CUDA, where its messages (CUPTI errors, missing privileges) matter; read lazily
        # at the first profile, and a level the user set wins.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    walls: list[float] = []
    waits: list[float] = []
    with warnings.catch_warnings():
        # torch 2.11 with CUDA activity warns, as the profile starts, that events are cleared at the end of each
        # cycle (acc_events): this profile has one cycle, so nothing is lost, and the warning would only alarm.
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        with profile(activities=activities, record_shapes=True, with_flops=True,
                     profile_memory=config.record_memory, with_stack=False) as prof:
            # One unmarked step first: the profiler's own start-up cost lands there, outside the analysed steps.
            step()
            for _ in range(config.steps):
                t0 = time.perf_counter()
                with record_function("dlperf/step"):
                    step()
                walls.append(time.perf_counter() - t0)
                waits.append(step.last_data_wait_s)
    if config.trace_path:
        try:
            prof.export_chrome_trace(config.trace_path)
        except (OSError, RuntimeError) as exc:
            raise ProfileError(f"cannot write the trace to '{config.trace_path}': {exc}") from exc
        if not os.path.isfile(config.trace_path) or os.path.getsize(config.trace_path) == 0:
            # the profiler's export fails without a word (a path under /sys, a file system that took nothing)
            raise ProfileError(f"the profiler wrote no trace to '{config.trace_path}': give --trace a path on a "
                               "writable file system")
    events = prof.events()
    # kineto's own events are read for the dtypes only where FunctionEvents lack them (torch 2.11)
    dtypes = None if not events or hasattr(events[0], "input_dtypes") else host_input_dtypes(prof)
    trace = events_to_trace(events, walls, waits, step.workload.name, config.mode, config.device,
                            step.batch_size, memory_records(prof, config.device), dtypes)
    if cuda:
        _free, total = torch.cuda.mem_get_info(config.device)
        peak = cuda_peak(config.device)
        trace.memory.device_peak_allocated_bytes = peak.max_allocated_bytes
        trace.memory.device_peak_reserved_bytes = peak.max_reserved_bytes
        trace.memory.device_total_bytes = int(total)
        trace.cache_bytes = int(getattr(torch.cuda.get_device_properties(config.device), "L2_cache_size", 0)) or None
    return trace


HOST_MEMORY_DEVICES = ("CPU", "MKLDNN", "IDEEP")


def memory_records(prof: Any, device: str) -> list[tuple[float, int]] | None:
    """(time_us, bytes) of every allocation (positive) and free (negative) the profiler recorded with
    profile_memory, on the FunctionEvents' clock; host memory on the CPU, the device's on CUDA.

    These are kineto's '[memory]' events (`prof.profiler.kineto_results`). `prof.events()` folds them into the
    operators and ranges they fall in, so a free outside every operator (a tensor released when Python drops
    it) is lost there. None when this torch does not expose them."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return None
    wanted = ("CUDA",) if device.startswith("cuda") else HOST_MEMORY_DEVICES
    start_ns = results.trace_start_ns()
    records = [((e.start_ns() - start_ns) / 1e3, int(e.nbytes())) for e in results.events()
               if e.name() == "[memory]" and str(e.device_type()).rsplit(".", 1)[-1] in wanted]
    return sorted(records)


def host_input_dtypes(prof: Any) -> dict[int, tuple[str, ...]]:
    """The input dtypes of each host operator, by its FunctionEvent id, read from kineto's events: a torch
    whose FunctionEvents lack `input_dtypes` (2.11 has none) still records them there. Empty when this torch
    exposes no kineto results."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return {}
    found: dict[int, tuple[str, ...]] = {}
    for e in results.events():
        if str(e.device_type()).rsplit(".", 1)[-1] != "CPU":
            continue
        dtypes = tuple(str(d) for d in (e.dtypes() or ()))
        if dtypes:
            found[int(e.correlation_id())] = dtypes
    return found


def events_to_trace(events: Any, walls: list[float], waits: list[float], workload: str, mode: str,
                    device: str, batch_size: int,
                    memory_events: list[tuple[float, int]] | None = None,
                    input_dtypes: dict[int, tuple[str, ...]] | None = None) -> ProfileTrace:
    """Turn torch.profiler FunctionEvents into a ProfileTrace (steps, phases, operators, kernels, memory).

    `memory_events` are the profiler's allocations and frees (`memory_records`); the memory timeline is built
    from them, and is left empty without them. `input_dtypes` (`host_input_dtypes`) gives the operators' input
    dtypes where the FunctionEvents do not carry them (torch 2.11)."""
    from torch.autograd import DeviceType

    # With CUDA activity on, the profiler also puts each record_function range on the GPU timeline (a CUDA
    # event of the same name, is_user_annotation=True; pytorch/pytorch#144613): the steps and phases are
    # the host ranges, and those GPU copies are not kernels.
    host = [e for e in events if e.device_type == DeviceType.CPU]
    cuda = device.startswith("cuda")
    step_ranges = sorted((e.time_range.start, e.time_range.end) for e in host if e.name == "dlperf/step")
    if len(step_ranges) != len(walls):
        raise ProfileError(
            f"the profiler recorded {len(step_ranges)} step ranges for {len(walls)} steps: the trace is incomplete"
        )
    starts = [s for s, _ in step_ranges]

    def step_of(t: float) -> int:
        import bisect

        i = bisect.bisect_right(starts, t) - 1
        return i if i >= 0 and t <= step_ranges[i][1] else -1

    phase_ranges: list[dict[str, tuple[float, float]]] = [{} for _ in step_ranges]
    for e in host:
        if e.name.startswith("dlperf/") and e.name[7:] in PHASES:
            i = step_of(e.time_range.start)
            if i >= 0:
                phase_ranges[i][e.name[7:]] = (e.time_range.start, e.time_range.end)

    def is_op(e: Any) -> bool:
        return (e.device_type == DeviceType.CPU and not e.is_user_annotation and not e.name.startswith("dlperf/")
                and not e.name.startswith("ProfilerStep") and not _is_runtime_call(e))

    # CUDA runtime/driver calls (cudaLaunchKernel, cudaMemcpyAsync...) are host events too, but not operators:
    # nested in an op they are its launch cost; outside every op, a synchronize is the host waiting for the
    # device, which is neither operator time nor framework overhead.
    sync_us = [0.0] * len(step_ranges)
    for e in host:
        if _is_runtime_call(e) and "Synchronize" in e.name and _op_depth(e, is_op) == 0:
            i = step_of(e.time_range.start)
            if i >= 0:
                sync_us[i] += float(e.time_range.end - e.time_range.start)
    steps = [
        StepWindow(index=i, start_us=s, end_us=t, wall_s=walls[i], data_wait_s=waits[i],
                   phase_us={p: b - a for p, (a, b) in phase_ranges[i].items()}, device_sync_us=sync_us[i])
        for i, (s, t) in enumerate(step_ranges)
    ]

    flops_of = _moved_flops(events, is_op, _self_device_us if cuda else _self_cpu_us)
    ops: list[OpEvent] = []
    kernels: list[KernelEvent] = []
    for e in events:
        start = float(e.time_range.start)
        if e.device_type == DeviceType.CUDA:
            if e.is_user_annotation:
                continue
            kernels.append(KernelEvent(e.name, start, float(e.time_range.end - start), step_of(start),
                                       _kernel_kind(e.name)))
            continue
        if not is_op(e):
            continue
        depth = _op_depth(e, is_op)
        i = step_of(start)
        phase = "other"
        if i >= 0:
            for p, (a, b) in phase_ranges[i].items():
                if a <= start <= b:
                    phase = p
                    break
        ops.append(OpEvent(
            name=e.name, start_us=start, dur_us=float(e.time_range.end - start),
            self_us=float(e.self_cpu_time_total), thread=int(e.thread), depth=depth, step=i, phase=phase,
            flops=flops_of.get(id(e), int(e.flops or 0)),
            input_shapes=tuple(_shape(s) for s in (e.input_shapes or ())),
            input_strides=tuple(_shape(s) for s in (getattr(e, "structured_input_strides", None) or ())),
            input_dtypes=tuple(str(d) for d in (getattr(e, "input_dtypes", None)
                                                or (input_dtypes or {}).get(int(e.id), ()))),
            self_memory_bytes=int(e.self_cpu_memory_usage or 0),
            is_leaf=not any(is_op(c) for c in e.cpu_children),
            device_us=_self_device_us(e) if cuda else 0.0,
        ))
    ops.sort(key=lambda o: o.start_us)
    # Memory held: allocations minus frees since the first profiled step began, frees outside operators
    # included. (Summing operators' net allocations instead only ever rises: the frees of their outputs
    # happen after them.)
    timeline: list[tuple[float, int]] = []
    held = 0
    for t_us, nbytes in memory_events or ():
        if step_ranges[0][0] <= t_us <= step_ranges[-1][1]:
            held += nbytes
            timeline.append((t_us, held))
    memory = MemoryInfo(start_rss_bytes=0, peak_rss_bytes=0, available_bytes=0, total_bytes=0, budget_bytes=1,
                        timeline=timeline)
    threads = ThreadInfo(intra_op_threads=1, inter_op_threads=1, logical_cores=1, physical_cores=None,
                         usable_cores=1, process_cpu_percent=0.0, system_cpu_percent=0.0)
    return ProfileTrace(workload=workload, mode=mode, device=device, batch_size=batch_size, steps=steps, ops=ops,
                        memory=memory, threads=threads, kernels=kernels)


def _shape(value: Any) -> tuple[int, ...]:
    """A tensor's shape; () for a scalar, a list of tensors (aten::cat) or anything else."""
    if isinstance(value, (list, tuple)) and all(isinstance(d, int) for d in value):
        return tuple(value)
    return ()


RUNTIME_ACTIVITIES = frozenset({"cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver"})


def _is_runtime_call(e: Any) -> bool:
    """A CUDA runtime or driver API call recorded on the host (kineto's cuda_runtime / cuda_driver activity);
    by name (cudaLaunchKernel, cuLaunchKernel) where this torch's FunctionEvent has no activity_type."""
    activity = getattr(e, "activity_type", None)
    if activity is not None:
        return activity in RUNTIME_ACTIVITIES
    return re.match(r"cu(da)?[A-Z]", e.name) is not None


def _op_depth(e: Any, is_op: Callable[[Any], bool]) -> int:
    """How many operators the event runs inside (0: top level, under only user ranges)."""
    depth = 0
    parent = e.cpu_parent
    while parent is not None:
        depth += is_op(parent)
        parent = parent.cpu_parent
    return depth


def _self_cpu_us(e: Any) -> float:
    return float(e.self_cpu_time_total)


def _self_device_us(e: Any) -> float:
    """Time of the device kernels this host op launched itself (not those of its nested ops)."""
    value = getattr(e, "self_device_time_total", None)
    if value is None:  # torch before the device_* names
        value = getattr(e, "self_cuda_time_total", 0)
    return float(value or 0)


def _moved_flops(events: Any, is_op: Callable[[Any], bool], self_us: Callable[[Any], float]) -> dict[int, int]:
    """FLOPs the profiler counts on a convolution wrapper (aten::conv2d) moved to the nested convolution op
    that does the work (aten::mkldnn_convolution, aten::cudnn_convolution): the innermost convolution ops below
    it, the one with the most self time among them (`self_us`: host time on the CPU, its kernels' time on
    CUDA). Chosen by the nesting, not by comparing the wrapper's self time with it: a descheduled step made
    that comparison come out the other way in some steps, left the FLOPs on the wrapper there, and its
    microseconds of self time then "ran at 268-456% of the roofline" (zoo:resnet18's 1x1 downsamples)."""

    def descendants(e: Any) -> Iterator[Any]:
        for c in e.cpu_children:
            if is_op(c):
                yield c
            yield from descendants(c)

    moved: dict[int, int] = {}
    for e in events:
        if not is_op(e) or not e.flops or "conv" not in e.name:
            continue
        parent = e.cpu_parent
        while parent is not None and not (is_op(parent) and parent.flops):
            parent = parent.cpu_parent
        if parent is not None:
            moved[id(e)] = 0  # counted with its outermost counted ancestor
            continue
        innermost = [d for d in descendants(e)
                     if "conv" in d.name and not any("conv" in c.name for c in descendants(d))]
        heavy = max(innermost, key=self_us, default=None)
        if heavy is not None:
            moved[id(heavy)] = int(e.flops)
            moved[id(e)] = 0
    return moved


def _kernel_kind(name: str) -> str:
    lowered = name.lower()
    if "memcpy" in lowered:
        if "htod" in lowered:
            return "memcpy_h2d"
        if "dtoh" in lowered:
            return "memcpy_d2h"
        return "memcpy"
    if "memset" in lowered:
        return "memset"
    return "kernel"
