"""Tests that compare two independent samples of latencies (two stored runs, a run and a baseline).

- Mann-Whitney U (two-sided, normal approximation with tie and continuity corrections): does one
  distribution tend to give larger values? Rank-based, so it needs no normality and is not moved by a
  few outliers, which latency samples always have. Valid for independent samples; samples of two runs
  taken at different times are not interleaved, so machine drift between them shows up as a difference.
- A bootstrap confidence interval of the ratio of a statistic (a percentile or the mean), resampling each
  sample independently: the effect size that a threshold is checked against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STATISTICS = ("p50", "p90", "p95", "p99", "mean")


@dataclass(frozen=True)
class MannWhitney:
    """U of the first sample, the two-sided p-value, and P(X > Y) + P(X = Y)/2 (the common-language
    effect size: 0.5 means neither tends to be larger)."""

    u: float
    p_value: float
    z: float
    prob_greater: float
    n_x: int
    n_y: int

    def to_dict(self) -> dict[str, Any]:
        return {"test": "mann-whitney-u", "u": self.u, "p_value": self.p_value, "z": self.z,
                "prob_greater": self.prob_greater, "n_x": self.n_x, "n_y": self.n_y}


SMALLEST_P = 1e-300
"""Below this a p-value is printed as a bound: the normal tail underflows to 0.0, and "p=0" claims certainty."""


def p_text(p_value: float, digits: int = 2) -> str:
    """'p=3e-07', or 'p<1e-300' where the computed value underflowed to (almost) zero."""
    if p_value < SMALLEST_P:
        return f"p<{SMALLEST_P:.0e}"
    return f"p={p_value:.{digits}g}"


def change_text(change: float, lower_is_better: bool) -> str:
    """A change of a metric in its own direction, and which way that is: '+29.9% worse' for a p50 29.9% longer,
    '-25.1% worse' for a throughput a quarter lower, '+3.0% better'; a change that rounds to 0.0% has no word.
    `dlperf check` and `dlperf compare` both word their changes so (check printed a throughput loss as +25.1%,
    compare as -25.1%)."""
    text = f"{change * 100:+.1f}%"
    if not math.isfinite(change) or round(change * 100, 1) == 0.0:
        return text
    worse = change > 0 if lower_is_better else change < 0
    return f"{text} {'worse' if worse else 'better'}"


def _ranks(values: Sequence[float]) -> tuple[list[float], float]:
    """Average ranks (1-based) and the tie term sum(t^3 - t) over groups of equal values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_term = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        average = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = average
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    return ranks, tie_term


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> MannWhitney:
    """Two-sided Mann-Whitney U test of x against y (scipy.stats.mannwhitneyu, method='asymptotic')."""
    n_x, n_y = len(x), len(y)
    if n_x < 1 or n_y < 1:
        raise ValueError("the Mann-Whitney test needs at least one value in each sample")
    ranks, tie_term = _ranks([*x, *y])
    r_x = sum(ranks[:n_x])
    u_x = r_x - n_x * (n_x + 1) / 2.0
    mean_u = n_x * n_y / 2.0
    n = n_x + n_y
    var_u = n_x * n_y / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var_u <= 0:
        return MannWhitney(u_x, 1.0, 0.0, 0.5, n_x, n_y)
    # Continuity correction toward the mean, as scipy does.
    diff = u_x - mean_u
    z = (abs(diff) - 0.5) / math.sqrt(var_u)
    z = max(z, 0.0)
    p = min(1.0, math.erfc(z / math.sqrt(2.0)))
    return MannWhitney(u_x, p, math.copysign(z, diff), u_x / (n_x * n_y), n_x, n_y)


def statistic(values: Any, name: str) -> Any:
    """A statistic of a 1-D or (resamples x n) numpy array along its last axis."""
    import numpy as np

    if name == "mean":
        return np.mean(values, axis=-1)
    if name.startswith("p") and name[1:].replace(".", "", 1).isdigit():
        return np.percentile(values, float(name[1:]), axis=-1)
    raise ValueError(f"unknown statistic '{name}': choose one of {', '.join(STATISTICS)}")


@dataclass(frozen=True)
class RatioEstimate:
    """stat(new) / stat(base) with a percentile-bootstrap confidence interval."""

    statistic: str
    base: float
    new: float
    ratio: float
    ci: tuple[float, float]
    confidence: float
    base_ci: tuple[float, float] | None = None
    """The statistic's own interval in each run, from the same resamples: where the ratio's interval is very wide,
    these say which run's statistic is unsettled (a median between two clusters of a run's calls moves from one to
    the other between resamples: 0.0042-1.48 ms in a run whose ratio's interval read 0.869-353.977)."""
    new_ci: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "base": self.base, "new": self.new, "ratio": self.ratio,
                "ci": list(self.ci), "confidence": self.confidence,
                "base_ci": list(self.base_ci) if self.base_ci is not None else None,
                "new_ci": list(self.new_ci) if self.new_ci is not None else None}


