"""Tune a training loop: try each knob against the current best, keep what is faster AND trains the same.

For each proposal of each knob (knobs/), in order: (1) loss parity against the baseline from the same
seed (parity.py), so speed is never bought with broken training; (2) an interleaved A/B of the current
best loop against the candidate loop in one process (dlperf.measure.ab: ABBA blocks, bootstrap CI of the
ratio). A candidate is kept only when parity holds and the A/B calls it faster (or, for a `required` one
such as a batch split forced by the memory budget, whatever the A/B says); the next proposal is measured
against it. At the end the baseline and the best are measured in full (breakdown, memory, MFU)
and against each other, interleaved, for the headline gain.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlperf.errors import ConfigError, TrainError
from dlperf.measure.ab import FASTER, ABConfig, ABResult, ab_test, kept_blocks
from dlperf.measure.clock import clock_for
from dlperf.measure.env import usable_cores
from dlperf.measure.stats import Measurement, median
from dlperf.train.knobs import DEFAULT_KNOBS, Candidate, Knob, TuneContext, registry
from dlperf.train.loop import StepConfig, TrainLoop, base_config, has_conv, kept_random_state
from dlperf.train.parity import (
    ParityConfig,
    ParityResult,
    blind_reason,
    compare_losses,
    frozen_curve,
    loss_curve,
)
from dlperf.train.step import TrainMeasurement, measure_loop
from dlperf.workload.base import Workload, error_text

if TYPE_CHECKING:
    from dlperf.calibrate import Ceilings

ACCEPTED = "accepted"
NOT_FASTER = "not faster"
PARITY_FAILED = "parity failed"
FAILED = "failed"
SKIPPED = "skipped"


@dataclass(frozen=True)
class TuneConfig:
    knobs: tuple[str, ...] = DEFAULT_KNOBS
    parity: ParityConfig = field(default_factory=ParityConfig)
    ab: ABConfig = field(default_factory=lambda: ABConfig(blocks=6, iters_per_block=2, warmup_iters=2))
    final_ab: ABConfig = field(default_factory=lambda: ABConfig(blocks=10, iters_per_block=2, warmup_iters=2))
    steps_per_call: int = 4
    """Optimizer steps per timed A/B call (see ab_loops)."""
    measure_steps: int = 20
    measure_warmup: int = 3
    """Warm-up steps before the final measurements of the baseline and the best."""
    memory_budget_bytes: int | None = None
    safety_margin: float = 0.1
    count_flops: bool = True
    """Count FLOPs (for MFU) in the final measurements of the baseline and the best."""
    time_budget_s: float | None = None
    """Wall time for the baseline's loss curve and the trials, counted from `Tuner.run`: no trial starts once it
    would be expected to end past it (as long as the knob's own trials so far, or for a knob's first, the mean trial
    so far); each knob left is recorded as skipped, saying so, and the time taken against it is kept
    (`TuneResult.time_budget`). The final measurements of the baseline and the best still run, so the result is
    measured as without a budget. None: no limit."""

    def to_dict(self) -> dict[str, Any]:
        """What a user set for the tuning, as a run's config keeps it (`dlperf runs show ID --json`): a tune run kept
        only its baseline step, so the knobs, budgets and parity it ran under were lost."""
        return {"knobs": list(self.knobs), "parity_steps": self.parity.steps, "parity_rtol": self.parity.rtol,
                "ab_blocks": self.ab.blocks, "memory_budget_bytes": self.memory_budget_bytes,
                "safety_margin": self.safety_margin, "time_budget_s": self.time_budget_s}

    def __post_init__(self) -> None:
        unknown = [k for k in self.knobs if k not in DEFAULT_KNOBS]
        if unknown:
            raise unknown_knobs(unknown)
        if not 0 <= self.safety_margin < 1:
            raise ConfigError(f"safety margin must be in [0, 1), got {self.safety_margin}")
        if self.measure_warmup < 0:
            raise ConfigError(f"warm-up steps must be >= 0, got {self.measure_warmup}")
        if self.steps_per_call < 1:
            raise ConfigError(f"steps per A/B call must be >= 1, got {self.steps_per_call}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:
            raise ConfigError(f"memory budget must be positive, got {self.memory_budget_bytes}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ConfigError(f"time budget must be positive, got {self.time_budget_s}")


def unknown_knobs(names: list[str]) -> ConfigError:
    """The error for knob names that are not knobs, with the knob each typo is closest to (`thread` -> threads)."""
    import difflib

    guesses = {n: close[0] for n in names if (close := difflib.get_close_matches(n, DEFAULT_KNOBS, n=1))}
    hint = ""
    if len(names) == 1 and guesses:
        hint = f"; did you mean {guesses[names[0]]}?"
    elif guesses:
        hint = f"; did you mean {', '.join(f'{g} for {n}' for n, g in guesses.items())}?"
    return ConfigError(f"unknown knob(s) {', '.join(names)}: choose from {', '.join(DEFAULT_KNOBS)}{hint}")


@dataclass
class Trial:
    """One proposal measured: its change, parity, A/B against the then-best, and what was decided."""

    knob: str
    change: dict[str, Any]
    note: str
    status: str
    reason: str = ""
    config: StepConfig | None = None
    parity: ParityResult | None = None
    speedup: float | None = None
    """Samples/s of the candidate over the then-best (interleaved A/B); > 1 is faster."""
    speedup_ci: tuple[float, float] | None = None
    verdict: str | None = None
    samples_per_s: float | None = None
    """The candidate's, from the A/B's paired blocks as the speedup is (`paired_rates`)."""
    reference_samples_per_s: float | None = None
    """The then-best's, from the same blocks."""
    tokens_per_s: float | None = None
    """`samples_per_s` times the tokens a sample the candidate's loop trained on; None for inputs that are not
    token ids."""
    tokens_guessed: bool = False
    """Those tokens were counted from the inputs' shape (padding included), not by the workload's count_tokens."""
    disturbed: str | None = None
    """Why the A/B's totals disagree with its paired blocks (`disturbance`); None when they agree."""
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob, "change": self.change, "note": self.note, "status": self.status,
            "reason": self.reason, "config": self.config.to_dict() if self.config else None,
            "parity": self.parity.to_dict() if self.parity else None, "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None, "verdict": self.verdict,
            "samples_per_s": self.samples_per_s, "reference_samples_per_s": self.reference_samples_per_s,
            "tokens_per_s": self.tokens_per_s, "tokens_guessed": self.tokens_guessed,
            "disturbed": self.disturbed, "details": self.details, "duration_s": self.duration_s,
        }


