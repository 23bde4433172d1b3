"""The figures of a training measurement where a plausible slip would give a wrong number and no other test would
notice: the step time, achieved FLOP/s, the input-bound finding, the steps the losses come from, the samples and
phase times of an accumulated step, the loader's queued batches in a step's footprint, parity's tolerance, and DDP's
exposed communication, overlap and threads (from a mutation-testing audit)."""

from __future__ import annotations

import io
import math
import re
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from dlperf.measure.env import usable_cores
from dlperf.measure.stats import Measurement
from dlperf.report.html import render_report
from dlperf.report.terminal import fmt_count, profile_train_headline
from dlperf.report.train_view import measurement_view
from dlperf.store.records import RunRecord
from dlperf.train import loop as loop_module
from dlperf.train.ddp import DdpConfig, DdpResult, RankStats
from dlperf.train.knobs.batch import queued_batches, step_footprint_bytes
from dlperf.train.loop import PHASES, PhaseTimer, StepConfig, TrainLoop
from dlperf.train.parity import compare_losses, loss_curve
from dlperf.train.step import TrainMeasurement, measure_training

from ._workloads import FEATURES, SEQ, char_lm, padded, tiny

pytestmark = pytest.mark.unit

MS = 1_000_000


def _measured(samples_ns: list[int], batch: int = 16, phases_ns: dict[str, list[int]] | None = None,
              **kwargs: Any) -> TrainMeasurement:
    phases = {p: [0] * len(samples_ns) for p in PHASES}
    phases.update(phases_ns or {})
    return TrainMeasurement("tiny", StepConfig(batch_size=batch, threads=1), Measurement(samples_ns, batch),
                            phases, 0, **kwargs)


def test_the_step_time_is_the_median_step() -> None:
    """One stalled step (40 ms among 10 ms ones) moves the mean step, not the median one reported."""
    assert _measured([10 * MS, 40 * MS, 10 * MS]).step_s == pytest.approx(0.010)


def test_achieved_flops_scale_with_the_samples_of_the_counted_step() -> None:
    """The FLOPs were counted on a short last batch of 8 samples: per sample they are 1000 / 8, and the steps
    measured trained 16 samples/s, so 2000 FLOP/s; over the full batch of 16 it would read 1000."""
    m = _measured([MS * 1000, MS * 1000], flops_per_step=1000.0, samples_per_step=[16, 16], flops_step_samples=8)
    assert m.samples_per_s == pytest.approx(16.0)
    assert m.achieved_flops == pytest.approx(2000.0)


def test_achieved_flops_without_per_step_samples_are_over_the_whole_measured_time() -> None:
    """3 steps in 60 ms: 50 steps/s, whatever the median step (10 ms) would say."""
    m = _measured([10 * MS, 40 * MS, 10 * MS], flops_per_step=1e6)
    assert m.achieved_flops == pytest.approx(50e6)


def test_a_step_waiting_40_percent_for_data_is_input_bound() -> None:
    m = _measured([10 * MS], phases_ns={"data": [4 * MS], "forward": [6 * MS]})
    assert any(f.startswith("input-bound: 40% of the step") for f in m.findings)


def test_findings_is_a_property_as_on_a_diagnosis_and_the_old_call_still_answers() -> None:
    """`.findings` was a method here and an attribute on `Diagnosis`: `m.findings[0]` raised "'method' object is not
    subscriptable"."""
    m = _measured([10 * MS], phases_ns={"data": [4 * MS], "forward": [6 * MS]})
    assert isinstance(m.findings, list) and m.findings[0].startswith("input-bound: 40% of the step")
    with pytest.warns(DeprecationWarning, match=r"write `\.findings`, not `\.findings\(\)`"):
        assert m.findings() == m.findings
    assert m.to_dict()["findings"] == m.findings


def test_the_measured_losses_are_those_of_the_timed_steps_not_the_warm_up() -> None:
    config = StepConfig(batch_size=16, threads=1)
    result = measure_training(tiny(), config, steps=3, warmup_steps=2, count_flops=False)
    curve = loss_curve(tiny(), config, steps=5)
    assert result.losses == pytest.approx(curve[2:])


