"""OpenVINO engine pass: fp32 matches torch, int8 (weights / static) stays close, IR round trip, applicability."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dlperf.errors import ConfigError, PassError
from dlperf.passes.base import ModelState, PassContext, apply_pass, initial_state, why_not
from dlperf.passes.openvino import OpenVinoConfig, layer_ops, load_artifact, search_space
from dlperf.passes.sensitivity import cosine_rows
from dlperf.workload.zoo import get

from .engine_models import PaddedEncoder, padded_inputs, tiny_cnn, tiny_transformer, two_heads

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]

CTX = PassContext(threads=1)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(cosine_rows(a, b).min())


@pytest.mark.parametrize("frontend", ["onnx", "pytorch"])
def test_fp32_matches_torch_and_ir_round_trips(frontend: str, tmp_path: Path) -> None:
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(OpenVinoConfig(frontend=frontend), state, CTX)
    assert new.engine == "openvino" and new.precision == "fp32"
    assert new.notes[0].startswith(f"openvino CPU via the {frontend} frontend, 1 thread, ")  # it read "1 threads"
    for b in (1, 5):
        x = wl.example_inputs(b)
        torch.testing.assert_close(new.predict(*x), state.predict(*x).detach(), atol=1e-5, rtol=1e-4)
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    assert manifest["engine"] == "openvino" and manifest["files"] == ["model.xml", "model.bin"]
    assert manifest["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 64]}]
    assert (tmp_path / "model.bin").stat().st_size > 4 * 64 * 256  # fp32 weights, not fp16
    x = wl.example_inputs(3)
    torch.testing.assert_close(load_artifact(tmp_path, manifest)(*x), new.predict(*x), atol=1e-6, rtol=1e-5)


def test_tuple_outputs_and_integer_inputs() -> None:
    wl = two_heads()
    state = initial_state(wl)
    out = apply_pass(OpenVinoConfig(frontend="onnx"), state, CTX).predict(*wl.example_inputs(2))
    assert isinstance(out, tuple) and [o.shape[1] for o in out] == [4, 2]
    wl = tiny_transformer()
    state = initial_state(wl)
    new = apply_pass(OpenVinoConfig(frontend="onnx"), state, CTX)
    x = wl.example_inputs(3)
    torch.testing.assert_close(new.predict(*x), state.predict(*x), atol=1e-4, rtol=1e-3)


def test_weight_compression_is_close() -> None:
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(OpenVinoConfig(precision="int8-weights", frontend="onnx"), state, CTX)
    assert new.precision == "int8"
    x = wl.example_inputs(8)
    assert 0.995 < _cos(new.predict(*x), state.predict(*x)) < 1.0


def test_static_int8_conv_is_close(tmp_path: Path) -> None:
    wl = tiny_cnn()
    state = initial_state(wl)
    new = apply_pass(OpenVinoConfig(precision="int8-static", frontend="onnx", calibration_samples=16), state, CTX)
    x = wl.example_inputs(4)
    y = new.predict(*x)
    assert 0.97 < _cos(y, state.predict(*x)) < 1.0
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    assert "FakeQuantize" in (tmp_path / "model.xml").read_text()
    torch.testing.assert_close(load_artifact(tmp_path, manifest)(*x), y, atol=1e-5, rtol=1e-4)


def test_calibration_data_the_model_cannot_take_is_named() -> None:
    """The calibration batches are checked against the example inputs before OpenVINO converts or NNCF calibrates."""
    import dataclasses

    from dlperf.workload.base import EvalSpec

    wl = dataclasses.replace(get("mlp"), eval=EvalSpec(lambda predict: 1.0, "score",
                                                       calibration_inputs=lambda: [(torch.zeros(3, 5),)]))
    with pytest.raises(PassError, match=r"^workload 'mlp': its calibration_inputs yielded batch 0 as input 0 \(x\): "
                                        r"float32\[3, 5\], which does not fit the model's example inputs"):
        apply_pass(OpenVinoConfig(precision="int8-static", calibration_samples=8), initial_state(wl), CTX)


def test_keep_fp32_auto_finds_layers_and_meets_budget() -> None:
    wl = tiny_transformer()
    state = initial_state(wl)
    new = apply_pass(OpenVinoConfig(precision="int8-static", frontend="onnx", keep_fp32="auto",
                                    max_metric_drop=0.002), state, CTX)
    assert wl.eval is not None
    assert wl.eval.evaluate(new.predict) >= 1.0 - 0.002 - 1e-6
    assert any("budget met" in n for n in new.notes)


def test_layer_ops_maps_modules_to_ops_for_both_frontends(tmp_path: Path) -> None:
    import openvino as ov

    from dlperf.passes import _engine

    wl = tiny_cnn()
    model = wl.build_model().eval()
    x = wl.example_inputs(1)
    ov_model = ov.convert_model(model, example_input=x)
    assert len(layer_ops(ov_model, ["conv2"])) == 1
    # The PyTorch frontend renames a conv it folds a batch norm into; the ONNX path keeps every name.
    assert len(layer_ops(ov_model, ["conv1", "conv2", "head"])) == 2
    spec = _engine.io_spec(wl, model, [x])
    onnx_model = ov.convert_model(str(_engine.export_onnx(model, x, spec, tmp_path / "m.onnx")))
    assert len(layer_ops(onnx_model, ["conv1", "conv2", "head"])) == 3


def test_not_applicable_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    state = initial_state(get("mlp"))
    converted = ModelState(workload=state.workload, model=None, predict=state.predict, engine="onnxruntime")
    assert "already converted to onnxruntime" in (why_not(OpenVinoConfig(), converted, CTX) or "")
    assert "CPU" in (why_not(OpenVinoConfig(), state, PassContext(device="cuda")) or "")
    monkeypatch.setitem(sys.modules, "nncf", None)
    reason = why_not(OpenVinoConfig(precision="int8-static"), state, CTX)
    assert reason == "install dlperf[openvino] (nncf is not installed)"
    assert why_not(OpenVinoConfig(), state, CTX) is None
    monkeypatch.setitem(sys.modules, "openvino", None)
    assert why_not(OpenVinoConfig(), state, CTX) == "install dlperf[openvino] (openvino is not installed)"
    assert search_space(state.workload, CTX) == []


def test_config_validation_and_search_space() -> None:
    with pytest.raises(ConfigError):
        OpenVinoConfig(precision="int4")
    with pytest.raises(ConfigError):
        OpenVinoConfig(frontend="tflite")
    labels = [c.label() for c in search_space(get("mlp"), CTX)]
    assert labels == ["openvino", "openvino(precision=int8-weights)", "openvino(precision=int8-static,keep_fp32=auto)"]


def test_signals_still_work_after_a_compiled_model_is_gone() -> None:
    # OpenVINO's CPU plugin replaces the thread's alternate signal stack when it compiles and frees it
    # with the compiled model; without the restore, the next Python signal handler (SIGINT, SIGCHLD ...)
    # ran on freed memory and the kernel killed the process with SIGSEGV (seen in `dlperf serve DIR` and
    # in this suite). Run in a fresh process so that a crash is a failed test, not a dead test run.
    code = (
        "import gc, os, signal\n"
        "from dlperf.passes._sigstack import current_signal_stack\n"
        "from dlperf.passes.base import PassContext, apply_pass, initial_state\n"
        "from dlperf.passes.openvino import OpenVinoConfig\n"
        "from dlperf.workload.zoo import get\n"
        "got = []\n"
        "signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))\n"
        "before = current_signal_stack()\n"
        "wl = get('mlp')\n"
        "new = apply_pass(OpenVinoConfig(), initial_state(wl), PassContext(threads=1))\n"
        "new.predict(*wl.example_inputs(2))\n"
        "assert current_signal_stack() == before, (before, current_signal_stack())\n"
        "del new; gc.collect()\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "assert got == [signal.SIGUSR1]\n"
    )
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_model_the_pytorch_frontend_cannot_convert_goes_through_an_onnx_export() -> None:
    """'No conversion rule found for operations: aten::_nested_tensor_from_mask, aten::to_padded_tensor' failed
    every OpenVINO candidate of a transformer with a padding mask; the ONNX exporters lower those operators."""
    from dlperf.workload.base import Workload

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return PaddedEncoder()

    wl = Workload("padded", make, padded_inputs, input_names=("ids", "mask"))
    state = initial_state(wl)
    new = apply_pass(OpenVinoConfig(), state, PassContext(threads=1, batch_size=1))
    assert new.notes[0].startswith("openvino CPU via the onnx frontend")
    assert new.notes[1].startswith("converted through the ONNX frontend: the PyTorch frontend could not (")
    x = wl.example_inputs(5)
    with torch.no_grad():
        torch.testing.assert_close(new.predict(*x), state.predict(*x), atol=1e-4, rtol=1e-3)
