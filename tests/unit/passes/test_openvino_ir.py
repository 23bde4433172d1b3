"""The OpenVINO IR a user deploys without dlperf: its tensors carry the manifest's names; a model OpenVINO cannot
convert fails with one line naming the ops."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.errors import PassError
from dlperf.optimize import artifact
from dlperf.passes.base import PassContext, apply_pass, initial_state
from dlperf.passes.openvino import OpenVinoConfig
from dlperf.workload.base import Workload
from dlperf.workload.zoo import get

from .engine_models import tiny_transformer, two_heads

ov = pytest.importorskip("openvino")
pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]

CTX = PassContext(threads=1)


@pytest.mark.parametrize("config", [OpenVinoConfig(), OpenVinoConfig(precision="int8-weights")],
                         ids=lambda c: c.label())
@pytest.mark.parametrize("make", [two_heads, tiny_transformer, lambda: get("mlp")], ids=["two-heads", "tiny-tf", "mlp"])
def test_the_ir_names_its_inputs_and_outputs_as_the_manifest_does(make: Callable[[], Workload],
                                                                   config: OpenVinoConfig, tmp_path: Path) -> None:
    """The PyTorch frontend left every output of the IR unnamed: OpenVINO itself (`compiled[name]`), its model
    server and Triton address outputs by name, and the manifest's names ('logits', 'embedding') were in no file."""
    wl = make()
    state = apply_pass(config, initial_state(wl), CTX)
    assert state.exporter is not None
    manifest = state.exporter(tmp_path)
    artifact.write_manifest(tmp_path, manifest)
    compiled = ov.Core().compile_model(str(tmp_path / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert [i.get_any_name() for i in compiled.inputs] == [s["name"] for s in manifest["inputs"]]
    assert [o.get_names() for o in compiled.outputs] == [{s["name"]} for s in manifest["outputs"]]
    # deployed without dlperf, by name, it gives what dlperf.load gives
    x = wl.example_inputs(3)
    results = compiled({s["name"]: t.numpy() for s, t in zip(manifest["inputs"], x, strict=True)})
    loaded = artifact.load_artifact(tmp_path)(*x)
    outs = loaded if isinstance(loaded, tuple) else (loaded,)
    for spec, out in zip(manifest["outputs"], outs, strict=True):
        torch.testing.assert_close(torch.from_numpy(results[spec["name"]]), out, atol=0, rtol=0)


class _Echo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.lin(x)
        return h, h, x


def test_an_output_that_is_an_input_keeps_the_input_s_name(tmp_path: Path) -> None:
    wl = Workload("echo", _Echo, lambda b: (torch.randn(b, 4),), input_names=("x",), output_names=("h1", "h2", "echo"))
    state = apply_pass(OpenVinoConfig(), initial_state(wl), CTX)
    artifact.write_manifest(tmp_path, state.exporter(tmp_path))  # type: ignore[misc]
    model = ov.Core().read_model(str(tmp_path / "model.xml"))
    assert [i.get_names() for i in model.inputs] == [{"x"}]
    x = wl.example_inputs(2)
    with torch.no_grad():
        want = wl.build_model()(*x)
    for got, ref in zip(artifact.load_artifact(tmp_path)(*x), want, strict=True):
        assert got.shape == ref.shape


class _Bessel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.i0e(self.lin(x))


def test_a_model_openvino_cannot_convert_fails_on_one_line_naming_the_op() -> None:
    """The error was OpenVINO's OpConversionFailure whole: C++ source locations, a log per op and, after an ONNX
    export in the same process, the TorchScript graph, printed under the optimizer's table."""
    wl = Workload("bessel", _Bessel, lambda b: (torch.randn(b, 8),), input_names=("x",))
    with pytest.raises(PassError) as info:
        apply_pass(OpenVinoConfig(), initial_state(wl), CTX)
    said = str(info.value)
    assert said.startswith("OpenVINO's PyTorch frontend could not convert the model: No conversion rule found for "
                           "operations: aten::special_i0e; and through an ONNX export: ONNX export failed: "
                           "torchscript exporter: UnsupportedOperatorError: Exporting the operator 'aten::special_i0e'")
    assert "\n" not in said  # the ONNX route tried after the PyTorch frontend, on the same line