BOOTSTRAP_BLOCKS = 40
"""A run's samples, in the order they were taken, are resampled in this many contiguous blocks, not one by one:
samples taken close together are alike (another process's burst slows a stretch of them), and resampling them
one by one treated a burst as independent draws, so the interval was too narrow for the run it came from."""


def ratio_ci(base: Sequence[float], new: Sequence[float], stat: str = "p50", confidence: float = 0.95,
             resamples: int = 2000, seed: int = 0, max_points: int = 4000) -> RatioEstimate:
    """Bootstrap CI of stat(new)/stat(base), each run resampled on its own (the two are independent), in
    BOOTSTRAP_BLOCKS contiguous blocks of its samples in the order they were taken (a moving-block bootstrap
    with fixed blocks): it keeps what correlation there is between neighbouring samples; with independent
    samples it is the ordinary bootstrap at block resolution. Samples must be in time order (as a Measurement
    keeps them). The interval covers the noise within each run, not drift between two runs taken at other times.

    A resample's statistic is computed from counts (`_resampled`), which bounds the cost: the mean exactly, a
    percentile to within 1/max_points of the run's ranks.
    """
    import numpy as np

    if len(base) == 0 or len(new) == 0:
        raise ValueError("ratio_ci needs values in both samples")
    rng = np.random.default_rng(seed)
    base_a, new_a = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    base_value = float(statistic(base_a, stat))  # raises on an unknown statistic
    new_value = float(statistic(new_a, stat))
    rb = _resampled(base_a, stat, resamples, rng, max_points)
    rn = _resampled(new_a, stat, resamples, rng, max_points)
    ratios = rn / np.maximum(rb, 1e-300)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    ratio = new_value / base_value if base_value > 0 else math.inf
    base_lo, base_hi = np.quantile(rb, [alpha, 1.0 - alpha])
    new_lo, new_hi = np.quantile(rn, [alpha, 1.0 - alpha])
    return RatioEstimate(stat, base_value, new_value, ratio, (float(lo), float(hi)), confidence,
                         (float(base_lo), float(base_hi)), (float(new_lo), float(new_hi)))


