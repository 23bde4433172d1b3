"""The figures a candidate's fidelity and paired gain are made of: per-row cosines, errors against the original's
outputs, the held-out batches, and the rounds of paired blocks (timed on a fake clock)."""

from __future__ import annotations

import itertools
import math
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.measure.ab import decide
from dlperf.optimize.evaluate import (
    EvalSettings,
    _heldout_batches,
    _paired_with_original,
    fidelity_of,
)
from dlperf.passes._engine import HELDOUT_FIRST_BATCH

pytestmark = pytest.mark.unit


def test_a_zero_row_against_a_nonzero_one_is_no_agreement() -> None:
    """Only two all-zero rows agree perfectly: a candidate that outputs zeros where the original does not (a dead
    int8 layer) scored a cosine of 1 on that row when either row being zero counted."""
    ref = [torch.tensor([[1.0, 2.0], [3.0, 4.0]])]
    dead = fidelity_of([torch.tensor([[1.0, 2.0], [0.0, 0.0]])], ref, batch_size=2)
    assert dead["mean_cosine"] == pytest.approx(0.5) and dead["min_cosine"] == pytest.approx(0.0)
    silent = fidelity_of([ref[0].clone()], [torch.tensor([[1.0, 2.0], [0.0, 0.0]])], batch_size=2)
    assert silent["min_cosine"] == pytest.approx(0.0)


def test_errors_are_relative_to_the_original_and_the_worst_output_counts() -> None:
    """rel_error divides by the original's norm (not the candidate's), is the largest over the outputs, and
    max_abs_error is the largest difference anywhere."""
    ref = [torch.tensor([[3.0, 4.0]]), torch.tensor([[1.0, 0.0]])]
    out = [torch.tensor([[6.0, 8.0]]), torch.tensor([[1.0, 0.0]])]
    fid = fidelity_of(out, ref, batch_size=1)
    assert fid["rel_error"] == pytest.approx(1.0)  # |(3, 4)| / |(3, 4)|, not / |(6, 8)|
    assert fid["max_abs_error"] == pytest.approx(4.0)
    swapped = fidelity_of(list(reversed(out)), list(reversed(ref)), batch_size=1)
    assert swapped["rel_error"] == pytest.approx(1.0) and swapped["max_abs_error"] == pytest.approx(4.0)


def test_an_output_without_a_batch_dimension_is_compared_as_one_row() -> None:
    """An output whose first dimension is not the batch (a pooled vector of 3 at batch size 2) is compared as one
    row, not split into batch_size rows (3 values do not even split into 2)."""
    fid = fidelity_of([torch.tensor([1.0, 1.0, 0.0])], [torch.tensor([1.0, 0.0, 0.0])], batch_size=2)
    assert fid["mean_cosine"] == pytest.approx(2**-0.5) and fid["min_cosine"] == pytest.approx(2**-0.5)
    rows = fidelity_of([torch.tensor([[1.0, 0.0, 0.0, 1.0]])], [torch.tensor([[1.0, 0.0, 0.0, 0.0]])], batch_size=2)
    assert rows["mean_cosine"] == pytest.approx(2**-0.5)  # (1, 4): one row, not two of (1, 2)


class _Rows:
    """A workload whose example_inputs(n) has n rows (or a fixed count), recording the sizes asked for."""

    def __init__(self, fixed: int | None = None) -> None:
        self.asked: list[int] = []
        self.fixed = fixed

    def example_inputs(self, n: int) -> tuple[torch.Tensor, ...]:
        self.asked.append(n)
        rows = self.fixed if self.fixed is not None else n
        return (torch.arange(rows, dtype=torch.float32)[:, None],)


def test_held_out_batches_cover_the_samples_asked_for_at_the_candidates_batch_size() -> None:
    """32 held-out samples at batch size 5 are 7 batches of 5 (35 rows, not 30), and they are rows past the first
    HELDOUT_FIRST_BATCH (not the calibration sets' 1..24, nor the example batch)."""
    wl = _Rows()
    batches = _heldout_batches(wl, EvalSettings(source="fake", batch_size=5, heldout_samples=32))
    assert [int(b[0].shape[0]) for b in batches] == [5] * 7
    assert wl.asked == [HELDOUT_FIRST_BATCH + 35]
    small = _Rows()
    assert len(_heldout_batches(small, EvalSettings(source="fake", batch_size=4, heldout_samples=8))) == 2
    assert small.asked == [HELDOUT_FIRST_BATCH + 8]


