"""Engine artifacts return outputs shaped as the model's: a 0-d (scalar) output stays 0-d."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.optimize import artifact
from dlperf.passes.base import PassConfig, PassContext, apply_pass, initial_state
from dlperf.passes.onnxruntime import OrtConfig
from dlperf.passes.openvino import OpenVinoConfig
from dlperf.workload.base import Workload

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]


class _WithTotal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.lin(x)
        return logits, logits.logsumexp(dim=1).mean()  # per sample, and one number for the batch


@pytest.mark.parametrize("config", [OrtConfig(), OpenVinoConfig()], ids=lambda c: c.name)
def test_a_scalar_output_stays_a_scalar(config: PassConfig, tmp_path: Path) -> None:
    """np.ascontiguousarray turned the engine's 0-d result into shape [1]: the artifact answered [1] where the model
    returns [] (and the manifest says [])."""
    pytest.importorskip(config.name)
    wl = Workload("total", _WithTotal, lambda b: (torch.randn(b, 8, generator=torch.Generator().manual_seed(b)),),
                  input_names=("x",), output_names=("logits", "total"))
    state = initial_state(wl)
    new = apply_pass(config, state, PassContext(threads=1))
    artifact.write_manifest(tmp_path, new.exporter(tmp_path))  # type: ignore[misc]
    assert artifact.read_manifest(tmp_path)["outputs"][1]["shape"] == []
    loaded = artifact.load_artifact(tmp_path)
    x = wl.example_inputs(5)
    with torch.no_grad():
        want = state.predict(*x)
    for got in (new.predict(*x), loaded(*x)):
        assert [tuple(t.shape) for t in got] == [(5, 3), ()]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


class _Named(nn.Module):
    """Returns a dict of tensors by name, as a Hugging Face-style model does."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 3)
        self.proj = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.head(x), "embedding": self.proj(x).tanh()}


@pytest.mark.parametrize("config", [OrtConfig(), OpenVinoConfig()], ids=lambda c: c.name)
def test_a_dict_output_comes_back_a_dict_with_the_same_keys(config: PassConfig, tmp_path: Path) -> None:
    """Engine passes refused a model returning a dict ('not applicable: the model returns dict'), so a transformer
    with named outputs was left to compile alone; the exporters take a dict of tensors, flattened in its order."""
    pytest.importorskip(config.name)
    wl = Workload("named", _Named, lambda b: (torch.randn(b, 8, generator=torch.Generator().manual_seed(b)),),
                  input_names=("x",))
    state = initial_state(wl)
    new = apply_pass(config, state, PassContext(threads=1))
    artifact.write_manifest(tmp_path, new.exporter(tmp_path))  # type: ignore[misc]
    manifest = artifact.read_manifest(tmp_path)
    # without output_names the dict's keys name the outputs, in its order
    assert [o["name"] for o in manifest["outputs"]] == ["logits", "embedding"]
    assert manifest["output_structure"] == "dict" and manifest["output_keys"] == ["logits", "embedding"]
    loaded = artifact.load_artifact(tmp_path)
    x = wl.example_inputs(4)
    with torch.no_grad():
        want = state.predict(*x)
    for got in (new.predict(*x), loaded(*x)):
        assert isinstance(got, dict) and list(got) == ["logits", "embedding"]
        assert tuple(got["logits"].shape) == (4, 3) and tuple(got["embedding"].shape) == (4, 5)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


def test_outputs_that_are_not_tensors_by_name_are_still_refused() -> None:
    from dlperf.errors import PassNotApplicable
    from dlperf.passes._engine import flat_outputs

    assert flat_outputs({"a": torch.ones(1), "b": torch.zeros(2)})[2] == ("a", "b")
    for out in ({"a": torch.ones(1), "b": [torch.ones(1)]}, {0: torch.ones(1)}, {}, "text"):
        with pytest.raises(PassNotApplicable, match="a tensor, a tuple of tensors or a dict of tensors by name"):
            flat_outputs(out)


class _Encoder(nn.Module):
    """Token ids -> an nn.TransformerEncoder (whose fast path only the torch.export-based exporter traces) -> a dict
    whose key `embedding` is also the name that exporter gives the value of its `aten.embedding` node."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(50, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.encoder(self.tokens(ids))
        return {"last_hidden_state": hidden, "embedding": hidden.mean(1)}


def test_an_output_named_as_a_value_inside_the_graph_exports_a_graph_that_loads(tmp_path: Path) -> None:
    """torch.onnx's dynamo exporter renamed the outputs without looking at the names inside: an output `embedding`
    beside its `aten.embedding` node's value `embedding` made a graph ONNX Runtime refused ('Duplicate definition of
    name (embedding)'), so every onnxruntime candidate of such a transformer failed."""
    pytest.importorskip("onnxruntime")

    def make() -> nn.Module:
        torch.manual_seed(0)
        return _Encoder().eval()

    wl = Workload("enc", make, lambda b: (torch.randint(0, 50, (b, 6), generator=torch.Generator().manual_seed(b)),),
                  input_names=("ids",))
    state = initial_state(wl)
    new = apply_pass(OrtConfig(), state, PassContext(threads=1, batch_size=1))
    artifact.write_manifest(tmp_path, new.exporter(tmp_path))  # type: ignore[misc]
    assert [o["name"] for o in artifact.read_manifest(tmp_path)["outputs"]] == ["last_hidden_state", "embedding"]
    x = wl.example_inputs(3)
    with torch.no_grad():
        want = state.predict(*x)
    torch.testing.assert_close(artifact.load_artifact(tmp_path)(*x), want, atol=1e-4, rtol=1e-3)


def test_a_graph_onnx_runtime_refuses_is_not_called_a_batch_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exported graph ONNX Runtime would not load was reported as 'the graph traced at batch 1 does not run at
    batch 2 (the trace fixed a size that follows the batch)', sending the user after dynamic shapes."""
    pytest.importorskip("onnxruntime")
    from dlperf.errors import PassError
    from dlperf.passes import _engine

    monkeypatch.setattr(_engine, "_rename_clashing_values", lambda graph: None)  # the duplicate name, back
    wl = Workload("enc", _Encoder, lambda b: (torch.randint(0, 50, (b, 6)),), input_names=("ids",))
    with pytest.raises(PassError) as info:
        apply_pass(OrtConfig(), initial_state(wl), PassContext(threads=1, batch_size=1))
    message = str(info.value).partition("dynamo exporter: ")[2]
    assert message.startswith("ONNX Runtime refuses the exported graph: ") and "Duplicate definition" in message
    assert "does not run at batch" not in message