@dataclass(frozen=True)
class BudgetUse:
    """How long the tuning (the baseline's loss curves and the trials) took against `--time-budget`. A budget bounds
    when a trial starts, not when it ends, so a trial longer than expected can end past it: `overrun_by` names it."""

    budget_s: float
    spent_s: float
    overrun_by: str | None = None
    """The trial during which the budget ran out, as 'compile: torch.compile(model) (started at 2.0s, took 8.1s)',
    or the baseline's loss curves; None within the budget."""

    @property
    def overrun_s(self) -> float:
        return max(self.spent_s - self.budget_s, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"budget_s": self.budget_s, "spent_s": self.spent_s, "overrun_s": self.overrun_s,
                "overrun_by": self.overrun_by}


@dataclass
class Setting:
    """One setting to put into the user's code, with the measured gain of the trial that chose it."""

    what: str
    code: str
    speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "code": self.code, "speedup": self.speedup}


@dataclass
class TuneResult:
    workload: str
    baseline: StepConfig
    best: StepConfig
    trials: list[Trial]
    baseline_measurement: TrainMeasurement
    best_measurement: TrainMeasurement
    final_ab: ABResult | None
    settings: list[Setting]
    final_samples: tuple[int, int] | None = None
    """Samples trained in the final A/B's timed calls, baseline and best (a loader without drop_last ends each
    epoch with a shorter batch); None with no final A/B."""
    final_samples_per_s: tuple[float, float] | None = None
    """Baseline's and best's samples/s from the final A/B's paired blocks (`paired_rates`); None with none."""
    parity_blind: str | None = None
    """Why loss parity could not tell a candidate that stops training (`parity.blind_reason`); None when it can."""
    not_tried: list[str] = field(default_factory=list)
    """The knobs the time budget left untried, whole or in part (their trials say which proposals)."""
    time_budget: BudgetUse | None = None
    """How long the tuning took against its time budget, and what overran it; None without a budget."""

    def __repr__(self) -> str:
        # the dataclass's printed every trial with its parity losses and both measurements' per-step times: ~5 KB
        # with one trial, growing with each
        accepted = sum(t.status == ACCEPTED for t in self.trials)
        changes = ", ".join(f"{k}={v!r}" for k, v in self.baseline.diff(self.best).items()) or "none"
        return (f"TuneResult({self.workload!r}, {len(self.trials)} trial{'s' * (len(self.trials) != 1)}, "
                f"{accepted} accepted, changes: {changes}, {self.speedup:.3g}x samples/s; .settings, .trials)")

    @property
    def speedup(self) -> float:
        """Best over baseline in samples/s, from the final interleaved A/B (1.0 when nothing changed)."""
        if self.final_ab is None:
            return 1.0
        return throughput_speedup(self.final_ab, self.baseline, self.best)

    @property
    def baseline_samples_per_s(self) -> float:
        """From the final interleaved A/B's paired blocks, as its speedup is, else the baseline's measurement."""
        if self.final_samples_per_s is None:
            return self.baseline_measurement.samples_per_s
        return self.final_samples_per_s[0]

    @property
    def best_samples_per_s(self) -> float:
        if self.final_samples_per_s is None:
            return self.best_measurement.samples_per_s
        return self.final_samples_per_s[1]

    @property
    def baseline_tokens_per_s(self) -> float | None:
        """Tokens/s beside `baseline_samples_per_s`: it times the tokens a sample the baseline's own measurement
        trained on (the final A/B counts no tokens); None for inputs that are not token ids."""
        return _in_tokens(self.baseline_samples_per_s, self.baseline_measurement)

    @property
    def best_tokens_per_s(self) -> float | None:
        return _in_tokens(self.best_samples_per_s, self.best_measurement)

    @property
    def disturbed(self) -> str | None:
        """Why the final A/B's totals disagree with its paired blocks (`disturbance`); None when they agree."""
        if self.final_ab is None or self.final_samples is None:
            return None
        return disturbance(self.final_ab, self.final_samples, "the best", "the baseline's")

    def to_dict(self) -> dict[str, Any]:
        ab = self.final_ab
        return {
            "workload": self.workload,
            "baseline": self.baseline.to_dict(),
            "best": self.best.to_dict(),
            "speedup": self.speedup,
            "final_ab": ab.to_dict() if ab else None,
            "baseline_samples_per_s": self.baseline_samples_per_s,
            "best_samples_per_s": self.best_samples_per_s,
            "baseline_tokens_per_s": self.baseline_tokens_per_s,
            "best_tokens_per_s": self.best_tokens_per_s,
            "disturbed": self.disturbed,
            "parity_blind": self.parity_blind,
            "not_tried": self.not_tried,
            "time_budget": self.time_budget.to_dict() if self.time_budget else None,
            "settings": [s.to_dict() for s in self.settings],
            "trials": [t.to_dict() for t in self.trials],
            "baseline_measurement": self.baseline_measurement.to_dict(),
            "best_measurement": self.best_measurement.to_dict(),
        }


