"""The search's last step, the confirmed pick against the runner-up, given the verdicts of its A/Bs.

The A/Bs themselves run for real in tests/integration/optimize/test_runner_up.py; here the search's two
trial calls return the verdicts each case needs, so that every branch of the decision is taken."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.measure.ab import FASTER, SAME, SLOWER
from dlperf.optimize.constraints import Constraints
from dlperf.optimize.search import OptimizeConfig, _meet_runner_up

pytestmark = pytest.mark.unit


def _row(key: str, passes: int, **extra: Any) -> dict[str, Any]:
    return {"key": key, "label": key, "pipeline": [{"pass": f"p{i}"} for i in range(passes)], "status": "ok",
            "metric_drop_rel": 0.0, **extra}


def _ab(verdict: str) -> dict[str, Any]:
    return {"status": "ok", "ab": {"verdict": verdict, "speedup": 1.0, "a": {}, "b": {}},
            "describe": f"B vs A: 1.00x speed: {verdict}"}


class _Trials:
    """The part of the search `_meet_runner_up` uses; the A/Bs answer with the given verdicts."""

    def __init__(self, rows: list[dict[str, Any]], versus: dict[str, Any], confirm: dict[str, Any] | None = None,
                 remaining_s: float = 100.0, after_versus_s: float | None = None,
                 config: OptimizeConfig | None = None) -> None:
        self.rows = {r["key"]: r for r in rows}
        self.config = config or OptimizeConfig()
        self.baseline = self.rows["base"]
        self._versus, self._confirm, self._remaining = versus, confirm, remaining_s
        self._after_versus = remaining_s if after_versus_s is None else after_versus_s
        self.calls: list[tuple[str, ...]] = []

    def remaining(self) -> float:
        return self._after_versus if any(c[0] == "versus" for c in self.calls) else self._remaining

    def versus(self, key: str, other: str) -> dict[str, Any]:
        self.calls.append(("versus", key, other))
        return self._versus

    def confirm(self, key: str) -> dict[str, Any]:
        self.calls.append(("confirm", key))
        assert self._confirm is not None, "no confirmation expected"
        return self._confirm


def _run(trials: _Trials, ranked: list[str], winner: str = "big") -> tuple[str, Any, Any, list[str]]:
    notes: list[str] = []
    first = _ab(FASTER)
    key, conf, found = _meet_runner_up(trials, [trials.rows[k] for k in ranked], winner, first,  # type: ignore[arg-type]
                                       notes)
    return key, (conf is first), found, notes


def test_an_equally_fast_simpler_runner_up_replaces_the_pick_once_confirmed_itself() -> None:
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)], _ab(SAME), confirm=_ab(FASTER))
    key, kept_conf, found, _ = _run(trials, ["big", "small", "base"])
    assert key == "small" and not kept_conf  # the winner's confirmation is now small's own
    assert found["switched"] and found["key"] == "small" and "fewer passes (1 against 2)" in found["reason"]
    assert "a" not in found["ab"] and "b" not in found["ab"]  # no raw samples in the result
    assert trials.calls == [("versus", "big", "small"), ("confirm", "small")]
    assert trials.rows["small"]["confirmation"]["ab"]["verdict"] == FASTER


def test_under_an_absolute_metric_budget_the_smaller_drop_is_given_in_the_metric_units() -> None:
    """Under --max-metric-drop-abs 0.005 the reason read 'a smaller metric drop (+0.05% against +0.32%)': percentages
    of the baseline's metric, not the units of the budget, the table and the why lines."""
    rows = [_row("base", 0), _row("lossy", 1, metric_drop=0.003, metric_drop_rel=0.0032),
            _row("exact", 1, metric_drop=0.0005, metric_drop_rel=0.00053)]
    absolute = OptimizeConfig(constraints=Constraints(max_metric_drop=None, max_metric_drop_abs=0.005))
    trials = _Trials(rows, _ab(SAME), confirm=_ab(FASTER), config=absolute)
    key, _, found, _ = _run(trials, ["lossy", "exact", "base"], winner="lossy")
    assert key == "exact"
    assert found["reason"] == "no significant difference, and exact has a smaller metric drop (+0.0005 against +0.003)"
    # a relative budget still gives the drops relative to the baseline's metric
    rows = [{**r, "confirmation": None} for r in rows]
    _, _, found, _ = _run(_Trials(rows, _ab(SAME), confirm=_ab(FASTER)), ["lossy", "exact", "base"], winner="lossy")
    assert found["reason"] == "no significant difference, and exact has a smaller metric drop (+0.05% against +0.32%)"


