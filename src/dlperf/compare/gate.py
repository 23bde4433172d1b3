"""The regression gate: does a fresh measurement regress against a baseline, beyond a threshold, for sure?

A point fails only when the regression is larger than `max_regression` (e.g. p50 latency 5% higher) AND
that is statistically significant: the whole bootstrap confidence interval of the regression lies above
the threshold (a one-sided test of "regression <= threshold" at (1 + confidence) / 2). So noise alone
does not fail a build, a significant but small slowdown does not either, and neither does an estimate
just above the threshold whose interval reaches below it (reported as inconclusive). Throughput is
items per second over the measured calls, so its statistic is the mean latency per call.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlperf.compare.stats import MannWhitney, RatioEstimate, change_text, mann_whitney_u, p_text, ratio_ci
from dlperf.errors import ConfigError
from dlperf.measure.stats import Measurement, min_samples_for_interval

METRICS = ("p50", "p90", "p95", "p99", "mean", "throughput")


@dataclass(frozen=True)
class GateConfig:
    metric: str = "p50"
    max_regression: float = 0.05
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_regression", "confidence"):  # from Python: "5%" raised TypeError from a comparison
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{name} must be a number (a fraction: 5% = 0.05), got {value!r}")
        if self.metric not in METRICS:
            raise ConfigError(f"unknown metric '{self.metric}': choose one of {', '.join(METRICS)}")
        if not 0.0 <= self.max_regression < 10.0:
            raise ConfigError(f"max_regression must be a fraction >= 0 (5% = 0.05), got {self.max_regression}")
        if self.metric == "throughput" and self.max_regression >= 1.0:
            # A throughput regression is the lost fraction, below 100%: such a threshold could never fail.
            raise ConfigError(f"a throughput regression is the fraction lost (at most 100%), so max_regression "
                              f"{self.max_regression:.0%} could never fail: give less than 100%, e.g. 5%")
        if not 0.5 < self.confidence < 1.0:
            raise ConfigError(f"confidence must be in (0.5, 1), got {self.confidence}")

    @property
    def statistic(self) -> str:
        return "mean" if self.metric == "throughput" else self.metric


@dataclass
class PointVerdict:
    """One batch size: `regression` is the fractional loss (+0.2 = 20% slower / 16.7% less throughput), positive when
    worse whatever the metric; `change` is the metric's own change (now / baseline - 1: -0.167 for that throughput),
    which is how the verdict words it, with "worse" or "better"."""

    batch_size: int
    metric: str
    baseline_value: float
    current_value: float
    regression: float
    regression_ci: tuple[float, float]
    significant: bool
    exceeds: bool
    mann_whitney: MannWhitney
    estimate: RatioEstimate
    threshold: float = 0.0
    per_item: bool = False
    """The latencies are per item (calls of a batch larger than 1, divided by its size), not per call."""
    samples: int = 0
    """The fewer of the two runs' sample counts."""
    baseline_samples: int = 0
    """The baseline run's sample count: where it is the short one, no re-measurement of the check can be judged."""
    needed: int = 0
    """The fewest samples a run needs for the interval to mean anything (`min_samples_for_interval`)."""

    @property
    def too_few(self) -> bool:
        """Too few samples to judge: never a failure, always inconclusive (one sample a run failed a build with a CI
        of zero width and a Mann-Whitney p of 1)."""
        return self.samples < self.needed

    @property
    def failed(self) -> bool:
        return not self.too_few and self.exceeds and self.regression_ci[0] > self.threshold

    @property
    def inconclusive(self) -> bool:
        """Passed, but the interval reaches above the threshold: a regression larger than it is not ruled out."""
        return self.too_few or (not self.failed and self.regression_ci[1] > self.threshold)

    @property
    def improved(self) -> bool:
        """Significantly better: the whole interval of the regression lies below 0, from enough samples (an 88% faster
        check read "within the threshold: pass", as a change of +0.1% did)."""
        return not self.too_few and self.regression_ci[1] < 0.0

    @property
    def lower_is_better(self) -> bool:
        return self.metric != "throughput"

    @property
    def change(self) -> float:
        """now / baseline - 1 of the metric itself: a throughput loss is negative, a latency rise positive."""
        return self.regression if self.lower_is_better else -self.regression

    @property
    def change_ci(self) -> tuple[float, float]:
        lo, hi = self.regression_ci
        return (lo, hi) if self.lower_is_better else (-hi, -lo)

    def reason(self, max_regression: float, confidence: float) -> str:
        hi = self.regression_ci[1]
        change_lo, change_hi = self.change_ci
        unit = "items/s" if self.metric == "throughput" else ("ms per item" if self.per_item else "ms")
        def value(v: float) -> str:  # items/s as bench prints them (45,310, where '.4g' printed 4.531e+04)
            if self.metric == "throughput":
                return f"{v:,.0f}" if v >= 1_000 else f"{v:.4g}"
            return f"{v * 1e3:.4g}"

        if self.too_few:
            # It said "measure longer: --min-iters, --min-duration", options `dlperf check` does not have, and not
            # which run was short: a baseline of 4 samples passed a +32.7% check however long the check measured.
            count = self.samples
            if self.baseline_samples < self.needed:
                whose, count = "the baseline's run", self.baseline_samples
                fix = (f"no check against this baseline can judge it: re-measure the baseline with at least "
                       f"{self.needed} calls (`dlperf bench --min-iters`, --min-duration) and `dlperf baseline set` "
                       "that run")
            else:
                whose = "this run"
                fix = "measure longer: `dlperf check --duration`, min_duration_s from Python"
            return (f"batch {self.batch_size}: {self.metric} {value(self.baseline_value)} -> "
                    f"{value(self.current_value)} {unit}: {change_text(self.change, self.lower_is_better)}, from "
                    f"{count} sample{'' if count == 1 else 's'} in {whose}, where a {confidence:.0%} "
                    f"interval needs {self.needed}: too few to judge: inconclusive, pass ({fix})")
        head = (f"batch {self.batch_size}: {self.metric} {value(self.baseline_value)} -> "
                f"{value(self.current_value)} {unit}: {change_text(self.change, self.lower_is_better)} "
                f"({confidence:.0%} CI {_signed(change_lo)} to {_signed(change_hi)}; "
                f"Mann-Whitney {p_text(self.mann_whitney.p_value)})")
        if self.failed:
            return f"{head}: REGRESSION, significantly above the {max_regression:.1%} threshold"
        if self.exceeds and self.significant:
            return (f"{head}: above the {max_regression:.1%} threshold, but the interval reaches below it: "
                    "inconclusive, pass (measure longer to decide)")
        if self.exceeds:
            return f"{head}: above the {max_regression:.1%} threshold but not significant (noise): pass"
        if hi > max_regression:
            # "within the threshold" of `+1.6% (95% CI -1.3% to +47.7%)` told a CI job that no regression was
            # there, when the run was too noisy to rule out one of 47%
            return (f"{head}: below the {max_regression:.1%} threshold, but the interval reaches above it: "
                    "inconclusive, pass (a regression above the threshold is not ruled out: measure longer)")
        if self.significant:
            return f"{head}: significant but within the {max_regression:.1%} threshold: pass"
        if self.improved:
            return f"{head}: significantly better: pass"
        return f"{head}: within the threshold: pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size, "metric": self.metric, "baseline_value": self.baseline_value,
            "current_value": self.current_value, "regression": self.regression,
            "regression_ci": list(self.regression_ci), "change": self.change, "change_ci": list(self.change_ci),
            "lower_is_better": self.lower_is_better, "significant": self.significant, "improved": self.improved,
            "exceeds": self.exceeds, "failed": self.failed, "inconclusive": self.inconclusive,
            "threshold": self.threshold, "per_item": self.per_item, "samples": self.samples,
            "baseline_samples": self.baseline_samples,
            "too_few_samples": self.too_few,
            "mann_whitney": self.mann_whitney.to_dict(),
            "estimate": self.estimate.to_dict(),
        }