def _in_tokens(samples_per_s: float, measured: TrainMeasurement) -> float | None:
    """`samples_per_s` times the tokens a sample `measured` trained on; None for inputs that are not token ids. The
    same loader at the same batch gives the same tokens a sample, so the best's tokens/s over the baseline's is then
    their samples/s's ratio; another batch size can change it (padding to each batch's longest row)."""
    tokens = measured.tokens_per_s
    if tokens is None or measured.samples_per_s <= 0:
        return None
    return samples_per_s * tokens / measured.samples_per_s


def throughput_speedup(ab: ABResult, a: StepConfig, b: StepConfig) -> float:
    """Samples/s of B over A from an A/B of their steps (steps may carry different numbers of samples)."""
    return ab.speedup * b.effective_batch_size / a.effective_batch_size


def paired_rates(ab: ABResult, samples: tuple[int, int], statistic: str = "median") -> tuple[float, float]:
    """Samples/s of A and B from the paired blocks the A/B's speedup and verdict come from: the samples a side
    trained per timed call over the geometric mean of its call times in the blocks the speedup's trimmed estimate
    keeps (`measure.ab.kept_blocks`; each block summed up by `statistic`, as the A/B did). B's over A's is the A/B's
    speedup (times their samples per call), so the figures printed beside it agree with it. Total samples over
    total time would not: one slow block (a stall, another process) weighs on the totals as much as all the
    others, where the speedup leaves it out (a trial of slow_loader's prefetch_factor printed 2.89x beside
    samples/s 1.40x its reference's)."""
    stat = median if statistic == "median" else statistics.fmean
    blocks = len(ab.block_ratios)
    kept = kept_blocks(ab.block_ratios)

    def rate(m: Measurement, trained: int) -> float:
        per_block = m.n // blocks
        times = [max(stat([t / 1e9 for t in m.samples_ns[k * per_block:(k + 1) * per_block]]), 1e-9)
                 for k in kept]
        return trained / m.n / math.exp(sum(math.log(t) for t in times) / len(kept))

    return rate(ab.a, samples[0]), rate(ab.b, samples[1])


def disturbance(ab: ABResult, samples: tuple[int, int], b_name: str = "the candidate",
                a_name: str = "the best so far's") -> str | None:
    """What to say when the A/B's totals (samples / time over all its blocks) give B a speed over A outside the
    interval its paired blocks give: a few blocks ran far slower than the rest, on one side (a stall, another
    process, a cost paid once an epoch such as restarting loader workers), which the interval does not cover.
    The speedup and verdict rest on the paired blocks; None when the totals agree with them."""
    totals = (samples[1] / ab.b.total_s) / (samples[0] / ab.a.total_s)
    per_call = (samples[1] / ab.b.n) / (samples[0] / ab.a.n)  # the paired speedup's samples per call
    lo, hi = (x * per_call for x in ab.speedup_ci)
    if lo <= totals <= hi:
        return None
    return (f"disturbed: over the whole A/B {b_name} trained {totals:.2f}x {a_name} samples/s (total samples / "
            f"total time), outside the paired blocks' {ab.confidence:.0%} CI {lo:.2f}-{hi:.2f}x: a few blocks ran "
            "far slower than the rest (another process, a stall, a cost paid once an epoch); the speedup and "
            "verdict rest on the paired blocks: repeat on a quieter machine before trusting them")


