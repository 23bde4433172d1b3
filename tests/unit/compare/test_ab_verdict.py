"""The A/B verdict line: what it says must agree with the interval it prints."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

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
    assert said.startswith("verdict: not shown beyond --min-effect (B speed")
    assert said.endswith(": B is faster, significantly, but its interval reaches within the --min-effect of 1% of no "
                         "change")
    said = ab_verdict(_run(1.005, (1.001, 1.009), SAME, min_effect=None)).plain
    assert said.endswith(": B is slower, significantly, but its interval reaches within the --min-effect of no change")


def test_an_interval_past_the_min_effect_at_one_end_is_not_called_less_than_it() -> None:
    """docs/compare.md showed `no difference as large as the minimum effect (B speed 1.008x of A, CI 1.001-1.018x): B
    is faster, significantly but by less than the --min-effect of 1%`: 1.018x is past 1%, so "by less than" is not
    shown; only the near end of the interval is within 1% of no change."""
    said = ab_verdict(_run(1 / 1.008, (1 / 1.018, 1 / 1.001), SAME)).plain
    assert "CI 1.001-1.018x" in said
    assert "as large as" not in said and "less than" not in said
    assert "not shown beyond --min-effect" in said


def test_an_interval_around_one_and_a_real_verdict_read_as_before() -> None:
    assert ab_verdict(_run(1.0, (0.99, 1.01), SAME)).plain.startswith("verdict: no significant difference (B speed")
    assert ab_verdict(_run(1.2, (1.15, 1.25), SLOWER)).plain.startswith("verdict: B is slower (B speed 0.833x")


def test_the_min_effect_survives_the_store() -> None:
    run = _run(0.992, (0.983, 0.999), SAME, min_effect=0.02)
    assert ABRun.from_dict(run.to_dict()).min_effect == 0.02
    old = run.to_dict()
    del old["min_effect"]  # an A/B recorded before it was kept
    assert ABRun.from_dict(old).min_effect is None


def test_an_a_b_and_its_result_repr_in_one_line() -> None:
    """`repr(run_ab(...))` of 6 blocks was 993 characters: both sides' every setting, every block's ratio and wait,
    where BenchResult's and RunRecord's are one line."""
    run = dataclasses.replace(_run(0.8, (0.75, 0.85), "faster"), b=parse_settings("threads=2"))
    run.result.block_ratios = [0.8] * 200
    run.result.settle_waits_s = [0.01] * 400
    assert repr(run) == ("ABRun('zoo:mlp', B (threads=2) vs A (threads=1): 1.25x speed (95% CI 1.18-1.33x, 200 paired "
                         "blocks): faster; .result)")
    assert repr(run.result) == ("ABResult(B vs A: 1.25x speed (95% CI 1.18-1.33x, 200 paired blocks): faster; .a, .b, "
                                ".block_ratios)")
    busy = dataclasses.replace(run, process_cpu_percent=70.0, system_cpu_percent=100.0 * 2.0 / (os.cpu_count() or 1))
    assert repr(busy).endswith("faster, 1 warning in .warnings; .result)")


def test_other_processes_busy_while_the_blocks_ran_are_warned_of_and_kept() -> None:
    """threads=1 against threads=2 of a small transformer on 2 cores with one kept busy elsewhere read 'B is slower
    (0.306x)' without a word on the load; bench said as much of its own measurements."""
    cores = os.cpu_count() or 1
    run = dataclasses.replace(_run(3.27, (1.9, 5.6), SLOWER), process_cpu_percent=70.0,
                              system_cpu_percent=100.0 * (0.7 + 1.3) / cores, threads=(1, 2))
    [warning] = run.warnings
    assert warning.startswith("other processes kept 1.3 cores busy while measuring (this process: 0.7): expect "
                              "slower, noisier numbers; the interleaving shares their load between the sides")
    assert "its 2 intra-op threads got 0.7 cores" in warning and "--threads" not in warning
    assert warning.endswith("the sides differ in threads (A 1, B 2): the one with more loses more to the other "
                            "processes, so this verdict may not hold on a quiet machine")
    back = ABRun.from_dict(run.to_dict())
    assert (back.process_cpu_percent, back.threads, back.warnings) == (70.0, (1, 2), [warning])
    same = dataclasses.replace(run, threads=(2, 2))
    assert not same.warnings[0].endswith("quiet machine") and "its 2 intra-op threads" in same.warnings[0]
    quiet = dataclasses.replace(run, system_cpu_percent=100.0 * (0.7 + 0.4) / cores)
    assert quiet.warnings == []
    old = run.to_dict()
    for key in ("process_cpu_percent", "system_cpu_percent", "threads", "warnings"):
        del old[key]  # an A/B recorded before they were kept
    assert ABRun.from_dict(old).warnings == []


def test_an_a_b_beside_a_busy_process_says_so() -> None:
    """A real A/B of zoo:mlp with another process spinning on a core: the load is measured, not assumed."""
    from dlperf.compare.ab import run_ab

    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        run = run_ab("zoo:mlp", parse_settings("threads=1"), parse_settings("threads=1"), blocks=4,
                     iters_per_block=200)
    finally:
        burner.kill()
        burner.wait()
    assert run.threads == (1, 1) and run.process_cpu_percent is not None and run.process_cpu_percent > 0
    assert run.warnings and run.warnings[0].startswith("other processes kept ")


def test_a_side_whose_slow_calls_hold_its_items_per_s_is_warned_of_and_kept() -> None:
    """B's items/s 32,883 beside A's 175,769 under 'B speed 0.881x of A': B's mean call was 15x its median (calls of
    up to 56 ms), which bench warns of and `dlperf ab`, `runs show` and the report did not."""
    a = Measurement([30_000 + i for i in range(200)])
    b = Measurement([34_000 + i for i in range(190)] + [5_000_000] * 10)  # 5% of the calls at 5 ms
    run = ABRun("zoo:mlp", parse_settings("threads=1"), parse_settings("threads=2"), 16, 16,
                ABResult(a, b, [1.13] * 8, 1.13, (1.12, 1.14), 0.95, SLOWER), False, 200, 0.01)
    [warning] = run.warnings
    assert warning.startswith("side B: the mean call is 8.3x the median (0.282 vs 0.0341 ms): 10 calls (5%) over 2x "
                              "the median, up to 5 ms, took 89% of the time; items/s counts them")
    assert ABRun.from_dict(run.to_dict()).warnings == [warning]
    assert run.to_dict()["warnings"] == [warning]  # what the HTML report prints
