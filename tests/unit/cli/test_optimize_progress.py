"""optimize's progress lines: a candidate that did not run says its reason once, as written; each candidate's
start says how much of the time budget is left."""

from __future__ import annotations

import pytest

from dlperf.cli import optimize

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("row", "line"), [
    # it read "dynamic_int8: not_applicable: dynamic_int8: not applicable: no nn.Linear ..."
    ({"label": "dynamic_int8", "status": "not_applicable", "error": "dynamic_int8: not applicable: no nn.Linear"},
     "dynamic_int8: not applicable: no nn.Linear"),
    ({"label": "pruning(0.5)+dynamic_int8", "status": "not_applicable",
      "error": "dynamic_int8: not applicable: no nn.Linear"},
     "pruning(0.5)+dynamic_int8: not applicable (dynamic_int8): no nn.Linear"),
    # a failure's error as written: markup would drop '[1, 4]'
    ({"label": "compile", "status": "failed", "error": "shape [1, 4] is not [2, 4]"},
     "compile: failed: shape [1, 4] is not [2, 4]"),
])
def test_a_candidate_that_did_not_run_says_why_once(row: dict[str, str], line: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    optimize._Progress()("candidate_done", {"row": row})
    assert " ".join(capsys.readouterr().err.split()) == line


def test_each_candidate_s_line_says_how_much_of_the_time_budget_is_left(capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf optimize --time-budget 10m` printed `measuring compile ...` and nothing of the budget until its
    summary."""
    progress = optimize._Progress()
    progress("start", {"workload": "zoo:mlp", "batch_size": 1, "space": ["hygiene"], "time_budget_s": 600.0})
    progress("candidate_start", {"label": "compile(mode=max-autotune)", "key": "k", "remaining_s": 412.4})
    progress("candidate_start", {"label": "hygiene", "key": "h", "remaining_s": -1.0})  # past it, for the A/Bs
    lines = capsys.readouterr().err.splitlines()
    assert lines[1:] == ["  measuring compile(mode=max-autotune) ... (412 s of the 600 s time budget left)",
                         "  measuring hygiene ... (0 s of the 600 s time budget left)"]


def test_a_row_measured_again_for_its_stalled_calls_says_so_and_a_tiny_gain_keeps_its_digits(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With CPU hogs on 2 cores `measuring channels_last ...` came twice with nothing between, and its gain of
    0.0012 read "0.00x"."""
    progress = optimize._Progress()
    progress("stalled", {"label": "channels_last", "why": "the original model ... took 30 ms a call"})
    progress("candidate_done", {"row": {"label": "channels_last", "status": "ok", "p50_s": 51.8e-3, "gain": 0.00116,
                                        "paired_gain": 1.15, "feasible": True, "stalled": "its calls stalled"}})
    assert capsys.readouterr().err.splitlines() == [
        "  channels_last's calls stalled: measuring it again",
        "  channels_last: p50 51.800 ms 0.0012x (in its process against the original: 1.15x) (! calls stalled: see "
        "the table's note)"]
