"""Compare two stored runs: KPI deltas per batch size, a significance test, environment differences.

The test is Mann-Whitney U on the raw per-item latencies (rank-based: latency samples are skewed and have
outliers, so a t-test's normality does not hold), plus a bootstrap CI of the ratio of medians as the
effect size. Caveat: two stored runs were measured at different times, not interleaved, so a drift of
the machine (thermal, other load) between them is indistinguishable from a real change; use `dlperf ab`
when the question is which of two settings is faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dlperf.compare.records import a_kind, has_samples, point_measurements, train_measurement
from dlperf.compare.stats import MannWhitney, RatioEstimate, change_text, mann_whitney_u, p_text, ratio_ci
from dlperf.errors import ConfigError, StoreError
from dlperf.measure.env import environment_differences
from dlperf.measure.stats import Measurement, min_samples_for_interval, percentile
from dlperf.store.records import SAMPLED_KINDS, RunRecord

# (KPI key in Measurement.summary(), label, True if lower is better)
KPIS: tuple[tuple[str, str, bool], ...] = (
    ("p50_s", "p50 latency", True),
    ("p90_s", "p90 latency", True),
    ("p99_s", "p99 latency", True),
    ("mean_s", "mean latency", True),
    ("throughput", "throughput", False),
)
TEST_NOTE = (
    "Mann-Whitney U (two-sided) on raw per-item latencies; effect: bootstrap CI of the ratio of medians. "
    "The runs were not interleaved: drift of the machine between them looks like a change "
    "(use `dlperf ab` to compare settings)."
)
MEDIAN_KPI = "p50_s"
"""The KPI the point's test and median ratio judge (its verdict is on it)."""
VERDICT_ON = "median latency"
"""What a point's verdict judges (the test and the median ratio): named beside it, since a verdict line alone read
as the whole comparison's."""
MIN_EFFECT = 0.01
"""The default smallest change of the median latency that `dlperf compare` calls B slower or faster (as `dlperf ab`)."""
NOT_BEYOND_MIN_EFFECT = "not shown beyond --min-effect"
"""A KPI's verdict where its interval of B/A excludes 1 but reaches within the minimum effect of it: the change is
real, but not shown to be that large (it was "below --min-effect", read as "smaller than 1%", until 2026-12-07)."""
UNSETTLED_MEDIAN = 2.0
"""A run's median whose own interval spans this factor or more is named beside a disagreement of the tests."""
NOTABLE_THROUGHPUT_CHANGE = 0.10
"""A throughput change at least this large (either way) is named beside a verdict that does not say it."""
NOTABLE_FAILED_SHARE = 0.01
"""A load level's share of failed requests that moved by at least this much (1 point) is named beside its verdict."""
LOAD_TEST_NOTE = TEST_NOTE.replace("raw per-item latencies", "per-request latencies")
"""The same for load runs, whose latencies are per request (a request of a batch of 8 is one latency)."""


@dataclass(frozen=True)
class KpiDelta:
    name: str
    label: str
    a: float
    b: float
    lower_is_better: bool
    ci: tuple[float, float] | None = None
    """The interval of B/A of this KPI from the noise within each run (bootstrap); None where it has no test of its
    own (a load level's throughput, counted over the level, not per request)."""

    @property
    def change(self) -> float:
        """(b - a) / a: +0.10 means B's value is 10% higher."""
        return (self.b - self.a) / self.a if self.a else math.inf

    @property
    def better(self) -> bool:
        return self.b < self.a if self.lower_is_better else self.b > self.a

    def to_dict(self) -> dict[str, Any]:
        # `change` is in the KPI's own direction (a throughput loss is negative); `better` says which way that is
        return {"name": self.name, "label": self.label, "a": self.a, "b": self.b, "change": self.change,
                "lower_is_better": self.lower_is_better, "better": self.better,
                "ci": list(self.ci) if self.ci is not None else None}


