"""Statistics of a Measurement, checked exactly against numpy on known data."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dlperf.measure.bench import BenchConfig, BenchPoint, BenchResult
from dlperf.measure.stats import (
    NOISE_IQR_RATIO,
    Measurement,
    bootstrap_ci,
    calls_to_bound_within,
    early_stopping_fails,
    early_stopping_min_count,
    early_stopping_passes,
    median,
    percent_beside,
    percentile,
    percentile_upper_bound,
)

pytestmark = pytest.mark.unit

QUANTILES = (0, 1, 5, 25, 50, 75, 90, 95, 99, 99.9, 100)


@pytest.fixture(scope="module")
def data_ns() -> list[int]:
    rng = np.random.default_rng(42)
    return [int(v) for v in rng.lognormal(mean=13.0, sigma=0.3, size=1001)]


def test_percentiles_match_numpy_linear(data_ns: list[int]) -> None:
    m = Measurement(data_ns)
    expected = np.percentile(np.array(data_ns) / 1e9, QUANTILES, method="linear")
    got = [m.percentile_s(q) for q in QUANTILES]
    assert got == pytest.approx(list(expected), rel=1e-12)
    assert m.p50_s == pytest.approx(float(np.median(np.array(data_ns) / 1e9)), rel=1e-12)
    assert (m.p90_s, m.p99_s, m.p999_s) == pytest.approx(tuple(expected[[6, 8, 9]]), rel=1e-12)


def test_percentile_interpolates_between_ranks() -> None:
    # 4 values: position of q=50 is 1.5 -> halfway between 20 and 30
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 90) == pytest.approx(37.0)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_spread_statistics(data_ns: list[int]) -> None:
    m = Measurement(data_ns)
    arr = np.array(data_ns) / 1e9
    q25, q75 = np.percentile(arr, [25, 75])
    assert m.iqr_s == pytest.approx(q75 - q25, rel=1e-12)
    assert m.std_s == pytest.approx(float(np.std(arr, ddof=1)), rel=1e-9)
    assert m.mean_s == pytest.approx(float(np.mean(arr)), rel=1e-12)
    assert m.cv == pytest.approx(float(np.std(arr, ddof=1) / np.mean(arr)), rel=1e-9)
    assert m.min_s == arr.min() and m.max_s == arr.max()
    assert m.noise_ratio == pytest.approx((q75 - q25) / np.median(arr), rel=1e-12)


def test_throughput_is_items_over_total_time() -> None:
    m = Measurement([1_000_000, 3_000_000], items_per_call=8)  # 2 calls, 4 ms total, 16 items
    assert m.total_s == pytest.approx(0.004)
    assert m.throughput == pytest.approx(16 / 0.004)
    assert Measurement([5]).std_s == 0.0


def test_noise_warning_flag() -> None:
    quiet = Measurement([1000 * v for v in (1000, 1010, 1020, 1030, 990, 1000, 1005, 1015)])  # 1 ms calls
    assert quiet.noise_ratio < NOISE_IQR_RATIO
    assert quiet.noise_warning is None
    noisy = Measurement([1000 * v for v in (1000, 1500, 700, 2000, 1000, 600, 1800, 900)])
    assert noisy.noise_ratio > NOISE_IQR_RATIO
    assert noisy.noise_warning is not None and "noisy" in noisy.noise_warning
    few = Measurement([1000, 1000, 1000])
    assert few.noise_warning is not None and "only 3 samples" in few.noise_warning
    # just over the threshold: shown to a decimal, not as "10% of the median (> 10%)"
    edge = Measurement([1_000_000 + k * 2_060 for k in range(-50, 51)])
    assert edge.noise_ratio == pytest.approx(0.103)
    assert edge.noise_warning is not None and edge.noise_warning.startswith("noisy: IQR is 10.3% of the median (> 10%)")
    # closer still: it read "IQR is 10.0% of the median (> 10%)"
    closer = Measurement([1_000_000 + k * 2_006 for k in range(-50, 51)])
    assert closer.noise_ratio == pytest.approx(0.1003)
    assert (closer.noise_warning or "").startswith("noisy: IQR is 10.03% of the median (> 10%)")
    # 10% itself, but for the float error of seconds: no warning that reads "IQR is 10.000% of the median (> 10%)"
    exact = Measurement([907, 907, 1_000, 1_007, 1_007], clock="fake")  # an IQR of 100 ns on a median of 1000 ns
    assert exact.noise_ratio > NOISE_IQR_RATIO and exact.noise_warning is None


def test_a_ratio_beside_its_threshold_is_shown_with_the_digits_that_tell_them_apart() -> None:
    """The noise warning and bench's IQR/p50 column showed 10.03% as "10.0%" and "10%" beside "(> 10%)" or
    "IQR/p50 > 10% = noisy", and 9.96% (not noisy) as "10%"."""
    assert [percent_beside(v, 0.10) for v in (0.34, 0.103, 0.1003, 0.0996, 0.05)] == [
        "34%", "10.3%", "10.03%", "9.96%", "5%"]


def test_one_percentage_wording_serves_the_noise_ratio_and_the_optimize_budgets() -> None:
    """budget_percent and percent_beside were two loops, and only the budgets' kept a ratio that is not 0 from
    showing as 0: a quiet run's IQR/p50 of 0.4% read "0%" in bench's column."""
    from dlperf.optimize.constraints import budget_percent

    assert [percent_beside(v, 0.10) for v in (0.004, 0.0004, 0.0, 0.00001)] == ["0.4%", "0.04%", "0%", "0.001%"]
    assert [budget_percent(v) for v in (0.0, 0.05, 0.00001, 0.000018)] == ["0.00%", "5.00%", "0.001%", "0.002%"]
    assert budget_percent(0.00001, 0.000018) == "0.001%" and budget_percent(0.000018, 0.00001) == "0.002%"
    assert budget_percent(0.0500001, 0.05) == "5.00001%"


def test_calls_near_the_clocks_own_overhead_get_a_note_not_a_noise_verdict() -> None:
    # an empty call's perf_counter_ns sample reads ~90 ns, steps of 10 ns: "noisy ... other load" misled
    tiny = Measurement([80, 80, 90, 100, 100, 90, 80, 100])
    assert tiny.noise_ratio > NOISE_IQR_RATIO
    assert tiny.noise_warning is not None
    assert tiny.noise_warning.startswith("calls of 90 ns are under 20x the perf_counter_ns clock's own ~100 ns")
    assert "time a loop of many calls as one call" in tiny.noise_warning
    assert Measurement([1_990] * 8).noise_warning is not None  # under 2 µs: the clock is over 5% of a sample
    assert Measurement([2_000] * 8).noise_warning is None
    assert Measurement([9_000] * 8, clock="cuda_events").noise_warning is not None  # events resolve ~0.5 µs
    assert (Measurement([80, 80, 90, 100, 100, 90, 80, 100], clock="fake").noise_warning or "").startswith("noisy")
    assert Measurement([90] * 8, clock="fake").noise_warning is None  # a clock of unknown overhead: no note


def test_summary_and_round_trip(data_ns: list[int]) -> None:
    m = Measurement(data_ns[:50], items_per_call=4, warmup_iters=3, label="x")
    s = m.summary()
    assert s["n"] == 50 and s["items_per_call"] == 4
    assert s["p50_s"] == m.p50_s and s["throughput"] == m.throughput
    assert s["noise_ratio"] == m.noise_ratio
    lo, hi = s["median_ci_s"]
    assert lo <= m.p50_s <= hi
    back = Measurement.from_dict(m.to_dict())
    assert back.samples_ns == m.samples_ns and back.items_per_call == 4 and back.warmup_iters == 3


def test_round_trip_keeps_the_clock_label_and_extra() -> None:
    """A stored measurement read back keeps its clock: the short-call note depends on it (a 9 us call is under 20x
    CUDA events' resolution, not perf_counter_ns's), and a record that came back as perf_counter_ns lost the note."""
    m = Measurement([9_000] * 8, clock="cuda_events", label="gpu", extra={"stop_note": "stopped at the cap"})
    back = Measurement.from_dict(m.to_dict())
    assert (back.clock, back.label, back.extra) == ("cuda_events", "gpu", {"stop_note": "stopped at the cap"})
    assert back.noise_warning is not None and back.noise_warning == m.noise_warning
    assert back.summary()["stop_note"] == "stopped at the cap"


def test_a_measurement_and_a_bench_point_print_as_one_short_line() -> None:
    """Printing a point of `dlperf.bench(...).points` dumped its every sample (some 60 KB for a 1 s run at 30 us a
    call), as the dataclass's repr does; the BenchResult holding it already printed as one line."""
    m = Measurement([30_000 + i for i in range(20_000)], items_per_call=8, label="mycnn bs=8")
    point = BenchPoint(8, m, 2**20, 100.0, 50.0)
    assert repr(m) == "Measurement('mycnn bs=8', 20000 calls of 8 items, p50 0.04 ms, mean 0.04 ms)"
    assert len(repr(point)) < 400 and "30001" not in repr(point)