def test_held_out_rows_are_none_of_the_example_batch_s_or_calibration_s_when_every_batch_size_repeats_them() -> None:
    """A workload whose make_inputs seeds one generator (`torch.Generator().manual_seed(2)`, then randint) gives the
    same first rows at every batch size: example_inputs(32), the "32 held-out inputs" the fidelity was reported on,
    held the example batch, the default calibration rows (batch sizes 1..24) and the rows keep_fp32="auto" chose its
    fp32 layers on (batch sizes 9, 10 ...)."""
    wl = _Rows()  # row i is i at every batch size, as such a workload's
    settings = EvalSettings(source="fake", batch_size=64, heldout_samples=32)
    held = torch.cat([b[0] for b in _heldout_batches(wl, settings)]).flatten().tolist()
    assert held == [float(i) for i in range(64, 128)]  # past the example batch of 64 and every calibration row


def test_inputs_with_fewer_rows_than_asked_give_no_held_out_batches() -> None:
    """A workload whose example_inputs ignores the size asked (always 3 rows): slicing past them gave empty and
    short batches, scored as held-out fidelity."""
    assert _heldout_batches(_Rows(fixed=3), EvalSettings(source="fake", batch_size=2, heldout_samples=8)) == []


class _SideClock:
    """A fake clock: each timed call lasts what the side that just ran set."""

    name = "fake"

    def __init__(self) -> None:
        self.next_ns = 0

    def start(self) -> None:
        return None

    def stop(self, token: None) -> int:
        return self.next_ns