@dataclass
class PointComparison:
    batch_size: int
    kpis: list[KpiDelta]
    test: MannWhitney
    median_ratio: RatioEstimate
    alpha: float = 0.05
    title: str = ""
    """What the point is when not a batch size: a load level, e.g. 'concurrency 4'."""
    failed: tuple[tuple[int, int], tuple[int, int]] | None = None
    """A load level's (failed, sent) requests of A and of B; None for other points."""
    min_effect: float = MIN_EFFECT
    """The smallest change of the median called a direction, as `dlperf ab --min-effect` (`compare --min-effect`)."""

    @property
    def samples(self) -> int:
        """The fewer of the two runs' samples at this point."""
        return min(self.test.n_x, self.test.n_y)

    @property
    def needed(self) -> int:
        """The fewest samples a run needs for the median's interval to mean anything (`min_samples_for_interval`)."""
        return min_samples_for_interval(1.0 - self.alpha)

    @property
    def too_few(self) -> bool:
        """Too few samples to judge, as `dlperf check` has it: 3 against 3 calls read "median B/A 1.917 (CI
        1.911-1.971): no significant difference", where no test of 3 and 3 can reach p < 0.1."""
        return self.samples < self.needed

    @property
    def verdict(self) -> str:
        """A direction only where the test and the median's interval agree on it: the direction of the test's
        effect (B's times tend to be larger or smaller), with the median ratio's whole interval on that side of 1.
        It came from the median ratio alone, so a significant test beside a median ratio of exactly 1.000 (CI
        0.999-1.001) read "B slower" while B tended to be faster."""
        if self.too_few:
            return "too few samples to judge"
        direction = self._direction(self.min_effect)
        return f"B {direction}" if direction else "no significant difference"

    def _direction(self, min_effect: float) -> str | None:
        """'slower' or 'faster' where the test is significant and the median ratio's whole interval lies beyond
        `min_effect` on the side the test points to. Without a minimum effect two bench runs of one unchanged model
        read "B slower" in 11 of 12 pairs, at B/A 1.002-1.014 (thousands of calls make any drift between the runs
        significant)."""
        if self.too_few or self.test.p_value >= self.alpha:
            return None
        lo, hi = self.median_ratio.ci
        if self.test.prob_greater > 0.5 and lo > 1.0 + min_effect:
            return "slower"
        if self.test.prob_greater < 0.5 and hi < 1.0 - min_effect:
            return "faster"
        return None

    @property
    def tests_disagree(self) -> str | None:
        """Where the Mann-Whitney test and the median ratio's interval disagree, what each says and why they can: the
        test counts every sample as an independent draw, the interval resamples stretches of each run
        (BOOTSTRAP_BLOCKS), so a run whose calls fall into two clusters, or change part-way, moves the first and not
        the second. Two bench runs on a busy machine read "no significant difference (B/A 2.157, CI 0.869-353.977;
        Mann-Whitney U p=1.62e-06)" with nothing to say that the test beside the verdict had found a difference, or
        why the interval reached 354x (run A's median lay between its 0.004 ms and 2 ms calls, and 40% of the
        resamples put it at the fast ones). None where they agree, or with too few samples to judge."""
        if self.too_few:
            return None
        lo, hi = self.median_ratio.ci
        p = p_text(self.test.p_value, 3)
        if self.test.p_value < self.alpha:
            larger = self.test.prob_greater > 0.5
            if lo <= 1.0 <= hi:
                interval = "holds 1"
            elif (hi < 1.0) == larger:
                interval = f"lies {'below' if larger else 'above'} 1, the other way"
            else:
                return None
            said = (f"the tests disagree: Mann-Whitney U finds B's latencies {'larger' if larger else 'smaller'} "
                    f"({p}), counting the {self.test.n_y} and {self.test.n_x} samples as independent draws, while the "
                    f"median ratio's interval, which resamples stretches of each run, {interval}")
        elif lo > 1.0 or hi < 1.0:
            said = (f"the tests disagree: the median ratio's interval lies {'above' if lo > 1.0 else 'below'} 1, "
                    f"while Mann-Whitney U finds no shift of the whole distributions ({p})")
        else:
            return None
        ratio = self.median_ratio
        return said + "".join(self._unsettled(run, value, ci) for run, value, ci in
                              (("A", ratio.base, ratio.base_ci), ("B", ratio.new, ratio.new_ci)))

    @staticmethod
    def _unsettled(run: str, value: float, ci: tuple[float, float] | None) -> str:
        """'; A's median alone moves between 0.00659x and 2.33x its value ...' where a run's own median is unsettled
        (UNSETTLED_MEDIAN); relative, since the test's samples are per item where the table's are per call."""
        if ci is None or ci[0] <= 0 or value <= 0 or ci[1] / ci[0] < UNSETTLED_MEDIAN:
            return ""
        return (f"; {run}'s median alone moves between {ci[0] / value:.3g}x and {ci[1] / value:.3g}x its value "
                "across the resamples (its samples fall into clusters, or changed during the run): the median does not "
                "sum it up")

    @property
    def below_min_effect(self) -> str | None:
        """'slower' or 'faster' where only the minimum effect keeps that direction from the verdict (which is then "no
        significant difference", and the text "not shown beyond --min-effect", as `dlperf ab` says)."""
        return self._direction(0.0) if self.verdict == "no significant difference" else None

    def kpi_verdict(self, kpi: KpiDelta) -> str | None:
        """What a KPI's change amounts to: 'worse' or 'better' only where it is beyond the run's noise and the minimum
        effect; else 'within noise', 'not shown beyond --min-effect' (`NOT_BEYOND_MIN_EFFECT`), or 'no test' (a KPI
        with no interval of its own); None with too few samples to judge. The median's is the point's verdict (its
        test and interval); each other KPI's is its own interval of B/A. Every row said "worse" or "better" beside
        "no significant difference", where a p90 +3% was within the noise of two runs of one model."""
        if self.too_few:
            return None
        if kpi.name == MEDIAN_KPI:
            if self.verdict in ("B slower", "B faster"):
                return "worse" if (self.verdict == "B slower") == kpi.lower_is_better else "better"
            return NOT_BEYOND_MIN_EFFECT if self.below_min_effect else "within noise"
        if kpi.ci is None:
            return "no test"
        lo, hi = kpi.ci
        if lo > 1.0 + self.min_effect or hi < 1.0 - self.min_effect:
            return "worse" if (lo > 1.0) == kpi.lower_is_better else "better"
        # the interval excludes 1 but reaches within the minimum effect of it: the change may be that large or larger
        # (p90 -79.0%, B/A in [0.210, 0.995]), so it is not shown beyond it; "below --min-effect" read as a change
        # smaller than 1% until 2026-12-07
        return NOT_BEYOND_MIN_EFFECT if lo > 1.0 or hi < 1.0 else "within noise"

    @property
    def verdict_on(self) -> str:
        # a training run's samples are its steps: "median latency: B slower" of two train runs named the wrong thing
        return "median step time" if self.title.startswith("train step") else VERDICT_ON

    @property
    def also_changed(self) -> list[str]:
        """What changed a lot that the verdict, on the median latency, does not say: a throughput change of
        NOTABLE_THROUGHPUT_CHANGE or more in a direction the verdict does not give, and a load level's failed share
        moved by NOTABLE_FAILED_SHARE. Two load runs read "no significant difference" beside a throughput of -27%,
        with nothing near the verdict to say so."""
        out = []
        throughput = next((k for k in self.kpis if k.name == "throughput"), None)
        # a direction the verdict already gives ("B slower" beside a throughput loss) is not said twice
        if (throughput is not None and throughput.a and abs(throughput.change) >= NOTABLE_THROUGHPUT_CHANGE
                and self.verdict != ("B faster" if throughput.better else "B slower")):
            out.append(f"throughput {change_text(throughput.change, lower_is_better=False)}")
        if self.failed is not None:
            (fa, na), (fb, nb) = self.failed
            share_a, share_b = fa / na if na else 0.0, fb / nb if nb else 0.0
            if abs(share_b - share_a) >= NOTABLE_FAILED_SHARE:
                out.append(f"failed requests {share_a:.1%} -> {share_b:.1%} (A {fa} of {na}, B {fb} of {nb})")
        return out

    def to_dict(self) -> dict[str, Any]:
        # verdict_on and also_changed were added on 2026-12-06, each KPI's ci and verdict and tests_disagree (the
        # terminal's "the tests disagree: ...", null where they agree) on 2026-12-07; verdict keeps
        # its values, so below_min_effect says the direction the terminal gives beside "not shown beyond
        # --min-effect"
        return {"batch_size": self.batch_size, "title": self.title or f"batch {self.batch_size}",
                "kpis": [{**k.to_dict(), "verdict": self.kpi_verdict(k)} for k in self.kpis],
                "test": self.test.to_dict(),
                "median_ratio": self.median_ratio.to_dict(), "alpha": self.alpha, "min_effect": self.min_effect,
                "verdict": self.verdict, "below_min_effect": self.below_min_effect,
                "tests_disagree": self.tests_disagree,
                "verdict_on": self.verdict_on, "also_changed": self.also_changed, "too_few_samples": self.too_few}


