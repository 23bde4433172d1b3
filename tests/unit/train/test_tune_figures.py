"""`train --tune`: the samples/s printed beside a speedup come from the A/B's paired blocks as the speedup does, and
an A/B whose totals disagree with its blocks says so."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest
from rich.console import Console

from dlperf.measure.ab import ABConfig, ABResult, ab_test
from dlperf.measure.clock import FakeClock
from dlperf.report.train_view import trial_notes, tune_view
from dlperf.train.knobs import Candidate, Knob, TuneContext
from dlperf.train.loop import StepConfig
from dlperf.train.parity import ParityConfig
from dlperf.train.tune import TuneConfig, Tuner, disturbance, paired_rates, throughput_speedup

from ._workloads import tiny

pytestmark = pytest.mark.unit

MS = 1_000_000


def _stalled_ab() -> ABResult:
    """20 blocks of 2 calls, ABBA order: A 10 ms a call; B 5 ms, but 400 ms in both calls of its last block."""
    durations = []
    for block in range(20):
        b = [400 * MS] * 2 if block == 19 else [5 * MS] * 2
        a = [10 * MS] * 2
        durations += a + b if block % 2 == 0 else b + a
    return ab_test(lambda: None, lambda: None, ABConfig(blocks=20, iters_per_block=2, warmup_iters=0),
                   FakeClock(durations))


def test_samples_per_second_come_from_the_paired_blocks() -> None:
    """The tuner printed total samples / total time beside a speedup from the block ratios: a trial of
    slow_loader's prefetch_factor read 2.89x beside samples/s 1.40x its reference's."""
    ab = _stalled_ab()
    a, b = paired_rates(ab, (40 * 64, 40 * 64))
    assert a == pytest.approx(64 / 0.010)
    assert b == pytest.approx(64 / 0.005)  # the stalled block is one the speedup's trimmed estimate leaves out
    assert b / a == pytest.approx(ab.speedup)  # the printed figures agree with the speedup beside them
    # samples per call differ (a short batch at an epoch's end): the ratio carries them, the speedup is per call
    a2, b2 = paired_rates(ab, (40 * 64, 40 * 32))
    assert (a2, b2) == (pytest.approx(a), pytest.approx(b / 2))


def test_the_rates_agree_with_the_speedup_whichever_blocks_are_trimmed() -> None:
    rng = random.Random(3)
    durations = [int(rng.lognormvariate(math.log(side * MS), 0.3)) for _ in range(13 * 3) for side in (10, 7)]
    ab = ab_test(lambda: None, lambda: None, ABConfig(blocks=13, iters_per_block=3, warmup_iters=0),
                 FakeClock(durations))
    a, b = paired_rates(ab, (39 * 64, 39 * 64))
    assert b / a == pytest.approx(ab.speedup)


def test_totals_outside_the_blocks_interval_are_a_disturbed_measurement() -> None:
    ab = _stalled_ab()
    lo, hi = ab.speedup_ci
    assert lo > 1.0  # the paired blocks: B 2x faster
    # over all the blocks B took 990 ms to A's 400 ms: 0.40x A's samples/s
    said = disturbance(ab, (2560, 2560))
    assert said is not None
    assert said.startswith("disturbed: over the whole A/B the candidate trained 0.40x the best so far's samples/s")
    assert f"CI {lo:.2f}-{hi:.2f}x" in said and "rest on the paired blocks" in said
    steady = ab_test(lambda: None, lambda: None, ABConfig(blocks=6, iters_per_block=2, warmup_iters=0),
                     FakeClock([10 * MS, 10 * MS, 5 * MS, 5 * MS] * 6, ))
    assert disturbance(steady, (768, 768)) is None


def _render(renderable: object) -> str:
    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_the_views_print_a_disturbed_measurement() -> None:
    note = "disturbed: over the whole A/B the candidate trained 0.40x the best so far's samples/s"
    trial = {"knob": "prefetch", "status": "not faster", "reason": "A/B: no significant difference",
             "disturbed": note}
    assert note in trial_notes([trial]).plain
    assert "disturbed" not in trial_notes([{**trial, "disturbed": None}]).plain


@dataclasses.dataclass
class _Knob:
    name: str = "impl"
    sweep: bool = False
    required: bool = True

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"optimizer_impl": "foreach"}, "foreach", required=True)]


def test_a_tuning_prints_figures_that_agree_with_its_speedups() -> None:
    knobs: dict[str, Knob] = {"impl": _Knob()}
    quick = ABConfig(blocks=4, iters_per_block=2, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    (trial,) = result.trials
    assert trial.samples_per_s is not None and trial.reference_samples_per_s is not None
    assert trial.samples_per_s / trial.reference_samples_per_s == pytest.approx(trial.speedup)
    assert result.best_samples_per_s / result.baseline_samples_per_s == pytest.approx(result.speedup)
    data: dict[str, Any] = result.to_dict()
    assert "disturbed" in data and "disturbed" in data["trials"][0]
    text = _render(tune_view({**data, "disturbed": "disturbed: over the whole A/B the best trained 0.50x"}))
    assert "disturbed: over the whole A/B the best trained 0.50x" in text


def _steady_ab() -> ABResult:
    """6 blocks of 2 calls: A 10 ms a call, B 5 or 5.5 ms (alternate blocks)."""
    durations = []
    for block in range(6):
        b = 5 * MS if block % 2 == 0 else 5_500_000
        durations += [10 * MS, 10 * MS, b, b] if block % 2 == 0 else [b, b, 10 * MS, 10 * MS]
    return ab_test(lambda: None, lambda: None, ABConfig(blocks=6, iters_per_block=2, warmup_iters=0),
                   FakeClock(durations))


def test_the_speedup_of_a_larger_batch_is_in_samples_not_calls() -> None:
    """B's calls take half A's time per call and train twice A's samples: 4x A's samples/s (2x per call)."""
    ab = ab_test(lambda: None, lambda: None, ABConfig(blocks=4, iters_per_block=2, warmup_iters=0),
                 FakeClock([10 * MS, 10 * MS, 5 * MS, 5 * MS, 5 * MS, 5 * MS, 10 * MS, 10 * MS] * 2))  # ABBA
    assert ab.speedup == pytest.approx(2.0)
    assert throughput_speedup(ab, StepConfig(batch_size=32), StepConfig(batch_size=64)) == pytest.approx(4.0)


def test_totals_of_a_side_training_fewer_samples_per_call_are_not_a_disturbance() -> None:
    """B trains half A's samples per call in half the time: over the whole A/B the same samples/s as A, which is
    inside the paired blocks' interval once that is counted in samples (about 1x), not in calls (about 2x)."""
    ab = _steady_ab()
    assert ab.speedup_ci[0] > 1.5
    assert disturbance(ab, (12 * 64, 12 * 32)) is None


def test_a_tune_result_prints_as_one_line_of_what_it_changed() -> None:
    """`print(dlperf.tune(...))` printed the dataclass: every trial with its parity and both measurements' per-step
    times, ~5 KB with one trial and more with each."""
    from typing import cast

    from dlperf.train.tune import ACCEPTED, Trial, TuneResult

    baseline = StepConfig(batch_size=32)
    best = baseline.replace(batch_size=64)
    trials = [Trial("batch", {"batch_size": 64}, "", ACCEPTED, details={"probes": list(range(1000))}),
              Trial("optimizer", {"foreach": True}, "", "rejected", reason="slower")]
    result = TuneResult("zoo:mlp", baseline, best, trials, cast(Any, None), cast(Any, None), None, [])
    assert repr(result) == ("TuneResult('zoo:mlp', 2 trials, 1 accepted, changes: batch_size=64, 1x samples/s; "
                            ".settings, .trials)")