def ab_loops(a: TrainLoop, b: TrainLoop, config: ABConfig, steps_per_call: int = 1) -> tuple[ABResult, tuple[int, int]]:
    """Interleaved A/B of the two loops; each timed call runs `steps_per_call` optimizer steps. Returns the A/B
    and the samples A and B trained in its timed calls (a loader without drop_last ends each epoch with a
    shorter batch, so steps x batch size would overstate samples/s).

    Several steps per call make a sample a throughput over a short window: with loader workers, steps are
    bursty (most find a batch ready, some wait for one), and the median of single steps would miss the waits.
    While one side runs, the other's loader workers are paused (`TrainLoop.pause_loader`): left running, they
    filled their prefetch queue during the other side's block and took CPU from it.
    """
    items = a.config.effective_batch_size * steps_per_call
    if a.config.effective_batch_size != b.config.effective_batch_size:
        items = steps_per_call
    trained: tuple[list[int], list[int]] = ([], [])  # samples per call, the warm-up calls first

    def calls(loop: TrainLoop, out: list[int]) -> Callable[[], None]:
        def run() -> None:
            samples = 0
            for _ in range(steps_per_call):
                loop.step()
                samples += loop.last_step_samples
            out.append(samples)

        return run

    def switch_to(running: TrainLoop, idle: TrainLoop) -> Callable[[], None]:
        def before() -> None:  # the idle side's loader workers neither load nor take CPU while the other is timed
            # one DataLoader for both (make_loader caches it, or two wrappers hold it): shared workers
            shared = idle.workers.dataloader is not None and idle.workers.dataloader is running.workers.dataloader
            if idle.loader is not running.loader and not shared:
                idle.pause_loader()
            running.resume_loader()

        return before

    try:
        ab = ab_test(calls(a, trained[0]), calls(b, trained[1]), config, clock_for(a.config.device),
                     items_per_call=items, before_a=switch_to(a, b), before_b=switch_to(b, a))
    finally:
        a.resume_loader()
        b.resume_loader()
    return ab, (sum(trained[0][config.warmup_iters:]), sum(trained[1][config.warmup_iters:]))


def make_context(workload: Workload, device: str, config: TuneConfig) -> TuneContext:
    from dlperf.passes.compile import compiler_reason
    from dlperf.train.knobs.precision import bf16_supported

    return TuneContext(
        workload=workload, device=device, cpu_count=usable_cores(),
        memory_budget_bytes=config.memory_budget_bytes, safety_margin=config.safety_margin,
        conv_model=has_conv(workload.build_model()), bf16_supported=bf16_supported(device),
        compiler_missing=compiler_reason(device),
    )