@dataclass
class RunComparison:
    a: RunRecord
    b: RunRecord
    points: list[PointComparison]
    environment_differences: list[str]
    notes: list[str] = field(default_factory=list)
    other_deltas: list[tuple[str, float, float]] = field(default_factory=list)
    # what makes the tables read wrongly (runs of two workloads), said before them; notes come after
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        # the dataclass's printed both records and every point's KPIs, tests and intervals: ~1.5 KB for one batch
        # size, growing with each
        points = "; ".join(f"{p.title or f'batch {p.batch_size}'}: {p.verdict}" for p in self.points) or "no points"
        said = len(self.warnings) + len(self.notes) + len(self.environment_differences)
        return (f"RunComparison({self.a.id!r} vs {self.b.id!r}, {points}, {said} warning"
                f"{'s' * (said != 1)} and notes; .points, .to_dict())")

    @property
    def test_note(self) -> str:
        return LOAD_TEST_NOTE if self.a.kind == self.b.kind == "load" else TEST_NOTE

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": {"id": self.a.id, "kind": self.a.kind, "workload": self.a.workload, "created_at": self.a.created_at},
            "b": {"id": self.b.id, "kind": self.b.kind, "workload": self.b.workload, "created_at": self.b.created_at},
            "test_method": self.test_note,
            "points": [p.to_dict() for p in self.points],
            "environment_differences": self.environment_differences,
            "warnings": self.warnings,
            "notes": self.notes,
            "other_deltas": [{"key": k, "a": a, "b": b} for k, a, b in self.other_deltas],
        }


