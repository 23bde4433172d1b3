"""`runs history --json` says what the text marks `changed`: a CI script reading the trend saw a bf16 run's 40% step
and not that the precision made it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.measure.stats import Measurement
from dlperf.store import Store

pytestmark = pytest.mark.integration

ENV = {"torch_version": "2.13.0+cpu", "cpu_model": "Test CPU", "logical_cores": 2, "torch_threads": 2}


def _bench(store: Store, median_s: float, precision: str) -> str:
    m = Measurement([int(median_s * 1e9 * (1 + k / 1000)) for k in range(50)])
    run = store.create_run("bench", "zoo:mlp", {"precision": precision, "threads": 2, "workload_key": "zoo:mlp"}, ENV)
    store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": m.summary()}]})
    return run.id


def test_history_json_names_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "runs.db")
    first = _bench(store, 1e-3, "fp32")
    same = _bench(store, 1e-3, "fp32")
    bf16 = _bench(store, 0.6e-3, "bf16")
    assert main(["runs", "history", "zoo:mlp", "--json", "--store", str(tmp_path / "runs.db")]) == 0
    points = {p["run_id"]: p for p in json.loads(capsys.readouterr().out)["points"]}
    assert points[first]["changed"] == [] and points[same]["changed"] == []
    assert points[bf16]["changed"] == ["precision fp32 -> bf16"]


def test_a_history_of_a_workload_only_checked_points_at_its_check_runs(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A CI job that only runs `dlperf check` asked `runs history` and was told to run `dlperf bench` first, though
    its check runs are the trend that `report --history` draws."""
    store = Store(tmp_path / "runs.db")
    m = Measurement([int(1e6 * (1 + k / 1000)) for k in range(50)])
    run = store.create_run("check", "zoo:mlp", {"threads": 2, "workload_key": "zoo:mlp"}, ENV)
    store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": m.summary()}]})
    assert main(["runs", "history", "zoo:mlp", "--store", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err
    assert "no finished bench runs of 'zoo:mlp'" in err
    assert "the store has check runs of it: `dlperf runs history zoo:mlp --kind check`" in err
    assert main(["runs", "history", "zoo:mlp", "--kind", "check", "--store", str(tmp_path / "runs.db")]) == 0
    assert main(["runs", "history", "zoo:nope", "--store", str(tmp_path / "runs.db")]) == 2
    assert "--kind check" not in capsys.readouterr().err