def _resampled(values: Any, stat: str, resamples: int, rng: Any, max_points: int,
               blocks: int = BOOTSTRAP_BLOCKS) -> Any:
    """`stat` of `resamples` block-bootstrap resamples of `values` (in time order): each draws as many of the run's
    contiguous blocks as it has, with replacement, and takes the statistic of all their samples (fewer values than
    blocks: one value a block).

    Computed from counts, not by copying samples: the mean from the blocks' sums and sizes (exact); a percentile from
    the resample's histogram over the run's sorted values, in at most `max_points` bins of equal count (each value a
    bin of its own below that), the sum of its blocks' histograms, read as numpy's linear interpolation reads sorted
    values. Until 2026-12-05 each block was thinned to max_points/blocks order statistics first: a mean or a p99 of a
    run with a heavy tail lost its tail that way, and the gate printed `+25.1% (95% CI -5.3% to +18.9%)`, the
    interval of a 10 s check's throughput missing its own estimate."""
    import numpy as np

    count = len(values)
    blocks = max(1, min(blocks, count))
    edges = np.linspace(0, count, blocks + 1).round().astype(int)
    sizes = np.diff(edges)
    block_of = np.repeat(np.arange(blocks), sizes)
    draws = rng.integers(0, blocks, size=(resamples, blocks))
    weights = np.zeros((resamples, blocks))
    np.add.at(weights, (np.arange(resamples)[:, None], draws), 1.0)
    if stat == "mean":
        sums = np.bincount(block_of, weights=values, minlength=blocks)
        return (weights @ sums) / (weights @ sizes)
    q = float(stat[1:]) / 100.0
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    bins = max(1, min(count, max_points))
    bin_of_rank = np.arange(count) * bins // count  # equal-count bins over the sorted values
    starts = np.searchsorted(bin_of_rank, np.arange(bins))
    ends = np.append(starts[1:], count)
    bin_value = sorted_values[(starts + ends - 1) // 2]  # a bin stands for its middle value
    histograms = np.bincount(block_of[order] * bins + bin_of_rank, minlength=blocks * bins).reshape(blocks, bins)
    out = np.empty(resamples)
    chunk = max(1, 1_000_000 // bins)
    for start in range(0, resamples, chunk):
        cum = np.cumsum(weights[start:start + chunk] @ histograms, axis=1)
        total = cum[:, -1]
        position = (total - 1.0) * q
        below = np.floor(position)
        # the k-th smallest value (0-based) of a resample lies in the first bin whose cumulative count exceeds k
        low = bin_value[np.minimum((cum <= below[:, None]).sum(axis=1), bins - 1)]
        high = bin_value[np.minimum((cum <= np.minimum(below + 1.0, total - 1.0)[:, None]).sum(axis=1), bins - 1)]
        out[start:start + len(cum)] = low + (position - below) * (high - low)
    return out


def mann_whitney_grouped(counts_x: Sequence[float], counts_y: Sequence[float]) -> MannWhitney:
    """Mann-Whitney U from two histograms over the same ordered buckets (non-cumulative counts).

    Values in one bucket count as ties, so this is the test on bucketed data; with a server's latency
    histograms it is the same test as on raw samples, at the buckets' resolution.
    """
    if len(counts_x) != len(counts_y):
        raise ValueError("the two histograms must have the same buckets")
    n_x, n_y = float(sum(counts_x)), float(sum(counts_y))
    if n_x < 1 or n_y < 1:
        raise ValueError("the Mann-Whitney test needs at least one value in each sample")
    u_x = 0.0
    below_y = 0.0
    tie_term = 0.0
    for cx, cy in zip(counts_x, counts_y, strict=False):
        u_x += cx * (below_y + cy / 2.0)
        below_y += cy
        t = cx + cy
        tie_term += t**3 - t
    n = n_x + n_y
    var_u = n_x * n_y / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var_u <= 0:
        return MannWhitney(u_x, 1.0, 0.0, 0.5, int(n_x), int(n_y))
    diff = u_x - n_x * n_y / 2.0
    z = max((abs(diff) - 0.5) / math.sqrt(var_u), 0.0)
    p = min(1.0, math.erfc(z / math.sqrt(2.0)))
    return MannWhitney(u_x, p, math.copysign(z, diff), u_x / (n_x * n_y), int(n_x), int(n_y))


@dataclass(frozen=True)
class ProportionTest:
    """Two-sided test of rates x/n_x against y/n_y: the two-proportion z-test (pooled variance), or Fisher's
    exact test (`z` NaN) where the z-test's normal approximation does not hold."""

    rate_x: float
    rate_y: float
    p_value: float
    z: float
    test: str = "two-proportion-z"

    @property
    def label(self) -> str:
        return "Fisher exact" if self.test == "fisher-exact" else "z-test"

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "rate_x": self.rate_x, "rate_y": self.rate_y,
                "p_value": self.p_value, "z": self.z}


def proportion_test(x: float, n_x: float, y: float, n_y: float) -> ProportionTest:
    """The z-test where every expected cell count of the 2x2 table is at least 5 (the textbook condition for
    its normal approximation), else Fisher's exact test: 1 failure in 3 requests against 0 in 1,000 is
    p=0.003, where the z-test says p=1e-72."""
    if n_x <= 0 or n_y <= 0:
        raise ValueError("both samples need at least one trial")
    pooled = (x + y) / (n_x + n_y)
    smallest = min(n_x, n_y) * min(pooled, 1.0 - pooled)
    return two_proportion_test(x, n_x, y, n_y) if smallest >= 5 else fisher_exact(x, n_x, y, n_y)


def fisher_exact(x: float, n_x: float, y: float, n_y: float) -> ProportionTest:
    """Fisher's exact test, two-sided (the tables at most as likely as the observed one), of x/n_x against
    y/n_y; counts are rounded to integers (Prometheus counters are floats)."""
    a, nx, b, ny = round(x), round(n_x), round(y), round(n_y)
    if nx <= 0 or ny <= 0 or not (0 <= a <= nx and 0 <= b <= ny):
        raise ValueError(f"not a 2x2 table: {x}/{n_x} against {y}/{n_y}")
    total = a + b

    def log_p(k: int) -> float:  # hypergeometric: k of the `total` events fall in the first sample
        return (math.lgamma(nx + 1) - math.lgamma(k + 1) - math.lgamma(nx - k + 1)
                + math.lgamma(ny + 1) - math.lgamma(total - k + 1) - math.lgamma(ny - total + k + 1)
                - math.lgamma(nx + ny + 1) + math.lgamma(total + 1) + math.lgamma(nx + ny - total + 1))

    observed = log_p(a)
    ks = range(max(0, total - ny), min(total, nx) + 1)
    p = sum(math.exp(lp) for lp in (log_p(k) for k in ks) if lp <= observed + 1e-7)
    return ProportionTest(a / nx, b / ny, min(1.0, p), math.nan, "fisher-exact")


def two_proportion_test(x: float, n_x: float, y: float, n_y: float) -> ProportionTest:
    if n_x <= 0 or n_y <= 0:
        raise ValueError("both samples need at least one trial")
    px, py = x / n_x, y / n_y
    pooled = (x + y) / (n_x + n_y)
    var = pooled * (1 - pooled) * (1 / n_x + 1 / n_y)
    if var <= 0:
        return ProportionTest(px, py, 1.0, 0.0)
    z = (px - py) / math.sqrt(var)
    return ProportionTest(px, py, min(1.0, math.erfc(abs(z) / math.sqrt(2.0))), z)
