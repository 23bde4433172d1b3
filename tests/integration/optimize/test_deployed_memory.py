"""`--objective memory`: each candidate's peak RSS is that of a fresh process loading its exported artifact alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.optimize.search import OptimizeConfig, optimize

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST = {"warmup_iters": 2, "min_duration_s": 0.1, "min_iters": 5, "max_duration_s": 2.0, "ab_blocks": 6,
        "ab_iters_per_block": 3}


def test_an_engine_candidate_is_charged_for_its_engine_and_the_baseline_for_torch(tmp_path: Path) -> None:
    """The peak RSS came from the candidate's own process, which holds torch, the original model and what the
    conversion left: an ONNX Runtime MiniLM read 895 MiB against the torch baseline's 705, though ONNX Runtime alone
    runs it in 190 MiB. Now an ONNX Runtime candidate is measured in a process that never imports torch, and the
    baseline in one that loads its torch artifact (torch and the workload, as `dlperf.load` does)."""
    config = OptimizeConfig(objective="memory", passes=("onnxruntime",), max_depth=1, time_budget_s=150,
                            threads=1, workdir=str(tmp_path / "work"), **FAST)  # type: ignore[arg-type]
    result = optimize("zoo:mlp", config)
    rows = {r["label"]: r for r in result.rows}
    base, ort = result.baseline, rows["onnxruntime"]
    assert ort["status"] == "ok"
    for row, engine in ((base, "torch"), (ort, "onnxruntime")):
        deployed = row["deployed_memory"]
        assert deployed["engine"] == engine and "error" not in deployed
        assert row["peak_rss_bytes"] == deployed["peak_rss_bytes"] >= deployed["loaded_rss_bytes"]
        assert deployed["loaded_rss_bytes"] > deployed["start_rss_bytes"] > 0
        assert deployed["calls"] == FAST["warmup_iters"] + 1  # the timing's warm-up and one more, as deployed
        assert "gpu_bytes" not in deployed and row["gpu_memory_bytes"] is None  # a CPU artifact: no GPU reading
    assert base["deployed_memory"]["torch_imported"] is True
    assert ort["deployed_memory"]["torch_imported"] is False
    assert ort["deployed_memory"]["imports"] == "onnxruntime and numpy"
    # the candidate's own process held torch and the original model: far more than ONNX Runtime alone
    assert ort["peak_rss_bytes"] < 0.6 * ort["timing_peak_rss_bytes"]
    assert ort["peak_rss_bytes"] < 0.6 * base["peak_rss_bytes"]


def test_other_objectives_keep_the_candidate_process_figure(tmp_path: Path) -> None:
    """The fresh process costs seconds per candidate: only the memory objective, which ranks by it, starts one."""
    config = OptimizeConfig(objective="latency", passes=("hygiene",), max_depth=1, time_budget_s=90, threads=1,
                            workdir=str(tmp_path / "work"), **FAST)  # type: ignore[arg-type]
    result = optimize("zoo:mlp", config)
    assert result.baseline["deployed_memory"] is None
    assert result.baseline["peak_rss_bytes"] == result.baseline["timing_peak_rss_bytes"]


@pytest.mark.parametrize("static_shape", [False, True])
def test_an_openvino_artifact_is_measured_without_torch(tmp_path: Path, static_shape: bool) -> None:
    """OpenVINO's fresh process compiles what `dlperf.load` does (the static-shape copy too) and imports no torch."""
    pytest.importorskip("openvino")
    from dlperf.optimize.artifact import export_state
    from dlperf.optimize.evaluate import EvalSettings
    from dlperf.optimize.footprint import measure_deployed, save_inputs
    from dlperf.optimize.space import candidate_from_list
    from dlperf.passes.base import PassContext, apply_pass, initial_state
    from dlperf.passes.openvino import OpenVinoConfig
    from dlperf.workload.zoo import get

    wl = get("mlp")
    config = OpenVinoConfig(static_shape=static_shape)
    state = apply_pass(config, initial_state(wl), PassContext(threads=1))
    candidate = candidate_from_list([{"pass": "openvino", "static_shape": static_shape}])
    export_state(state, candidate, EvalSettings(source="zoo:mlp", threads=1), None, tmp_path / "artifact", None)
    assert save_inputs(wl.example_inputs(1), tmp_path / "inputs.npz")
    deployed = measure_deployed(tmp_path / "artifact", tmp_path / "inputs.npz", 3, 1)
    assert deployed["engine"] == "openvino" and deployed["torch_imported"] is False, deployed
    assert deployed["peak_rss_bytes"] >= deployed["loaded_rss_bytes"] > deployed["start_rss_bytes"] > 0


SCRATCH = """
import torch


class Scratch(torch.nn.Module):
    \"\"\"Small weights, and 128 MiB of working memory in each call.\"\"\"

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        scratch = torch.ones(32 * 2**20)
        return self.linear(x) + scratch[0]


def model():
    return Scratch()


def inputs(batch_size):
    return (torch.ones(batch_size, 4),)
"""


def test_the_deployed_peak_counts_the_working_memory_of_the_calls(tmp_path: Path) -> None:
    """The figure is the process's peak over its calls, not what it held once the artifact was loaded."""
    import dataclasses

    from dlperf.optimize.evaluate import EvalSettings, evaluate_here
    from dlperf.optimize.footprint import measure_deployed, save_inputs
    from dlperf.workload.loader import load_workload

    (tmp_path / "scratch.py").write_text(SCRATCH)
    source = str(tmp_path / "scratch.py")
    settings = EvalSettings(source=source, warmup_iters=1, min_duration_s=0.0, min_iters=1, max_duration_s=1.0,
                            paired_blocks=0, heldout_samples=0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": [], "out_dir": str(tmp_path / "cand")},
                  lambda phase: None)
    assert save_inputs(load_workload(source).example_inputs(1), tmp_path / "inputs.npz")
    deployed = measure_deployed(tmp_path / "cand" / "artifact", tmp_path / "inputs.npz", 2, 1)
    assert deployed["engine"] == "torch" and deployed["calls"] == 2, deployed
    assert deployed["peak_rss_bytes"] > deployed["loaded_rss_bytes"] + 100 * 2**20