@dataclass
class GateResult:
    config: GateConfig
    points: list[PointVerdict]
    warnings: list[str] = field(default_factory=list)
    baseline_run_id: str | None = None
    current_run_id: str | None = None
    baseline_git_commit: str | None = None
    """The git commit the baseline's run was taken at (its environment's), None where it recorded none."""
    baseline_git_dirty: bool | None = None
    git_commit: str | None = None
    """The git commit this check ran at, None where none was recorded."""
    git_dirty: bool | None = None
    measured_again: list[str] = field(default_factory=list)
    """For each batch size that failed beside other busy processes or with stalled calls, and was measured again once
    (`dlperf check`): both measurements' verdicts; its point is the second's."""

    def __repr__(self) -> str:
        # the dataclass's printed its config and every point's samples test and intervals: ~1.3 KB for one batch
        # size, growing with each (what dlperf.assert_no_regression returns, shown by a notebook cell)
        verdict = "FAIL" if self.failed else "pass"
        points = ", ".join(f"batch {p.batch_size} {p.change:+.1%}" for p in self.points) or "no points"
        return (f"GateResult({verdict}, {self.config.metric} within {self.config.max_regression:.1%}: {points}, "
                f"{len(self.warnings)} warning{'s' * (len(self.warnings) != 1)} in .warnings; .describe())")

    @property
    def failed(self) -> bool:
        return any(p.failed for p in self.points)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def reasons(self) -> list[str]:
        return [p.reason(self.config.max_regression, self.config.confidence) for p in self.points]

    def describe(self) -> str:
        """The reasons, the warnings and the verdict, as `dlperf check` prints them (report.compare_text.gate_lines)."""
        verdict = verdict_line(self.failed, self.config.metric, self.config.max_regression)
        return "\n".join([*self.reasons(), *(f"note: {n}" for n in self.measured_again),
                          *(f"warning: {w}" for w in self.warnings), verdict])

    def headline(self) -> dict[str, Any]:
        """The check run's headline as a run records it ({kpi, value, unit, batch_size}, as bench's): the gated
        metric at the batch size that regressed most (it was the bench's throughput, whatever the gate judged)."""
        worst = max(self.points, key=lambda p: p.regression)
        throughput = self.config.metric == "throughput"
        return {"kpi": "throughput" if throughput else f"{self.config.metric}_s", "value": worst.current_value,
                "unit": "items/s" if throughput else "s", "batch_size": worst.batch_size,
                "per_item": worst.per_item and not throughput, "baseline_value": worst.baseline_value,
                "change": worst.change, "regression": worst.regression, "failed": self.failed,
                # the batch size's own standing: a pass the interval cannot confirm, or from too few samples
                "inconclusive": worst.inconclusive, "too_few_samples": worst.too_few}

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.config.metric, "max_regression": self.config.max_regression,
            "confidence": self.config.confidence, "failed": self.failed, "exit_code": self.exit_code,
            "baseline_run_id": self.baseline_run_id, "current_run_id": self.current_run_id,
            "baseline_git_commit": self.baseline_git_commit, "baseline_git_dirty": self.baseline_git_dirty,
            "git_commit": self.git_commit, "git_dirty": self.git_dirty,
            "points": [p.to_dict() for p in self.points], "reasons": self.reasons(),
            "measured_again": list(self.measured_again), "warnings": list(self.warnings),
            "headline": self.headline(),
        }


