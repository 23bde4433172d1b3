"""A stopped search is resumed once: after a later search resumed it, the next identical search does not take it up
again (it did, after the resuming search had finished, reusing the stopped search's candidates once more)."""

from __future__ import annotations

from pathlib import Path

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
