"""Measure training steps as the user's loop runs them: step time, its phase breakdown, samples/s, memory, MFU.

Each measured step is timed end to end by the device's clock (host `perf_counter_ns` on CPU; CUDA events
synchronized on the end event) through `dlperf.measure.timer.time_callable`, and split into phases by a
`PhaseTimer` (see loop.py). Training FLOPs are counted once, on one eager step, with
`torch.utils.flop_counter.FlopCounterMode` (matmuls, convolutions and attention, forward and backward; the
optimizer's elementwise work is not counted), and MFU = FLOPs per step x steps per second / the calibrated GEMM
ceiling for the dtype in use.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlperf._findings import Findings
from dlperf.errors import DlperfError, MeasurementError, TrainError
from dlperf.measure.clock import clock_for
from dlperf.measure.memory import PeakRssSampler, WorkerMemorySampler, cuda_peak, cuda_release_cached, cuda_reset_peak
from dlperf.measure.stats import Measurement
from dlperf.measure.timer import TimerConfig, time_callable
from dlperf.train.loop import (
    GUESSED_TOKENS,
    PHASES,
    PhaseTimer,
    StepConfig,
    TrainLoop,
    checkpointing_off,
    kept_random_state,
    too_many_workers,
)
from dlperf.workload.base import Workload

if TYPE_CHECKING:
    from dlperf.calibrate import Ceilings

CEILING_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
INPUT_BOUND_SHARE = 0.3
"""A phase (data wait, host-to-device copy) taking this share of the step or more is reported as the bottleneck."""


@dataclass
class TrainMeasurement:
    """Measured training steps of one configuration. Times in seconds, memory in bytes."""

    workload: str
    config: StepConfig
    measurement: Measurement
    """One sample per optimizer step; items_per_call = the effective batch."""
    phases_ns: dict[str, list[int]]
    """Per measured step, the nanoseconds of each phase (data, h2d, forward, backward, optimizer)."""
    peak_rss_bytes: int
    """The main process's peak RSS (its loader workers are separate processes: `workers_peak_uss_bytes`)."""
    cuda_max_allocated_bytes: int | None = None
    flops_per_step: float | None = None
    ceiling_flops: float | None = None
    ceiling_dtype: str | None = None
    losses: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    samples_per_step: list[int] = field(default_factory=list)
    """Samples each measured step trained on (less than the effective batch at a short last batch); empty
    when unknown, and then every step counts as the effective batch."""
    flops_step_samples: int | None = None
    """Samples of the step whose FLOPs were counted (FLOPs scale with the samples of a step)."""
    workers_peak_uss_bytes: int | None = None
    """The loader workers' memory: the peak of their summed USS (the memory private to each, which they add to the
    main process's; their RSS counts the pages a forked worker shares with it), sampled every 0.5 s. None without
    workers or where USS cannot be read."""
    worker_processes: int = 0
    """The most loader worker processes seen alive at one reading."""
    tokens_per_step: list[int] = field(default_factory=list)
    """Tokens each measured step trained on (`TrainSpec.count_tokens`, or every position of [batch, seq] token ids:
    `tokens_guessed`); empty for inputs that are not token ids."""
    tokens_guessed: bool = False
    """The tokens were counted from the inputs' shape (padding included), not by the workload's `count_tokens`."""
    loader_trials: list[str] = field(default_factory=list)
    """What a tuning tried on the loader without gain ('num_workers=2 (0.36x, not faster)'), so that an input-bound
    finding does not advise the very trials that just failed; empty outside a tuning."""

    def __repr__(self) -> str:
        # the dataclass's printed every step's phase times, loss and samples: 2.1 KB for zoo:mlp's 20 steps, growing
        # with each step (a notebook cell showing a 1000-step measurement printed ~100 KB)
        steps = len(self.measurement.samples_ns)
        mfu = self.mfu
        return (f"TrainMeasurement({self.workload!r}, batch {self.config.batch_size}, {steps} step"
                f"{'s' * (steps != 1)}, step p50 {self.step_s * 1e3:.4g} ms, {self.samples_per_s:,.1f} samples/s"
                + (f", MFU {mfu:.1%}" if mfu is not None else "")
                + f", {len(self.notes)} note{'s' * (len(self.notes) != 1)} in .notes; .breakdown_s(), .measurement)")

    @property
    def job_peak_bytes(self) -> int:
        """Main process peak RSS + the workers' peak USS: the job's memory (at most; the two peaks may not coincide)."""
        return self.peak_rss_bytes + (self.workers_peak_uss_bytes or 0)

    @property
    def samples_per_s(self) -> float:
        """Samples trained on over the measured time (the samples each step really had)."""
        if not self.samples_per_step or self.measurement.total_s <= 0:
            return self.measurement.throughput
        return sum(self.samples_per_step) / self.measurement.total_s

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens trained on over the measured time; None for a workload whose inputs are not token ids."""
        if not self.tokens_per_step or self.measurement.total_s <= 0:
            return None
        return sum(self.tokens_per_step) / self.measurement.total_s

    @property
    def step_s(self) -> float:
        """Median step time."""
        return self.measurement.median_s

    def breakdown_s(self) -> dict[str, float]:
        """Mean seconds per step of each phase, plus 'other' (the step time no phase accounts for)."""
        n = self.measurement.n
        out = {phase: sum(self.phases_ns[phase]) / n / 1e9 for phase in PHASES}
        out["other"] = max(self.measurement.mean_s - sum(out.values()), 0.0)
        return out

    def breakdown_share(self) -> dict[str, float]:
        mean = self.measurement.mean_s
        return {k: (v / mean if mean > 0 else 0.0) for k, v in self.breakdown_s().items()}

    @property
    def achieved_flops(self) -> float | None:
        if self.flops_per_step is None:
            return None
        if self.samples_per_step and self.flops_step_samples:
            return self.flops_per_step / self.flops_step_samples * self.samples_per_s
        return self.flops_per_step * self.measurement.n / self.measurement.total_s

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization: achieved FLOP/s over the calibrated ceiling for the dtype in use."""
        achieved = self.achieved_flops
        if achieved is None or not self.ceiling_flops:
            return None
        return achieved / self.ceiling_flops

    @property
    def findings(self) -> Findings:
        """What the breakdown says to do next (an input-bound or copy-bound step); a property, as `Diagnosis`'s."""
        share = self.breakdown_share()
        out = []
        if share["data"] >= INPUT_BOUND_SHARE:
            out.append(f"input-bound: {share['data']:.0%} of the step waits for the loader; "
                       + _input_bound_advice(self.config, self.loader_trials))
        if share["h2d"] >= INPUT_BOUND_SHARE:
            out.append(f"copy-bound: {share['h2d']:.0%} of the step copies batches to the device; pin_memory=True "
                       "with non_blocking copies overlaps them")
        return Findings(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "config": self.config.to_dict(),
            "findings": list(self.findings),
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_guessed": self.tokens_guessed,
            "step_s": self.step_s,
            "summary": self.measurement.summary(),
            "breakdown_s": self.breakdown_s(),
            "breakdown_share": self.breakdown_share(),
            "peak_rss_bytes": self.peak_rss_bytes,
            "workers_peak_uss_bytes": self.workers_peak_uss_bytes,
            "worker_processes": self.worker_processes,
            "job_peak_bytes": self.job_peak_bytes,
            "cuda_max_allocated_bytes": self.cuda_max_allocated_bytes,
            "flops_per_step": self.flops_per_step,
            "achieved_flops": self.achieved_flops,
            "ceiling_flops": self.ceiling_flops,
            "ceiling_dtype": self.ceiling_dtype,
            "mfu": self.mfu,
            "losses": self.losses,
            "notes": self.notes,
            "measurement": self.measurement.to_dict(),
            "phases_ns": self.phases_ns,
            "samples_per_step": self.samples_per_step,
            "tokens_per_step": self.tokens_per_step,
        }


