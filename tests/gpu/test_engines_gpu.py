"""Engine passes on a CUDA GPU: Torch-TensorRT and the ONNX Runtime CUDA / TensorRT providers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlperf.passes.base import PassContext, apply_pass, initial_state, why_not
from dlperf.passes.onnxruntime import OrtConfig
from dlperf.passes.onnxruntime import load_artifact as load_ort
from dlperf.passes.tensorrt import TensorRtConfig
from dlperf.passes.tensorrt import load_artifact as load_trt
from dlperf.workload.zoo import get

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

GPU = PassContext(device="cuda", threads=1)


def _ort_has(provider: str) -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    return provider in ort.get_available_providers()


@pytest.mark.parametrize(("provider", "ep"), [("cuda", "CUDAExecutionProvider"),
                                              ("tensorrt", "TensorrtExecutionProvider")])
def test_ort_gpu_providers_match_torch(provider: str, ep: str, tmp_path: Path) -> None:
    if not _ort_has(ep):
        pytest.skip(f"onnxruntime here has no {ep}")
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(OrtConfig(provider=provider), state, GPU)
    x = wl.example_inputs(4)
    ref = state.predict(*x).detach()
    torch.testing.assert_close(new.predict(*x), ref, atol=2e-3, rtol=2e-3)
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    assert manifest["provider"] == provider
    torch.testing.assert_close(load_ort(tmp_path, manifest)(*x), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("provider", ["cpu", "cuda"])
def test_ort_pass_takes_a_model_already_on_the_gpu(provider: str) -> None:
    """In a CUDA search the candidate's torch model is on the GPU before the pass (optimize.evaluate moves it
    there); the pass exports it from the CPU, and its outputs come back on the inputs' device."""
    if provider == "cuda" and not _ort_has("CUDAExecutionProvider"):
        pytest.skip("onnxruntime here has no CUDAExecutionProvider")
    wl = get("mlp")
    state = initial_state(wl, device="cuda")
    new = apply_pass(OrtConfig(provider=provider), state, GPU)
    x = tuple(t.cuda() for t in wl.example_inputs(4))
    out = new.predict(*x)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out, state.predict(*x).detach().cuda(), atol=2e-3, rtol=2e-3)


def test_torch_tensorrt_fp16_is_close_and_round_trips(tmp_path: Path) -> None:
    pytest.importorskip("torch_tensorrt")
    wl = get("mlp")
    state = initial_state(wl, device="cuda")
    assert why_not(TensorRtConfig(), state, GPU) is None
    new = apply_pass(TensorRtConfig(precision="fp16"), state, GPU)
    x = tuple(t.cuda() for t in wl.example_inputs(1))
    ref = state.predict(*x).detach()
    out = new.predict(*x)
    cos = torch.nn.functional.cosine_similarity(out.float(), ref.float(), dim=1)
    assert float(cos.min()) > 0.999
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    assert manifest["engine"] == "tensorrt" and (tmp_path / "model.ep").exists()
    loaded = load_trt(tmp_path, manifest)
    torch.testing.assert_close(loaded(*x).float(), out.float(), atol=1e-3, rtol=1e-3)
    # built and saved for a batch range (a static engine ran its one batch size only: serve's warm-up failed)
    assert manifest["batch_range"] == [1, 32], new.notes
    x8 = tuple(t.cuda() for t in wl.example_inputs(8))
    cos8 = torch.nn.functional.cosine_similarity(loaded(*x8).float(), state.predict(*x8).detach().float(), dim=1)
    assert float(cos8.min()) > 0.999