def test_an_accumulated_step_counts_the_samples_of_every_micro_batch() -> None:
    """3 micro-batches of 8: the step trained 24 samples, and samples/s counts them all."""
    loop = TrainLoop(tiny(), StepConfig(batch_size=8, accumulation_steps=3, threads=1))
    try:
        loop.step()
        assert loop.last_step_samples == 24
    finally:
        loop.close()
    result = measure_training(tiny(), StepConfig(batch_size=8, accumulation_steps=3, threads=1), steps=2,
                              warmup_steps=1, count_flops=False)
    assert result.samples_per_step == [24, 24]


def test_a_workload_s_count_tokens_gives_tokens_per_s_without_its_padding() -> None:
    """A language model's training reported samples/s only: no tokens/s. Row i of each padded batch has
    (i % SEQ) + 1 real tokens; the workload counts them with its attention mask."""
    m = measure_training(padded(batch_size=8), StepConfig(batch_size=8, threads=1, accumulation_steps=2), steps=3,
                         warmup_steps=1, count_flops=False)
    real = 2 * sum(i % SEQ + 1 for i in range(8))  # two micro-batches a step
    assert m.tokens_per_step == [real] * 3 and not m.tokens_guessed
    assert m.tokens_per_s == pytest.approx(3 * real / m.measurement.total_s)
    assert m.to_dict()["tokens_per_s"] == m.tokens_per_s
    assert not any("guessed" in n for n in m.notes)
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(measurement_view(m.to_dict()))
    assert f"tokens/s  {fmt_count(m.tokens_per_s)} (counted by the workload's count_tokens)" in console.export_text()
    assert profile_train_headline(m.to_dict()).endswith(f", {fmt_count(m.tokens_per_s)} tokens/s")
    html = render_report([RunRecord(id="t1", kind="train", workload="padded", created_at="2026-12-07T00:00:00",
                                    status="ok", config={"mode": "measure"}, result=m.to_dict())])
    # right-aligned with the table's other numbers where the figure has thousands separators
    assert re.search(f'<td( class="n")?>{fmt_count(m.tokens_per_s)} '
                     r"\(counted by the workload&#x27;s count_tokens\)</td>", html)


def test_token_ids_without_count_tokens_are_guessed_and_the_measurement_says_so() -> None:
    m = measure_training(padded(batch_size=8, count=False), StepConfig(batch_size=8, threads=1), steps=2,
                         warmup_steps=1, count_flops=False)
    assert m.tokens_per_step == [8 * SEQ] * 2 and m.tokens_guessed  # every position, the padding too
    assert any(n.startswith("tokens/s guessed: the first input is an integer tensor [batch, seq]") for n in m.notes)
    lm = measure_training(char_lm(), StepConfig(batch_size=16, threads=1), steps=2, warmup_steps=1,
                          count_flops=False)
    assert lm.tokens_per_step == [16 * SEQ] * 2 and lm.tokens_guessed
    assert profile_train_headline(lm.to_dict()).endswith(" tokens/s (guessed)")


def test_float_inputs_have_no_tokens_per_s() -> None:
    m = measure_training(tiny(), StepConfig(batch_size=32, threads=1), steps=2, warmup_steps=1, count_flops=False)
    assert m.tokens_per_step == [] and m.tokens_per_s is None and m.to_dict()["tokens_per_s"] is None


def test_the_phase_timer_adds_up_a_phase_over_the_micro_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each micro-batch waits for its own batch: the step's data time is the sum of the waits (5 + 7 ns)."""
    ticks = iter([0, 5, 100, 107])
    monkeypatch.setattr(loop_module, "time", SimpleNamespace(perf_counter_ns=lambda: next(ticks)))
    timer = PhaseTimer("cpu")
    for _ in range(2):
        timer.start("data")
        timer.stop()
    assert timer.finish()["data"] == 12