def _input_bound_advice(config: StepConfig, tried: list[str] | None = None) -> str:
    """What to try for a step that waits for its loader, given the workers it already has and what a tuning `tried`
    on the loader without gain. The advice to tune the loader knobs was printed under the best configuration of a
    tuning that had just tried them (2 workers on the 2 usable CPUs, prefetch_factor 4: not faster), and, with
    0 workers kept, "more DataLoader workers ... should help" right below a trial of 2 workers at 0.36x."""
    from dlperf.measure.env import usable_cores

    cpus = usable_cores()
    if tried and config.num_workers < cpus:
        return (f"this tuning tried {', '.join(tried)}, so more loader workers or prefetching are not the fix "
                "here: make each sample cheaper to load (decoding, augmentation, a dataset cached in memory, reading "
                "a batch at once rather than sample by sample)")
    if config.num_workers == 0:
        return ("more DataLoader workers or prefetching should help (`dlperf train --tune --knobs "
                "workers,prefetch,persistent`)")
    if config.num_workers < cpus:
        return (f"more DataLoader workers than its {config.num_workers} (up to the {cpus} usable CPUs) or deeper "
                "prefetching should help (`dlperf train --tune --knobs workers,prefetch,persistent`)")
    return (f"its {config.num_workers} DataLoader workers already match the {cpus} usable CPUs: more help only "
            "where loading waits on I/O rather than the CPU; otherwise make each sample cheaper to load (decoding, "
            "augmentation, a dataset cached in memory)")


