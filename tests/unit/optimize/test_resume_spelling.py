"""A search recorded with a relative workload path (as runs were before paths were made absolute) resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import OptimizeError
from dlperf.optimize.search import _find_resumable
from dlperf.store.db import Store

pytestmark = pytest.mark.unit

KEY = {"batch_size": 1, "passes": None}


def _interrupted(store: Store, workload: str) -> str:
    with pytest.raises(KeyboardInterrupt), store.recording("optimize", workload, {"search_key": KEY}) as run:
        raise KeyboardInterrupt
    return run.id


def test_a_relative_recorded_path_is_the_same_workload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = Store(str(tmp_path / "runs.db"))
    old = _interrupted(store, "model.py:workload")
    source = f"{tmp_path / 'model.py'}:workload"
    found = _find_resumable(store, source, KEY, None)
    assert found is not None and found.id == old
    assert _find_resumable(store, source, KEY, old).id == old  # --resume ID says the same
    assert _find_resumable(store, source, {**KEY, "batch_size": 8}, None) is None  # other settings: no
    other = f"{tmp_path / 'other.py'}:workload"
    assert _find_resumable(store, other, KEY, None) is None
    with pytest.raises(OptimizeError, match=r"optimized 'model\.py:workload', not"):
        _find_resumable(store, other, KEY, old)
    with pytest.raises(OptimizeError, match=r"optimized 'model\.py:workload', not"):
        _find_resumable(store, f"{tmp_path / 'model.py'}:other_name", KEY, old)
