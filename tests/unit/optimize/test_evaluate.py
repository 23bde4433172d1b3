"""Fidelity of outputs against the original, and the candidate evaluation run in this process."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.errors import OptimizeError
from dlperf.optimize.evaluate import PAIRED_CI_SPAN, EvalSettings, _flatten, evaluate_here, fidelity_of
from dlperf.optimize.space import Candidate
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config

pytestmark = pytest.mark.unit


def test_flatten_nested_outputs() -> None:
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [t.shape[0] for t in _flatten({"x": a, "y": (b, [c]), "n": None})] == [1, 2, 3]


def test_fidelity_identical_scaled_and_opposite() -> None:
    ref = [torch.tensor([[1.0, 0.0], [0.0, 2.0]])]
    same = fidelity_of([ref[0].clone()], ref, batch_size=2)
    assert same["mean_cosine"] == pytest.approx(1.0) and same["rel_error"] == 0.0
    flipped = fidelity_of([torch.tensor([[1.0, 0.0], [0.0, -2.0]])], ref, batch_size=2)
    assert flipped["mean_cosine"] == pytest.approx(0.0) and flipped["min_cosine"] == pytest.approx(-1.0)
    assert flipped["rel_error"] == pytest.approx(4 / 5**0.5)  # |diff| = 4, |ref| = sqrt(5)
    zeros = fidelity_of([torch.zeros(2, 2)], [torch.zeros(2, 2)], batch_size=2)
    assert zeros["mean_cosine"] == 1.0
    nan = fidelity_of([torch.full((2, 2), float("nan"))], ref, batch_size=2)
    assert nan["nan_outputs"]
    with pytest.raises(OptimizeError, match="shape"):
        fidelity_of([torch.zeros(3, 2)], ref, batch_size=2)
    with pytest.raises(OptimizeError, match="2 output tensors"):
        fidelity_of([torch.zeros(2, 2), torch.zeros(2, 2)], ref, batch_size=2)


def test_evaluate_here_measures_and_exports_a_recipe(tmp_path: Path) -> None:
    settings = EvalSettings(source="zoo:mlp", batch_size=2, warmup_iters=1, min_duration_s=0.01, min_iters=3,
                            max_duration_s=1.0)
    phases: list[str] = []
    cand = Candidate((HygieneConfig(), DynamicInt8Config()))
    row = evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": cand.to_list(),
                         "out_dir": str(tmp_path)}, phases.append)
    assert phases == ["load", "build", "apply", "check", "eval", "time", "paired", "export", "done"]
    assert row["status"] == "ok" and row["precision"] == "int8" and row["engine"] == "torch"
    # Without an eval metric the metric is fidelity on held-out inputs, not on the one example batch.
    assert row["metric_is_fidelity"] and 0.99 < row["metric"] < 1.0
    assert row["fidelity"]["heldout_samples"] == 32 and row["metric"] == row["fidelity"]["heldout_mean_cosine"]
    assert row["fidelity"]["heldout_min_cosine"] <= row["metric"]
    assert "32 held-out inputs" in row["metric_name"]
    assert row["latency"]["n"] >= 3 and row["p50_s"] > 0
    # The candidate against the original model, interleaved in this process: 6 ABBA blocks, a time ratio.
    # Dynamic int8 on this tiny model pays its (de)quantization on every call: 2.3-4.7x fp32's time in six runs
    # on an idle machine, 7.5x once on a busy one; the bound only catches a ratio that is no ratio of the two.
    paired = row["paired"]
    assert paired["blocks"] in (6, 12, 18) and paired["iters_per_block"] >= 2 and 0.05 < paired["ratio"] < 20
    assert paired["ci"][0] <= paired["ratio"] <= paired["ci"][1]
    # more rounds only while the CI is wide and holds the gate
    gain_ci = (1 / paired["ci"][1], 1 / paired["ci"][0])
    done = paired["ci"][1] <= paired["ci"][0] * PAIRED_CI_SPAN or not gain_ci[0] < 0.95 < gain_ci[1]
    assert paired["blocks"] == 18 or done
    assert row["artifact"]["fields"]["recipe"] == cand.to_list()
    assert (tmp_path / "artifact" / "manifest.json").exists()


def test_the_search_gates_and_orders_by_the_paired_gain_where_there_is_one() -> None:
    """A candidate whose own process ran slow (isolated gain 0.58x) but which is as fast as the original model
    in that process (paired 1.01x) is extended; the paired gain also orders the next depth."""
    from dlperf.optimize.search import OptimizeConfig, _Search, search_gain
    from dlperf.optimize.space import Candidate

    search = _Search("zoo:mlp", OptimizeConfig(), None, None)
    search.baseline = {"key": "b", "status": "ok", "p50_s": 0.144e-3, "throughput": 6944.0, "metric": 0.97,
                       "higher_is_better": True, "size_bytes": 100, "peak_rss_bytes": 100, "wall_s": 5.0}
    row: dict[str, Any] = {"key": "h", "status": "ok", "p50_s": 0.248e-3, "p99_s": 0.3e-3, "throughput": 4032.0,
                           "metric": 0.97, "size_bytes": 100, "peak_rss_bytes": 100, "paired": {"ratio": 0.99}}
    search._accept(Candidate((HygieneConfig(),)), row)
    assert round(row["gain"], 2) == 0.58 and round(row["paired_gain"], 2) == 1.01
    assert search_gain(row) == row["paired_gain"] and search.extendable(row)
    assert "slower_reasons" not in row  # not called slower: in its own process it was not
    unpaired = {k: v for k, v in row.items() if k not in ("paired", "paired_gain", "feasible", "gain")}
    search._accept(Candidate((DynamicInt8Config(),)), unpaired)
    assert not search.extendable(unpaired)  # 0.58x isolated, nothing paired: not extended
    size = _Search("zoo:mlp", OptimizeConfig(objective="size"), None, None)
    size.baseline = search.baseline
    sized = {k: v for k, v in row.items() if k not in ("feasible", "gain", "paired_gain")}
    size._accept(Candidate((HygieneConfig(),)), sized)
    assert "paired_gain" not in sized  # a time ratio says nothing about size