def compare_points(a: Measurement, b: Measurement, batch_size: int, alpha: float = 0.05,
                   seed: int = 0) -> PointComparison:
    sa, sb = _kpis(a), _kpis(b)
    # Per-item latencies so that the test and the ratio agree with per-item KPIs.
    per_a = [s / a.items_per_call for s in a.samples_s]
    per_b = [s / b.items_per_call for s in b.samples_s]
    cis = _latency_cis(per_a, per_b, alpha, seed)
    lo, hi = cis["mean_s"]
    cis["throughput"] = (1.0 / hi, 1.0 / lo)  # items/s is the inverse of the mean time per item
    kpis = [KpiDelta(key, label, float(sa[key]), float(sb[key]), lower, cis.get(key)) for key, label, lower in KPIS]
    return PointComparison(batch_size, kpis, mann_whitney_u(per_b, per_a),
                           ratio_ci(per_a, per_b, "p50", 1 - alpha, 1000, seed), alpha)


def _latency_cis(a: list[float], b: list[float], alpha: float, seed: int) -> dict[str, tuple[float, float]]:
    """The interval of B/A of each latency KPI other than the median (whose interval is the point's median ratio)."""
    return {f"{stat}_s": ratio_ci(a, b, stat, 1 - alpha, 1000, seed).ci for stat in ("p90", "p99", "mean")}


TRAIN_NOTE = ("train runs: each measured step is a sample (its time per sample where the batch sizes differ); the "
              "throughput column is samples/s")

LOAD_NOTE = ("load runs: levels are matched by mode and level; latencies are per request, and requests of one "
             "level queue behind each other, so they are not independent samples and the p-value is optimistic: "
             "read it beside the throughput change")


def load_levels(record: RunRecord) -> dict[str, tuple[list[float], float, int]]:
    """'concurrency 4' / 'rate 50' -> (request latencies in s, items/s, items per request) of a load run."""
    levels = record.result.get("levels") if isinstance(record.result, dict) else None
    found: dict[str, tuple[list[float], float, int]] = {}
    for level in levels or []:
        try:
            latencies = [v / 1e9 for v in level["latencies_ns"]]
            if latencies:
                found[f"{level['mode']} {float(level['level']):g}"] = (
                    latencies, float(level["throughput_items_per_s"]), int(level.get("items_per_request", 1)))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def _level_errors(record: RunRecord) -> dict[str, tuple[int, int]]:
    """'rate 50' -> (failed requests, sent requests) of a load run's levels, as `LevelResult.summary` stored them:
    from the statuses, leaving out 'dropped' (due but not sent, which runs before 2026-12-06 counted in
    'errors'), or 'errors' where a level has no statuses."""
    out: dict[str, tuple[int, int]] = {}
    for level in (record.result.get("levels") if isinstance(record.result, dict) else None) or []:
        try:
            statuses = level.get("statuses")
            failed = (sum(int(n) for s, n in statuses.items() if s not in ("200", "dropped"))
                      if isinstance(statuses, dict) else int(level["errors"]))
            out[f"{level['mode']} {float(level['level']):g}"] = (failed, failed + int(level["requests_ok"]))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return out