def gate_point(baseline: Measurement, current: Measurement, config: GateConfig,
               batch_size: int = 1) -> PointVerdict:
    """Judge one batch size. Per-item times are compared, so batch sizes need not be equal."""
    base_s = [s / baseline.items_per_call for s in baseline.samples_s]
    cur_s = [s / current.items_per_call for s in current.samples_s]
    est = ratio_ci(base_s, cur_s, config.statistic, config.confidence, config.resamples, config.seed)
    mw = mann_whitney_u(cur_s, base_s)
    if config.metric == "throughput":
        # throughput ratio = 1/time ratio; regression = lost fraction of throughput.
        regression = 1.0 - 1.0 / est.ratio
        ci = (1.0 - 1.0 / est.ci[0], 1.0 - 1.0 / est.ci[1])
        base_value, cur_value = baseline.throughput, current.throughput
    else:
        regression = est.ratio - 1.0
        ci = (est.ci[0] - 1.0, est.ci[1] - 1.0)
        base_value, cur_value = est.base, est.new
    samples, needed = min(len(base_s), len(cur_s)), min_samples_for_interval(config.confidence)
    return PointVerdict(
        batch_size=batch_size, metric=config.metric, baseline_value=base_value, current_value=cur_value,
        regression=regression, regression_ci=ci, significant=ci[0] > 0.0 and samples >= needed,
        exceeds=regression > config.max_regression, mann_whitney=mw, estimate=est,
        threshold=config.max_regression,
        per_item=baseline.items_per_call != 1 or current.items_per_call != 1,
        samples=samples, needed=needed, baseline_samples=len(base_s),
    )


