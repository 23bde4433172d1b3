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
    found, _ = _find_resumable(store, source, KEY, None)
    assert found is not None and found.id == old
    assert _find_resumable(store, source, KEY, old)[0].id == old  # --resume ID says the same
    assert _find_resumable(store, source, {**KEY, "batch_size": 8}, None) == (None, None)  # other settings: no
    other = f"{tmp_path / 'other.py'}:workload"
    assert _find_resumable(store, other, KEY, None) == (None, None)
    with pytest.raises(OptimizeError, match=r"optimized 'model\.py:workload', not"):
        _find_resumable(store, other, KEY, old)
    with pytest.raises(OptimizeError, match=r"optimized 'model\.py:workload', not"):
        _find_resumable(store, f"{tmp_path / 'model.py'}:other_name", KEY, old)


def test_resume_by_id_refuses_a_finished_search_or_other_settings(tmp_path: Path) -> None:
    """`--resume ID` checked only the workload: a finished batch-1 search resumed at batch 16 showed its batch-1 rows
    under a batch-16 title, as if measured there."""
    store = Store(str(tmp_path / "runs.db"))
    key = {**KEY, "workload_code": "abc", "measurement": {"min_duration_s": 1.0}}
    with store.recording("optimize", "zoo:mlp", {"search_key": key}) as done:
        pass
    with pytest.raises(OptimizeError, match=rf"run {done.id} finished: only an interrupted or failed search"):
        _find_resumable(store, "zoo:mlp", key, done.id)
    stopped = _interrupted(store, "zoo:mlp")  # recorded with KEY: no code hash, no measurement settings
    with pytest.raises(OptimizeError, match=r"other settings than this search \(workload_code not recorded there, "
                                            r'"abc" here; measurement not recorded there'):
        _find_resumable(store, "zoo:mlp", key, stopped)
    with pytest.raises(OptimizeError, match=r"batch_size 1 there, 16 here\): give the options it ran with"):
        _find_resumable(store, "zoo:mlp", {**KEY, "batch_size": 16}, stopped)
    with store.recording("bench", "zoo:mlp", {}) as bench:
        pass
    with pytest.raises(OptimizeError, match=rf"^run {bench.id} is a 'bench' run, not an optimize run: nothing to "
                                            r"resume$"):
        _find_resumable(store, "zoo:mlp", key, bench.id)


def test_an_interrupted_search_of_edited_code_is_not_resumed_and_says_why(tmp_path: Path) -> None:
    """Resuming after the workload file was edited mixed two models' rows in one table."""
    store = Store(str(tmp_path / "runs.db"))
    key = {**KEY, "workload_code": "before"}
    with pytest.raises(KeyboardInterrupt), store.recording("optimize", "/w/model.py", {"search_key": key}) as run:
        raise KeyboardInterrupt
    assert _find_resumable(store, "/w/model.py", key, None)[0].id == run.id
    found, note = _find_resumable(store, "/w/model.py", {**key, "workload_code": "after"}, None)
    assert found is None and note == f"not resuming run {run.id}: the workload's code changed since (its files hash " \
                                     "differently)"
    with pytest.raises(OptimizeError, match="the workload's code changed since"):
        _find_resumable(store, "/w/model.py", {**key, "workload_code": "after"}, run.id)


def test_the_code_fingerprint_covers_the_file_and_the_modules_it_imports_beside_it(tmp_path: Path) -> None:
    import sys

    from dlperf.workload.loader import code_fingerprint, load_workload

    (tmp_path / "mynet_fp.py").write_text("import torch\nNet = lambda: torch.nn.Linear(4, 2)\n")
    (tmp_path / "unrelated_fp.py").write_text("X = 1\n")
    wl = tmp_path / "wl.py"
    wl.write_text("import torch\nfrom mynet_fp import Net\ndef model():\n    return Net()\n"
                  "def inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")
    try:
        source = load_workload(str(wl)).source
        first = code_fingerprint(source)
        assert code_fingerprint(source) == first
        (tmp_path / "unrelated_fp.py").write_text("X = 2\n")  # not imported: not the workload's code
        assert code_fingerprint(source) == first
        (tmp_path / "mynet_fp.py").write_text("import torch\nNet = lambda: torch.nn.Linear(4, 3)\n")
        second = code_fingerprint(source)
        assert second != first
        wl.write_text(wl.read_text() + "# edited\n")
        assert code_fingerprint(source) not in (first, second)
        assert code_fingerprint("zoo:mlp").startswith("dlperf ")
    finally:
        sys.modules.pop("mynet_fp", None)


def test_the_passes_in_another_order_are_the_same_search() -> None:
    """`--passes onnxruntime,hygiene` did not resume an interrupted `--passes hygiene,onnxruntime` search (and
    `--resume ID` refused it for "other settings"): the key kept the passes in the order given."""
    from dlperf.optimize.search import OptimizeConfig

    one = OptimizeConfig(passes=("hygiene", "onnxruntime")).search_key(1, "code")
    other = OptimizeConfig(passes=("onnxruntime", "hygiene", "hygiene")).search_key(1, "code")
    assert one == other and one["passes"] == ["hygiene", "onnxruntime"]


def test_a_search_recorded_with_its_passes_unsorted_still_resumes(tmp_path: Path) -> None:
    from dlperf.optimize.search import OptimizeConfig

    store = Store(str(tmp_path / "runs.db"))
    key = OptimizeConfig(passes=("hygiene", "onnxruntime")).search_key(1, "code")
    recorded = {**key, "passes": ["onnxruntime", "hygiene"]}  # as keys were written before
    with pytest.raises(KeyboardInterrupt), store.recording("optimize", "zoo:mlp", {"search_key": recorded}) as run:
        raise KeyboardInterrupt
    assert _find_resumable(store, "zoo:mlp", key, None)[0].id == run.id
    assert _find_resumable(store, "zoo:mlp", key, run.id)[0].id == run.id


def test_a_memory_search_recorded_before_the_fresh_process_figure_is_not_resumed() -> None:
    """Its rows' peak RSS came from the candidate's own process (torch and the original model in it): resumed, they
    would be ranked against fresh-process figures. A latency search's key is unchanged."""
    from dlperf.optimize.search import OptimizeConfig, _key_differences

    key = OptimizeConfig(objective="memory").search_key(1, "code")
    recorded = {k: v for k, v in key.items() if k != "peak_rss"}
    assert _key_differences(recorded, key) == ['peak_rss not recorded there, "deployed artifact, fresh process" here']
    assert "peak_rss" not in OptimizeConfig(objective="latency").search_key(1, "code")
