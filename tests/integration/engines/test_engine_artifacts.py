"""Engine passes through dlperf.optimize: export -> manifest -> artifact.load_artifact dispatch -> same outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlperf.optimize import artifact
from dlperf.passes.base import PassConfig, PassContext, apply_pass, initial_state
from dlperf.passes.onnxruntime import OrtConfig
from dlperf.passes.openvino import OpenVinoConfig
from dlperf.workload.zoo import get

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::UserWarning")]

CTX = PassContext(threads=1)


@pytest.mark.parametrize("config", [
    OrtConfig(precision="int8-static", calibration_samples=32),
    OrtConfig(precision="int8-dynamic"),
    OpenVinoConfig(frontend="onnx", static_shape=True),
    OpenVinoConfig(precision="int8-static", frontend="onnx", calibration_samples=32),
], ids=lambda c: c.label())
def test_exported_artifact_loads_through_the_optimizer(config: PassConfig, tmp_path: Path) -> None:
    wl = get("digits-cnn")
    state = initial_state(wl)
    new = apply_pass(config, state, CTX)
    assert new.exporter is not None
    artifact.write_manifest(tmp_path, new.exporter(tmp_path))
    loaded = artifact.load_artifact(tmp_path)
    for b in (1, 4):
        x = wl.example_inputs(b)
        torch.testing.assert_close(loaded(*x), new.predict(*x), atol=1e-5, rtol=1e-4)
    # int8 keeps the trained CNN's accuracy within a point of fp32
    assert wl.eval is not None
    assert wl.eval.evaluate(loaded) >= wl.eval.evaluate(state.predict) - 0.01