def _load_notes(a: RunRecord, b: RunRecord, shared: list[str], la: dict[str, tuple[list[float], float, int]],
                lb: dict[str, tuple[list[float], float, int]]) -> list[str]:
    """What makes two load runs' levels differ besides the server: requests of other sizes, failed requests
    (their latencies are not in the comparison: a B that timed out its slow requests looks faster), another
    SLO, and the peak searches' own results."""
    notes = []
    for key in shared:
        if la[key][2] != lb[key][2]:
            notes.append(f"{key}: A sent {la[key][2]} items per request, B {lb[key][2]}: the latencies are per "
                         "request, so they compare requests of different sizes (items/s compares the work done)")
    ea, eb = _level_errors(a), _level_errors(b)
    for key in shared:
        (fa, na), (fb, nb) = ea.get(key, (0, 0)), eb.get(key, (0, 0))
        if fa or fb:
            notes.append(f"{key}: failed requests A {fa} of {na}, B {fb} of {nb}: their latencies are left out of "
                         "the comparison (a run that failed its slow requests looks faster)")
    from dlperf.loadgen.generator import Slo

    pa = a.result.get("peak") if isinstance(a.result, dict) else None
    pb = b.result.get("peak") if isinstance(b.result, dict) else None
    sa, sb = Slo.from_record(a.config), Slo.from_record(b.config)
    if sa != sb:
        notes.append(f"the runs judged different SLOs (A {sa or 'none'}, B {sb or 'none'}): a level's verdict, "
                     "and a peak search's levels, are not comparable")
    if isinstance(pa, dict) and isinstance(pb, dict):
        notes.append(f"peak search: A {_peak_text(pa)}, B {_peak_text(pb)}"
                     + ("" if sa == sb else " (against different SLOs)"))
    return notes


def _peak_text(peak: dict[str, Any]) -> str:
    found = peak.get("peak_rate")
    return f"{float(found):.1f} req/s" if isinstance(found, (int, float)) else "no passing rate"


def compare_load_levels(a: tuple[list[float], float, int], b: tuple[list[float], float, int], title: str,
                        alpha: float = 0.05, seed: int = 0,
                        failed: tuple[tuple[int, int], tuple[int, int]] | None = None) -> PointComparison:
    """`failed`: (failed, sent) requests of the level in A and in B (`_level_errors`)."""
    def kpis(latencies: list[float], items_per_s: float) -> dict[str, float]:
        ordered = sorted(latencies)
        return {"p50_s": percentile(ordered, 50), "p90_s": percentile(ordered, 90), "p99_s": percentile(ordered, 99),
                "mean_s": sum(ordered) / len(ordered), "throughput": items_per_s}

    sa, sb = kpis(a[0], a[1]), kpis(b[0], b[1])
    cis = _latency_cis(a[0], b[0], alpha, seed)  # the throughput, counted over the level, has no test of its own
    deltas = [KpiDelta(key, label, sa[key], sb[key], lower, cis.get(key)) for key, label, lower in KPIS]
    return PointComparison(a[2], deltas, mann_whitney_u(b[0], a[0]), ratio_ci(a[0], b[0], "p50", 1 - alpha, 1000, seed),
                           alpha, title, failed)


def _per_item(m: Measurement) -> Measurement:
    """`m` with each call's time divided by its items: the same items/s, latencies per item."""
    return Measurement([round(s / m.items_per_call) for s in m.samples_ns], items_per_call=1, label=m.label)


def _kpis(m: Measurement) -> dict[str, float]:
    return {"p50_s": m.p50_s, "p90_s": m.p90_s, "p99_s": m.p99_s, "mean_s": m.mean_s, "throughput": m.throughput}


