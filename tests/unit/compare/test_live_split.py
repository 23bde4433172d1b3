"""The windowed latency verdict with an unequal split (a 90:10-style canary) on skewed latencies: identical
variants are not called different, and a slower canary is called slower, not faster.

Each slice compares the variant's latencies with the control's by rank (P(variant > control)), not by the
slices' mean latencies: the mean of the canary's few requests falls below the population mean more often than
not when latencies are right-skewed, which read as "faster" in most slices."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("prometheus_client")

from dlperf.compare.live import compare_live
from dlperf.serve.metrics import Metrics

pytestmark = pytest.mark.unit

SLICES = 20


def _window(rng: random.Random, per_slice: tuple[int, int], slowdown: float, sigma: float = 1.2) -> str:
    """The verdict of one window: `per_slice` requests of the control and of the canary in each slice."""
    metrics = Metrics()
    control, canary = metrics.recorder("m", "control"), metrics.recorder("m", "canary")
    pages = [metrics.exposition()[0].decode()]
    for _ in range(SLICES):
        for rec, n, factor in ((control, per_slice[0], 1.0), (canary, per_slice[1], slowdown)):
            for _ in range(n):
                ns = int(rng.lognormvariate(0, sigma) * 0.004 * factor * 1e9)
                rec.batch(1, 0, ns, 0)
                rec.success(ns, 0, (0, ns, 0))
        pages.append(metrics.exposition()[0].decode())
    result = compare_live(pages[-1], earlier=pages[0], between=pages[1:-1], window_s=10.0, control="control")
    return result.tests[0].latency_verdict


def test_identical_variants_with_an_unequal_split_are_not_called_different() -> None:
    rng = random.Random(7)
    verdicts = [_window(rng, (45, 2), 1.0) for _ in range(30)]
    # with the slices' means: 'faster' in about 30% of such windows (9 of these 30) against the 5% level
    assert verdicts.count("faster") + verdicts.count("slower") <= 3, verdicts


def test_a_slower_canary_is_never_called_faster() -> None:
    rng = random.Random(8)
    verdicts = [_window(rng, (45, 5), 1.5) for _ in range(15)]
    # with the slices' means, 4 of these 15 windows found it slower: the skew of 5 requests' mean hid it
    assert "faster" not in verdicts
    assert verdicts.count("slower") >= 7, verdicts
