"""`dlperf report --history W --metric M` draws the trend of M, and `--metric` without `--history` is refused
(it was ignored without a word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.store import Store

pytestmark = pytest.mark.integration


def test_the_history_trend_is_of_the_metric_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    store = Store(db)
    run = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]})
    store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": {"p50_s": 1e-3, "p99_s": 4e-3}}]})
    assert main(["report", "--history", "zoo:mlp", "--metric", "p99", "-o", "-", "--store", str(db)]) == 0
    html = capsys.readouterr().out
    assert "History of zoo:mlp: p99 at each batch size" in html


def test_a_metric_without_history_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    Store(db, create=True)
    assert main(["report", "--metric", "p99", "-o", str(tmp_path / "r.html"), "--store", str(db)]) == 2
    assert "--metric sets the metric of the --history trend: add --history WORKLOAD" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
