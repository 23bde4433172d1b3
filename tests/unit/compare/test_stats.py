"""Mann-Whitney U (raw and bucketed), the bootstrap ratio CI and the two-proportion test, against scipy."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dlperf.compare.stats import mann_whitney_grouped, mann_whitney_u, ratio_ci, two_proportion_test

pytestmark = pytest.mark.unit
scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mann_whitney_matches_scipy_asymptotic(seed: int) -> None:
    rng = random.Random(seed)
    x = [rng.lognormvariate(0.0, 0.3) for _ in range(40)]
    y = [rng.lognormvariate(0.1, 0.3) for _ in range(55)]
    ours = mann_whitney_u(x, y)
    ref = scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    assert ours.u == pytest.approx(ref.statistic)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_mann_whitney_with_ties_matches_scipy() -> None:
    x = [1, 2, 2, 3, 3, 3, 4, 5]
    y = [2, 3, 4, 4, 5, 5, 6, 6, 7]
    ours = mann_whitney_u(x, y)
    ref = scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert ours.prob_greater < 0.5  # x tends to be smaller


def test_bucketed_test_equals_the_raw_test_on_bucket_values() -> None:
    # Values that all sit on bucket indices: the grouped test must be the raw test with ties.
    counts_x = [5, 10, 20, 10, 5, 0]
    counts_y = [1, 4, 10, 20, 12, 3]
    raw_x = [i for i, c in enumerate(counts_x) for _ in range(c)]
    raw_y = [i for i, c in enumerate(counts_y) for _ in range(c)]
    grouped = mann_whitney_grouped(counts_x, counts_y)
    raw = mann_whitney_u(raw_x, raw_y)
    assert grouped.u == pytest.approx(raw.u)
    assert grouped.p_value == pytest.approx(raw.p_value)


def test_identical_samples_give_p_one() -> None:
    assert mann_whitney_u([1.0] * 5, [1.0] * 7).p_value == 1.0


def test_ratio_ci_brackets_a_known_shift() -> None:
    rng = np.random.default_rng(0)
    base = rng.lognormal(np.log(0.010), 0.05, 800)
    new = rng.lognormal(np.log(0.012), 0.05, 800)
    est = ratio_ci(base.tolist(), new.tolist(), "p50", resamples=500)
    assert est.ci[0] < 1.2 < est.ci[1] or abs(est.ratio - 1.2) < 0.01
    assert 1.15 < est.ci[0] <= est.ratio <= est.ci[1] < 1.25


def test_two_proportion_test_matches_the_formula() -> None:
    t = two_proportion_test(30, 1000, 10, 1000)
    pooled = 40 / 2000
    z = (0.03 - 0.01) / np.sqrt(pooled * (1 - pooled) * (2 / 1000))
    assert t.z == pytest.approx(z)
    assert t.p_value == pytest.approx(2 * scipy_stats.norm.sf(z))
    assert two_proportion_test(0, 10, 0, 10).p_value == 1.0


def _iid_ratio_ci(base: np.ndarray, new: np.ndarray, q: float, resamples: int = 1000) -> tuple[float, float]:
    """The bootstrap that resamples samples one by one (the gate's until 2026-12-05)."""
    rng = np.random.default_rng(0)
    rb = np.percentile(base[rng.integers(0, len(base), (resamples, len(base)))], q, axis=1)
    rn = np.percentile(new[rng.integers(0, len(new), (resamples, len(new)))], q, axis=1)
    lo, hi = np.quantile(rn / rb, [0.025, 0.975])
    return float(lo), float(hi)


def test_ratio_ci_resamples_blocks_of_neighbouring_samples() -> None:
    """A run is not independent draws: a stretch of it slowed by another process's burst moved its p90 by
    more than the one-by-one bootstrap allowed, and the gate failed unchanged code (p90 in 17% of same-code
    checks). Blocks of neighbouring samples keep the burst together: a wider interval for such a run, about the
    same one for independent samples."""
    rng = np.random.default_rng(1)
    base = rng.lognormal(np.log(1e-3), 0.05, 4000)
    calm = rng.lognormal(np.log(1e-3), 0.05, 4000)
    est = ratio_ci(base.tolist(), calm.tolist(), "p90", resamples=1000)
    iid = _iid_ratio_ci(base, calm, 90)
    assert 0.6 < (est.ci[1] - est.ci[0]) / (iid[1] - iid[0]) < 1.6
    burst = calm.copy()
    burst[1000:1600] *= 1.4  # 15% of the run, one stretch
    est = ratio_ci(base.tolist(), burst.tolist(), "p90", resamples=1000)
    iid = _iid_ratio_ci(base, burst, 90)
    assert (est.ci[1] - est.ci[0]) > 2 * (iid[1] - iid[0])
    assert est.ci[0] < 1.02 < iid[0]  # the one-by-one interval called the burst a regression of the code


def _heavy_tailed(seed: int, scale: float, n: int = 40_000) -> np.ndarray:
    """A busy machine's calls: mostly ~20 us, 0.2% stalled for ~20 ms (the stalls take most of the time)."""
    rng = np.random.default_rng(seed)
    values = rng.lognormal(np.log(20e-6), 0.05, n)
    stalled = rng.random(n) < 0.002
    values[stalled] = rng.lognormal(np.log(20e-3), 0.3, int(stalled.sum()))
    return values * scale


def _direct_block_ci(base: np.ndarray, new: np.ndarray, stat: str, resamples: int = 400) -> tuple[float, float]:
    """The same block bootstrap done the slow way: copy the drawn blocks' samples and take the statistic."""
    rng = np.random.default_rng(5)

    def resampled(values: np.ndarray) -> np.ndarray:
        edges = np.linspace(0, len(values), 41).round().astype(int)
        blocks = [values[edges[i]:edges[i + 1]] for i in range(40)]
        out = []
        for _ in range(resamples):
            drawn = np.concatenate([blocks[i] for i in rng.integers(0, 40, 40)])
            out.append(drawn.mean() if stat == "mean" else np.percentile(drawn, float(stat[1:])))
        return np.array(out)

    lo, hi = np.quantile(resampled(new) / resampled(base), [0.025, 0.975])
    return float(lo), float(hi)


@pytest.mark.parametrize("stat", ["mean", "p99"])
def test_ratio_ci_keeps_a_heavy_tail(stat: str) -> None:
    """The mean (the gate's throughput) and p99 of a run whose few stalls take most of its time: thinning each
    block to order statistics dropped the stalls, and a check printed `+25.1% (95% CI -5.3% to +18.9%)`, an
    interval that missed its own estimate."""
    base, new = _heavy_tailed(0, 1.0), _heavy_tailed(1, 1.3)
    est = ratio_ci(base.tolist(), new.tolist(), stat, resamples=1000)
    assert est.ci[0] <= est.ratio <= est.ci[1]
    lo, hi = _direct_block_ci(base, new, stat)
    assert est.ci[0] == pytest.approx(lo, rel=0.08)
    assert est.ci[1] == pytest.approx(hi, rel=0.08)


def test_ratio_ci_of_a_small_run_is_the_block_bootstrap_exactly() -> None:
    """Below max_points every value is a bin of its own: the counts give the percentile numpy gives."""
    rng = np.random.default_rng(2)
    base, new = rng.lognormal(0.0, 0.5, 333), rng.lognormal(0.1, 0.5, 257)
    for stat in ("p50", "p90", "mean"):
        est = ratio_ci(base.tolist(), new.tolist(), stat, resamples=4000)
        lo, hi = _direct_block_ci(base, new, stat, resamples=4000)
        assert est.ci[0] == pytest.approx(lo, rel=0.01)
        assert est.ci[1] == pytest.approx(hi, rel=0.01)


def _block_resamples(values: np.ndarray, rng: np.random.Generator, resamples: int, q: float) -> np.ndarray:
    """The block bootstrap's percentiles the slow way, drawing blocks from `rng` in the order ratio_ci draws them."""
    edges = np.linspace(0, len(values), 41).round().astype(int)
    blocks = [values[edges[i]:edges[i + 1]] for i in range(40)]
    draws = rng.integers(0, 40, size=(resamples, 40))
    return np.array([np.percentile(np.concatenate([blocks[i] for i in row]), q) for row in draws])


@pytest.mark.parametrize("stat", ["p50", "p90"])
def test_ratio_ci_of_a_small_run_matches_the_same_draws_to_rounding(stat: str) -> None:
    """Below max_points the counts give the resamples' percentiles exactly as numpy interpolates them: with the same
    seeded draws the interval is the slow way's to rounding (a resample's percentile read as the order statistic
    below it, without the interpolation, moved the interval by a few percent and the test at 1% did not see it).
    The estimate itself is stat(new) / stat(base) of the runs, not a statistic of the bootstrap ratios."""
    rng = np.random.default_rng(3)
    base, new = rng.lognormal(0.0, 0.5, 203), rng.lognormal(0.1, 0.5, 150)
    est = ratio_ci(base.tolist(), new.tolist(), stat, resamples=500, seed=11)
    q = float(stat[1:])
    draws = np.random.default_rng(11)
    rb = _block_resamples(base, draws, 500, q)
    rn = _block_resamples(new, draws, 500, q)
    lo, hi = np.quantile(rn / rb, [0.025, 0.975])
    assert est.ci == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    assert est.ratio == pytest.approx(np.percentile(new, q) / np.percentile(base, q), rel=1e-12)