class Tuner:
    """Runs the knobs in order against a baseline. `on_event(text)` reports progress; `on_trial` each trial."""

    def __init__(self, workload: Workload, baseline: StepConfig, config: TuneConfig | None = None,
                 knobs: dict[str, Knob] | None = None, ceilings: Ceilings | None = None,
                 on_event: Callable[[str], None] | None = None,
                 on_trial: Callable[[Trial], object] | None = None) -> None:
        self.workload = workload
        self.baseline = baseline
        self.config = config or TuneConfig()
        all_knobs = knobs if knobs is not None else registry()
        self.knobs = [all_knobs[name] for name in all_knobs if knobs is not None or name in self.config.knobs]
        self.ceilings = ceilings
        self.on_event = on_event or (lambda text: None)
        self.on_trial = on_trial or (lambda trial: None)
        self.trials: list[Trial] = []
        # how far it got, for a tuning stopped before its end (`partial_result`)
        self.best = baseline
        self.baseline_measurement: TrainMeasurement | None = None
        self.best_measurement: TrainMeasurement | None = None
        self.parity_blind: str | None = None
        self.not_tried: list[str] = []
        self.time_budget: BudgetUse | None = None
        self._overrun_by: str | None = None
        self._running: tuple[str, float] | None = None
        """The knob or trial in progress and when it started (`time.perf_counter`, as a trial's duration is timed):
        what an interrupt stopped."""
        self._started = time.monotonic()

    def ceilings_for(self, config: StepConfig) -> Ceilings | None:
        """The ceilings of the thread count `config` trains with: a best configuration on 1 thread had its MFU taken
        against the baseline's 2-thread peak (and was told to calibrate `--threads 2`). Measured once if not cached."""
        if self.ceilings is None or config.threads is None:
            return self.ceilings
        from dlperf.measure.env import usable_cores

        if min(config.threads, usable_cores()) == self.ceilings.threads:
            return self.ceilings
        from dlperf.calibrate import get_ceilings

        self.on_event(f"reading this machine's ceilings at {config.threads} threads for MFU")
        return get_ceilings(self.ceilings.device, measure_if_missing=True, threads=config.threads)

    def _record(self, trial: Trial) -> None:
        self.trials.append(trial)
        budget = self.config.time_budget_s
        if budget is not None and self._overrun_by is None and trial.status != SKIPPED:
            spent = time.monotonic() - self._started
            if spent > budget:  # it started within the budget (or none would have) and ended past it
                what = f"{trial.knob}: {trial.note or trial.change}" if trial.change else trial.knob
                self._overrun_by = (f"{what} (started at {spent - trial.duration_s:.1f}s, "
                                    f"took {trial.duration_s:.1f}s)")
        self.on_trial(trial)

    def _over_budget(self, knob: str | None = None) -> str | None:
        """Why no further trial starts: one more would end past the time budget; None within it (or with no budget).
        The next trial of a knob that has run one is expected to last as long as its own (the mean of them); a knob's
        first, the mean of all trials so far. The mean alone let a knob much slower than the others start its second
        trial: after four 1 s trials, a 10 s one's second was expected to take 2.8 s, and a 20 s budget ran 25 s."""
        budget = self.config.time_budget_s
        if budget is None:
            return None
        spent = time.monotonic() - self._started
        durations = [t.duration_s for t in self.trials if t.status != SKIPPED]
        own = [t.duration_s for t in self.trials if t.status != SKIPPED and t.knob == knob and t.change]
        expected = statistics.fmean(own or durations) if durations else 0.0
        if spent + expected <= budget:
            return None
        # with no trial run yet, "a trial took 0s on average" read as a measurement
        took = (f"its last {len(own)} trial(s) took {expected:.0f}s on average" if own
                else f"a trial took {expected:.0f}s on average" if durations
                else "before any trial, on the baseline's loss curves")
        return (f"not tried: the time budget ({budget:g}s) would be exceeded ({spent:.0f}s spent, {took}); raise "
                "--time-budget, or try this knob alone with --knobs")

    def _skip_for_budget(self, knob: str, reason: str, changes: list[dict[str, Any]] | None = None) -> None:
        if changes:
            reason = f"{len(changes)} more proposal(s) " + reason + ": " + "; ".join(
                ", ".join(f"{k}={v}" for k, v in change.items()) for change in changes)
        self.not_tried.append(knob)
        self._record(Trial(knob, {}, "", SKIPPED, reason))

    def run(self) -> TuneResult:
        try:
            return self._run()
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: what the tuning kept (`partial_result`) has its time, too
            if self.time_budget is None:
                self.time_budget = self._budget_use()
            raise

    def _run(self) -> TuneResult:
        ctx = make_context(self.workload, self.baseline.device, self.config)
        parity_config = self.config.parity
        self._started = time.monotonic()
        self.on_event(f"baseline loss curve ({parity_config.steps} steps)")
        baseline_losses = self._baseline_losses()
        self.on_event("a model that does not train: is loss parity able to tell?")
        frozen = frozen_curve(self.workload, self.baseline, parity_config)
        self.parity_blind = blind_reason(baseline_losses, frozen, parity_config.rtol, parity_config.atol)
        best = self.baseline
        best_loop = TrainLoop(self.workload, best)
        try:
            for knob in self.knobs:
                over = self._over_budget()
                if over is not None:
                    # a knob that does not apply here costs nothing: listed as left by the budget, pin_memory on a
                    # CPU read as a loss, with "try this knob alone with --knobs" to find it skipped there
                    reason = None if getattr(knob, "skip_probes", False) else knob.skip_reason(best, ctx)
                    if reason:
                        self._record(Trial(knob.name, {}, "", SKIPPED, reason))
                    else:
                        self._skip_for_budget(knob.name, over)
                    continue
                best, best_loop = self._try_knob(knob, ctx, best, best_loop, baseline_losses)
                self.best = best
                self._running = None
            self.time_budget = self._budget_use()
            return self._finish(best, best_loop)
        finally:
            best_loop.close()

    def _budget_use(self) -> BudgetUse | None:
        """The time the loss curves and trials took against the budget, and what ran past it."""
        budget = self.config.time_budget_s
        if budget is None:
            return None
        spent = time.monotonic() - self._started
        overrun_by = self._overrun_by
        if spent > budget and overrun_by is None and self._running is not None:  # interrupted in it
            what, began = self._running
            took = time.perf_counter() - began
            overrun_by = f"{what} (started at {spent - took:.1f}s, interrupted after {took:.1f}s)"
        elif spent > budget and overrun_by is None:  # no trial ended past it: the baseline's loss curves did
            overrun_by = "the baseline's loss curves, before any trial"
        return BudgetUse(budget, spent, overrun_by if spent > budget else None)

    def _baseline_losses(self) -> list[float]:
        import torch

        parity = self.config.parity
        try:
            losses = loss_curve(self.workload, self.baseline, parity.steps, parity.seed)
        except torch.cuda.OutOfMemoryError as exc:
            # every trial is measured against a running baseline, so the user's batch has to fit once
            raise TrainError(
                f"the baseline (batch {self.baseline.batch_size} x {self.baseline.accumulation_steps}) runs out "
                f"of memory on {self.baseline.device}: pass a smaller --batch-size to tune from"
            ) from exc
        bad = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
        if bad is not None:
            # every candidate's loss is compared with this curve: against nan, each would fail parity
            raise TrainError(
                f"workload '{self.workload.name}': the baseline's loss is {losses[bad]} at step {bad + 1} of "
                f"{len(losses)}: its training diverges, so no candidate can be checked against it; fix the "
                "training first (learning rate, loss, data)"
            )
        return losses

    def _try_knob(self, knob: Knob, ctx: TuneContext, best: StepConfig, best_loop: TrainLoop,
                  baseline_losses: list[float]) -> tuple[StepConfig, TrainLoop]:
        reason = knob.skip_reason(best, ctx)
        if reason:
            self._record(Trial(knob.name, {}, "", SKIPPED, reason))
            return best, best_loop
        self.on_event(f"{knob.name}: proposing")
        started = time.perf_counter()
        self._running = (knob.name, started)
        try:
            candidates = knob.candidates(best, ctx)
        except Exception as exc:  # a knob that cannot propose must not stop the others
            self._record(Trial(knob.name, {}, "", FAILED, f"{type(exc).__name__}: {exc}",
                               duration_s=time.perf_counter() - started))
            return best, best_loop
        if not candidates:
            details: dict[str, Any] = getattr(getattr(knob, "last_search", None), "to_dict", dict)()
            unchanged = getattr(knob, "unchanged_reason", None)
            why = unchanged(best) if unchanged is not None else "nothing to change here"
            self._record(Trial(knob.name, {}, "", SKIPPED, why, details=details,
                               duration_s=time.perf_counter() - started))
            return best, best_loop
        for i, candidate in enumerate(candidates):
            over = self._over_budget(knob.name)
            if over is not None:
                self._skip_for_budget(knob.name, over, [dict(c.change) for c in candidates[i:]])
                break
            trial, loop = self._try_candidate(knob, candidate, best, best_loop, baseline_losses)
            self._record(trial)
            if trial.status == ACCEPTED and loop is not None and trial.config is not None:
                best_loop.close()
                best, best_loop = trial.config, loop
            else:
                if loop is not None:
                    loop.close()
                if knob.sweep and trial.status != FAILED:
                    break
        return best, best_loop

    def _try_candidate(self, knob: Knob, candidate: Candidate, best: StepConfig, best_loop: TrainLoop,
                       baseline_losses: list[float]) -> tuple[Trial, TrainLoop | None]:
        started = time.perf_counter()
        trial = Trial(knob.name, dict(candidate.change), candidate.note, FAILED, details=dict(candidate.details))
        self._running = (f"{knob.name}: {candidate.note or candidate.change}", started)
        loop: TrainLoop | None = None
        try:
            config = best.replace(**candidate.change)
            trial.config = config
            self.on_event(f"{knob.name}: {candidate.note or candidate.change}: loss parity")
            losses = loss_curve(self.workload, config, self.config.parity.steps, self.config.parity.seed)
            trial.parity = compare_losses(baseline_losses, losses, self.config.parity.rtol, self.config.parity.atol)
            if not trial.parity.ok:
                trial.status, trial.reason = PARITY_FAILED, trial.parity.describe()
                hint = (summed_loss_hint(self.baseline.batch_size, config.batch_size, trial.parity)
                        or batch_norm_hint(self.workload, self.baseline.batch_size, config.batch_size))
                if hint:
                    trial.reason += f"; {hint}"
                if candidate.required:
                    # the result read "gain none" over the user's batch with nothing on its breaking their budget
                    trial.reason += (f"; it was required ({candidate.note}), so the best so far still breaks the "
                                     "memory budget")
                return trial, None
            self.on_event(f"{knob.name}: {candidate.note or candidate.change}: interleaved A/B")
            loop = TrainLoop(self.workload, config)
            ab, (samples_a, samples_b) = ab_loops(best_loop, loop, self.config.ab, self.config.steps_per_call)
            trial.speedup = throughput_speedup(ab, best, config)
            lo, hi = ab.speedup_ci
            scale = config.effective_batch_size / best.effective_batch_size
            trial.speedup_ci = (lo * scale, hi * scale)
            trial.verdict = ab.verdict
            trial.reference_samples_per_s, trial.samples_per_s = paired_rates(
                ab, (samples_a, samples_b), self.config.ab.block_statistic)
            if loop.tokens_per_sample is not None:
                trial.tokens_per_s = trial.samples_per_s * loop.tokens_per_sample
                trial.tokens_guessed = loop.spec.count_tokens is None
            trial.disturbed = disturbance(ab, (samples_a, samples_b))
            if ab.verdict == FASTER:
                trial.status = ACCEPTED
            elif candidate.required:
                trial.status, trial.reason = ACCEPTED, f"required ({candidate.note}); A/B: {ab.verdict}"
            else:
                trial.status, trial.reason = NOT_FASTER, f"A/B: {ab.verdict}"
        except Exception as exc:  # a broken knob is a finding, not a crash of the tuner
            trial.status, trial.reason = FAILED, error_text(exc)[:300]
            if loop is not None:
                loop.close()
            loop = None
        except BaseException:  # Ctrl-C, SIGTERM: its loader workers stop now, not in a 5 s join each at exit
            if loop is not None:
                loop.close()
            raise
        finally:
            trial.duration_s = time.perf_counter() - started
        return trial, loop

    def _finish(self, best: StepConfig, best_loop: TrainLoop) -> TuneResult:
        """Measure baseline and best in full, then A/B them on fresh loops (same epoch position, same warm-up)."""
        steps = self.config.measure_steps
        self.on_event("measuring the baseline")
        base_loop = TrainLoop(self.workload, self.baseline)
        try:
            base_m = measure_loop(base_loop, steps, self.config.measure_warmup, ceilings=self.ceilings,
                                  count_flops=self.config.count_flops)
        except KeyboardInterrupt as exc:
            self.baseline_measurement = getattr(exc, "dlperf_partial", None)  # the steps timed before it
            raise
        finally:
            base_loop.close()
        self.baseline_measurement = base_m
        base_m.loader_trials = loader_trials(self.trials)
        if best == self.baseline:
            return TuneResult(self.workload.name, self.baseline, best, self.trials, base_m, base_m, None, [],
                              parity_blind=self.parity_blind, not_tried=self.not_tried,
                              time_budget=self.time_budget)
        self.on_event("measuring the best configuration")
        try:
            best_m = measure_loop(best_loop, steps, self.config.measure_warmup, ceilings=self.ceilings_for(best),
                                  count_flops=self.config.count_flops)
        except KeyboardInterrupt as exc:
            self.best_measurement = getattr(exc, "dlperf_partial", None)
            raise
        self.best_measurement = best_m
        best_m.loader_trials = loader_trials(self.trials)
        self.on_event("baseline vs best, interleaved")
        fresh_base, fresh_best = TrainLoop(self.workload, self.baseline), TrainLoop(self.workload, best)
        try:
            final, final_samples = ab_loops(fresh_base, fresh_best, self.config.final_ab, self.config.steps_per_call)
        finally:
            fresh_base.close()
            fresh_best.close()
        return TuneResult(self.workload.name, self.baseline, best, self.trials, base_m, best_m, final,
                          code_settings(self.baseline, best, self.trials), final_samples,
                          paired_rates(final, final_samples, self.config.final_ab.block_statistic),
                          self.parity_blind, self.not_tried, self.time_budget)


