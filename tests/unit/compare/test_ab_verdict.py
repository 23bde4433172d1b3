"""The A/B verdict line: what it says must agree with the interval it prints."""

from __future__ import annotations

import pytest

from dlperf.compare.ab import ABRun
from dlperf.compare.settings import parse_settings
from dlperf.measure.ab import SAME, SLOWER, ABResult
from dlperf.measure.stats import Measurement
from dlperf.report.compare_text import ab_verdict

pytestmark = pytest.mark.unit


def _run(ratio: float, ci: tuple[float, float], verdict: str, min_effect: float | None = 0.01) -> ABRun:
    a = Measurement([20_000 + i for i in range(40)])
    b = Measurement([int((20_000 + i) * ratio) for i in range(40)])
    result = ABResult(a, b, [ratio] * 4, ratio, ci, 0.95, verdict)
    return ABRun("zoo:mlp", parse_settings("threads=1"), parse_settings("threads=1"), 1, 1, result, False, 40,
                 min_effect)


def test_a_difference_under_the_min_effect_is_not_called_insignificant() -> None:
    """`verdict: no significant difference (B speed 1.008x of A, CI 1.001-1.018x)`: the interval excludes 1."""
    said = ab_verdict(_run(0.992, (0.983, 0.999), SAME)).plain
    assert "no significant difference" not in said
    assert "B is faster, significantly but by less than the --min-effect of 1%" in said
    said = ab_verdict(_run(1.005, (1.001, 1.009), SAME, min_effect=None)).plain
    assert "B is slower, significantly but by less than the --min-effect" in said


def test_an_interval_around_one_and_a_real_verdict_read_as_before() -> None:
    assert ab_verdict(_run(1.0, (0.99, 1.01), SAME)).plain.startswith("verdict: no significant difference (B speed")
    assert ab_verdict(_run(1.2, (1.15, 1.25), SLOWER)).plain.startswith("verdict: B is slower (B speed 0.833x")


def test_the_min_effect_survives_the_store() -> None:
    run = _run(0.992, (0.983, 0.999), SAME, min_effect=0.02)
    assert ABRun.from_dict(run.to_dict()).min_effect == 0.02
    old = run.to_dict()
    del old["min_effect"]  # an A/B recorded before it was kept
    assert ABRun.from_dict(old).min_effect is None
