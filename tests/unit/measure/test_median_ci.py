"""The median CI of a measurement resamples blocks of neighbouring samples: calls timed close together are alike,
and an interval that resampled them one by one covered the true median far less often than it said."""

from __future__ import annotations

import math
import random

import pytest

from dlperf.measure.stats import CI_BLOCKS, Measurement, block_bootstrap_median_ci

pytestmark = pytest.mark.unit


def _ar1_ns(n: int, phi: float, seed: int) -> list[int]:
    """1 ms calls whose 5% deviations persist from one call to the next (another process's load comes and goes
    over many calls), as an AR(1) series; its median is exactly 1 ms."""
    rng = random.Random(seed)
    x = rng.gauss(0.0, 1.0) / math.sqrt(1.0 - phi * phi)
    out = []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, 1.0)
        out.append(round(1e6 * (1.0 + 0.05 * x * math.sqrt(1.0 - phi * phi))))
    return out


def _coverage(phi: float, n: int, trials: int = 60) -> float:
    covered = 0
    for seed in range(trials):
        lo, hi = Measurement(_ar1_ns(n, phi, seed)).median_ci_s()
        covered += lo <= 1e-3 <= hi
    return covered / trials


def test_the_interval_covers_the_median_of_correlated_calls() -> None:
    # resampled one by one the 95% interval held the true median in about half of these runs (0.47 in 100)
    assert _coverage(phi=0.9, n=2000) >= 0.8


def test_independent_calls_keep_their_coverage() -> None:
    assert _coverage(phi=0.0, n=500) >= 0.88


def test_seeded_and_around_the_median() -> None:
    samples = _ar1_ns(10_000, 0.5, seed=1)  # above CI_MAX_POINTS: the blocks are thinned
    m = Measurement(samples)
    assert m.median_ci_s() == m.median_ci_s() == tuple(x / 1e9 for x in block_bootstrap_median_ci(samples))
    lo, hi = m.median_ci_s()
    assert lo <= m.p50_s <= hi


def test_few_samples_are_resampled_one_by_one() -> None:
    samples = [float(v) for v in range(1, CI_BLOCKS)]  # fewer than the blocks: the ordinary bootstrap
    lo, hi = block_bootstrap_median_ci(samples, seed=2)
    assert 1.0 <= lo < 20.0 < hi <= CI_BLOCKS - 1.0
    with pytest.raises(ValueError):
        block_bootstrap_median_ci([])


def test_thinned_blocks_stand_for_their_order_statistics_not_every_kth_call() -> None:
    """Above CI_MAX_POINTS each block is thinned to evenly spaced order statistics of its sorted samples. Picking
    every k-th call in time order instead follows any period in the calls: with every third call slow (a periodic
    stall), the picked calls were all slow and the interval was [5 ms, 5 ms] around a median of 1 ms."""
    samples = [5_000_000 if i % 3 == 1 else 1_000_000 for i in range(12_000)]
    m = Measurement(samples)
    lo, hi = m.median_ci_s()
    assert m.p50_s == pytest.approx(1e-3)
    assert lo <= m.p50_s <= hi
    assert hi < 2e-3
