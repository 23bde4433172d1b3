"""The windowed live comparison decides latency by a sign test over time slices, not by counting requests."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("prometheus_client")

from dlperf.compare.live import compare_live, sign_test, slice_count
from dlperf.serve.metrics import Metrics

from .live_traffic import traffic

pytestmark = pytest.mark.unit


def test_sign_test_is_exact_and_drops_ties() -> None:
    assert sign_test([1.2] * 6).p_value == pytest.approx(2 / 64)
    assert sign_test([0.8] * 6).above == 0 and sign_test([0.8] * 6).p_value == pytest.approx(2 / 64)
    mixed = sign_test([1.1, 0.9] * 5)
    assert (mixed.slices, mixed.above, mixed.p_value) == (10, 5, 1.0)
    tied = sign_test([1.0, 1.0, 1.3, 1.3])
    assert (tied.slices, tied.above) == (2, 2) and tied.p_value == pytest.approx(0.5)
    assert sign_test([]).p_value == 1.0 and not sign_test([]).decidable
    assert sign_test([2.0, 0.5]).geomean_ratio == pytest.approx(1.0)


def test_slice_count_is_bounded() -> None:
    assert [slice_count(w) for w in (0.5, 3, 5, 60, 3600)] == [6, 6, 10, 20, 20]


def test_a_stall_of_one_variant_is_not_a_difference_between_identical_variants() -> None:
    # identical variants; in two of ten slices a stall makes every request of the control 3x slower
    rng = random.Random(7)
    metrics = Metrics()
    earlier = metrics.exposition()[0].decode()
    pages = []
    for i in range(10):
        traffic(metrics, "a", 60, 0.030 if i in (2, 5) else 0.010, rng=rng)
        traffic(metrics, "b", 60, 0.010, rng=rng)
        pages.append(metrics.exposition()[0].decode())
    windowed = compare_live(pages[-1], earlier=earlier, window_s=5, between=pages[:-1], control="a").tests[0]
    # counted per request, the stalled run of 120 requests is a "difference" at any level
    assert windowed.latency is not None and windowed.latency.p_value < 1e-6
    # counted per slice, b was faster in the two stalled slices and a coin flip in the others
    assert windowed.slices is not None and windowed.slices.slices == 10
    assert windowed.latency_verdict == "no significant difference"


def test_too_few_slices_with_both_variants_give_no_verdict() -> None:
    rng = random.Random(3)
    metrics = Metrics()
    earlier = metrics.exposition()[0].decode()
    pages = []
    for i in range(6):  # b has traffic in 3 slices only, 3x slower each time
        traffic(metrics, "a", 50, 0.010, rng=rng)
        if i % 2:
            traffic(metrics, "b", 50, 0.030, rng=rng)
        pages.append(metrics.exposition()[0].decode())
    result = compare_live(pages[-1], earlier=earlier, window_s=3, between=pages[:-1], control="a")
    test = result.tests[0]
    assert test.slices is not None and (test.slices.slices, test.slices.above) == (3, 3)
    assert test.latency_verdict == "not enough requests"
    assert any(n.startswith("fewer than 6 slices had requests of both variants") for n in result.notes)
    assert result.to_dict()["tests"][0]["slice_test"]["slices"] == 3 and result.to_dict()["slices"] == 6


def test_an_error_rate_from_a_handful_of_requests_gets_an_exact_p_value() -> None:
    rng = random.Random(11)
    metrics = Metrics()
    traffic(metrics, "a", 1000, 0.010, rng=rng)
    traffic(metrics, "b", 2, 0.010, rng=rng)
    metrics.recorder("m", "b").failure("BACKEND", 1_000_000)
    result = compare_live(metrics.exposition()[0].decode(), control="a")
    test = result.tests[0]
    assert test.errors is not None and test.errors.test == "fisher-exact"
    assert test.errors.p_value == pytest.approx(3 / 1003)  # the one failure of 1003 requests fell among b's 3
    assert "error rate more errors (Fisher exact p=0.003)" in result.findings[0]
