"""`dlperf optimize` from the command line: JSON on stdout, export, store, and user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_optimize_cli_json_export_and_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimize", "zoo:mlp", "--passes", "hygiene", "--max-depth", "1", "--time-budget", "2m",
                 "--min-duration", "0.05", "--store", str(tmp_path / "runs.db"), "--export", str(tmp_path / "out"),
                 "--workdir", str(tmp_path / "work"), "--json", "--max-metric-drop", "0.5%"])
    captured = capsys.readouterr()
    assert code == 0
    data = json.loads(captured.out)
    assert data["workload"] == "zoo:mlp" and data["objective"] == "latency"
    assert data["constraints"]["max_metric_drop"] == pytest.approx(0.005)
    assert [c["label"] for c in data["candidates"]] == ["baseline", "hygiene"]
    assert data["export_dir"] == str(tmp_path / "out")
    assert (tmp_path / "out" / "manifest.json").exists()
    assert "measuring hygiene" in captured.err  # progress goes to stderr
    # the stored runs read back as the command printed them, with one-line headlines
    store = str(tmp_path / "runs.db")
    assert main(["runs", "show", data["run_id"], "--store", store]) == 0
    shown = capsys.readouterr().out
    assert "candidates for zoo:mlp" in shown and '"candidates"' not in shown
    assert main(["runs", "list", "--store", store]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    winner = next((c["label"] for c in data["candidates"] if c["key"] == data["winner"]), None)
    assert (f"winner: {winner}" if winner else "no winner") in listed
    assert "hygiene: p50" in listed  # the candidate run's headline


def test_optimize_cli_rejects_unknown_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimize", "zoo:mlp", "--passes", "warp", "--store", str(tmp_path / "runs.db")])
    assert code == 2
    assert "unknown passes warp" in capsys.readouterr().err


def test_optimize_cli_rejects_bad_budget() -> None:
    with pytest.raises(SystemExit):
        main(["optimize", "zoo:mlp", "--time-budget", "soon"])