def test_a_bench_result_gives_the_warnings_the_cli_prints() -> None:
    """A notebook's `dlperf.bench(...)` showed a batch at 16 ms beside 0.02 ms, other processes busy, with no word
    of it but in each point's fields; `dlperf bench` prints these lines under its table."""
    quiet = BenchPoint(1, Measurement([20_000 + i % 7 for i in range(500)], label="m bs=1"), 2**20, 100.0, 50.0,
                       torch_threads=1)
    noisy = BenchPoint(8, Measurement([20_000 * (1 + i % 3) for i in range(500)], items_per_call=8), 2**20, 40.0,
                       100.0, torch_threads=2)  # IQR 100% of the median; 0.4 cores of 2 threads, the machine busy
    result = BenchResult("m", BenchConfig(), [quiet, noisy], model_bytes=1)
    assert result.warnings[0] == ("noisy at batch 8 (IQR/p50 > 10%): other load on the machine, frequency scaling, "
                                  "the model's own per-call variation (data-dependent control flow, random-length "
                                  "loops) or too few samples")
    assert noisy.contention_warning is not None and result.warnings[1] == f"batch 8: {noisy.contention_warning}"
    assert len(result.warnings) == 2 and repr(result).endswith(", 2 warnings in .warnings)")
    calm = BenchResult("m", BenchConfig(), [quiet], model_bytes=1)
    assert calm.warnings == [] and "warning" not in repr(calm)


