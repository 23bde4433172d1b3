"""A run deleted while its command still records it: `runs delete` removed a running bench, which then printed
"run ... saved" of a run no longer in the store, and what it measured was gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.errors import StoreError
from dlperf.store import OK, RUNNING, Store

pytestmark = pytest.mark.unit


def test_a_running_run_is_kept_unless_forced(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    run = store.create_run("bench", "zoo:mlp")
    with pytest.raises(StoreError, match=r"is still running: let it finish.*--force"):
        store.delete(run.id)
    assert store.get(run.id).status == RUNNING  # nothing was lost
    assert [r.id for r in store.delete(run.id, force=True)] == [run.id]  # a run its killed process left behind


def test_the_end_of_a_run_deleted_while_it_ran_is_set_aside_not_lost(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    with pytest.raises(StoreError, match=r"is no longer in the store .*saved in") as caught, \
            store.recording("bench", "zoo:mlp") as run:
        store.delete(run.id, force=True)  # `dlperf runs delete --force` from another shell
        run.result = {"points": [{"batch_size": 1}]}
    aside = tmp_path / f"dlperf-run-{run.id}.json"
    assert str(aside) in str(caught.value)
    saved = json.loads(aside.read_text())
    assert saved["status"] == OK and saved["result"] == {"points": [{"batch_size": 1}]}


def test_runs_delete_of_a_running_run_from_the_command_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.db"
    run = Store(path).create_run("bench", "zoo:mlp")
    assert main(["runs", "delete", run.id, "--store", str(path)]) == 2
    assert f"run {run.id} (bench of zoo:mlp, started " in capsys.readouterr().err
    assert main(["runs", "delete", run.id, "--force", "--store", str(path)]) == 0
    assert f"deleted run {run.id}" in capsys.readouterr().out