def tune(workload: Workload | str | os.PathLike[str], baseline: StepConfig | None = None,
         config: TuneConfig | None = None, **kwargs: Any) -> TuneResult:
    """Tune `workload` (a Workload or a spec such as 'zoo:mlp') from `baseline` (see Tuner). No baseline: the
    workload's own configuration (`base_config`: its TrainSpec's batch size, eager fp32 on the CPU), as
    `dlperf train WORKLOAD --tune` starts from with no options."""
    # an int batch size or a dict failed as "'int' object has no attribute 'device'" after the workload loaded
    if baseline is not None and not isinstance(baseline, StepConfig):
        raise ConfigError(f"baseline must be a dlperf.StepConfig, e.g. StepConfig(batch_size=32), or None for the "
                          f"workload's own, got {type(baseline).__name__}")
    if config is not None and not isinstance(config, TuneConfig):
        raise ConfigError(f"config must be a dlperf.TuneConfig, got {type(config).__name__}")
    if isinstance(workload, (str, os.PathLike)):
        from dlperf.workload.loader import load_workload

        workload = load_workload(os.fspath(workload))  # a Path too, as dlperf.bench takes one
    if baseline is None:
        baseline = base_config(workload)
    with kept_random_state():  # its loops seed the generators: the caller's are given back as they were
        return Tuner(workload, baseline, config, **kwargs).run()


