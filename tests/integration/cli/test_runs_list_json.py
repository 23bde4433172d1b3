"""`runs list --json` carries each run's one-line headline as the table prints it: a check run's JSON had only
its throughput (not its FAIL), and ab, optimize, profile and train runs had a null headline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dlperf.cli.main import main
from dlperf.compare.gate import GateConfig, gate
from dlperf.measure.stats import Measurement
from dlperf.store import Store

pytestmark = pytest.mark.integration


def _measurement(median_s: float, seed: int) -> Measurement:
    rng = np.random.default_rng(seed)
    return Measurement([int(v) for v in rng.lognormal(np.log(median_s), 0.02, 300) * 1e9])


def test_runs_list_json_has_the_table_s_headline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "runs.db")
    base, now = _measurement(0.001, 1), _measurement(0.0012, 2)  # 20% slower: a failed gate
    verdict = gate({1: base}, {1: now}, GateConfig(max_regression=0.05)).to_dict()
    assert verdict["failed"]
    check = store.create_run("check", "zoo:mlp")
    store.finish_run(check.id, {"points": [{"batch_size": 1, "summary": now.summary()}], "gate": verdict,
                                "headline": {"kpi": "throughput", "value": 830.0, "batch_size": 1}})
    ab = store.create_run("ab", "zoo:mlp")
    store.finish_run(ab.id, {"ratio": 0.8, "ci": [0.75, 0.85], "verdict": "faster"})
    assert main(["runs", "list", "--json", "--store", str(tmp_path / "runs.db")]) == 0
    listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[check.id]["headline_text"].startswith("FAIL: p50 +")
    assert listed[check.id]["headline"]["kpi"] == "throughput"  # the KPI record stays as it was
    assert listed[ab.id]["headline_text"] == "B/A 0.800: faster"


def test_a_filter_that_matches_nothing_says_why_on_stderr_beside_the_empty_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "runs.db")
    store.create_run("bench", "zoo:mlp")
    assert main(["runs", "list", "--kind", "benchs", "--json", "--store", str(tmp_path / "runs.db")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == []
    assert "no runs of kind 'benchs'" in captured.err and "the store has kinds: bench" in captured.err