def compare_records(a: RunRecord, b: RunRecord, alpha: float = 0.05, min_effect: float = MIN_EFFECT) -> RunComparison:
    """Compare two runs. Runs with raw samples (bench, check) get KPI deltas and the test per batch size;
    others get the deltas of their top-level numeric results. Runs of two kinds (other than a bench and a check
    run) are refused with a StoreError: they share no measurement to compare. A point is called B slower or faster
    only beyond `min_effect` (a fraction of the median latency)."""
    if not 0.0 <= min_effect < 1.0:
        raise ConfigError(f"min_effect must be a fraction in [0, 1), e.g. 0.01 for 1%; got {min_effect:g}")
    if a.kind != b.kind and not {a.kind, b.kind} <= set(SAMPLED_KINDS):
        # a bench against an ab run printed a note and "nothing else to compare", and exited 0 as a comparison did
        own = next((f"; an ab run compares its own two sides: `dlperf runs show {r.id}`" for r in (a, b)
                    if r.kind == "ab"), "")
        raise StoreError(f"cannot compare run {a.id} ({a_kind(a.kind)} run) with run {b.id} ({a_kind(b.kind)} run): "
                         f"`dlperf compare` takes two runs of one kind (or a bench and a check run){own}")
    env_diff = environment_differences(a.environment or {}, b.environment or {})
    notes: list[str] = []
    warnings: list[str] = []
    if a.id == b.id:  # `compare 3139 3139`: "p=1 ... no significant difference" with no word of why
        notes.append(f"A and B are the same run ({a.id}): it is compared with itself, so no difference is expected")
    lineage = _lineage(a, b)
    if lineage is not None:
        notes.append(lineage)
    elif a.workload != b.workload:
        warnings.append(f"different workloads: '{a.workload}' vs '{b.workload}': the tables compare two models, not "
                        "one model's change")
    settings = config_differences(a.config or {}, b.config or {}, a.environment, b.environment)
    if settings:
        notes.append(f"measured with different settings ({'; '.join(settings)}): the comparison is of those as much "
                     "as of the code")
    for rec in (a, b):
        if rec.status != "ok":
            notes.append(f"run {rec.id} has status '{rec.status}': its result may be partial")
    points: list[PointComparison] = []
    other: list[tuple[str, float, float]] = []
    la, lb = (load_levels(a), load_levels(b)) if a.kind == b.kind == "load" else ({}, {})
    if la and lb:
        shared = [key for key in la if key in lb]
        if not shared:
            notes.append(f"no load level in common: A has {', '.join(la)}, B has {', '.join(lb)}")
        elif len(shared) < max(len(la), len(lb)):
            notes.append(f"levels in only one of the runs are left out: "
                         f"{', '.join(k for k in [*la, *lb] if k not in shared)}")
        notes.append(LOAD_NOTE)
        notes += _load_notes(a, b, shared, la, lb)
        ea, eb = _level_errors(a), _level_errors(b)
        points = [compare_load_levels(la[key], lb[key], key, alpha, failed=(ea.get(key, (0, 0)), eb.get(key, (0, 0))))
                  for key in shared]
    elif (ta := train_measurement(a)) is not None and (tb := train_measurement(b)) is not None:
        # each step a sample: it said "neither run holds raw latency samples" and listed 30 flattened fields
        notes.append(TRAIN_NOTE)
        size = ta.items_per_call if ta.items_per_call == tb.items_per_call else 0
        title = (f"train step, batch {size}" if size else
                 f"train step, batch {ta.items_per_call} vs {tb.items_per_call} (times per sample)")
        if not size:  # every figure per sample, as the test is (the step times of batch 64 and 32 read "-0.1%")
            ta, tb = _per_item(ta), _per_item(tb)
        points = [compare_points(ta, tb, size, alpha)]
        points[0].title = title
    elif has_samples(a) and has_samples(b):
        pa, pb = point_measurements(a), point_measurements(b)
        common = sorted(set(pa) & set(pb))
        if not common:
            notes.append(f"no batch size in common: A has {sorted(pa)}, B has {sorted(pb)}")
        only = sorted(set(pa) ^ set(pb))
        if only and common:
            notes.append(f"batch sizes {only} are in only one of the runs and are left out")
        points = [compare_points(pa[bs], pb[bs], bs, alpha) for bs in common]
    else:
        # Say which run and why (runs of two kinds are refused above)
        lacking = [r.id for r in (a, b) if not (has_samples(r) or load_levels(r) or train_measurement(r) is not None)]
        who = f"run {lacking[0]} holds no" if len(lacking) == 1 else "neither run holds"
        # "raw latency samples" was said of two ab runs, which hold them per side (compared within each run)
        notes.append(f"{who} samples of a kind compared here (a bench or check run's per batch size, a load "
                     "run's per level, a train run's per step): only the numeric results are compared")
        flat_a, flat_b = _flatten(a.result), _flatten(b.result)
        other = [(k, flat_a[k], flat_b[k]) for k in sorted(set(flat_a) & set(flat_b)) if flat_a[k] != flat_b[k]]
        # two profiles at batch 1 and 8 listed their step times side by side; the batch size was a row deep in the table
        batches = [f"{k}: A {va:g}, B {vb:g}" for k, va, vb in other if k.rpartition(".")[2] == "batch_size"]
        if batches:
            notes.append(f"measured at different batch sizes ({'; '.join(batches)}): a step's or call's figures are "
                         "of different amounts of work")
        if not other:
            notes.append("the two runs share no numeric result that differs: nothing else to compare")
    for point in points:
        point.min_effect = min_effect
    return RunComparison(a, b, points, env_diff, notes, other, warnings)


