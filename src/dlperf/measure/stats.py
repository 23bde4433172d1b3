"""A Measurement keeps every per-iteration sample; statistics are computed on demand from them."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

NOISE_IQR_RATIO = 0.10
"""IQR/median above which a measurement is flagged as noisy (torch.utils.benchmark uses 10%)."""
MODEL_VARIATION = "the model's own per-call variation (data-dependent control flow, random-length loops)"
"""A noisy measurement's cause that lies in the model: it left it out, the cause for such a model on an idle machine."""
NOISE_CAUSES = f"other load on the machine, frequency scaling, {MODEL_VARIATION} or too few samples"
"""What the noise warning lists where it cannot tell which (a Measurement does not know the machine's load)."""
FIXED_WORK_NOISE_CAUSES = "other load on the machine, frequency scaling or too few samples"
"""The causes of noise in timing a call whose work never varies (a calibration's GEMM or copy): no model's own."""

CLOCK_OVERHEAD_NS = {"perf_counter_ns": 100, "cuda_events": 500}
"""What a clock adds to one sample or cannot resolve in it: an empty call's `perf_counter_ns` sample reads
80-140 ns (docs/measure.md); CUDA's event timer resolves about 0.5 µs (cudaEventElapsedTime)."""

SHORT_CALL_FACTOR = 20
"""A median under this many times its clock's overhead gets a note: the clock is then over 5% of each sample."""

def fmt_ratio(value: float) -> str:
    """A ratio (a gain, a speed-up) as shown: two decimals, or two significant digits below 0.1, where two decimals
    said nothing: a candidate whose process stalled had a gain of 0.00025, which read "0.00x" beside "paired 1.88x"."""
    # from 0.095 two decimals read 0.10, where two significant digits wrote "0.1"
    return f"{value:.2f}x" if value >= 0.095 or value <= 0 or not math.isfinite(value) else f"{value:.2g}x"



def fmt_count(value: float | None) -> str:
    """A count or a rate (items/s, samples/s, tokens/s) as shown in the terminal and the HTML report: '1,800,926' from
    100 up, three significant digits below, trailing zeros kept: 21.996 items/s is '22.0' (it read '22' beside
    '21.8' in one column, as if known to two digits, until 2026-12-07); 0 is '0'."""
    if value is None:
        return "-"
    if value >= 99.95:  # what rounds to 100 at three digits
        return f"{value:,.0f}"
    if value <= 0:
        return f"{value:.3g}"
    decimals = max(0, 2 - math.floor(math.log10(float(f"{value:.3g}"))))
    return f"{value:.{decimals}f}"


HEAVY_TAIL_RATIO = 2.0
"""A mean call over this many times the median gets a note: the throughput (from the total time) and the median then
tell different stories, and the IQR, which looks at the middle half, may not say so."""

THROUGHPUT_GAP = 0.20
"""Items/s (from the total time) this share or more below 1/p50 (the mean call 1.25x the median) gets a note, from a
mean under `HEAVY_TAIL_RATIO` x the median (which has its own): twice the noise warning's 10%. Of 35 stored bench points
on a shared 2-core VM, those without a planted spell or slow start and under the heavy tail were at most 15% below."""

SPELL_RATIO = 1.5
"""A call over this many times the median counts as slow when the throughput-gap note looks for a spell of them."""

SPEED_CHANGE_RATIO = 1.2
"""A run whose two parts' medians differ by this factor or more, each part quiet (IQR/median at most
`NOISE_IQR_RATIO`) while the whole run is noisy, gets a note that it changed speed part-way."""

SLOW_START_RATIO = 2.0
"""A timed call over this many times the later calls' median counts as slow for the slow-start check."""

SLOW_START_SHARE = 0.05
"""The slow start is reported when its calls' excess over the later calls' median is this share of the measured time
(it moves the mean and the throughput by that much)."""

SLOW_START_P_VALUE = 0.01
"""The slow start is reported only when its slow calls are this unlikely at the rate of slow calls in the rest of the
run (one-sided binomial test): a model slow on every other call at random is not warming up."""


