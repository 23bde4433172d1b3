"""`runs show --json` and `runs export` write a float that is not finite as null, and `runs history --batch-size N`
follows batch size N."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.store import Store

pytestmark = pytest.mark.integration


def _nan_run(db: Path) -> str:
    store = Store(db)
    run = store.create_run("load", "zoo:mlp")
    store.finish_run(run.id, {"levels": [{"requests": 0, "p99_s": float("nan"), "throughput": float("inf")}]})
    return run.id


def test_runs_show_json_writes_a_percentile_of_no_requests_as_null(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    run_id = _nan_run(db)
    assert main(["runs", "show", run_id, "--json", "--store", str(db)]) == 0
    level = json.loads(capsys.readouterr().out)["result"]["levels"][0]  # strict JSON: NaN is not
    assert level == {"requests": 0, "p99_s": None, "throughput": None}


def test_runs_export_writes_a_percentile_of_no_requests_as_null(tmp_path: Path) -> None:
    db, out = tmp_path / "runs.db", tmp_path / "run.json"
    run_id = _nan_run(db)
    assert main(["runs", "export", run_id, "-o", str(out), "--store", str(db)]) == 0
    assert json.loads(out.read_text(), parse_constant=pytest.fail)["result"]["levels"][0]["p99_s"] is None


def test_runs_history_follows_the_batch_size_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "runs.db")
    for p50_s in (1e-3, 2e-3):
        run = store.create_run("bench", "zoo:mlp", {"workload_key": "zoo:mlp"})
        store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": {"p50_s": p50_s}},
                                             {"batch_size": 8, "summary": {"p50_s": 10 * p50_s}}]})
    assert main(["runs", "history", "zoo:mlp", "--batch-size", "8", "--json",
                 "--store", str(tmp_path / "runs.db")]) == 0
    assert [p["value"] for p in json.loads(capsys.readouterr().out)["points"]] == [1e-2, 2e-2]


def test_runs_delete_force_names_the_baselines_it_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Said, not left for the next `dlperf check` to find."""
    store = Store(tmp_path / "runs.db")
    run = store.create_run("bench", "zoo:mlp")
    store.finish_run(run.id, {})
    for name in ("main", "nightly"):
        store.set_baseline(name, run.id)
    assert main(["runs", "delete", run.id, "--force", "--store", str(tmp_path / "runs.db")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("; removed the baselines main, nightly")
    assert store.list_baselines() == []


def test_runs_export_to_a_missing_folder_or_a_folder_says_which_and_what_to_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said `cannot write '.../x.json': [Errno 2] No such file or directory`, as `dlperf report -o` no longer
    does."""
    db = tmp_path / "runs.db"
    run_id = _nan_run(db)
    missing = tmp_path / "nope" / "x.json"
    assert main(["runs", "export", run_id, "-o", str(missing), "--store", str(db)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: cannot write '{missing}': the folder '{missing.parent}' does "
                                               "not exist; create it or give another -o")
    assert main(["runs", "export", run_id, "-o", str(tmp_path), "--store", str(db)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: '{tmp_path}' is a folder: give the export a file name, e.g. "
                                               f"-o {tmp_path / (run_id + '.json')}")


@pytest.mark.parametrize("argv", [["runs", "show", "abc"], ["runs", "export", "abc"], ["report", "abc", "-o", "-"]])
def test_the_commands_that_read_runs_refuse_a_store_that_does_not_exist(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped path is an error, not a new empty store left behind with "no run abc" said of it."""
    missing = tmp_path / "typo.db"
    assert main([*argv, "--store", str(missing)]) == 2
    assert "no run store at" in capsys.readouterr().err
    assert not missing.exists()
