"""A torch recipe moved together with its workload file (a project cloned elsewhere, copied into a container)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import OptimizeError
from dlperf.optimize.artifact import TORCH_FORMAT, copy_artifact, read_manifest, write_manifest
from dlperf.optimize.evaluate import EvalSettings, evaluate_here
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.workload.zoo import get

pytestmark = pytest.mark.unit

WORKLOAD = '''
import torch
from torch import nn
from dlperf.workload.base import Workload

def workload(width: int = 32):
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4))
    return Workload("moved", build, lambda b: (torch.randn(b, 16, generator=torch.Generator().manual_seed(b)),),
                    input_names=("x",))
'''


def _project(root: Path) -> Path:
    """project/model.py and project/artifacts/int8, exported as dlperf optimize --export does."""
    project = root / "project"
    project.mkdir(parents=True)
    (project / "model.py").write_text(WORKLOAD)
    spec = f"{project / 'model.py'}:workload?width=64"
    settings = EvalSettings(source=spec, batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    pipeline = [{"pass": "dynamic_int8", **dataclasses.asdict(DynamicInt8Config())}]
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": pipeline, "out_dir": str(root / "cand")},
                  lambda phase: None)
    copy_artifact(root / "cand" / "artifact", project / "artifacts" / "int8", {})
    return project


def test_a_recipe_moved_with_its_project_loads_from_the_new_place(tmp_path: Path) -> None:
    """The recipe records its workload by absolute path: a project moved whole failed with 'workload file
    '/old/place/model.py' does not exist' for every torch artifact in it."""
    project = _project(tmp_path / "old")
    x = torch.randn(3, 16)
    with torch.no_grad():
        before = dlperf.load(project / "artifacts" / "int8")(x)
    manifest = read_manifest(project / "artifacts" / "int8")
    assert manifest["workload"] == f"{project / 'model.py'}:workload?width=64"
    assert manifest["workload_relative"] == "../../model.py"
    moved = tmp_path / "elsewhere" / "app"
    moved.parent.mkdir()
    shutil.move(project, moved)
    with torch.no_grad():
        after = dlperf.load(moved / "artifacts" / "int8")(x)
    torch.testing.assert_close(after, before, atol=0, rtol=0)  # the same options (width=64) and weights
    # without the file beside it either, the error names both places
    (moved / "model.py").unlink()
    with pytest.raises(OptimizeError, match=r"does not exist \(nor is it at '.*elsewhere/app/model.py', where it was "
                                            r"relative to the artifact\)"):
        dlperf.load(moved / "artifacts" / "int8")


def test_a_recipe_whose_file_is_still_there_uses_it_and_an_edited_spec_is_not_redirected(tmp_path: Path) -> None:
    project = _project(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)
    (copy / "model.py").write_text("raise RuntimeError('the copy is not loaded')\n")
    assert dlperf.load(copy / "artifacts" / "int8")(torch.randn(2, 16)).shape == (2, 4)  # the recorded file
    file = copy / "artifacts" / "int8" / "manifest.json"
    manifest = json.loads(file.read_text())
    file.write_text(json.dumps({**manifest, "workload": str(tmp_path / "gone" / "other.py:workload")}))
    with pytest.raises(OptimizeError, match=r"workload file '.*gone/other.py' does not exist$"):
        dlperf.load(copy / "artifacts" / "int8")


PASS_MODULE = '''
from dataclasses import dataclass
from typing import ClassVar

from dlperf.passes.base import PassConfig, register


@dataclass(frozen=True)
class MarkConfig(PassConfig):
    name: ClassVar[str] = "{name}"


@register(MarkConfig)
class Mark:
    def applicable(self, config, state, ctx):
        return None

    def apply(self, config, state, ctx):
        state.model.marked = "{name}"
        return state
'''


def test_a_recipe_s_own_pass_module_moved_with_its_project_is_found_beside_it(tmp_path: Path) -> None:
    """The recipe records the search's pass module files by absolute path: a project moved whole (cloned elsewhere,
    copied into a container) failed with 'replays passes of the module /old/place/passes.py, which cannot be
    imported here'."""
    name = f"mark_{tmp_path.name.replace('-', '_')}"  # a pass and file no other test has imported
    project = tmp_path / "old" / "project"
    (project / "build").mkdir(parents=True)
    (project / "passes.py").write_text(PASS_MODULE.replace("{name}", name))
    torch.save(get("mlp").build_model().state_dict(), project / "build" / "weights.pt")
    write_manifest(project / "build", {
        "engine": "torch", "format": TORCH_FORMAT, "files": ["weights.pt"], "trained_after": -1, "workload": "zoo:mlp",
        "inputs": [], "outputs": [],
        "recipe": [{"pass": name, "version": 1}], "pass_modules": [str(project / "passes.py"), "json"]})
    copy_artifact(project / "build", project / "artifacts" / "marked", {})  # as dlperf optimize --export does
    manifest = read_manifest(project / "artifacts" / "marked")
    assert manifest["pass_modules"] == [str(project / "passes.py"), "json"]
    assert manifest["pass_modules_relative"] == ["../../passes.py", None]
    moved = tmp_path / "elsewhere" / "app"
    moved.parent.mkdir()
    shutil.move(project, moved)
    loaded = dlperf.load(moved / "artifacts" / "marked")
    assert loaded.marked == name and loaded(torch.randn(2, 64)).shape == (2, 10)
    (moved / "passes.py").unlink()  # gone from both places: the error names both
    with pytest.raises(OptimizeError, match=r"replays passes of the module '.*old/project/passes.py', which cannot "
                                            r"be imported here \(.*\) \(nor is it at '.*elsewhere/app/passes.py', "
                                            r"where it was relative to the artifact\)$"):
        dlperf.load(moved / "artifacts" / "marked")
