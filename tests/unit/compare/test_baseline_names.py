"""Baseline names that `--baseline NAME` and the list cannot give back as typed are refused; the list shows names
as text, not as console markup."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.compare.baselines import set_baseline
from dlperf.errors import StoreError
from dlperf.store import Store

from .helpers import add_run, bench_result

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("name", "message"), [
    (" main", r"^baseline name ' main' has white space at an end, which `--baseline` would have to repeat exactly: "
              r"use 'main'$"),
    ("main\n", r"white space at an end"),
    ("a\nb", r"^baseline name 'a\\nb' has control characters \('\\n'\)"),
    ("a\tb", r"control characters \('\\t'\)"),
    ("main\u200b", r"control characters \('\\u200b'\)"),  # a zero-width space pasted in: invisible in the list
    ("  ", r"^a baseline needs a non-empty name$"),
])
def test_names_that_cannot_be_typed_back_are_refused(tmp_path: Path, name: str, message: str) -> None:
    store = Store(tmp_path / "runs.db")
    run = add_run(store, "bench", bench_result({1: 0.01}))
    with pytest.raises(StoreError, match=message):
        set_baseline(store, name, run)
    assert store.list_baselines() == []  # nothing half-set


def test_odd_but_typeable_names_are_kept_and_listed_as_typed(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.db"
    store = Store(path)
    run = add_run(store, "bench", bench_result({1: 0.01}))
    for name in ("feat/x-1.2", "[bold]red[/]", "ünï"):
        assert main(["baseline", "set", name, run, "--store", str(path)]) == 0
    capsys.readouterr()
    assert main(["baseline", "list", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    # the list rendered '[bold]red[/]' as console markup: a bold 'red', a name `--baseline red` does not find
    assert "[bold]red[/]" in out and "feat/x-1.2" in out and "ünï" in out
    assert main(["baseline", "rm", "[bold]red[/]", "--store", str(path)]) == 0
    assert "removed baseline '[bold]red[/]'" in capsys.readouterr().out


def test_a_baseline_whose_run_is_gone_lists_no_workload_name(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import sqlalchemy as sa

    path = tmp_path / "runs.db"
    store = Store(path)
    run = add_run(store, "bench", bench_result({1: 0.01}))
    set_baseline(store, "main", run)
    with store.engine.begin() as conn:  # a run gone behind the store's back (`runs delete` refuses it)
        conn.execute(sa.text("PRAGMA foreign_keys=OFF"))
        conn.execute(sa.text("DELETE FROM runs WHERE id = :id"), {"id": run})
    assert main(["baseline", "list", "--json", "--store", str(path)]) == 0
    # --json gave the table's "(run deleted)" as the workload's name
    assert json.loads(capsys.readouterr().out) == [
        {"name": "main", "run_id": run, "workload": None, "created_at": store.list_baselines()[0][2][:19],
         "git_commit": None, "git_dirty": None}]
    assert main(["baseline", "list", "--store", str(path)]) == 0
    assert "(run deleted)" in capsys.readouterr().out