def _paired(monkeypatch: pytest.MonkeyPatch, candidate_ns: list[int]) -> dict[str, Any]:
    """The pairing of an original that takes 1 ms a call with a candidate whose calls take `candidate_ns` in turn."""
    clock = _SideClock()
    monkeypatch.setattr("dlperf.measure.clock.clock_for", lambda device: clock)
    durations = itertools.cycle(candidate_ns)

    class Original(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            clock.next_ns = 1_000_000
            return x

    def candidate() -> None:
        clock.next_ns = next(durations)

    # p50 of 12.5 ms: 2 calls a block; the warm-up's 2 calls take the first two durations
    return _paired_with_original(types.SimpleNamespace(build_model=Original), (torch.zeros(1),), candidate, 0.0125,
                                 EvalSettings(source="fake", paired_blocks=6))


def test_the_pairing_adds_rounds_while_its_wide_interval_holds_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks at 0.8x and 1.3x the original's time: a gain near 1 whose interval is wide and holds the 0.95 gate, so
    the pairing runs all its rounds (18 blocks) and reports the ratio of them all."""
    paired = _paired(monkeypatch, [800_000, 800_000, 1_300_000, 1_300_000])
    assert "error" not in paired, paired
    assert paired["blocks"] == 18 and paired["iters_per_block"] == 2
    ratio, (lo, hi), _ = decide([1.3, 0.8] * 9)
    assert paired["ratio"] == pytest.approx(ratio) and paired["ci"] == pytest.approx([lo, hi])


def test_the_pairing_stops_after_one_round_far_from_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks at 0.3x and 0.5x: a wide interval, but a gain of 2-3x that the gate cannot straddle: one round."""
    paired = _paired(monkeypatch, [300_000, 300_000, 500_000, 500_000])
    assert "error" not in paired, paired
    assert paired["blocks"] == 6
    assert paired["ratio"] == pytest.approx(decide([0.5, 0.3] * 3)[0])


def test_integer_outputs_score_by_agreement_not_by_a_cosine_of_indices() -> None:
    """Class indices went through the cosine as floats: a sample whose class moved from 0 to 1 scored 0, one that
    moved from 1 to 2 scored 1.0 (its vectors point the same way), and the errors mixed index distances in. Each
    sample of an integer or boolean output now scores the share of its elements equal to the original's."""
    ref = torch.tensor([[0, 3], [1, 1], [2, 5]])
    moved = torch.tensor([[1, 3], [2, 1], [2, 5]])  # one element of two wrong in the first two samples
    figures = fidelity_of([moved], [ref], 3)
    assert figures["mean_cosine"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert figures["min_cosine"] == pytest.approx(0.5)
    assert figures["rel_error"] == 0.0 and figures["max_abs_error"] == 0.0  # errors are the float outputs'
    assert fidelity_of([ref.clone()], [ref], 3)["min_cosine"] == 1.0
    flags = torch.tensor([[True], [False]])
    assert fidelity_of([~flags], [flags], 2)["mean_cosine"] == 0.0
    # beside a float output that matches, the integer one still counts
    logits = torch.randn(3, 4)
    both = fidelity_of([logits.clone(), moved], [logits, ref], 3)
    assert both["min_cosine"] == pytest.approx(0.5) and both["rel_error"] == 0.0


def test_a_nan_on_one_sample_makes_the_fidelity_nan() -> None:
    """A candidate whose output is NaN on one sample of two was scored by the other sample alone, as if it had no NaN
    (the search refuses a NaN metric: 'its metric is NaN or missing')."""
    ref = [torch.tensor([[1.0, 2.0], [3.0, 4.0]])]
    half = fidelity_of([torch.tensor([[1.0, 2.0], [float("nan"), 4.0]])], ref, batch_size=2)
    assert half["nan_outputs"] and math.isnan(half["mean_cosine"]) and math.isnan(half["min_cosine"])


def test_an_empty_output_has_nothing_to_disagree_on() -> None:
    """An output with no elements (no detections in this batch) is left out: alone it scores full agreement, beside
    another output it leaves that one's figures as they are (it raised on the largest difference of nothing)."""
    empty = [torch.zeros(0, 4)]
    assert fidelity_of([torch.zeros(0, 4)], empty, batch_size=2) == {"mean_cosine": 1.0, "min_cosine": 1.0,
                                                                    "rel_error": 0.0, "max_abs_error": 0.0}
    ref = [torch.zeros(0, 4), torch.tensor([[3.0, 4.0]])]
    beside = fidelity_of([torch.zeros(0, 4), torch.tensor([[6.0, 8.0]])], ref, batch_size=1)
    assert beside == {"mean_cosine": pytest.approx(1.0), "min_cosine": pytest.approx(1.0),
                      "rel_error": pytest.approx(1.0), "max_abs_error": pytest.approx(4.0)}


CLASSIFIER = """
import torch


class Classifier(torch.nn.Module):
    \"\"\"Its output is each sample's predicted class (an int64 index), not the logits.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x).argmax(dim=1)


def model():
    return Classifier()


def inputs(batch_size):
    return (torch.randn(batch_size, 16, generator=torch.Generator().manual_seed(batch_size)),)
"""


def test_the_search_scores_a_candidate_s_class_indices_by_agreement(tmp_path: Path) -> None:
    """fidelity_of scored integer outputs by agreement, but the candidate's process (and the confirming A/B's) made the
    original's outputs float before calling it: the search still scored class indices by a cosine (a pruned classifier
    at 0.78) and reported index distances as errors (max_abs_error 9.0)."""
    import dataclasses

    from dlperf.optimize.evaluate import confirm_here, evaluate_here
    from dlperf.optimize.space import Candidate
    from dlperf.passes.base import PassContext, apply_pass, initial_state
    from dlperf.passes.pruning import PruneConfig
    from dlperf.workload.loader import load_workload

    (tmp_path / "classifier.py").write_text(CLASSIFIER)
    source = str(tmp_path / "classifier.py")
    settings = EvalSettings(source=source, batch_size=4, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0, paired_blocks=0, ab_blocks=4, ab_iters_per_block=1)
    pruned = Candidate((PruneConfig(method="magnitude", amount=0.5, finetune_steps=0),))
    row = evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": pruned.to_list(),
                         "out_dir": str(tmp_path / "cand")}, lambda phase: None)
    # the same pruning here: the share of each held-out sample's class that it left unchanged
    workload = load_workload(source)
    candidate = apply_pass(pruned.configs[0], initial_state(workload), PassContext(batch_size=4)).predict
    original = workload.build_model().eval()
    with torch.no_grad():
        kept = [float((candidate(*b) == original(*b)).float().mean()) for b in _heldout_batches(workload, settings)]
    assert 0 < sum(kept) / len(kept) < 1  # some classes moved
    assert row["metric"] == pytest.approx(sum(kept) / len(kept))
    assert (row["fidelity"]["rel_error"], row["fidelity"]["max_abs_error"]) == (0.0, 0.0)
    confirmed = confirm_here({"settings": dataclasses.asdict(settings), "artifact_dir": row["artifact"]["dir"]},
                             lambda phase: None)
    assert confirmed["loaded_fidelity"]["max_abs_error"] == 0.0
    with torch.no_grad():
        x = workload.example_inputs(4)
        expected = float((candidate(*x) == original(*x)).float().mean())
    assert confirmed["loaded_fidelity"]["mean_cosine"] == pytest.approx(expected)
