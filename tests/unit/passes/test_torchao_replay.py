"""A torchao static int8 recipe recalibrates when it is loaded: on the same samples as when it was measured."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from dlperf.optimize.artifact import load_artifact
from dlperf.optimize.evaluate import EvalSettings, evaluate_here
from dlperf.passes.base import PassContext, apply_pass, initial_state
from dlperf.passes.torchao_quant import TorchAoConfig
from dlperf.workload.loader import load_workload

pytest.importorskip("torchao")
pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]

# inputs drawn from torch's generator without a seed, as many workloads write them
UNSEEDED = '''
import torch
from torch import nn
from dlperf.workload.base import Workload

def workload():
    return Workload("unseeded", lambda: nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)),
                    lambda b: (torch.randn(b, 64) * 3,), input_names=("x",))
'''


def test_a_static_int8_recipe_loads_as_the_candidate_that_was_measured(tmp_path: Path) -> None:
    """Calibrated on the workload's random example inputs, each load drew other samples: two loads of one artifact
    gave outputs 0.02 apart, and neither was the measured candidate."""
    (tmp_path / "wl.py").write_text(UNSEEDED)
    source = f"{tmp_path / 'wl.py'}:workload"
    config = TorchAoConfig(compile=False, calibration_samples=16)
    settings = EvalSettings(source=source, batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0, export=True)
    result = evaluate_here({"settings": dataclasses.asdict(settings), "out_dir": str(tmp_path / "cand"),
                            "pipeline": [{"pass": "torchao", **dataclasses.asdict(config)}]}, lambda phase: None)
    assert result["status"] == "ok", result.get("error")
    x = torch.randn(4, 64) * 3
    with torch.no_grad():
        first = load_artifact(tmp_path / "cand" / "artifact")(x)
        torch.randn(1000)  # whatever ran before the load
        second = load_artifact(tmp_path / "cand" / "artifact")(x)
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    # and it is the candidate: the pass applied here, on the artifact's weights, calibrates the same way
    workload = load_workload(source)
    state = initial_state(workload)
    assert state.model is not None
    state.model.load_state_dict(torch.load(tmp_path / "cand" / "artifact" / "weights.pt", weights_only=True))
    candidate = apply_pass(config, state, PassContext())
    with torch.no_grad():
        torch.testing.assert_close(candidate.predict(x), first, atol=0, rtol=0)


def test_loading_a_torchao_recipe_prints_nothing(tmp_path: Path) -> None:
    """torchao's first import logged 'Failed to load .../_C_mxfp8...so: Could not load this library' per optional
    kernel library its build lacks (and torch a pytree deprecation), on the console of every dlperf.load and
    dlperf serve of a torchao recipe: read as errors, about nothing the recipe uses."""
    import subprocess
    import sys

    from dlperf.optimize.artifact import TORCH_FORMAT, write_manifest
    from dlperf.optimize.space import Candidate
    from dlperf.workload.zoo import get

    folder = tmp_path / "ao"
    folder.mkdir()
    torch.save(get("mlp").build_model().state_dict(), folder / "weights.pt")
    config = TorchAoConfig(method="int8-dynamic", compile=False)
    write_manifest(folder, {"engine": "torch", "format": TORCH_FORMAT, "files": ["weights.pt"], "trained_after": -1,
                            "workload": "zoo:mlp", "recipe": Candidate((config,)).to_list(), "inputs": [],
                            "outputs": []})
    code = f"import dlperf, torch; print(tuple(dlperf.load({str(folder)!r})(torch.randn(2, 64)).shape))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(2, 10)"
    assert done.stderr == ""