def test_measurement_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        Measurement([])
    with pytest.raises(ValueError):
        Measurement([1], items_per_call=0)


def test_bootstrap_ci_is_seeded_and_contains_true_median() -> None:
    rng = random.Random(7)
    true_median = math.exp(1.0)  # lognormal(mu=1, sigma) has median e^mu
    values = [rng.lognormvariate(1.0, 0.25) for _ in range(301)]
    a = bootstrap_ci(values, median, 0.95, resamples=500, seed=3)
    b = bootstrap_ci(values, median, 0.95, resamples=500, seed=3)
    c = bootstrap_ci(values, median, 0.95, resamples=500, seed=4)
    assert a == b
    assert a != c
    assert a[0] < true_median < a[1]
    assert a[0] <= median(values) <= a[1]


def test_bootstrap_ci_coverage_over_seeded_datasets() -> None:
    """The 95% CI of the median covers the true median in most of 30 independent datasets."""
    covered = 0
    for trial in range(30):
        rng = random.Random(1000 + trial)
        values = [rng.lognormvariate(0.0, 0.5) for _ in range(101)]
        lo, hi = bootstrap_ci(values, median, 0.95, resamples=300, seed=trial)
        covered += lo <= 1.0 <= hi  # true median of lognormal(0, s) is 1
    assert covered >= 25  # expected ~28.5; P(< 25) is about 1% for 95% coverage


