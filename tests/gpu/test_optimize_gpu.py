"""GPU paths of the torch-side passes: CUDA graphs, fp16/bf16 on CUDA, and a search on cuda. Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlperf.passes.base import ModelState, PassContext, apply_pass, apply_pipeline, initial_state
from dlperf.passes.cuda_graphs import CudaGraphsConfig, GraphedCall
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.precision import PrecisionConfig
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


@pytest.mark.parametrize(("dtype", "mode"), [("fp16", "autocast"), ("fp16", "cast"), ("bf16", "autocast")])
def test_low_precision_on_cuda_returns_fp32_close(dtype: str, mode: str) -> None:
    if dtype == "bf16" and not torch.cuda.is_bf16_supported():
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


@pytest.mark.slow
def test_search_on_cuda_finds_and_exports(tmp_path: Path) -> None:
    from dlperf.optimize.search import OptimizeConfig, optimize

    config = OptimizeConfig(device="cuda", batch_size=4, passes=("hygiene", "precision", "cuda_graphs"),
                            max_depth=2, time_budget_s=300, min_duration_s=0.2, workdir=str(tmp_path / "w"))
    result = optimize("zoo:mlp", config, export_dir=tmp_path / "out")
    assert result.baseline["status"] == "ok"
    assert any(r["label"].startswith("cuda_graphs") and r["status"] == "ok" for r in result.rows)
    assert result.baseline.get("cuda_peak_bytes") is not None
