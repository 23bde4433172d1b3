"""`runs list` leaves out the runs that belong to another run (an optimize run's candidates, a tune's trials)
unless asked: after one optimize run, 19 of the 20 listed runs were its candidates, and the bench and profile
runs were out of view (`runs list --limit 2 --json` in a CI script picked two candidates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.store import Store

pytestmark = pytest.mark.integration


def _store(tmp_path: Path) -> tuple[str, str, str, list[str]]:
    store = Store(tmp_path / "runs.db")
    bench = store.create_run("bench", "zoo:mlp").id
    optimize = store.create_run("optimize", "zoo:mlp").id
    candidates = [store.create_run("candidate", "zoo:mlp", parent_id=optimize).id for _ in range(3)]
    return str(tmp_path / "runs.db"), bench, optimize, candidates


def test_child_runs_are_left_out_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, bench, optimize, candidates = _store(tmp_path)
    assert main(["runs", "list", "--limit", "2", "--json", "--store", db]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [optimize, bench]
    assert main(["runs", "list", "--store", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert bench in out and optimize in out and not any(c in out for c in candidates)
    assert "3 runs that belong to another run (optimize candidates, tune trials) not listed: --children" in out
    assert main(["runs", "list", "--workload", "zoo:mlp", "--store", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert not any(c in out for c in candidates) and "3 runs that belong" in out


def test_children_and_their_kind_list_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, bench, optimize, candidates = _store(tmp_path)
    assert main(["runs", "list", "--children", "--json", "--store", db]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {bench, optimize, *candidates}
    assert main(["runs", "list", "--kind", "candidate", "--json", "--store", db]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == set(candidates)
    assert main(["runs", "list", "--kind", "candidate", "--store", db]) == 0
    assert "not listed" not in capsys.readouterr().out