def test_bootstrap_ci_needs_values() -> None:
    with pytest.raises(ValueError):
        bootstrap_ci([])


@pytest.mark.parametrize("n", [1, 2, 9, 100, 101])
def test_fast_median_bootstrap_matches_resampling(n: int) -> None:
    """The order-statistic draw of bootstrap medians has the distribution of resampling the values."""
    rng = random.Random(n)
    values = [rng.lognormvariate(0.0, 0.5) for _ in range(n)]
    fast = bootstrap_ci(values, median, 0.95, resamples=4000, seed=1)
    slow = bootstrap_ci(values, lambda v: median(v), 0.95, resamples=4000, seed=1)  # resamples the values
    width = max(values) - min(values)
    assert fast == pytest.approx(slow, abs=0.08 * width + 1e-12)
    assert min(values) <= fast[0] <= fast[1] <= max(values)


def test_median_ci_of_many_samples_is_cheap_and_tight() -> None:
    rng = random.Random(3)
    m = Measurement([int(rng.gauss(1_000_000, 50_000)) for _ in range(50_000)])
    lo, hi = m.median_ci_s()
    assert lo <= m.p50_s <= hi
    assert (hi - lo) / m.p50_s < 0.01  # ~0.25% expected for 50,000 samples at 5% spread


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k), X ~ Binomial(n, p), straight from the definition (exact integers, then one division)."""
    scale = 10**12
    q_num = round(p * scale)
    total = sum(math.comb(n, x) * q_num**x * (scale - q_num) ** (n - x) for x in range(k + 1))
    return total / scale**n


def test_early_stopping_counts_match_mlperf_and_the_binomial_definition() -> None:
    # MLPerf LoadGen's summaries: "Processed 21 queries. Would need to run at least 438 more queries" and
    # "Processed 300 queries ... at least 159 more" for p99 with none over: 459 either way.
    assert early_stopping_min_count(99) == 459
    for over in (0, 1, 3):
        n = early_stopping_min_count(99, over)
        assert _binomial_cdf(over, n, 0.01) <= 0.01 < _binomial_cdf(over, n - 1, 0.01)
    assert early_stopping_min_count(90) == math.ceil(math.log(0.01) / math.log(0.9))  # 44
    assert early_stopping_passes(459, 0, 99) and not early_stopping_passes(458, 0, 99)
    # the mirror: confidently over the bound when `over` or more happen at most 1% of the time at a true 1%
    for n, over in ((100, 5), (1000, 19), (100, 4), (1000, 17)):
        assert early_stopping_fails(n, over, 99) == (1 - _binomial_cdf(over - 1, n, 0.01) <= 0.01)
    assert early_stopping_fails(100, 5, 99) and not early_stopping_fails(100, 4, 99)
    assert not early_stopping_fails(1000, 0, 99)
    with pytest.raises(ValueError):
        early_stopping_min_count(100)


def test_percentile_upper_bound_is_the_sample_that_the_binomial_test_allows() -> None:
    values = [float(v) for v in range(1, 2001)]
    assert percentile_upper_bound(values[:458], 99) is None  # too few to say anything at 99% confidence
    assert percentile_upper_bound(values[:459], 99) == 459.0  # the largest: no sample may lie above
    assert percentile_upper_bound(values[:661], 99) == 661.0
    assert percentile_upper_bound(values[:662], 99) == 661.0  # one may lie above from 662 on
    for n in (700, 1000, 2000):
        bound = percentile_upper_bound(values[:n], 99)
        assert bound is not None
        above = n - int(bound)  # samples above the bound
        assert _binomial_cdf(above, n, 0.01) <= 0.01 < _binomial_cdf(above + 1, n, 0.01)
        assert bound >= percentile(values[:n], 99)  # never below the sample percentile


def test_percentile_upper_bound_covers_the_true_p99_of_a_known_distribution() -> None:
    # Exponential latencies: true p99 = ln(100). The sample p99 falls below it about half the time; the
    # 99%-confidence bound should almost never do so (seeded: 200 draws of 1000 samples).
    rng = random.Random(7)
    true_p99 = math.log(100)
    below_sample = below_bound = 0
    for _ in range(200):
        values = sorted(rng.expovariate(1.0) for _ in range(1000))
        below_sample += percentile(values, 99) < true_p99
        bound = percentile_upper_bound(values, 99)
        assert bound is not None
        below_bound += bound < true_p99
    assert below_sample > 50
    assert below_bound <= 6


def _loadgen_estimate_index(n: int, q: float) -> int | None:
    """MLPerf LoadGen's single-stream early-stopping estimate, transcribed from results.cc / early_stopping.cc:
    h(t) = the fewest queries under the bound such that P(Binomial(h + t, 1 - q) <= t) < 1 - 0.99; too few
    queries when n < h(1) + 1; else t = the largest t >= 1 with n >= h(t) + t, and the estimate is
    sorted[n - t] (0-based)."""
    def min_passing(t: int, h: int) -> int:  # from h(t - 1): h grows with t
        while not _binomial_cdf(t, h + t, 1.0 - q / 100.0) < 0.01:
            h += 1
        return h

    h = min_passing(1, 0)
    if n < h + 1:
        return None
    t = 1
    for i in range(2, n + 1):
        h = min_passing(i, h)
        if n < h + i:
            t = i - 1
            break
    return n - t


@pytest.mark.parametrize(("q", "counts"), [(90, (44, 63, 64, 100, 500)), (99, (459, 661, 662, 800))])
def test_percentile_upper_bound_is_one_sample_below_loadgens_estimate(q: float, counts: tuple[int, ...]) -> None:
    # as docs/measure.md says: the same test, but LoadGen counts its estimate as over, so it needs 64 (p90) or
    # 662 (p99) samples and reports the next larger one
    for n in counts:
        values = [float(v) for v in range(n)]
        loadgen = _loadgen_estimate_index(n, q)
        bound = percentile_upper_bound(values, q)
        assert bound is not None
        if n < (64 if q == 90 else 662):
            assert loadgen is None
        else:
            assert loadgen == int(bound) + 1


def test_to_device_copies_a_tensor_that_is_not_pinned_as_before() -> None:
    """non_blocking applies to pinned tensors only (the CUDA test checks those): others, and non-tensors, unchanged."""
    import torch

    from dlperf.measure.bench import to_device

    x = torch.arange(6.0)
    moved, flag = to_device((x, 3), "cpu", torch.float16, non_blocking=True)
    assert moved.dtype == torch.float16 and moved.tolist() == x.tolist() and flag == 3


@pytest.mark.parametrize(("slow", "q"), [(18, 90), (98, 90), (99, 90), (9, 99)])
def test_calls_to_bound_within_is_where_mlperf_s_test_starts_to_pass(slow: int, q: float) -> None:
    """The calls that bound the percentile under the limit at this share of calls above it: MLPerf's test (summed term
    by term) passes there and fails at 90% of it. 98 of 1,000 calls over a p90's limit need ~120,000 calls; the first
    version summed ~10^4 binomial terms at each of its steps and took 61 s to say so inside `dlperf bench`."""
    values = sorted([1.0] * (1000 - slow) + [10.0] * slow)
    calls = calls_to_bound_within(values, q, 2.0)
    assert calls is not None
    assert early_stopping_passes(calls, math.ceil(slow / 1000 * calls), q)
    fewer = int(calls * 0.9)
    assert not early_stopping_passes(fewer, math.ceil(slow / 1000 * fewer), q)


def test_calls_to_bound_within_is_none_where_no_run_would_do() -> None:
    assert calls_to_bound_within(sorted([1.0] * 900 + [10.0] * 100), 90, 2.0) is None  # 10% above a p90's limit
    assert calls_to_bound_within([], 90, 2.0) is None
    assert calls_to_bound_within(sorted([1.0] * 90_001 + [10.0] * 9_999), 90, 2.0) is None  # over 10^9 calls
