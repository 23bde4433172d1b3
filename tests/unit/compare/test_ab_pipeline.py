"""The whole interleaved A/B (measure.ab.ab_test + decide) on a fake clock whose machine speed drifts.

A drift of +-30% over the run would swamp a 5% difference between two sequential measurements; paired
blocks in ABBA order cancel it.
"""

from __future__ import annotations

import math
import random

import pytest

from dlperf.measure.ab import FASTER, SAME, SLOWER, ABConfig, ab_test

pytestmark = pytest.mark.unit


class DriftingClock:
    """Per-call time = base of the side that ran x slow sinusoidal drift x lognormal noise (seeded)."""

    name = "fake-drift"

    def __init__(self, base_a_ns: float, base_b_ns: float, seed: int, noise: float = 0.05) -> None:
        self.base = {"a": base_a_ns, "b": base_b_ns}
        self.side = "a"
        self.rng = random.Random(seed)
        self.noise = noise
        self.calls = 0
        self.phase = self.rng.random() * 2 * math.pi

    def start(self) -> int:
        return 0

    def stop(self, token: int) -> int:
        self.calls += 1
        drift = 1.0 + 0.3 * math.sin(self.phase + self.calls / 150.0)
        return int(self.base[self.side] * drift * math.exp(self.rng.gauss(0.0, self.noise)))


def _run(base_b: float, seed: int, blocks: int, iters: int) -> str:
    clock = DriftingClock(1e6, base_b, seed)

    def fn_a() -> None:
        clock.side = "a"

    def fn_b() -> None:
        clock.side = "b"

    result = ab_test(fn_a, fn_b, ABConfig(blocks=blocks, iters_per_block=iters), clock)
    assert result.a.n == result.b.n == blocks * iters
    return result.verdict


def test_same_settings_are_no_significant_difference_in_at_least_95_percent() -> None:
    verdicts = [_run(1e6, seed, blocks=20, iters=5) for seed in range(40)]
    assert verdicts.count(SAME) >= 38  # >= 95%


@pytest.mark.parametrize(("base_b", "expected"), [(1.05e6, SLOWER), (0.95e6, FASTER)])
def test_five_percent_shift_is_detected_despite_drift(base_b: float, expected: str) -> None:
    verdicts = [_run(base_b, 1000 + seed, blocks=30, iters=8) for seed in range(10)]
    assert verdicts.count(expected) >= 9


def test_before_hooks_run_untimed_before_each_block() -> None:
    events: list[str] = []
    clock = DriftingClock(1e6, 1e6, 0)
    ab_test(lambda: events.append("a"), lambda: events.append("b"), ABConfig(blocks=4, iters_per_block=2,
            warmup_iters=1), clock, before_a=lambda: events.append("setA"), before_b=lambda: events.append("setB"))
    assert events[:4] == ["setA", "a", "setB", "b"]  # warm-up
    blocks = events[4:]
    # ABBA: block 0 is A then B, block 1 is B then A; every run of calls is preceded by its hook.
    assert blocks[:6] == ["setA", "a", "a", "setB", "b", "b"]
    assert blocks[6:12] == ["setB", "b", "b", "setA", "a", "a"]
    assert clock.calls == 4 * 2 * 2
