"""GPU paths of the torch-side passes: CUDA graphs, fp16/bf16 on CUDA, and a search on cuda. Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf._device import cuda_bf16_native
from dlperf.passes.base import ModelState, PassContext, apply_pass, apply_pipeline, initial_state, why_not
from dlperf.passes.compile import CompileConfig
from dlperf.passes.cuda_graphs import CudaGraphsConfig, GraphedCall
from dlperf.passes.distill import DistillConfig
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.precision import PrecisionConfig
from dlperf.passes.pruning import PruneConfig
from dlperf.workload.zoo import get

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CUDA = PassContext(device="cuda", batch_size=4)


def _state() -> ModelState:
    return initial_state(get("mlp"), device="cuda")


def test_cuda_graphs_replay_matches_eager() -> None:
    state = _state()
    x = torch.randn(4, 64, device="cuda")
    with torch.no_grad():
        ref = state.model(x)  # type: ignore[misc]
    state = apply_pipeline([HygieneConfig(), CudaGraphsConfig()], state, CUDA)
    assert isinstance(state.predict, GraphedCall)
    out = state.predict(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    # Another batch size falls back to the eager call.
    y = torch.randn(3, 64, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(state.predict(y), state.model(y), rtol=1e-4, atol=1e-5)  # type: ignore[misc]


def test_cuda_graphs_are_not_captured_around_a_compile_mode_that_graphs_itself() -> None:
    state = _state()
    state.applied.append(CompileConfig(mode="max-autotune"))
    assert "already runs the model as CUDA graphs" in (why_not(CudaGraphsConfig(), state, CUDA) or "")
    assert why_not(CudaGraphsConfig(), _state(), CUDA) is None


@pytest.mark.parametrize(("dtype", "mode"), [("fp16", "autocast"), ("fp16", "cast"), ("bf16", "autocast")])
def test_low_precision_on_cuda_returns_fp32_close(dtype: str, mode: str) -> None:
    if dtype == "bf16" and not cuda_bf16_native():
        pytest.skip("no bf16 on this GPU")
    state = _state()
    x = torch.randn(4, 64, device="cuda")
    with torch.no_grad():
        ref = state.model(x)  # type: ignore[misc]
    state = apply_pass(PrecisionConfig(dtype=dtype, mode=mode), state, CUDA)
    with torch.no_grad():
        out = state.predict(x)
    assert out.dtype == torch.float32
    assert float(torch.nn.functional.cosine_similarity(out, ref).min()) > 0.99


def test_tf32_on_cuda_is_close_to_fp32_and_offered_on_ampere_or_newer() -> None:
    from dlperf.passes.precision import search_space

    state = _state()
    x = torch.randn(4, 64, device="cuda")
    with torch.no_grad():
        ref = state.model(x)  # type: ignore[misc]
    before = torch.get_float32_matmul_precision()
    state = apply_pass(PrecisionConfig(dtype="tf32"), state, CUDA)
    with torch.no_grad():
        out = state.predict(x)
    assert state.precision == "tf32" and out.dtype == torch.float32
    assert float(torch.nn.functional.cosine_similarity(out, ref).min()) > 0.999
    assert torch.get_float32_matmul_precision() == before
    offered = PrecisionConfig(dtype="tf32") in search_space(get("mlp"), CUDA)
    assert offered == (torch.cuda.get_device_capability()[0] >= 8)


@pytest.mark.parametrize(("workload", "config"), [
    ("mlp", PruneConfig(amount=0.5, finetune_steps=5)),
    ("digits-cnn", PruneConfig(amount=0.5, finetune_steps=5)),  # conv -> conv, and conv -> flatten -> linear (blocks)
    ("mlp", PruneConfig(method="magnitude", amount=0.5, finetune_steps=5)),
    ("mlp", DistillConfig(steps=5)),
], ids=["structured-mlp", "structured-cnn", "magnitude", "distill"])
def test_weight_changing_passes_train_on_the_gpu(workload: str, config: Any) -> None:
    """In a CUDA search the model is on the GPU (optimize.evaluate moves it there) and the training data on the
    CPU: the new layers, the fine-tuning and the distillation batches must all end up on the model's device."""
    wl = get(workload)
    state = initial_state(wl, device="cuda")
    x = tuple(t.cuda() for t in wl.example_inputs(4))
    with torch.no_grad():
        ref = state.model(*x)  # type: ignore[misc]
    state = apply_pass(config, state, CUDA)
    assert state.model is not None
    assert {p.device.type for p in state.model.parameters()} == {"cuda"}
    with torch.no_grad():
        out = state.predict(*x)
    assert out.shape == ref.shape and out.device.type == "cuda" and bool(torch.isfinite(out).all())