def attention_flop_formulas() -> dict[Any, Callable[..., int]]:
    """Model FLOP formulas for SDPA's fused kernels: forward on the CPU, which FlopCounterMode has none for, and
    backward on the CPU and CUDA, which it counts with the recomputation.

    Without a CPU forward formula a transformer's attention counted zero there: a causal char-level LM (2 layers, width
    64, sequence 64, batch 16) read 637 MFLOP / step, its linear layers alone, where attention adds 101 MFLOP more
    (14%), and so its MFU. torch's own forward formula is used, on the same shapes (full attention, as torch counts a
    causal one too). Its backward formula (`sdpa_backward_flop_count`) counts five matmuls: the flash kernels
    recompute the scores Q @ K^T in backward rather than keep them, the recomputation activation checkpointing also
    does. MFU counts model FLOPs (PaLM's definition: what the model needs, not what a kernel chooses to recompute, so
    that an implementation does not raise its MFU by recomputing more), and attention's backward needs four: dV, dP,
    dQ and dK, twice the forward's two. Counted with five, a model with SDPA read 8.4 MFLOP a step over the hand
    count, half its attention forward. The varlen kernels of nested tensors (`_flash_attention_backward`) keep
    torch's count.
    """
    import torch
    from torch.utils.flop_counter import sdpa_flop_count

    def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return int(sdpa_flop_count(query, key, value))

    def backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None,
                 **kwargs: Any) -> int:
        return 2 * int(sdpa_flop_count(query, key, value))  # dV, dP, dQ, dK: no recomputed Q @ K^T

    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., int]] = {aten._scaled_dot_product_flash_attention_for_cpu: forward,
                                                aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}
    for name in ("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
                 "_scaled_dot_product_cudnn_attention_backward"):  # (grad_out, query, key, value, ...), as on the CPU
        if hasattr(aten, name):
            formulas[getattr(aten, name)] = backward
    return formulas


