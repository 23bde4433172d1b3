"""A workload and the artifacts exported from it are served under the same input and output names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlperf.optimize import artifact
from dlperf.optimize.evaluate import EvalSettings, evaluate_here
from dlperf.optimize.space import Candidate
from dlperf.passes.base import PassConfig, PassContext, apply_pass, initial_state
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.onnxruntime import OrtConfig
from dlperf.passes.openvino import OpenVinoConfig
from dlperf.serve.instances import ServedModel, load_served_model
from dlperf.workload.loader import load_workload

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::UserWarning")]

# two inputs and two outputs, none of them named by the workload
WORKLOAD = """\
import torch, dlperf

class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        h = self.lin(x + y)
        return h, h.sum(dim=1)

workload = dlperf.Workload(name='two-heads', make_model=TwoHeads,
    make_inputs=lambda b: (torch.ones(b, 4), torch.zeros(b, 4)))
"""


def _names(served: ServedModel) -> tuple[list[str], list[str]]:
    return [s.name for s in served.signature.inputs], [s.name for s in served.signature.outputs]


@pytest.fixture(scope="module")
def workload_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wl") / "two_heads.py"
    path.write_text(WORKLOAD)
    return path


def test_a_torch_artifact_is_served_under_the_workloads_names(workload_file: Path, tmp_path: Path) -> None:
    """`dlperf serve WORKLOAD` said input__0, the exported torch artifact's manifest input_0: a client of the one was
    told `unknown input` by the other."""
    served = _names(load_served_model(str(workload_file)))
    assert served == (["input__0", "input__1"], ["output__0", "output__1"])
    settings = EvalSettings(source=str(workload_file), batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": Candidate((HygieneConfig(),)).to_list(),
                   "out_dir": str(tmp_path)}, lambda phase: None)
    assert _names(load_served_model(str(tmp_path / "artifact"))) == served


@pytest.mark.parametrize("config", [OrtConfig(), OpenVinoConfig()], ids=lambda c: c.name)
def test_an_engine_artifact_is_served_under_the_workloads_names(config: PassConfig, workload_file: Path,
                                                               tmp_path: Path) -> None:
    pytest.importorskip(config.name)
    new = apply_pass(config, initial_state(load_workload(str(workload_file))), PassContext(threads=1))
    artifact.write_manifest(tmp_path, new.exporter(tmp_path))  # type: ignore[misc]
    assert _names(load_served_model(str(tmp_path))) == _names(load_served_model(str(workload_file)))


def test_an_older_artifact_is_served_by_its_manifests_names(workload_file: Path, tmp_path: Path) -> None:
    """Artifacts exported before the names were made one named their tensors input_0 and output_0: they keep them."""
    settings = EvalSettings(source=str(workload_file), batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": Candidate((HygieneConfig(),)).to_list(),
                   "out_dir": str(tmp_path)}, lambda phase: None)
    folder = tmp_path / "artifact"
    manifest = artifact.read_manifest(folder)
    for key in ("inputs", "outputs"):
        for entry in manifest[key]:
            entry["name"] = entry["name"].replace("__", "_")
    artifact.write_manifest(folder, manifest)
    assert _names(load_served_model(str(folder))) == (["input_0", "input_1"], ["output_0", "output_1"])