SETTING_KEYS = ("precision", "device", "threads", "scenario", "mode", "timer.warmup_iters", "timer.min_iters",
                "timer.min_duration_s", "timer.max_duration_s")
"""What a run was measured with that changes its figures (run config keys; `timer.` nested): a bench or check
run's, and a profile's mode (inference or train)."""


def _lineage(a: RunRecord, b: RunRecord) -> str | None:
    """Where one run measured an artifact `dlperf optimize` exported from the other run's workload (its bench config
    records the manifest's workload and run): that the two models differ as the comparison means them to, not the
    'different workloads' warning a bench of zoo:minilm against a bench of its exported artifact got."""
    for side, rec, other, other_side in (("B", b, a, "A"), ("A", a, b, "B")):
        art = (rec.config or {}).get("artifact")
        if not isinstance(art, dict) or not art.get("source_workload"):
            continue
        if art["source_workload"] != other.workload or rec.workload == other.workload:
            continue
        run = f" (optimize run {art['optimize_run_id']})" if art.get("optimize_run_id") else ""
        what = ", ".join(str(art[k]) for k in ("label", "precision") if art.get(k))
        return (f"{side} is an artifact optimized from {other_side}'s workload '{other.workload}'{run}: the models "
                f"differ ({side}: {what or 'the artifact'}), as the comparison means them to")
    return None


def config_differences(a: dict[str, Any], b: dict[str, Any], env_a: dict[str, Any] | None = None,
                       env_b: dict[str, Any] | None = None) -> list[str]:
    """'precision: A fp32, B bf16' for each measuring setting the two run configs record differently (a setting one
    of them lacks is left out: another kind of run, or an older record). Threads left at torch's default count as
    the number the run's environment recorded, where it did: a check records its baseline's 2 threads, and a bench
    at the default on a 2-CPU machine ran 2 as well ('threads: A 2, B default' was no difference)."""
    out = []
    for key in SETTING_KEYS:
        head, _, sub = key.partition(".")
        va, vb = a.get(head), b.get(head)
        if sub:
            va = va.get(sub) if isinstance(va, dict) else None
            vb = vb.get(sub) if isinstance(vb, dict) else None
        if head == "threads" and head in a and head in b:
            ra, rb = _threads_of(va, env_a), _threads_of(vb, env_b)
            if (va, vb) != (None, None) and (ra is None or rb is None or ra != rb):
                out.append(f"threads: A {_threads_text(va, ra)}, B {_threads_text(vb, rb)}")
        elif va is not None and vb is not None and va != vb:
            out.append(f"{key.removeprefix('timer.')}: A {va}, B {vb}")
    return out


def _threads_of(value: Any, env: dict[str, Any] | None) -> Any:
    """The threads a run measured at: its setting, else the torch threads its environment recorded (None where
    neither says)."""
    recorded = (env or {}).get("torch_threads")
    return value if value is not None else (recorded if isinstance(recorded, int) else None)


def _threads_text(value: Any, resolved: Any) -> str:
    return str(value) if value is not None else ("default" if resolved is None else f"default ({resolved})")


def _flatten(data: Any, prefix: str = "", depth: int = 0) -> dict[str, float]:
    out: dict[str, float] = {}
    if depth > 3:
        return out
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}.", depth + 1))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix.rstrip(".")] = float(data)
    return out
