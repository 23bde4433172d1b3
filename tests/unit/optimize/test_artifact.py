"""Artifacts: manifest checks, safe torch recipe round trip, engine dispatch errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import OptimizeError
from dlperf.optimize.artifact import copy_artifact, io_spec, load_artifact, read_manifest
from dlperf.optimize.evaluate import EvalSettings, evaluate_here
from dlperf.optimize.space import Candidate
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.workload.zoo import get

pytestmark = pytest.mark.unit


def _export(tmp_path: Path, cand: Candidate) -> Path:
    settings = EvalSettings(source="zoo:mlp", batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": cand.to_list(), "out_dir": str(tmp_path)},
                  lambda phase: None)
    return tmp_path / "artifact"


def test_torch_recipe_round_trip_matches_the_candidate(tmp_path: Path) -> None:
    folder = _export(tmp_path, Candidate((HygieneConfig(), DynamicInt8Config())))
    manifest = read_manifest(folder)
    assert manifest["engine"] == "torch" and manifest["files"] == ["weights.pt"]
    assert manifest["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 64]}]
    assert manifest["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]
    predict = dlperf.load(folder)
    model = get("mlp").build_model().eval()
    x = torch.randn(5, 64)
    with torch.no_grad():
        ref = model(x)
    out = predict(x)
    assert out.shape == (5, 10)
    assert float(torch.nn.functional.cosine_similarity(out, ref).min()) > 0.99
    # The weights file holds only tensors: it loads with weights_only=True.
    assert all(isinstance(v, torch.Tensor) for v in torch.load(folder / "weights.pt", weights_only=True).values())


def test_copy_artifact_merges_manifest_and_refuses_foreign_folders(tmp_path: Path) -> None:
    folder = _export(tmp_path / "a", Candidate((HygieneConfig(),)))
    out = copy_artifact(folder, tmp_path / "out", {"passes": ["hygiene"], "dlperf_version": dlperf.__version__})
    manifest = read_manifest(out)
    assert manifest["passes"] == ["hygiene"] and manifest["engine"] == "torch"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    with pytest.raises(OptimizeError, match="not a dlperf artifact"):
        copy_artifact(folder, foreign, {})
    assert (foreign / "thesis.tex").exists()


def test_load_errors_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(OptimizeError, match=r"no manifest\.json"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "warp", "files": []}))
    with pytest.raises(OptimizeError, match="engine 'warp'"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "torch", "format_version": 99}))
    with pytest.raises(OptimizeError, match="upgrade dlperf"):
        load_artifact(tmp_path)
    gone = str(tmp_path / "moved_away.py")
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "torch", "format": "dlperf-torch-recipe",
                                                        "pass_modules": [gone], "workload": "zoo:mlp"}))
    with pytest.raises(OptimizeError, match=f"replays passes of the module '{gone}', which cannot be imported here"):
        load_artifact(tmp_path)


def test_io_spec_marks_batch_dynamic() -> None:
    spec = io_spec((torch.zeros(4, 3, dtype=torch.int64),), ("ids",))
    assert spec == [{"name": "ids", "dtype": "int64", "shape": [-1, 3]}]


def test_damaged_weights_are_named_without_torch_s_advice_to_unpickle_code(tmp_path: Path) -> None:
    """torch's UnpicklingError text advises weights_only=False, which would run whatever the file holds."""
    from dlperf.optimize.artifact import _load_weights

    file = tmp_path / "weights.pt"
    file.write_bytes(b"garbage")
    with pytest.raises(OptimizeError) as caught:
        _load_weights(file, "cpu")
    message = str(caught.value)
    assert message.startswith(f"cannot load {file}: UnpicklingError; it is damaged") and "export" in message
    assert "weights_only" not in message
    with pytest.raises(OptimizeError, match=f"cannot load {tmp_path / 'trained.pt'}: FileNotFoundError"):
        _load_weights(tmp_path / "trained.pt", "cpu")


def test_serving_a_path_that_does_not_exist_names_both_kinds_of_model(tmp_path: Path) -> None:
    from dlperf.errors import ConfigError
    from dlperf.serve.instances import load_served_model

    with pytest.raises(ConfigError, match="does not exist: give an artifact folder written by `dlperf optimize "
                                          "--export DIR`, or a workload"):
        load_served_model(str(tmp_path / "gone"))