def test_a_runner_up_its_own_ab_does_not_call_faster_than_the_baseline_does_not_replace_the_pick() -> None:
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)], _ab(FASTER), confirm=_ab(SAME))
    key, kept_conf, found, _ = _run(trials, ["big", "small", "base"])
    assert key == "big" and kept_conf and not found["switched"]
    assert found["reason"] == "small is faster, but its A/B against the baseline says 'no significant difference'"


def test_the_pick_stays_when_faster_or_when_the_runner_up_is_not_simpler() -> None:
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)], _ab(SLOWER))
    key, _, found, _ = _run(trials, ["big", "small", "base"])
    assert key == "big" and found["reason"] == "big is faster" and not found["switched"]
    trials = _Trials([_row("base", 0), _row("small", 1), _row("big", 2)], _ab(SAME))
    key, _, found, _ = _run(trials, ["small", "big", "base"], winner="small")
    assert key == "small" and found["reason"] == "no significant difference, and big is not simpler"
    assert [c[0] for c in trials.calls] == ["versus"]  # no confirmation needed to keep the pick


def test_no_runner_up_below_the_baseline_or_already_refuted_and_none_without_time() -> None:
    # ranked below the baseline: measured no faster than the original, never a runner-up
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)], _ab(SAME))
    assert _run(trials, ["big", "base", "small"])[2] is None and trials.calls == []
    # its earlier A/B against the baseline said "no significant difference": skipped for the next one
    refuted = _row("small", 1, confirmation=_ab(SAME))
    trials = _Trials([_row("base", 0), _row("big", 2), refuted, _row("other", 3)], _ab(SLOWER))
    _, _, found, _ = _run(trials, ["big", "small", "other", "base"])
    assert found["key"] == "other" and trials.calls == [("versus", "big", "other")]
    # no time left: not compared, and the note says so
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)], _ab(SAME), remaining_s=2.0)
    key, _, found, notes = _run(trials, ["big", "small", "base"])
    assert key == "big" and found is None and trials.calls == []
    assert notes == ["time budget spent: big was not compared with the runner-up small"]


def test_a_failed_ab_keeps_the_pick_and_says_why() -> None:
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)],
                     {"status": "failed", "error": "RuntimeError: boom"})
    key, kept_conf, found, _ = _run(trials, ["big", "small", "base"])
    assert key == "big" and kept_conf and found == {"key": "small", "label": "small", "pick": "big", "switched": False,
                                                     "reason": "the A/B failed: RuntimeError: boom"}


def test_a_runner_up_confirmed_far_from_its_paired_gain_is_doubted_in_a_note() -> None:
    """dlperf optimize zoo:digits-cnn switched to onnxruntime, whose confirming A/B (run for the switch) measured
    8.72x (95% CI 2.85-27.27x) against its paired 2.85x, with no note: only the first pick's confirmation was checked
    against its paired gain."""
    disturbed: dict[str, Any] = {"status": "ok", "ab": {"verdict": FASTER, "speedup": 8.72, "a": {}, "b": {}},
                 "describe": "winner vs baseline: 8.72x speed: faster"}
    trials = _Trials([_row("base", 0), _row("big", 2, paired_gain=3.39), _row("small", 1, paired_gain=2.85)],
                     _ab(FASTER), confirm=disturbed)
    key, _, found, notes = _run(trials, ["big", "small", "base"])
    assert key == "small" and found["switched"]
    assert notes == ["small: its confirming A/B measured 8.72x where its paired measurement gave 2.85x: one of the "
                     "two was disturbed (another process, a stall); re-run before trusting either"]
    # a confirmation that agrees with the paired gain gets no note
    trials = _Trials([_row("base", 0), _row("big", 2, paired_gain=3.39), _row("small", 1, paired_gain=2.85)],
                     _ab(FASTER), confirm={**disturbed, "ab": {**disturbed["ab"], "speedup": 3.1}})
    assert _run(trials, ["big", "small", "base"])[3] == []


def test_a_runner_up_with_no_time_left_to_confirm_it_does_not_replace_the_pick() -> None:
    """The A/B against the runner-up spent the budget: the switch needs its own A/B against the baseline, which is
    not run over the budget, so the confirmed pick stays."""
    trials = _Trials([_row("base", 0), _row("big", 2), _row("small", 1)], _ab(SAME), remaining_s=100.0,
                     after_versus_s=3.0)
    key, kept_conf, found, _ = _run(trials, ["big", "small", "base"])
    assert key == "big" and kept_conf and not found["switched"]
    assert found["reason"] == ("no significant difference, and small has fewer passes (1 against 2), but no time was "
                               "left to confirm it against the baseline")
    assert [c[0] for c in trials.calls] == ["versus"]