LOADER_KNOBS = ("workers", "prefetch", "persistent")


def loader_trials(trials: list[Trial]) -> list[str]:
    """The loader knobs' trials that were measured and not kept, as 'num_workers=2 (0.36x, not faster)'."""
    out = []
    for trial in trials:
        if trial.knob in LOADER_KNOBS and trial.change and trial.status in (NOT_FASTER, PARITY_FAILED, FAILED):
            change = ", ".join(f"{k}={v}" for k, v in trial.change.items())
            speed = f"{trial.speedup:.2f}x, " if trial.speedup is not None else ""
            out.append(f"{change} ({speed}{trial.status})")
    return out


def summed_loss_hint(base_micro: int, micro: int, parity: ParityResult) -> str | None:
    """Why a split batch failed parity when the loss is summed over the batch, not averaged: each micro-batch's loss
    then scales with its size (the reported loss is their mean), and dividing it by the accumulation steps halves
    the gradient too. A sum loss at 32 x 2 read "parity failed: tail mean 74.04 vs baseline 147.8"."""
    if micro == base_micro or parity.baseline_tail_mean == 0 or not math.isfinite(parity.candidate_tail_mean):
        return None
    expected = micro / base_micro  # the candidate's loss over the baseline's, were it a sum over the batch
    ratio = parity.candidate_tail_mean / parity.baseline_tail_mean
    if abs(ratio / expected - 1.0) > 0.2:
        return None
    return (f"the loss looks summed over the batch, not averaged (the candidate's is {ratio:.2f}x the baseline's at "
            f"{micro} of {base_micro} items a step): batch and accumulation changes assume a mean-reduced loss "
            "(reduction='mean'); with a sum, keep the batch or scale the learning rate yourself")


def batch_norm_hint(workload: Workload, base_micro: int, micro: int) -> str | None:
    """Why a split batch may fail parity when the model normalizes over the batch (BatchNorm): each micro-batch is
    normalized by its own statistics, which gradient accumulation does not undo. digits' MLP with BatchNorm1d read
    'parity FAILED: ... (+14.6%)' at 16 x 4 for 64 and nothing on why."""
    from dlperf.train.knobs.batch import batch_norm_kinds

    if micro >= base_micro:
        return None
    kinds = batch_norm_kinds(workload.build_model())
    if not kinds:
        return None
    return (f"the model normalizes over the batch ({', '.join(kinds)}): micro-batches of {micro} give it other "
            f"statistics than batches of {base_micro}, which gradient accumulation does not undo; keep the batch "
            "(raise --memory-budget), or allow the difference (--parity-tolerance)")


