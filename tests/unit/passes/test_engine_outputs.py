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