def test_a_workload_with_host_eval_data_scores_a_model_on_the_gpu() -> None:
    """zoo:digits-cnn's evaluate holds its images and labels on the host, as a user's would: scored on cuda, the
    predict it is given takes them to the GPU and gives the logits back (an optimize on cuda failed at its
    baseline without this)."""
    from dlperf.errors import WorkloadError
    from dlperf.workload.loader import load_workload

    wl = load_workload("zoo:digits-cnn")
    model = wl.build_model().to("cuda").eval()
    assert wl.score(model, "cuda") > 0.9
    with pytest.raises(WorkloadError, match="evaluate function raised"):
        wl.score(model)


@pytest.mark.slow
def test_search_on_cuda_finds_and_exports(tmp_path: Path) -> None:
    """A small search on cuda, each candidate in its own process with the model moved to the GPU there:
    CUDA graphs, and pruning (new layers and fine-tuning on the GPU). Sized for scripts/gpu-check's limit."""
    from dlperf.optimize.search import OptimizeConfig, optimize

    config = OptimizeConfig(device="cuda", batch_size=4, passes=("cuda_graphs", "pruning"), max_depth=1,
                            time_budget_s=100, min_duration_s=0.2, max_duration_s=2.0, ab_blocks=8,
                            confirm_top=1, workdir=str(tmp_path / "w"))
    result = optimize("zoo:mlp", config, export_dir=tmp_path / "out")
    assert result.baseline["status"] == "ok"
    ok = {r["label"] for r in result.rows if r["status"] == "ok"}
    assert "cuda_graphs" in ok and any(label.startswith("pruning") for label in ok), result.rows
    assert result.baseline.get("cuda_peak_bytes") is not None


@pytest.mark.slow
def test_a_memory_search_on_cuda_ranks_by_each_deployed_process_s_gpu_memory(tmp_path: Path) -> None:
    """--objective memory on cuda ranked by the host's peak RSS. Each artifact's fresh process now reads its GPU
    memory (NVML's figure for the process, else torch's reserved peak), and the ranking and front use that."""
    from dlperf.optimize.footprint import NVML_GPU_MEMORY, TORCH_GPU_MEMORY
    from dlperf.optimize.search import OptimizeConfig, optimize

    config = OptimizeConfig(device="cuda", objective="memory", batch_size=4, passes=("hygiene",), max_depth=1,
                            time_budget_s=60, min_duration_s=0.2, max_duration_s=2.0, ab_blocks=8,
                            confirm_top=1, workdir=str(tmp_path / "w"))
    result = optimize("zoo:mlp", config, export_dir=tmp_path / "out")
    ok = [r for r in [result.baseline, *result.rows] if r["status"] == "ok"]
    assert len(ok) >= 2, result.rows
    for row in ok:
        assert row["deployed_memory"].get("gpu_bytes_of") in (NVML_GPU_MEMORY, TORCH_GPU_MEMORY), row["label"]
        assert row["gpu_memory_bytes"] == row["deployed_memory"]["gpu_bytes"] > 0
    # the process's CUDA context alone is hundreds of MiB: NVML's figure is far above the model's 0.1 MiB
    if ok[0]["gpu_memory_of"] == NVML_GPU_MEMORY:
        assert ok[0]["gpu_memory_bytes"] > 50 * 2**20
