"""A/B of two settings of one workload, measured interleaved in one process (see measure/ab.py).

Each side gets its own model instance and inputs; process-wide settings (torch threads) are switched,
untimed, before each block. When the two sides use different batch sizes, the ratio is per item.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlperf.compare.settings import ABSettings
from dlperf.errors import ConfigError, MeasurementError
from dlperf.measure.ab import SETTLE_S, ABConfig, ABResult, ab_test, decide, without_stalled_blocks
from dlperf.measure.bench import contention_warning
from dlperf.measure.clock import Clock
from dlperf.measure.stats import Measurement
from dlperf.measure.system import UtilizationSampler
from dlperf.workload.base import Inputs, Workload

BLOCK_TARGET_S = 0.05
"""Auto block size: enough calls per block for about this long, so one slow call does not decide a block."""


@dataclass
class ABRun:
    """An A/B's settings and outcome. `result.ratio` is time(B)/time(A) per call, or per item when
    the batch sizes differ (`per_item`)."""

    workload: str
    a: ABSettings
    b: ABSettings
    batch_size_a: int
    batch_size_b: int
    result: ABResult
    per_item: bool
    iters_per_block: int
    min_effect: float | None = None
    """The smallest change called faster or slower (None: an A/B recorded before it was kept)."""
    process_cpu_percent: float | None = None
    """This process's CPU while the blocks ran, in % of one core; with `system_cpu_percent` (% of all cores) what
    other processes took (None: an A/B recorded before they were kept)."""
    system_cpu_percent: float | None = None
    threads: tuple[int, int] | None = None
    """torch's intra-op threads of side A and side B while measured."""
    stalled_blocks: dict[str, Any] | None = None
    """The paired blocks where a side stalled, left out of `result`'s verdict (`measure.ab.without_stalled_blocks`,
    as optimize's confirming A/B): `StallJudged.note` with every block's ratio (`block_ratios`) and, where too few
    were left to judge, `disturbed`; None where no side stalled (or an A/B recorded before 2026-12-07)."""

    @property
    def warnings(self) -> list[str]:
        """Other processes kept half a core busy or more while the blocks ran: the interleaving shares that load
        between the sides, but a side with more threads loses more to it (threads=1 against threads=2 of a small
        transformer on 2 cores, one kept busy elsewhere: 'B is slower (0.306x)'), so a verdict on threads taken then
        may not hold on a quiet machine. Then a side whose mean call is far above its median, as bench warns: the
        verdict is of block medians and the items/s column counts the slow calls (B at 32,883 items/s beside A's
        175,769 read as a 5x loss under 'B speed 0.881x of A', with no word of B's calls of up to 56 ms)."""
        out: list[str] = []
        stalled = self.stalled_blocks
        if stalled:  # first: it says what the verdict is of
            every = stalled["all_blocks"]
            lo, hi = every["speedup_ci"]
            over_all = (f"over all {stalled['of']} blocks B speed {every['speedup']:.3f}x of A (CI "
                        f"{lo:.3f}-{hi:.3f}x), {every['verdict']}")
            left = (f"{len(stalled['blocks'])} of {stalled['of']} blocks, a side stalled in them: blocks "
                    f"{stalled['where']}")
            out.append(f"not judged: {stalled['disturbed']}; {over_all}" if stalled.get("disturbed") else
                       f"the verdict leaves out {left} (a stalled block's ratio is the stall, not the settings); "
                       f"{over_all}")
        if self.process_cpu_percent is not None and self.system_cpu_percent is not None:
            most = max(self.threads) if self.threads else None
            said = contention_warning(self.process_cpu_percent, self.system_cpu_percent, most,
                                      advice="the interleaving shares their load between the sides",
                                      threads_option=False)
            if said is not None:
                if self.threads and self.threads[0] != self.threads[1]:
                    said += (f"; the sides differ in threads (A {self.threads[0]}, B {self.threads[1]}): the one with "
                             "more loses more to the other processes, so this verdict may not hold on a quiet machine")
                out.append(said)
        for side, measurement in (("A", self.result.a), ("B", self.result.b)):
            tail = measurement.heavy_tail_note
            if tail:
                out.append(f"side {side}: {tail}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            **self.result.to_dict(),
            "per_item": self.per_item,
            "iters_per_block": self.iters_per_block,
            "min_effect": self.min_effect,
            "settings": {"a": self.a.to_dict(), "b": self.b.to_dict()},
            "batch_size": {"a": self.batch_size_a, "b": self.batch_size_b},
            "measurements": {"a": self.result.a.to_dict(), "b": self.result.b.to_dict()},
            "process_cpu_percent": self.process_cpu_percent,
            "system_cpu_percent": self.system_cpu_percent,
            "threads": list(self.threads) if self.threads else None,
            "stalled_blocks": self.stalled_blocks,
            "warnings": self.warnings,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ABRun:
        """A stored A/B back (`to_dict`'s output, as `dlperf ab` records it)."""
        sides = {side: Measurement.from_dict(data["measurements"][side]) for side in ("a", "b")}
        result = ABResult(sides["a"], sides["b"], [float(r) for r in data["block_ratios"]], float(data["ratio"]),
                          (float(data["ci"][0]), float(data["ci"][1])), float(data["confidence"]), str(data["verdict"]))
        return cls(str(data["workload"]), ABSettings.from_dict(data["settings"]["a"]),
                   ABSettings.from_dict(data["settings"]["b"]), int(data["batch_size"]["a"]),
                   int(data["batch_size"]["b"]), result, bool(data["per_item"]), int(data["iters_per_block"]),
                   float(data["min_effect"]) if isinstance(data.get("min_effect"), (int, float)) else None,
                   data.get("process_cpu_percent"), data.get("system_cpu_percent"),
                   (int(data["threads"][0]), int(data["threads"][1])) if data.get("threads") else None,
                   data.get("stalled_blocks"))

    def __repr__(self) -> str:
        # the dataclass's printed both sides' settings, every block's ratio and settle wait: ~1000 characters for 6
        # blocks, where BenchResult's and RunRecord's are one line
        warned = len(self.warnings)
        return (f"ABRun({self.workload!r}, {self.describe()}" + (f", {warned} warning{'s' if warned > 1 else ''} in "
                f".warnings" if warned else "") + "; .result)")

    def describe(self) -> str:
        unit = " per item" if self.per_item else ""
        return self.result.describe(f"A ({self.a.describe()})", f"B ({self.b.describe()})") + unit


def load_side(workload_spec: Any, options: Any) -> Workload:
    """The workload of a side with its `option.NAME=VALUE`s: a text (as typed after `--a`/`--b`) is read as a
    spec's ?NAME=VALUE is, by the parameter it is for ('nan' stays text for a `str` parameter), other values (the
    Python API's, an older stored A/B's) are passed as they are."""
    from dlperf.workload.loader import load_workload

    pairs = list(options)
    return load_workload(workload_spec, option_texts={k: v for k, v in pairs if isinstance(v, str)},
                         **{k: v for k, v in pairs if not isinstance(v, str)})


def _builds_alike(a: ABSettings, b: ABSettings) -> bool:
    """Whether both sides run the same model object: the same workload options, device and memory format (the
    threads, precision and batch size are how it is called). Two copies built alike still differ in speed by
    where their memory landed: an A/A of zoo:mlp with a copy per side had its interval exclude 1 in 6 of 8
    trials, and 3 of 37 `dlperf ab` runs called one copy 1.2-4% faster than the other."""
    return (a.options, a.device, a.channels_last) == (b.options, b.device, b.channels_last)


def _side(workload_spec: Any, settings: ABSettings, batch_size: int | None,
          where: str = "settings", built: tuple[Workload, Any, Inputs, int] | None = None
          ) -> tuple[Workload, Any, Inputs, int]:
    """The workload, model, inputs and batch of one side; `built`: the other side's, whose workload and model it
    shares (`_builds_alike`), and its inputs too at the same batch size."""
    import torch

    _refuse_device(settings, where)
    if built is not None:
        workload, model, inputs, batch = built
        own_batch = settings.batch_size or batch_size or workload.default_batch_size
        if own_batch == batch:
            return built
        return workload, model, _placed(workload.example_inputs(own_batch), settings), own_batch
    workload = load_side(workload_spec, settings.options)
    batch = settings.batch_size or batch_size or workload.default_batch_size
    model = workload.build_model().eval().to(settings.device)
    inputs = workload.example_inputs(batch)
    if settings.channels_last:
        _refuse_channels_last(workload, inputs, where)
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return workload, model, _placed(inputs, settings), batch


def _refuse_device(settings: ABSettings, where: str) -> None:
    """check_device's refusal (no CUDA, or 'cuda:7' on a machine of 2 GPUs, which failed inside torch once the A/B
    ran), named as the side's setting."""
    from dlperf._device import check_device

    try:
        check_device(settings.device, f"device={settings.device}")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _refuse_channels_last(workload: Workload, inputs: Inputs, where: str) -> None:
    import torch

    if not any(isinstance(x, torch.Tensor) and x.dim() == 4 for x in inputs):
        from dlperf.workload.base import describe_inputs

        raise ConfigError(
            f"{where}: channels_last=1 needs a 4-D (NCHW) input, but workload '{workload.name}' takes "
            f"{describe_inputs(inputs, workload.input_names)}: drop channels_last for this workload"
        )


def _placed(inputs: Inputs, settings: ABSettings) -> Inputs:
    """`inputs` in the side's memory format and on its device."""
    import torch

    from dlperf.measure.bench import to_device

    if settings.channels_last:
        inputs = tuple(x.contiguous(memory_format=torch.channels_last)
                       if isinstance(x, torch.Tensor) and x.dim() == 4 else x for x in inputs)
    return to_device(inputs, settings.device)


def _set_threads(n: int | None) -> Callable[[], None] | None:
    if n is None:
        return None

    def apply() -> None:
        import torch

        torch.set_num_threads(n)

    return apply


def _clock(a: ABSettings, b: ABSettings) -> Clock:
    """The host clock, with the CUDA devices of either side synchronized at both ends of a block: a CUDA call
    returns once its kernels are queued, and a host clock alone would time the queueing."""
    from dlperf.measure.clock import CpuClock, SyncedHostClock

    cuda = [s.device for s in (a, b) if s.device.startswith("cuda")]
    return SyncedHostClock(cuda) if cuda else CpuClock()


def _auto_iters(calls: list[Callable[[], Any]], clock: Clock, timed: int = 5) -> int:
    """Calls per block for about BLOCK_TARGET_S on the slower side (3 to 200), from the median of `timed` calls of
    each: one call gave 5, 22 and 28 calls per block for the same command on a busy machine."""
    slowest = 0.0
    for call in calls:
        times = []
        for _ in range(timed):
            token = clock.start()
            call()
            times.append(clock.stop(token) / 1e9)
        slowest = max(slowest, statistics.median(times))
    return max(3, min(200, math.ceil(BLOCK_TARGET_S / max(slowest, 1e-6))))


def run_ab(
    workload_spec: Any,
    a: ABSettings,
    b: ABSettings,
    *,
    batch_size: int | None = None,
    blocks: int = 20,
    iters_per_block: int | None = None,
    warmup_iters: int = 3,
    confidence: float = 0.95,
    min_effect: float = 0.01,
    on_block: Callable[[int, int], None] | None = None,
) -> ABRun:
    """Measure settings `a` and `b` of the workload interleaved; `batch_size` applies where a side sets none.

    `iters_per_block=None` picks enough calls for ~50 ms per block (3 to 200).
    """
    _check_options(blocks, iters_per_block, confidence, min_effect, batch_size)
    import torch

    from dlperf.measure.bench import make_call

    old_threads = torch.get_num_threads()
    try:
        if a.threads is not None:
            torch.set_num_threads(a.threads)
        workload, model_a, inputs_a, batch_a = _side(workload_spec, a, batch_size, "--a")
        workload.check(model_a, inputs_a)
        torch.set_num_threads(b.threads or old_threads)
        shared = (workload, model_a, inputs_a, batch_a) if _builds_alike(a, b) else None
        _, model_b, inputs_b, batch_b = _side(workload_spec, b, batch_size, "--b", shared)
        if model_b is not model_a or inputs_b is not inputs_a:
            workload.check(model_b, inputs_b)
        # the workload as given, not side A's (its options applied: the title named A's hidden=2048 for both sides)
        name = workload_spec if isinstance(workload_spec, str) else (workload.source or workload.name)
        call_a = make_call(model_a, inputs_a, a.device, a.precision)
        call_b = make_call(model_b, inputs_b, b.device, b.precision)
        before_a = _set_threads(a.threads or old_threads)
        before_b = _set_threads(b.threads or old_threads)
        clock = _clock(a, b)
        if iters_per_block is None:
            iters_per_block = _auto_iters([call_a, call_b], clock)
        # each side's block waits (untimed) for the other side's threads to go idle: an ONNX Runtime artifact's
        # workers spin after its block, and a side with more torch threads leaves them spinning, on the cores the
        # other side's block then runs on (`measure.ab.SETTLE_S`)
        config = ABConfig(blocks=blocks, iters_per_block=iters_per_block, warmup_iters=warmup_iters,
                          confidence=confidence, min_effect=min_effect, settle_s=SETTLE_S)
        threads = (a.threads or old_threads, b.threads or old_threads)
        util = UtilizationSampler(interval_s=0.5)

        def run_of(result: ABResult) -> ABRun:
            judged = without_stalled_blocks(result, min_effect)  # judged as optimize's confirming A/B is
            stalled = None
            if judged.stalled:
                stalled = {**judged.note(), "block_ratios": list(result.block_ratios)}
                if judged.too_few:
                    stalled["disturbed"] = f"{judged.left_out()}; too few blocks left to judge"
            return ABRun(name, a, b, batch_a, batch_b, judged.result, batch_a != batch_b, iters_per_block,
                         min_effect, util.result.process_cpu_percent, util.result.system_cpu_percent, threads,
                         stalled)

        try:
            with util:  # what other processes took while the blocks ran (`ABRun.warnings`)
                result = _ab(call_a, call_b, config, batch_a, batch_b, on_block, before_a, before_b, clock)
        except KeyboardInterrupt as exc:  # the blocks finished so far, as a run, for the caller to keep
            partial = getattr(exc, "dlperf_measured", None)
            if partial is not None:
                exc.dlperf_partial = run_of(partial)  # type: ignore[attr-defined]
            raise
    finally:
        torch.set_num_threads(old_threads)
    return run_of(result)


def _where(exc: BaseException) -> str:
    """' (at FILE:LINE in FUNCTION)': the innermost frame of the exception, most often in the user's model."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename}:{last.lineno} in {last.name})"


def _check_options(blocks: int, iters_per_block: int | None, confidence: float, min_effect: float,
                   batch_size: int | None = None) -> None:
    """Refuse bad options before the two models are built (which can take a while) and before a run is recorded."""
    if batch_size is not None and batch_size < 1:  # 0 was falsy: the workload's default batch was measured instead
        raise ConfigError(f"--batch-size must be an integer >= 1, got {batch_size}")
    if not 0.0 <= min_effect < 1.0:  # ABConfig refuses it too; this names the option in the CLI's spelling
        raise ConfigError(f"--min-effect must be a fraction in [0, 1), e.g. 1% or 0.01; got {min_effect:g}")
    if iters_per_block is not None and iters_per_block < 1:
        raise ConfigError(f"--iters-per-block must be >= 1 (none: about 50 ms a block), got {iters_per_block}")
    if not 0.5 < confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0.5, 1), e.g. 0.95 or 95%; got {confidence:g}")
    ABConfig(blocks=blocks, iters_per_block=1 if iters_per_block is None else iters_per_block,
             confidence=confidence, min_effect=min_effect)


def _ab(call_a: Callable[[], Any], call_b: Callable[[], Any], config: ABConfig, batch_a: int, batch_b: int,
        on_block: Callable[[int, int], None] | None, before_a: Callable[[], None] | None,
        before_b: Callable[[], None] | None, clock: Clock) -> ABResult:
    try:
        result = ab_test(call_a, call_b, config, clock, items_per_call=1, on_block=on_block,
                         before_a=before_a, before_b=before_b)
    except KeyboardInterrupt as exc:
        partial = getattr(exc, "dlperf_measured", None)
        if partial is not None:
            exc.dlperf_measured = _per_item(partial, batch_a, batch_b, config)  # type: ignore[attr-defined]
        raise
    except MeasurementError:
        raise
    except Exception as exc:  # the model's own error (an OOM at some call, a bad input): said once, not a traceback
        raise MeasurementError(f"a measured call raised {type(exc).__name__}: {exc}{_where(exc)}") from exc
    return _per_item(result, batch_a, batch_b, config)


def _per_item(result: ABResult, batch_a: int, batch_b: int, config: ABConfig) -> ABResult:
    result.a.items_per_call = batch_a
    result.b.items_per_call = batch_b
    if batch_a != batch_b:
        # Per-item time: a block ratio of per-call medians scaled by the batch sizes.
        per_item = [r * batch_a / batch_b for r in result.block_ratios]
        ratio, ci, verdict = decide(per_item, config.confidence, config.min_effect)
        result.block_ratios = per_item
        result.ratio, result.ci, result.verdict = ratio, ci, verdict
    return result


def run_ab_recorded(store: Any, workload_spec: Any, a: ABSettings, b: ABSettings,
                    **kwargs: Any) -> tuple[ABRun, str]:
    """run_ab, recorded in `store` as a run of kind 'ab' (failed or interrupted runs are recorded too)."""
    from dlperf.measure.env import capture_environment

    _check_options(kwargs.get("blocks", 20), kwargs.get("iters_per_block"), kwargs.get("confidence", 0.95),
                   kwargs.get("min_effect", 0.01), kwargs.get("batch_size"))
    # a spec that does not load (no such file, a syntax error, an unknown option) is no run; once per distinct
    # options, as a workload file runs its module code at each load
    loaded = {tuple(options): load_side(workload_spec, options)
              for options in [a.options] + ([b.options] if tuple(b.options) != tuple(a.options) else [])}
    # settings this machine or workload cannot take are no run either: `device=cuda` without CUDA and
    # `channels_last=1` of a 2-D input were recorded as failed A/Bs, a `runs list` row each
    for where, settings in (("--a", a), ("--b", b)):
        _refuse_device(settings, where)
        if settings.channels_last:
            workload = loaded[tuple(settings.options)]
            _refuse_channels_last(workload, workload.example_inputs(1), where)
    name = workload_spec if isinstance(workload_spec, str) else getattr(workload_spec, "name", "workload")
    config = {"version": 1, "a": a.to_dict(), "b": b.to_dict(),
              **{k: v for k, v in kwargs.items() if k != "on_block"}}
    device = next((s.device for s in (a, b) if s.device.startswith("cuda")), None)
    finished = [0]  # paired blocks done, for an interrupt before there are two to decide on
    on_block = kwargs.get("on_block")

    def count(done: int, total: int) -> None:
        finished[0] = done
        if on_block is not None:
            on_block(done, total)

    with store.recording("ab", name, config, capture_environment(device).to_dict()) as run:
        try:
            outcome = run_ab(workload_spec, a, b, **{**kwargs, "on_block": count})
        except KeyboardInterrupt as exc:
            partial = getattr(exc, "dlperf_partial", None)
            total = kwargs.get("blocks", 20)
            if partial is not None:  # kept with the interrupted run: its verdict is of the blocks it finished
                blocks = len(partial.result.block_ratios)
                run.result = {**partial.to_dict(), "partial": f"interrupted after {blocks} of "
                              f"{total} paired blocks: the verdict is of those"}
            else:  # `runs show` said only "no result recorded"
                run.result = {"partial": f"interrupted after {finished[0]} of {total} paired blocks: no verdict "
                                         f"(it needs at least 2)", "blocks_done": finished[0]}
            raise
        run.result = outcome.to_dict()
    return outcome, run.id
