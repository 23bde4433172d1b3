"""Live A/B from a server's own /metrics page (rendered by dlperf.serve.metrics with synthetic traffic)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("prometheus_client")

from dlperf.compare.live import compare_live, metrics_url
from dlperf.errors import ConfigError
from dlperf.serve.metrics import Metrics

pytestmark = pytest.mark.unit


def _traffic(metrics: Metrics, variant: str, n: int, median_s: float, failures: int, seed: int) -> None:
    rec = metrics.recorder("m", variant)
    rng = random.Random(seed)
    for _ in range(n):
        ns = int(rng.lognormvariate(0, 0.2) * median_s * 1e9)
        rec.batch(1, 0, ns, 0)
        rec.success(ns, 0, (0, ns, 0))
    for _ in range(failures):
        rec.failure("BACKEND", 1_000_000)


def _page(metrics: Metrics) -> str:
    return metrics.exposition()[0].decode()


def test_slower_variant_with_more_errors_is_detected() -> None:
    metrics = Metrics()
    _traffic(metrics, "a", 2000, 0.010, 4, seed=1)
    _traffic(metrics, "b", 300, 0.020, 15, seed=2)
    result = compare_live(_page(metrics))
    assert [v.name for v in result.variants] == ["a", "b"]  # control: most traffic
    a, b = result.variants
    assert a.requests == 2004 and b.requests == 315
    assert b.error_rate == pytest.approx(15 / 315)
    assert 0.0075 < a.p50_s < 0.015 and 0.015 < b.p50_s < 0.03
    test = result.tests[0]
    assert test.latency_verdict == "slower" and test.errors_verdict == "more errors"
    assert test.p50_ratio > 1.5
    assert "b vs a: latency slower" in result.findings()[0]


def test_same_traffic_is_no_significant_difference() -> None:
    metrics = Metrics()
    _traffic(metrics, "a", 1500, 0.010, 2, seed=3)
    _traffic(metrics, "b", 1500, 0.010, 2, seed=4)
    test = compare_live(_page(metrics)).tests[0]
    assert test.latency_verdict == "no significant difference"
    assert test.errors_verdict == "no significant difference"


def test_window_compares_only_new_requests() -> None:
    metrics = Metrics()
    _traffic(metrics, "a", 500, 0.010, 0, seed=5)
    _traffic(metrics, "b", 500, 0.010, 0, seed=6)
    earlier = _page(metrics)
    _traffic(metrics, "a", 400, 0.010, 0, seed=7)
    _traffic(metrics, "b", 300, 0.030, 0, seed=8)
    result = compare_live(_page(metrics), earlier=earlier, window_s=30)
    assert {v.name: v.requests for v in result.variants} == {"a": 400, "b": 300}
    assert result.tests[0].latency_verdict == "slower"
    assert "last 30 s" in result.findings()[-1]


def test_a_single_variant_is_a_clear_error() -> None:
    metrics = Metrics()
    _traffic(metrics, "only", 10, 0.01, 0, seed=9)
    with pytest.raises(ConfigError, match=r"at least two variants.*--variant a=DIR_A"):
        compare_live(_page(metrics))


def test_metrics_url_accepts_the_base_url() -> None:
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"