def gate(baseline: dict[int, Measurement], current: dict[int, Measurement],
         config: GateConfig | None = None, judged: Mapping[int, PointVerdict] | None = None,
         left_out: Collection[int] = ()) -> GateResult:
    """Judge every batch size present in both; the gate fails when any of them fails. `judged`: batch sizes already
    judged with this config (`dlperf check` judges each as it is measured), not judged again. `left_out`: baseline
    batch sizes not measured on purpose (`--batch-size` picked others), which get no warning."""
    config = config or GateConfig()
    common = sorted(set(baseline) & set(current))
    if not common:
        raise ConfigError(
            f"the baseline measured batch sizes {sorted(baseline)} and the new run {sorted(current)}: "
            "nothing to compare; re-measure with the baseline's batch sizes"
        )
    judged = judged or {}
    points = [judged.get(b) or gate_point(baseline[b], current[b], config, b) for b in common]
    warnings = []
    tail = {"p90": 0.10, "p95": 0.05, "p99": 0.01}.get(config.metric)
    if tail is not None:
        needed = round(10 / tail)  # about ten samples beyond the percentile
        for b in common:
            n = min(baseline[b].n, current[b].n)
            if n < needed:
                warnings.append(f"batch {b}: {config.metric} from {n} samples is unreliable (about {needed} needed): "
                                "measure longer (--duration) or gate on p50")
    if tail is not None and any(p.failed for p in points):
        warnings.append(f"{config.metric} drifts between two runs taken at different times more than one run's "
                        "interval shows (on this project's shared 2-core VM, 22 runs of unchanged code gated on p99 "
                        "at 5% failed 23% of verdicts, p90 8%, p50 3%): confirm with `dlperf ab` or a re-run, or "
                        "gate tails with a larger --max-regression")
    # a choice is not a caveat: `--batch-size 1` against a baseline of 1 and 8 warned "batch sizes [8] of the
    # baseline were not re-measured", which failed a pytest check under filterwarnings = error
    missing = sorted(set(baseline) - set(current) - set(left_out))
    if missing:
        sizes = ", ".join(map(str, missing))
        warnings.append(f"the baseline's batch size{'s' if len(missing) > 1 else ''} {sizes} "
                        f"{'were' if len(missing) > 1 else 'was'} not re-measured: this check judged "
                        f"{', '.join(map(str, common))} alone")
    return GateResult(config, points, warnings)


def verdict_line(failed: bool, metric: str, max_regression: float) -> str:
    """The check's last line, for `dlperf check` and `dlperf.testing` alike (they worded it two ways)."""
    if failed:
        return f"FAIL: {metric} regressed significantly by more than {max_regression:.1%}"
    return "PASS: no significant regression above the threshold"


def recorded_change(point: Mapping[str, Any]) -> tuple[float, list[float], bool] | None:
    """(change, its interval, lower_is_better) of a recorded point (`PointVerdict.to_dict()`); derived from the
    regression for a record made before 2026-12-05, which had no `change`. None where neither is there."""
    lower = point.get("metric") != "throughput"
    change, ci = point.get("change"), point.get("change_ci")
    if isinstance(change, (int, float)) and isinstance(ci, (list, tuple)) and len(ci) == 2:
        return float(change), [float(ci[0]), float(ci[1])], lower
    regression, reg_ci = point.get("regression"), point.get("regression_ci")
    if not isinstance(regression, (int, float)):
        return None
    lo, hi = (reg_ci if isinstance(reg_ci, (list, tuple)) and len(reg_ci) == 2 else (math.nan, math.nan))
    return (float(regression), [lo, hi], True) if lower else (-float(regression), [-hi, -lo], False)


def recorded_improved(point: Mapping[str, Any]) -> bool:
    """Whether a recorded point (`PointVerdict.to_dict()`) was significantly better; derived from its `regression_ci`
    for a record made before `improved` was recorded."""
    improved = point.get("improved")
    if isinstance(improved, bool):
        return improved
    ci = point.get("regression_ci")
    return (not point.get("too_few_samples") and isinstance(ci, (list, tuple)) and len(ci) == 2
            and isinstance(ci[1], (int, float)) and ci[1] < 0.0)


def _signed(fraction: float) -> str:
    return f"{fraction * 100:+.1f}%"