def code_settings(baseline: StepConfig, best: StepConfig, trials: list[Trial]) -> list[Setting]:
    """The best configuration as the exact settings for the user's code, each with its measured gain."""
    gains: dict[str, float | None] = {}
    for t in trials:
        if t.status == ACCEPTED:
            for key in t.change:
                previous = gains.get(key)
                gains[key] = t.speedup if previous is None or t.speedup is None else previous * t.speedup
    diff = baseline.diff(best)
    out: list[Setting] = []
    loader = {k: diff[k] for k in ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
              if k in diff}
    if loader:
        args = ", ".join(f"{k}={v!r}" for k, v in loader.items())
        gain = _product(gains.get(k) for k in loader)
        code = f"DataLoader(dataset, batch_size={best.batch_size}, ..., {args})"
        if best.pin_memory and "pin_memory" in loader:  # pinned batches only overlap copies made non-blocking
            code += "; x = x.to(device, non_blocking=True) (and the target alike)"
        out.append(Setting("DataLoader", code, gain))
    if "batch_size" in diff or "accumulation_steps" in diff:
        code = (f"batch_size={best.batch_size}; accumulate {best.accumulation_steps} micro-batches: "
                f"(loss / {best.accumulation_steps}).backward() each, optimizer.step() + zero_grad() "
                f"every {best.accumulation_steps} (effective batch {best.effective_batch_size})")
        out.append(Setting("batch and accumulation", code, gains.get("batch_size") or gains.get("accumulation_steps")))
    if "precision" in diff:
        device = "cuda" if best.device.startswith("cuda") else "cpu"
        dtype = "torch.bfloat16" if best.precision == "bf16" else "torch.float16"
        code = f"with torch.autocast('{device}', dtype={dtype}): loss = loss_fn(model(x), y)"
        if best.precision == "fp16":
            # the scaler is made once: its scale carries from step to step (one made in each step, as the line read,
            # starts every step at 65536 and skips each step whose gradients overflow at it)
            code = ("scaler = torch.amp.GradScaler('cuda') once, before the loop; each step: " + code
                    + "; scaler.scale(loss).backward(); scaler.step(opt); scaler.update() "
                    "(clipping gradients? scaler.unscale_(opt) before it)")
        out.append(Setting("mixed precision", code, gains.get("precision")))
    if "channels_last" in diff:
        out.append(Setting("memory format", "model = model.to(memory_format=torch.channels_last); "
                           "x = x.contiguous(memory_format=torch.channels_last)", gains.get("channels_last")))
    if "optimizer_impl" in diff:
        out.append(Setting("optimizer", f"make the optimizer with {best.optimizer_impl}=True",
                           gains.get("optimizer_impl")))
    if "checkpointing" in diff:
        out.append(Setting("activation checkpointing", "out = torch.utils.checkpoint.checkpoint(block, x, "
                           "use_reentrant=False) for each top-level block, and for each layer of a stack of repeated "
                           "blocks at any depth (a ModuleList, TransformerEncoder's layers)",
                           gains.get("checkpointing")))
    if "threads" in diff:
        out.append(Setting("threads", f"torch.set_num_threads({best.threads})", gains.get("threads")))
    if "compile" in diff:
        out.append(Setting("compile", "model = torch.compile(model)", gains.get("compile")))
    return out


def _product(values: Any) -> float | None:
    result = 1.0
    seen = False
    for v in values:
        if v is not None:
            result *= v
            seen = True
    return result if seen else None


def partial_result(workload: str, baseline: StepConfig, trials: list[Trial], best: StepConfig | None = None,
                   baseline_measurement: TrainMeasurement | None = None,
                   best_measurement: TrainMeasurement | None = None,
                   time_budget: BudgetUse | None = None) -> dict[str, Any]:
    """What a tuning stopped before its end has: the baseline and the trials it finished, and, stopped in its last
    phase, the best configuration so far and the measurements done (whole or up to the interrupt); no verdict.
    `time_budget`: the time it took against its budget, up to the interrupt or to its final measurements."""
    out: dict[str, Any] = {"workload": workload, "baseline": baseline.to_dict(),
                           "trials": [t.to_dict() for t in trials]}
    if time_budget is not None:
        out["time_budget"] = time_budget.to_dict()
    if best is not None and best != baseline:
        out["best_so_far"] = best.to_dict()
    if baseline_measurement is not None:
        out["baseline_measurement"] = baseline_measurement.to_dict()
    if best_measurement is not None:
        out["best_measurement"] = best_measurement.to_dict()
    return out


def record_trial(store: Any, parent_id: str, workload: str, trial: Trial) -> str:
    """Save one trial as a child run ('train-trial') of the tuning run; returns its id."""
    from dlperf.store.records import FAILED as RUN_FAILED

    config = {"knob": trial.knob, "change": trial.change, "step": trial.config.to_dict() if trial.config else None}
    with store.recording("train-trial", workload, config, parent_id=parent_id) as run:
        run.result = trial.to_dict()
        if trial.status == FAILED:
            run.status, run.error = RUN_FAILED, trial.reason
    return str(run.id)
