"""`runs list` and `runs history` keep the newest N runs of what they show, `--limit 0` is refused, and `runs delete`
counts the child runs it deleted with a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.store import Store
from tests.unit.store.spaced import space_runs

pytestmark = pytest.mark.integration


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store's path, its runs created a second apart."""
    space_runs(monkeypatch)
    return str(tmp_path / "runs.db")


def _listed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["runs", "list", "--json", *argv]) == 0
    return [r["id"] for r in json.loads(capsys.readouterr().out)]


def test_a_workload_s_list_is_its_newest_runs_after_the_child_runs_are_left_out(
        db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The newest optimize run's two candidates are the newest runs of all: `--limit 3` still lists three runs."""
    store = Store(db)
    benches = [store.create_run("bench", "zoo:mlp", {"workload_key": "zoo:mlp"}).id for _ in range(3)]
    optimize = store.create_run("optimize", "zoo:mlp", {"workload_key": "zoo:mlp"}).id
    for _ in range(2):
        store.create_run("candidate", "zoo:mlp", {"workload_key": "zoo:mlp"}, parent_id=optimize)
    assert _listed(capsys, "--workload", "zoo:mlp", "--limit", "3", "--store", db) == [optimize, benches[2], benches[1]]


def test_runs_history_follows_the_newest_n_runs(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    store, ids = Store(db), []
    for p50_s in (1e-3, 2e-3, 3e-3):
        run = store.create_run("bench", "zoo:mlp", {"workload_key": "zoo:mlp"})
        store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": {"p50_s": p50_s}}]})
        ids.append(run.id)
    assert main(["runs", "history", "zoo:mlp", "--limit", "2", "--json", "--store", db]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [p["run_id"] for p in history["points"]] == ids[1:]  # oldest first of the newest two
    assert [p["value"] for p in history["points"]] == [2e-3, 3e-3]


@pytest.mark.parametrize("command", [["list"], ["history", "zoo:mlp"]])
def test_a_limit_of_zero_runs_is_refused(db: str, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    Store(db, create=True)
    assert main(["runs", *command, "--limit", "0", "--store", db]) == 2
    assert "--limit expects a positive integer, got 0" in capsys.readouterr().err


def test_runs_delete_counts_the_child_runs_it_deleted(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(db)
    optimize = store.create_run("optimize", "zoo:mlp")
    store.finish_run(optimize.id, {})
    for _ in range(2):
        store.create_run("candidate", "zoo:mlp", parent_id=optimize.id)
    assert main(["runs", "delete", optimize.id, "--force", "--store", db]) == 0
    assert capsys.readouterr().out.rstrip().endswith(") and its 2 child runs")
