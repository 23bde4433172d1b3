"""The search on zoo:digits-cnn with its real accuracy metric: the int8 model it picks stays in budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.optimize.constraints import Constraints
from dlperf.optimize.search import OptimizeConfig, optimize
from dlperf.workload.loader import load_workload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# One intra-op thread: these tests check the search, not threading; on 2 cores under a loaded CI runner a model's
# 2 OpenMP threads stall on each other's preemption (dynamic int8 on zoo:mlp: 21-45 ms a call against 0.25-0.5 ms on
# one thread, 2026-12-07), which made rows measure again and notes differ between two searches.
FAST = {"warmup_iters": 2, "min_duration_s": 0.1, "min_iters": 5, "max_duration_s": 2.0, "ab_blocks": 6,
        "ab_iters_per_block": 3, "threads": 1}


def test_size_objective_picks_int8_within_the_accuracy_budget(tmp_path: Path) -> None:
    config = OptimizeConfig(
        objective="size", passes=("dynamic_int8",), constraints=Constraints(max_metric_drop=0.01),
        max_depth=1, time_budget_s=240, workdir=str(tmp_path / "work"), **FAST,  # type: ignore[arg-type]
    )
    result = optimize("zoo:digits-cnn", config, export_dir=tmp_path / "out")
    assert not result.metric_is_fidelity
    assert result.metric_name.lower().startswith("acc")
    base_acc = result.baseline["metric"]
    assert base_acc > 0.9  # a trained model on real data
    winner = result.winner_row
    assert winner is not None and winner["precision"] == "int8"
    assert winner["size_bytes"] < result.baseline["size_bytes"]
    assert winner["metric"] >= base_acc * 0.99
    for row in result.rows:
        if row.get("feasible"):
            assert row["metric"] >= base_acc * 0.99

    # The exported int8 model, loaded back, scores the same accuracy on the held-out digits.
    workload = load_workload("zoo:digits-cnn")
    loaded = dlperf.load(tmp_path / "out")
    assert workload.eval is not None
    with torch.no_grad():
        acc = workload.eval.evaluate(loaded)
    assert acc == pytest.approx(winner["metric"], abs=1e-9)
    assert acc >= base_acc * 0.99


def test_static_int8_engine_gets_the_search_budget_and_stays_within_it(tmp_path: Path) -> None:
    config = OptimizeConfig(
        objective="size", passes=("onnxruntime",), constraints=Constraints(max_metric_drop=0.01),
        max_depth=1, time_budget_s=300, workdir=str(tmp_path / "work"), **FAST,  # type: ignore[arg-type]
    )
    result = optimize("zoo:digits-cnn", config, export_dir=tmp_path / "out")
    base_acc = result.baseline["metric"]
    static = next(r for r in result.rows if "int8-static" in r["label"])
    assert static["status"] == "ok", static.get("error")
    # The fp32 fallback searched against the search's own budget (1% of the baseline accuracy), not its default.
    (cfg,) = static["pipeline"]
    assert cfg["keep_fp32"] == "auto" and cfg["max_metric_drop"] == pytest.approx(round(0.01 * base_acc, 6))
    for row in result.rows:
        if row.get("feasible"):
            assert row["metric"] >= base_acc * 0.99
    winner = result.winner_row
    assert winner is not None and winner["precision"] == "int8" and winner["engine"] == "onnxruntime"
    assert winner["size_bytes"] < result.baseline["size_bytes"]

    workload = load_workload("zoo:digits-cnn")
    assert workload.eval is not None
    acc = workload.eval.evaluate(dlperf.load(tmp_path / "out"))
    assert acc == pytest.approx(winner["metric"], abs=1e-9)
    assert acc >= base_acc * 0.99