def percent_beside(value: float, limit: float | None = None, fewest: int = 0, most: int = 3) -> str:
    """`value` as a percentage with the fewest decimals, from `fewest` up to `most`, that show it neither as 0 (when it
    is not) nor equal to `limit`: an IQR 10.03% of the median read "IQR is 10.0% of the median (> 10%)" (one decimal,
    as 10.3% needed); now "10.03%". 9.96% against 10% is "9.96%", not "10%"; 0.4% is "0.4%", not "0%". The optimize
    budgets' wording (`budget_percent`) is this from 2 decimals to 6."""
    shown = ""
    for decimals in range(fewest, most + 1):
        shown = f"{value:.{decimals}%}"
        zero = value != 0 and shown == f"{0.0:.{decimals}%}"
        if not zero and (limit is None or shown != f"{limit:.{decimals}%}"):
            break
    return shown


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default 'linear' method) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(sorted_values[lo])
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def median(values: list[float]) -> float:
    return percentile(sorted(values), 50.0)


def bootstrap_ci(values: list[float], stat: Any = median, confidence: float = 0.95,
                 resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of `stat` (default the median), seeded for reproducibility.

    For the median the resamples are drawn through order statistics (`_bootstrap_medians`): the same
    distribution as resampling n values, at O(resamples) instead of O(resamples x n) cost, so a 50,000-sample
    measurement gets its CI in milliseconds. Any other `stat` resamples the values.
    """
    if not values:
        raise ValueError("bootstrap of no values")
    rng = random.Random(seed)
    n = len(values)
    if stat is median:
        estimates = sorted(_bootstrap_medians(sorted(values), resamples, rng))
    else:
        estimates = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    return percentile(estimates, 100 * alpha), percentile(estimates, 100 * (1 - alpha))


def _bootstrap_medians(sorted_values: list[float], resamples: int, rng: random.Random) -> list[float]:
    """Medians of `resamples` bootstrap resamples of sorted values, drawn without building the resamples.

    A resample is n indices drawn uniformly from 0..n-1; as the values are sorted, its median is the value
    at the median of those indices. The k-th smallest of n uniform(0,1) draws is Beta(k, n-k+1), and
    floor(u·n) of a uniform u is a uniform index, so the k-th smallest index is floor(n·Beta(k, n-k+1)).
    For even n the next order statistic follows as U(k+1) = U(k) + (1 - U(k))·Beta(1, n-k).
    """
    n = len(sorted_values)
    if n == 1:
        return [sorted_values[0]] * resamples
    k = (n + 1) // 2  # 1-based rank of the (lower) middle value
    out = []
    for _ in range(resamples):
        u = rng.betavariate(k, n - k + 1)
        lo = sorted_values[min(int(u * n), n - 1)]
        if n % 2:
            out.append(lo)
        else:
            u_next = u + (1.0 - u) * rng.betavariate(1, n - k)
            out.append((lo + sorted_values[min(int(u_next * n), n - 1)]) / 2.0)
    return out


CI_BLOCKS = 40
"""A measurement's median CI resamples its samples in this many contiguous blocks in time order, as `dlperf compare`
does (`compare.stats.BOOTSTRAP_BLOCKS`): calls timed close together are alike (another process's burst slows a
stretch of them), and resampling them one by one made the interval several times too narrow for the run."""

CI_MAX_POINTS = 4000
"""Blocks are thinned to this many order statistics in all, which bounds the CI's cost at any sample count."""


def min_samples_for_interval(confidence: float = 0.95) -> int:
    """The fewest samples for which a distribution-free interval of a median at `confidence` exists: the smallest n
    with 2 * 0.5**n <= 1 - confidence (6 at 95%, 8 at 99%). With fewer, a bootstrap interval is not an interval of
    anything: one sample a run gave "+5.1% (95% CI +5.1% to +5.1%)", and the gate failed a build on it."""
    return max(1, math.ceil(math.log2(2.0 / (1.0 - confidence)) - 1e-9))


def block_bootstrap_median_ci(samples: Sequence[float], confidence: float = 0.95, resamples: int = 1000,
                              seed: int = 0, blocks: int = CI_BLOCKS,
                              max_points: int = CI_MAX_POINTS) -> tuple[float, float]:
    """Percentile bootstrap CI of the median of `samples` (in the order they were taken), resampled in blocks of
    neighbouring samples, about `blocks` of them a resample: it keeps the correlation between calls timed close
    together, and with independent samples it is the ordinary bootstrap at block resolution (with no more samples
    than blocks, the ordinary bootstrap). Up to `max_points` samples, blocks of n/blocks samples start anywhere
    (circularly: a moving-block bootstrap); above it, the samples are cut into `blocks` fixed blocks, each stood for
    by max_points/blocks of its order statistics, evenly spaced, which bounds the cost. Seeded: the same samples
    give the same interval. It covers the noise within the run, not a drift between this run and another."""
    import numpy as np

    if len(samples) == 0:
        raise ValueError("bootstrap of no values")
    values = np.asarray(samples, dtype=float)
    count = len(values)
    rng = np.random.default_rng(seed)
    if count <= max_points:
        length = max(1, count // blocks)
        per_resample = -(-count // length)
        offsets = np.arange(length)

        def resample(k: int) -> Any:
            starts = rng.integers(0, count, size=(k, per_resample, 1))
            return values[(starts + offsets) % count].reshape(k, -1)[:, :count]
    else:
        edges = np.linspace(0, count, blocks + 1).round().astype(int)
        per = max_points // blocks
        blocked = np.empty((blocks, per))
        for i in range(blocks):
            block = np.sort(values[edges[i]:edges[i + 1]])
            blocked[i] = block[((np.arange(per) + 0.5) * len(block) / per).astype(int)]

        def resample(k: int) -> Any:
            return blocked[rng.integers(0, blocks, size=(k, blocks))].reshape(k, -1)
    medians = np.empty(resamples)
    chunk = max(1, 2_000_000 // min(count, max_points))
    for first in range(0, resamples, chunk):
        k = min(chunk, resamples - first)
        medians[first:first + k] = np.median(resample(k), axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


EARLY_STOPPING_CONFIDENCE = 0.99
"""MLPerf LoadGen's confidence for its early-stopping percentile estimates (`min_query_count` aside)."""


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only on this side
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * f


def student_t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (bisection on its CDF, to 1e-10)."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"need 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)

    def cdf(t: float) -> float:
        return 1.0 - 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2.0
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2.0


def log_binomial_cdf(k: int, n: int, p: float) -> float:
    """log P(X <= k) for X ~ Binomial(n, p), 0 < p < 1, summed term by term in log space (no underflow at
    large n: 0.99**100000 is 1e-437)."""
    log_term = n * math.log1p(-p)  # x = 0
    log_cdf = log_term
    log_ratio = math.log(p) - math.log1p(-p)
    for x in range(min(k, n)):
        log_term += math.log(n - x) - math.log(x + 1) + log_ratio
        high, low = max(log_cdf, log_term), min(log_cdf, log_term)
        log_cdf = high + math.log1p(math.exp(low - high))
    return log_cdf


def early_stopping_passes(n: int, over: int, q: float, confidence: float = EARLY_STOPPING_CONFIDENCE) -> bool:
    """MLPerf's test: were the true share of samples above the q-th percentile's bound 1 - q/100 or more,
    `over` or fewer of `n` samples would exceed it with probability at most 1 - confidence."""
    return log_binomial_cdf(over, n, 1.0 - q / 100.0) <= math.log(1.0 - confidence)


def early_stopping_fails(n: int, over: int, q: float, confidence: float = EARLY_STOPPING_CONFIDENCE) -> bool:
    """The mirror test: were the true share above the bound at most 1 - q/100, `over` or more of `n` samples
    would exceed it with probability at most 1 - confidence; so the q-th percentile is over the bound."""
    if over <= 0:
        return False
    return -math.expm1(log_binomial_cdf(over - 1, n, 1.0 - q / 100.0)) <= 1.0 - confidence


def early_stopping_min_count(q: float, over: int = 0, confidence: float = EARLY_STOPPING_CONFIDENCE) -> int:
    """The fewest samples that let a bound on the q-th percentile pass with `over` samples above it: 459 for
    p99 at 99% confidence with none above, 662 with one above (MLPerf's "would need N more queries")."""
    if not 0.0 < q < 100.0 or not 0.0 < confidence < 1.0 or over < 0:
        raise ValueError(f"need 0 < q < 100, 0 < confidence < 1 and over >= 0, got {q}, {confidence}, {over}")
    lo = over + 1
    hi = max(lo, 2 * math.ceil(math.log(1.0 - confidence) / math.log(q / 100.0)))
    while not early_stopping_passes(hi, over, q, confidence):
        lo, hi = hi, hi * 2
    while lo < hi:  # the smallest passing n in [lo, hi]: the binomial CDF falls as n grows
        mid = (lo + hi) // 2
        if early_stopping_passes(mid, over, q, confidence):
            hi = mid
        else:
            lo = mid + 1
    return lo


def percentile_upper_bound(sorted_values: list[float], q: float,
                           confidence: float = EARLY_STOPPING_CONFIDENCE) -> float | None:
    """MLPerf's early-stopping estimate of the q-th percentile: a value that at least q% of the population
    stays within, at `confidence` (one-sided binomial test on how many samples exceed it).

    It is the (n - t)-th smallest sample, t the most samples that may lie above it and still pass; None
    when even t = 0 does not pass (fewer than `early_stopping_min_count(q)` samples: 459 for p99). Unlike the
    sample percentile it does not move with luck: 500 samples put the p99 estimate at the largest one.
    LoadGen's single-/multi-stream estimate is one sample higher (the t-th largest, t >= 1: it counts the
    estimate itself as over) and needs 64 samples for p90, 662 for p99; this one is the exact bound.
    """
    n = len(sorted_values)
    if n == 0 or not early_stopping_passes(n, 0, q, confidence):
        return None
    # the largest passing t: passing is monotone in t, and a passing t lies below the mean n(1 - q/100)
    lo, hi = 0, min(n - 1, math.ceil(n * (1.0 - q / 100.0)))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if early_stopping_passes(n, mid, q, confidence):
            lo = mid
        else:
            hi = mid - 1
    return float(sorted_values[n - lo - 1])


def calls_to_bound_within(sorted_values: list[float], q: float, limit: float,
                          confidence: float = EARLY_STOPPING_CONFIDENCE) -> int | None:
    """How many calls `percentile_upper_bound` of the q-th percentile needs to come out at `limit` or below, were the
    share of calls above `limit` what it is in `sorted_values`; None where that share is 1 - q/100 or more (no number
    of calls would), where it would take over 10^9 calls, or without samples. The bound is at or below `limit` exactly
    when MLPerf's test passes with the calls above `limit` counted as over, so this is about the fewest N with
    `early_stopping_passes(N, ceil(share x N), q)` (a bisection: the ceiling makes the test not quite monotone)."""
    n = len(sorted_values)
    if n == 0:
        return None
    share = (n - bisect.bisect_right(sorted_values, limit)) / n
    p_over = 1.0 - q / 100.0
    if share >= p_over:
        return None

    def passes(calls: int) -> bool:
        # the binomial CDF as a regularized incomplete beta, O(1) where log_binomial_cdf is O(over): a share of 9.8%
        # over a p90's limit needs ~10^5 calls, and summing their terms at each step of the search took a minute
        over = math.ceil(share * calls)
        return over < calls and _betainc(calls - over, over + 1, 1.0 - p_over) <= 1.0 - confidence

    lo = hi = early_stopping_min_count(q, 0, confidence)
    while not passes(hi):
        lo, hi = hi, hi * 2
        if hi > 10**9:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid + 1, hi)
    return lo


@dataclass(frozen=True)
class SlowStart:
    """The leading timed calls that were much slower than the later ones: a warm-up that was not over."""

    calls: int
    median_s: float
    """The median of those first calls."""
    later_median_s: float
    """The median of the last half of the samples (at least 3), the reference they are compared with."""
    time_share: float
    """Their time above `later_median_s`, as a share of the whole measured time."""


def slow_start(samples_ns: list[int]) -> SlowStart | None:
    """The leading segment of calls slower than `SLOW_START_RATIO` x the later calls' median, from the first call on
    and at least half of them slow, when it holds two calls or more and its excess time is `SLOW_START_SHARE` of
    the total or more; else None.

    A warm-up that was too short for the model (a thread pool waking up, lazy initialization, a cache being
    filled) shows as such a segment: zoo:mlp's batch 8 on a busy 2-core VM took 10-15 ms a call for its first
    31 timed calls and 0.04 ms after, 70% of the measured time in those 31, and its throughput read a third of
    the model's. Noise rarely starts a measurement with a long slow run; a burst of other load that ends just
    after the start looks the same, and is reported the same: the numbers include it either way.
    """
    n = len(samples_ns)
    if n < 4:
        return None
    reference = _median_ns(samples_ns[n - max(3, n // 2):])
    limit = SLOW_START_RATIO * reference
    if samples_ns[0] <= limit:
        return None
    # the segment may end at any slow call with at least half the calls up to it slow, until far below half; of those
    # ends, the one that splits the run best into a slow-rate and a later-rate part (the larger Bernoulli likelihood,
    # the later end on a tie): 33 slow calls, 16 fast ones and one slow one 17 calls on read as a slow start of 50
    # calls (the first end with half of them slow past it) until 2026-12-07
    total_slow = sum(1 for x in samples_ns if x > limit)
    slow = calls = 0
    best_fit = -math.inf
    for i, sample in enumerate(samples_ns[: n - 3]):
        if sample > limit:
            slow += 1
            if 2 * slow >= i + 1:
                fit = _bernoulli_fit(slow, i + 1) + _bernoulli_fit(total_slow - slow, n - i - 1)
                if fit >= best_fit:
                    best_fit, calls = fit, i + 1
        elif 2 * slow < i + 1 - 8:  # far below half slow: the leading segment is over
            break
    if calls < 2:  # one slow first call is as likely anywhere else in the run: no sign of a warm-up
        return None
    head = samples_ns[:calls]
    share = (sum(head) - calls * reference) / sum(samples_ns)
    if share < SLOW_START_SHARE:
        return None
    # a model slow on 20-50% of its calls at random (a sleep or a loop of random length) opened with such a segment
    # in 10-26% of runs of 44-459 calls and read "the warm-up was not over": some start of the segment must hold more
    # slow calls than the rest's rate of them makes likely, tried at each of its slow calls (hence the Bonferroni)
    # the calls after it, or the last half (the reference's) where it ends past that: a segment of nearly the whole run
    # left a few fast calls to say the rate
    rest = samples_ns[min(calls, n - max(3, n // 2)):]
    rate = (sum(1 for x in rest if x > limit) + 1) / (len(rest) + 2)  # +1/+2: a rest with no slow call is not rate 0
    best, tried = 1.0, 0
    slow = 0
    for i, sample in enumerate(head, start=1):
        if sample > limit:
            slow += 1
            tried += 1
            best = min(best, _binomial_tail_bound(slow, i, rate))
    if best * tried > SLOW_START_P_VALUE:
        return None
    return SlowStart(calls, _median_ns(head) / 1e9, reference / 1e9, share)


def _bernoulli_fit(k: int, n: int) -> float:
    """The log-likelihood of `k` slow calls among `n` at their own rate k/n (0 log 0 = 0)."""
    return sum(x * math.log(x / n) for x in (k, n - k) if x > 0)


def _binomial_tail_bound(k: int, n: int, p: float) -> float:
    """An upper bound of P(X >= k) for X ~ Binomial(n, p): Chernoff's exp(-n KL(k/n || p)), 1 for k/n <= p. O(1), where
    the exact tail costs O(k) and the slow-start check tries every start of a segment that can be long."""
    q = k / n
    if q <= p:
        return 1.0
    kl = (q * math.log(q / p) if q > 0 else 0.0) + ((1 - q) * math.log((1 - q) / (1 - p)) if q < 1 else 0.0)
    return math.exp(-n * kl)


def _median_ns(values: list[int]) -> float:
    ordered = sorted(values)
    k = len(ordered)
    return (ordered[(k - 1) // 2] + ordered[k // 2]) / 2.0


@dataclass
class Measurement:
    """Raw per-iteration times (ns) of a call that processed `items_per_call` items each time."""

    samples_ns: list[int]
    items_per_call: int = 1
    warmup_iters: int = 0
    clock: str = "perf_counter_ns"
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.samples_ns:
            raise ValueError("a Measurement needs at least one sample")
        if self.items_per_call < 1:
            raise ValueError("items_per_call must be >= 1")

    def __repr__(self) -> str:
        # the dataclass's printed every sample: a BenchPoint of `dlperf.bench(...).points` was some 60 KB of ns
        return (f"Measurement({self.label!r}, {self.n} calls of {self.items_per_call} item"
                f"{'' if self.items_per_call == 1 else 's'}, p50 {self.p50_s * 1e3:.4g} ms, "
                f"mean {self.mean_s * 1e3:.4g} ms)")

    @property
    def _sorted_s(self) -> list[float]:
        cached = self.__dict__.get("_sorted_cache")
        if cached is None or len(cached) != len(self.samples_ns):
            cached = sorted(s / 1e9 for s in self.samples_ns)
            self.__dict__["_sorted_cache"] = cached
        return cached

    @property
    def n(self) -> int:
        return len(self.samples_ns)

    @property
    def samples_s(self) -> list[float]:
        return [s / 1e9 for s in self.samples_ns]

    @property
    def total_s(self) -> float:
        return sum(self.samples_ns) / 1e9

    @property
    def mean_s(self) -> float:
        return self.total_s / self.n

    @property
    def std_s(self) -> float:
        """Sample standard deviation (n-1); 0 for one sample."""
        if self.n < 2:
            return 0.0
        m = self.mean_s
        return math.sqrt(sum((s / 1e9 - m) ** 2 for s in self.samples_ns) / (self.n - 1))

    @property
    def min_s(self) -> float:
        return self._sorted_s[0]

    @property
    def max_s(self) -> float:
        return self._sorted_s[-1]

    def percentile_s(self, q: float) -> float:
        return percentile(self._sorted_s, q)

    @property
    def p50_s(self) -> float:
        return self.percentile_s(50)

    @property
    def median_s(self) -> float:
        return self.p50_s

    @property
    def p90_s(self) -> float:
        return self.percentile_s(90)

    @property
    def p95_s(self) -> float:
        return self.percentile_s(95)

    @property
    def p99_s(self) -> float:
        return self.percentile_s(99)

    @property
    def p999_s(self) -> float:
        return self.percentile_s(99.9)

    @property
    def iqr_s(self) -> float:
        return self.percentile_s(75) - self.percentile_s(25)

    @property
    def cv(self) -> float:
        """Coefficient of variation: std / mean."""
        return self.std_s / self.mean_s if self.mean_s > 0 else 0.0

    @property
    def noise_ratio(self) -> float:
        """IQR / median: the robust spread that decides the noise warning."""
        return self.iqr_s / self.p50_s if self.p50_s > 0 else 0.0

    @property
    def noise_warning(self) -> str | None:
        if self.n < 4:
            return f"only {self.n} sample{'' if self.n == 1 else 's'}: percentiles and spread are unreliable"
        overhead_ns = CLOCK_OVERHEAD_NS.get(self.clock)
        if overhead_ns is not None and self.p50_s * 1e9 < SHORT_CALL_FACTOR * overhead_ns:
            # before the IQR test: at this length the spread is the clock's steps, not other load
            return (f"calls of {self.p50_s * 1e9:,.0f} ns are under {SHORT_CALL_FACTOR}x the {self.clock} clock's "
                    f"own ~{overhead_ns} ns a sample: its overhead and resolution are a large share of each "
                    "sample and of their spread; time a loop of many calls as one call")
        shown = percent_beside(self.noise_ratio, NOISE_IQR_RATIO)
        # over the threshold by more than float error (an IQR of 10% of the median in seconds can divide to
        # 0.1000000000000001): the warning would read "IQR is 10.000% of the median (> 10%)"
        if self.noise_ratio > NOISE_IQR_RATIO and shown != f"{NOISE_IQR_RATIO:.3%}":
            return (
                f"noisy: IQR is {shown} of the median (> {NOISE_IQR_RATIO:.0%}); {NOISE_CAUSES}"
            )
        return None

    @property
    def slow_start(self) -> SlowStart | None:
        """The leading timed calls much slower than the later ones (`slow_start`), or None."""
        cached = self.__dict__.get("_slow_start_cache")
        if cached is None or cached[0] != len(self.samples_ns):
            cached = (len(self.samples_ns), slow_start(self.samples_ns))
            self.__dict__["_slow_start_cache"] = cached
        return cached[1]

    @property
    def slow_start_note(self) -> str | None:
        """What `slow_start` found, in words, with the warm-up that would have left it out; None when nothing. The
        warm-up named is the one to pass: its `warmup_iters` calls and the k slow timed calls become warm-up calls,
        and the first timed call is the k+1st (until 2026-12-07 it said "more than" that, one too many)."""
        found = self.slow_start
        if found is None:
            return None
        k = found.calls
        last = max(3, self.n // 2)  # `slow_start`'s reference: "the later calls'" read as those after the k, whose
        # median a bimodal run (descheduled threads) can put far from this one, as the heavy-tail note beside it did
        overlap = k + last - self.n
        # a slow start past the first half reaches into the reference: "the first 48 ... the last 33 calls' median" of
        # 66 calls read as an error; it is said what the reference is, and that it holds some of them
        reference = (f"the last {last:,} calls' median" if overlap <= 0 else
                     f"the median of the last half of the {self.n:,} calls (the last {last:,}, {overlap:,} of them "
                     f"among those first {k:,})")
        return (f"the first {k:,} timed call{'s' if k > 1 else ''} took {found.median_s * 1e3:.3g} ms"
                f"{' at the median' if k > 1 else ''}, {found.median_s / found.later_median_s:,.0f}x {reference} "
                f"of {found.later_median_s * 1e3:.3g} ms, and {found.time_share:.0%} of the measured "
                "time: the warm-up was not over (or other load eased), and the mean and throughput include "
                f"{'them' if k > 1 else 'it'}; warm up with {self.warmup_iters + k:,} calls or more "
                f"(--warmup {self.warmup_iters + k})")

    @property
    def heavy_tail_note(self) -> str | None:
        """When the calls after any slow start average over `HEAVY_TAIL_RATIO` x their median: how much of the time
        the slow calls took, since the throughput counts them and the percentiles below p90 or so do not. The IQR
        test misses it when fewer than a quarter of the calls are slow: zoo:mlp's batch 8, 190 calls on a busy
        VM, had a median of 0.034 ms, a mean 57x that, and no noise warning."""
        cached = self.__dict__.get("_heavy_tail_cache")
        if cached is None or cached[0] != len(self.samples_ns):
            cached = (len(self.samples_ns), self._heavy_tail_note())
            self.__dict__["_heavy_tail_cache"] = cached
        return cached[1]

    def _past_slow_start(self) -> tuple[int, list[int], int, float, float] | None:
        """The calls after any slow start, for the notes on their spread: (how many the slow start held, the calls,
        their total ns, median ns, mean ns); None for under 10 of them."""
        head = self.slow_start.calls if self.slow_start else 0
        rest = self.samples_ns[head:]
        if len(rest) < 10:
            return None
        total = sum(rest)
        return head, rest, total, _median_ns(rest), total / len(rest)

    def _heavy_tail_note(self) -> str | None:
        past = self._past_slow_start()
        if past is None:
            return None
        head, rest, total, mid, mean = past
        if mid <= 0 or mean <= HEAVY_TAIL_RATIO * mid:
            return None
        slow = [x for x in rest if x > HEAVY_TAIL_RATIO * mid]
        after = " after the slow start" if head else ""
        return (f"the mean call{after} is {mean / mid:,.1f}x the median ({mean / 1e6:.3g} vs {mid / 1e6:.3g} ms): "
                f"{len(slow):,} call{'s' if len(slow) != 1 else ''} ({len(slow) / len(rest):.0%}) over "
                f"{HEAVY_TAIL_RATIO:g}x the median, up to {max(rest) / 1e6:.3g} ms, took {sum(slow) / total:.0%} "
                "of the time; items/s counts them, the median does not")

    @property
    def throughput_gap_note(self) -> str | None:
        """When items/s is `THROUGHPUT_GAP` or more below 1/p50 with the mean under `HEAVY_TAIL_RATIO` x the median
        (after any slow start): by how much, and where the slow calls lie (a spell: which calls, how many; or spread).
        A spell of 12 calls of 20 ms among 2.1 ms ones took 31% of the time, put items/s 29% below 1/p50 and got
        no note until 2026-12-07. None for a spell from the start or to the end of the run where `speed_change_note`
        has one: that note says it, at which call and from what to what."""
        past = self._past_slow_start()
        if past is None:
            return None
        head, rest, total, mid, mean = past
        if mid <= 0 or mean > HEAVY_TAIL_RATIO * mid or 1 - mid / mean < THROUGHPUT_GAP:
            return None
        limit = SPELL_RATIO * mid
        # the densest run of slow calls: the segment maximizing (slow calls - other calls), Kadane's scan
        best = score = 0
        start = best_start = best_end = 0
        for i, x in enumerate(rest):
            if score <= 0:
                score, start = 0, i
            score += 1 if x > limit else -1
            if score > best:
                best, best_start, best_end = score, start, i + 1
        excess = total - len(rest) * mid
        spell = rest[best_start:best_end]
        spell_excess = sum(spell) - len(spell) * mid
        slow = sum(1 for x in rest if x > limit)
        said = (f"items/s is {1 - mid / mean:.0%} below 1/p50 (mean call {mean / 1e6:.3g} ms, median "
                f"{mid / 1e6:.3g} ms)")
        if best > 1 and spell_excess >= excess / 2:
            if (best_start == 0 or best_end == len(rest)) and self.speed_change_note is not None:
                # a spell from the run's start or to its end is the run's second speed, which the speed-change note
                # names with its call: a spell of 4 ms calls from call 201 of 300 (2 ms before) got both notes
                return None
            first = head + best_start + 1  # 1-based, counting the timed calls
            in_spell = sum(1 for x in spell if x > limit)
            return (f"{said}: a spell of slow calls, timed calls {first:,}-{head + best_end:,} ({in_spell:,} of their "
                    f"{len(spell):,} over {SPELL_RATIO:g}x the median, {_median_ns(spell) / 1e6:.3g} ms at their "
                    f"median), took {sum(spell) / total:.0%} of the time (other load for a while, or the model's own "
                    "slow phase); items/s counts them, the median does not")
        return (f"{said}: {slow:,} calls ({slow / len(rest):.0%}) over {SPELL_RATIO:g}x the median, spread over the "
                f"run, took {sum(x for x in rest if x > limit) / total:.0%} of the time; items/s counts them, the "
                "median does not")

    @property
    def speed_change_note(self) -> str | None:
        """When the run is noisy because it changed speed part-way: at which call, from what to what. The best split
        of the log-times into two levels (least squares, each part at least a tenth of the calls and 10), kept when the
        parts' medians differ by `SPEED_CHANGE_RATIO` and each part is quiet: 2.1 ms calls then 3.1 ms from the 189th
        on read only "noisy: IQR is 43% of the median" until 2026-12-07."""
        n = self.n
        least = max(10, n // 10)
        if n < 2 * least or self.noise_ratio <= NOISE_IQR_RATIO:
            return None
        logs = [math.log(max(x, 1)) for x in self.samples_ns]
        total = sum(logs)
        left = 0.0
        best_k, best_gain = 0, -1.0
        for k in range(1, n):
            left += logs[k - 1]
            if least <= k <= n - least:
                gain = k * (n - k) / n * (left / k - (total - left) / (n - k)) ** 2
                if gain > best_gain:
                    best_k, best_gain = k, gain
        if self.slow_start is not None and best_k <= self.slow_start.calls:
            return None  # the slow start's note says it, with the warm-up that leaves it out
        before, after = Measurement(self.samples_ns[:best_k]), Measurement(self.samples_ns[best_k:])
        ratio = after.p50_s / before.p50_s if before.p50_s > 0 else 0.0
        if max(ratio, 1 / ratio if ratio > 0 else 0.0) < SPEED_CHANGE_RATIO:
            return None
        if before.noise_ratio > NOISE_IQR_RATIO or after.noise_ratio > NOISE_IQR_RATIO:
            return None
        return (f"the run changed speed at timed call {best_k + 1:,} of {n:,}: {before.p50_s * 1e3:.3g} ms at the "
                f"median before, {after.p50_s * 1e3:.3g} ms after (each part's IQR at most {NOISE_IQR_RATIO:.0%} of "
                f"its median): the noise is that change (other load that started or stopped, frequency scaling, the "
                "model's own state), and the median and items/s are of the two speeds together")

    def median_ci_s(self, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
        """Bootstrap confidence interval of the median latency, in seconds: the samples resampled in `CI_BLOCKS`
        contiguous blocks in the order they were taken (`block_bootstrap_median_ci`). Resampled one by one, the
        interval of a run on a shared machine was a fifth of this one's width at the median (226 stored runs), and
        the interval of a run's first half held its second half's median 11% of the time."""
        lo, hi = block_bootstrap_median_ci(self.samples_ns, confidence, seed=seed)
        return lo / 1e9, hi / 1e9

    @property
    def throughput(self) -> float:
        """Items per second over the measured iterations (total items / total time)."""
        return self.items_per_call * self.n / self.total_s if self.total_s > 0 else float("inf")

    def summary(self) -> dict[str, Any]:
        """The KPIs as a flat dict of floats in seconds / items per second, for records and JSON. `median_ci_s` is
        None with too few samples for an interval (`min_samples_for_interval`): one sample printed "CI -0.0/+0.0%"."""
        ci = list(self.median_ci_s()) if self.n >= min_samples_for_interval() else None
        return {
            "n": self.n,
            "items_per_call": self.items_per_call,
            "mean_s": self.mean_s,
            "std_s": self.std_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "p50_s": self.p50_s,
            "p90_s": self.p90_s,
            "p95_s": self.p95_s,
            "p99_s": self.p99_s,
            "p999_s": self.p999_s,
            "iqr_s": self.iqr_s,
            "cv": self.cv,
            "noise_ratio": self.noise_ratio,
            "median_ci_s": ci,
            "throughput": self.throughput,
            "noise_warning": self.noise_warning,
            "stop_note": self.extra.get("stop_note"),
            "slow_start_calls": self.slow_start.calls if self.slow_start else 0,
            "slow_start_note": self.slow_start_note,
            "heavy_tail_note": self.heavy_tail_note,
            "throughput_gap_note": self.throughput_gap_note,
            "speed_change_note": self.speed_change_note,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_ns": list(self.samples_ns),
            "items_per_call": self.items_per_call,
            "warmup_iters": self.warmup_iters,
            "clock": self.clock,
            "label": self.label,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            samples_ns=[int(s) for s in data["samples_ns"]],
            items_per_call=int(data.get("items_per_call", 1)),
            warmup_iters=int(data.get("warmup_iters", 0)),
            clock=str(data.get("clock", "perf_counter_ns")),
            label=str(data.get("label", "")),
            extra=dict(data.get("extra", {})),
        )
