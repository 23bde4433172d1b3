"""Which stopped search an identical one resumes, and what it takes over. A stopped search is resumed once: after a
later search resumed it, the next identical search does not take it up again (it did, after the resuming search had
finished, reusing the stopped search's candidates once more)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.optimize.search import _find_resumable
from dlperf.store.db import Store

pytestmark = pytest.mark.unit

KEY = {"batch_size": 1, "passes": None}


def _interrupted(store: Store, config: dict[str, object]) -> str:
    with pytest.raises(KeyboardInterrupt), store.recording("optimize", "zoo:mlp", config) as run:
        raise KeyboardInterrupt
    return run.id


def test_a_search_resumed_by_a_finished_one_is_not_resumed_again(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "runs.db"))
    stopped = _interrupted(store, {"search_key": KEY})
    assert _find_resumable(store, "zoo:mlp", KEY, None)[0].id == stopped
    with store.recording("optimize", "zoo:mlp", {"search_key": KEY, "resumed_from": stopped}):
        pass
    assert _find_resumable(store, "zoo:mlp", KEY, None) == (None, None)
    assert _find_resumable(store, "zoo:mlp", KEY, stopped)[0].id == stopped  # --resume ID still takes it, by choice


def test_a_resuming_search_that_was_interrupted_itself_is_the_one_resumed(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "runs.db"))
    first = _interrupted(store, {"search_key": KEY})
    second = _interrupted(store, {"search_key": KEY, "resumed_from": first})
    assert _find_resumable(store, "zoo:mlp", KEY, None)[0].id == second
    with store.recording("optimize", "zoo:mlp", {"search_key": KEY, "resumed_from": second}):
        pass
    assert _find_resumable(store, "zoo:mlp", KEY, None) == (None, None)  # not the first again


def test_a_search_that_failed_is_resumed_only_where_its_executor_lost_every_node(tmp_path: Path) -> None:
    """A search that failed for its own reasons (its baseline, an error in the search) starts afresh; one whose Ray
    cluster went away is carried on, as an interrupted one is."""
    from dlperf.optimize.search import EXECUTOR_LOST

    store = Store(str(tmp_path / "runs.db"))
    with pytest.raises(RuntimeError), store.recording("optimize", "zoo:mlp", {"search_key": KEY}):
        raise RuntimeError("the baseline of 'zoo:mlp' could not be measured")
    assert _find_resumable(store, "zoo:mlp", KEY, None) == (None, None)
    with pytest.raises(RuntimeError), store.recording("optimize", "zoo:mlp", {"search_key": KEY}) as lost:
        lost.result = {"partial": True, EXECUTOR_LOST: True}
        raise RuntimeError("every node of the Ray cluster is gone")
    assert _find_resumable(store, "zoo:mlp", KEY, None)[0].id == lost.id


def test_of_two_stopped_searches_the_later_one_is_resumed(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "runs.db"))
    _interrupted(store, {"search_key": KEY})
    later = _interrupted(store, {"search_key": KEY})  # a search run with auto-resume off, stopped too
    assert _find_resumable(store, "zoo:mlp", KEY, None)[0].id == later


def test_a_resumed_search_takes_over_what_was_measured_but_not_what_the_search_s_end_cut_short(
        tmp_path: Path) -> None:
    """A candidate that crashed or hung is a verdict (reused, not measured again for another timeout); one killed
    because the budget ran out (flagged, or by its error as rows were stored before the flag) or never answered is
    measured again."""
    from dlperf.optimize.search import BUDGET_CUT, _previous_rows
    from dlperf.store.records import FAILED, OK

    store = Store(str(tmp_path / "runs.db"))
    parent = store.create_run("optimize", "zoo:mlp", {"search_key": KEY})
    rows: dict[str, tuple[str, dict[str, Any]]] = {
        "ok": (OK, {"status": "ok", "p50_s": 1e-3}),
        "crashed": (FAILED, {"status": "failed", "error": "the candidate's process died with SIGSEGV during 'apply'"}),
        "hung": (FAILED, {"status": "failed", "timed_out": True, "error": "timed out after 300 s during 'apply'"}),
        "flagged": (FAILED, {"status": "failed", "budget_cut": True, "error": "timed out after 9 s"}),
        "old cut": (FAILED, {"status": "failed", "error": f"timed out after 9 s during 'time': {BUDGET_CUT} 9 s left"}),
    }
    for key, (status, result) in rows.items():
        child = store.create_run("candidate", "zoo:mlp", {"key": key}, parent_id=parent.id)
        store.finish_run(child.id, {"key": key, **result}, status, result.get("error"))
    store.create_run("candidate", "zoo:mlp", {"key": "open"}, parent_id=parent.id)  # running when it stopped
    previous = _previous_rows(store, parent.id)
    assert sorted(previous) == ["crashed", "hung", "ok"]
    assert previous["hung"]["status"] == "failed" and previous["hung"]["run_id"]