def test_a_loader_with_workers_adds_its_queued_batches_to_the_footprint() -> None:
    """Each worker holds prefetch_factor batches (DataLoader's default 2) besides the one trained on."""
    assert queued_batches(StepConfig(batch_size=8, num_workers=2)) == 4
    assert queued_batches(StepConfig(batch_size=8, num_workers=2, prefetch_factor=3)) == 6
    plain = step_footprint_bytes(tiny(), StepConfig(batch_size=8, threads=1))
    queued = step_footprint_bytes(tiny(), StepConfig(batch_size=8, threads=1, num_workers=2, prefetch_factor=1))
    batch_bytes = 8 * FEATURES * 4 + 8 * 8  # float32 inputs, int64 targets
    assert queued - plain == 2 * batch_bytes


def test_parity_allows_the_absolute_tolerance_on_top_of_the_relative_one() -> None:
    result = compare_losses([1.0] * 4, [1.0, 1.0, 1.2, 1.2], rtol=0.05, atol=0.2)
    assert result.tolerance == pytest.approx(0.25)
    assert result.ok


def test_a_non_finite_loss_anywhere_fails_parity() -> None:
    """The tail means are compared, but a nan in the first half still says the candidate's training broke."""
    result = compare_losses([2.0, 2.0, 1.0, 1.0], [math.nan, 2.0, 1.0, 1.0])
    assert not result.ok


def _ddp(step_n: float, nosync_n: float, allreduce: float) -> DdpResult:
    single = RankStats(1, 32, 0.010, 0.010, 0.0, 4 * 2**20, 3)
    multi = RankStats(2, 32, step_n, nosync_n, allreduce, 4 * 2**20, 3)
    return DdpResult("w", "gloo", 1, 25.0, single, multi)


def test_exposed_communication_is_never_negative_and_overlap_is_the_hidden_share() -> None:
    """A no-sync step measured slower than the DDP step (noise) exposes no communication, not a negative share; of
    a 4 ms all-reduce, 1 ms exposed means 75% hidden."""
    noisy = _ddp(step_n=0.010, nosync_n=0.011, allreduce=0.004)
    assert noisy.exposed_comm_s == 0.0 and noisy.comm_share == 0.0
    assert _ddp(step_n=0.011, nosync_n=0.010, allreduce=0.004).overlap == pytest.approx(0.75)


def test_ddp_ranks_share_the_usable_cores_by_default() -> None:
    cores = usable_cores()
    assert DdpConfig(nproc=1).threads_for() == cores
    assert DdpConfig(nproc=cores).threads_for() == 1


def test_the_repr_is_one_line_whatever_the_steps() -> None:
    """A notebook cell showing a measurement printed the dataclass's every step (phase times, losses, samples): 2.1 KB
    for zoo:mlp's 20 steps, ~100 KB for 1000. Now one line with the step p50 and samples/s (16 samples a 10 ms
    step: 1,600.0) whatever the count."""
    m = _measured([10 * MS] * 1000, losses=[1.0] * 1000, samples_per_step=[16] * 1000)
    text = repr(m)
    assert "\n" not in text and len(text) < 200, text
    assert text == ("TrainMeasurement('tiny', batch 16, 1000 steps, step p50 10 ms, 1,600.0 samples/s, 0 notes in "
                    ".notes; .breakdown_s(), .measurement)")


@pytest.mark.parametrize("call", ["measure", "tune"])
def test_the_caller_s_random_generators_are_given_back(call: str) -> None:
    """A loop seeds torch's, Python's and NumPy's generators; in a notebook, `torch.manual_seed(42)` then
    `measure_training(...)` (or `tune`) left them reseeded: the next `torch.rand(1)` read 0.3074, not 0.8823."""
    import random

    import numpy as np
    import torch

    from dlperf.train.tune import TuneConfig, tune

    def draws() -> tuple[float, float, float]:
        return torch.rand(1).item(), random.random(), float(np.random.rand())

    def seed() -> None:
        torch.manual_seed(42), random.seed(42), np.random.seed(42)

    seed()
    expected = draws()
    seed()
    if call == "measure":
        measure_training(tiny(), StepConfig(batch_size=8, threads=1), steps=2, warmup_steps=1, count_flops=False)
    else:
        tune(tiny(), StepConfig(batch_size=8, threads=1), TuneConfig(knobs=("threads",)))
    assert draws() == expected
