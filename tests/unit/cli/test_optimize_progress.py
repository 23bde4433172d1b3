"""optimize's progress line for a candidate that did not run says its reason once, as written."""

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