def count_step_flops(loop: TrainLoop, recompute: bool = False) -> float:
    """FLOPs of one optimizer step (forward + backward of every micro-batch), counted on an eager step.

    The step is a real training step (it updates the model), so call it during warm-up. It runs without activation
    checkpointing (`recompute=False`): the forward that checkpointing recomputes in backward is not model FLOPs,
    and counted it made a checkpointed step's FLOPs a third larger (19.6 against 26.1 MFLOP), and its MFU with it.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=attention_flop_formulas())
    with counter, (contextlib.nullcontext(0) if recompute else checkpointing_off(loop.model)):
        loop.step(eager=True)
    return float(counter.get_total_flops())


def ceiling_for(ceilings: Ceilings | None, precision: str) -> tuple[float | None, str]:
    dtype = CEILING_DTYPE[precision]
    if ceilings is None:
        return None, dtype
    return ceilings.peak_flops(dtype), dtype


def measure_loop(
    loop: TrainLoop,
    steps: int = 20,
    warmup_steps: int = 3,
    min_duration_s: float = 0.0,
    ceilings: Ceilings | None = None,
    count_flops: bool = True,
    on_progress: Callable[[int, float], None] | None = None,
) -> TrainMeasurement:
    """Measure `steps` steps (at least; more if `min_duration_s` asks) of an already built loop.

    `count_flops=False` skips the FLOP count (and so MFU): FlopCounterMode's first use in a process costs
    seconds of imports.
    """
    if steps < 1:
        raise TrainError(f"steps must be >= 1, got {steps}")
    config = loop.config
    notes: list[str] = []
    crowded = too_many_workers(config)
    if crowded is not None:  # said once, here, rather than torch's warning twice (see loop.quiet_worker_warning)
        notes.append(crowded)
    flops: float | None = None
    flops_samples: int | None = None
    warmup = warmup_steps
    if count_flops:
        import torch

        try:
            try:
                flops = count_step_flops(loop)
            except torch.cuda.OutOfMemoryError:
                if not config.checkpointing:
                    raise
                # the batch fits only checkpointed: count with the recomputation, and say what that overstates
                cuda_release_cached(config.device)
                flops = count_step_flops(loop, recompute=True)
                notes.append("FLOPs per step include the forward that activation checkpointing recomputes in "
                             "backward (the step without checkpointing, which counts model FLOPs only, ran out of "
                             "memory): the MFU is overstated by up to a third")
            flops_samples = loop.last_step_samples
            warmup = max(warmup - 1, 0)
        except Exception as exc:  # a model the counter cannot trace still trains: report, don't fail
            notes.append(f"FLOPs not counted ({type(exc).__name__}: {exc})")
    clock = clock_for(config.device)
    recorded: dict[str, list[int]] = {p: [] for p in PHASES}
    losses: list[Any] = []
    step_samples: list[int] = []
    step_tokens: list[int | None] = []

    def one_step() -> None:
        timer = PhaseTimer(config.device)
        losses.append(loop.step(timer))
        step_samples.append(loop.last_step_samples)
        step_tokens.append(loop.last_step_tokens)
        for phase, ns in timer.finish().items():
            recorded[phase].append(ns)

    timer_config = TimerConfig(warmup_iters=warmup, min_iters=steps, max_iters=max(steps, 1_000_000)
                               if min_duration_s > 0 else steps, min_duration_s=min_duration_s,
                               max_duration_s=max(min_duration_s * 4, 3600.0))
    cuda = config.device.startswith("cuda")
    if cuda:
        cuda_reset_peak(config.device)
    interrupted: KeyboardInterrupt | None = None
    failed: DlperfError | None = None
    workers = WorkerMemorySampler(loop.worker_pids) if config.num_workers else contextlib.nullcontext(None)
    with PeakRssSampler() as rss, workers as worker_memory:
        try:
            m = time_callable(one_step, timer_config, clock, items_per_call=config.effective_batch_size,
                              label=f"{loop.workload.name} train", on_progress=on_progress)
        except KeyboardInterrupt as exc:
            partial = getattr(exc, "dlperf_measured", None)
            if partial is None:  # nothing timed yet
                raise
            m, interrupted = partial, exc
        except MeasurementError as exc:
            # the cause already says what is wrong and how to fix it when it is one of ours
            error = exc.__cause__ if isinstance(exc.__cause__, DlperfError) else TrainError(
                f"workload '{loop.workload.name}': a training step failed: {exc}")
            partial = getattr(exc, "dlperf_measured", None)
            if partial is None:
                raise error from (None if error is exc.__cause__ else exc)
            m, failed = partial, error
    if interrupted is not None or failed is not None:
        what = "interrupted" if interrupted is not None else "failed"
        notes.append(f"{what} after {len(m.samples_ns)} of {steps} measured steps: every figure here is from "
                     "those steps")
    # the steps the timer counted (an interrupt can fall between a step's end and its sample being kept)
    counted = slice(warmup, warmup + len(m.samples_ns))
    phases = {p: v[counted] for p, v in recorded.items()}
    loss_values = [float(x) for x in losses[counted]]
    samples = step_samples[counted]
    counted_tokens = step_tokens[counted]
    # every step's, or none: a step without tokens would count as 0 in tokens/s
    tokens = [n for n in counted_tokens if n is not None] if None not in counted_tokens else []
    guessed = bool(tokens) and loop.spec.count_tokens is None
    if guessed:
        notes.append(GUESSED_TOKENS)
    short = [n for n in samples if n < config.effective_batch_size]
    if short:
        notes.append(f"{len(short)} of {len(samples)} measured steps trained on fewer samples than the batch of "
                     f"{config.effective_batch_size} (down to {min(short)}: the loader's last batch of an epoch); "
                     "samples/s counts the samples trained on, and drop_last=True keeps every step full")
    bad = next((i for i, loss in enumerate(loss_values) if not math.isfinite(loss)), None)
    if bad is not None:
        notes.append(f"the loss is {loss_values[bad]} from measured step {bad + 1}: the training diverges, and a "
                     "diverged step (nan/inf everywhere) may not run at the speed of a healthy one")
    ceiling, dtype = ceiling_for(ceilings, config.precision)
    if ceilings is not None and ceiling is None:
        notes.append(f"no {dtype} GEMM ceiling calibrated on this machine: MFU not computed")
    result = TrainMeasurement(
        workload=loop.workload.name, config=config, measurement=m, phases_ns=phases,
        peak_rss_bytes=rss.peak_rss_bytes, flops_per_step=flops, ceiling_flops=ceiling, ceiling_dtype=dtype,
        losses=loss_values, notes=notes, samples_per_step=samples, flops_step_samples=flops_samples,
        tokens_per_step=tokens, tokens_guessed=guessed,
    )
    if worker_memory is not None:
        result.workers_peak_uss_bytes = worker_memory.peak_uss_bytes
        result.worker_processes = worker_memory.processes
    if cuda:
        result.cuda_max_allocated_bytes = cuda_peak(config.device).max_allocated_bytes
    from dlperf.calibrate.ceilings import ABOVE_CEILING, ceilings_caveat, ceilings_news, worth_measuring_again

    if ceilings is not None and result.mfu is not None and result.mfu > ABOVE_CEILING and (why := worth_measuring_again(
            ceilings, f"a training step ({config.precision}) ran at MFU {result.mfu:.0%} of the {dtype} GEMM ceiling "
                      f"measured at {ceilings.measured_at}")) is not None:
        # as profile does for an operator above its roofline: the cached ceilings understate the machine
        from dlperf.calibrate import get_ceilings

        ceilings = get_ceilings(ceilings.device, measure_if_missing=True, threads=ceilings.threads, remeasure=why)
        result.ceiling_flops, result.ceiling_dtype = ceiling_for(ceilings, config.precision)
        notes.append(ceilings_news(ceilings) or f"the cached ceilings were measured again: {why}")
    caveat = ceilings_caveat(ceilings, "MFU", uses=(dtype,)) if result.mfu is not None else None
    if caveat is not None:  # ceilings calibrated on a busy machine: MFU 2.2% was printed with no word of it
        notes.append(caveat)
    elif result.mfu is not None and result.mfu > IMPLAUSIBLE_MFU:
        # 85-100% for a tiny CNN: its ceiling was measured while the machine was busy, and cached
        notes.append(f"MFU {result.mfu:.0%} of the {dtype} GEMM ceiling is implausibly high for a whole training "
                     "step: the cached ceiling is likely an underestimate (measured on a busy machine?): run "
                     "`dlperf calibrate --force` when the machine is idle")
    if m.noise_warning:
        notes.append(m.noise_warning)
    if interrupted is not None:  # the interrupt goes on, carrying what was measured
        interrupted.dlperf_partial = result  # type: ignore[attr-defined]
        raise interrupted
    if failed is not None:  # so does the error
        failed.dlperf_partial = result  # type: ignore[attr-defined]
        raise failed from None
    return result


IMPLAUSIBLE_MFU = 0.8
"""Above this a training step's MFU says more about its ceiling than about the step: a whole step (loss, backward,
optimizer, small operators) does not keep the GEMM units as busy as one large GEMM does."""


def measure_training(
    workload: Workload,
    config: StepConfig,
    steps: int = 20,
    warmup_steps: int = 3,
    min_duration_s: float = 0.0,
    ceilings: Ceilings | None = None,
    seed: int = 0,
    count_flops: bool = True,
    on_progress: Callable[[int, float], None] | None = None,
) -> TrainMeasurement:
    """Build the loop for `config` and measure it (see `measure_loop`). The caller's random generators are as they
    were after it (`kept_random_state`), though the loop seeds them with `seed`."""
    with kept_random_state():
        loop = TrainLoop(workload, config, seed=seed)
        try:
            return measure_loop(loop, steps, warmup_steps, min_duration_s, ceilings, count_flops, on_progress)
        finally:
            loop.close()
