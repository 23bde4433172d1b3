"""Artifacts: manifest checks, safe torch recipe round trip, engine dispatch errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import OptimizeError
from dlperf.optimize.artifact import check_export_dir, copy_artifact, io_spec, load_artifact, read_manifest
from dlperf.optimize.evaluate import EvalSettings, evaluate_here
from dlperf.optimize.space import Candidate
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.workload.zoo import get
from tests.unit.optimize.artifacts import export_candidate as _export

pytestmark = pytest.mark.unit


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


def test_export_replaces_only_a_folder_that_is_a_dlperf_artifact(tmp_path: Path) -> None:
    """A folder was deleted whole because it held some file named manifest.json."""
    folder = _export(tmp_path / "a", Candidate((HygieneConfig(),)))
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "manifest.json").write_text('{"engine": "mine"}')
    (project / "data" / "keep.csv").write_text("x")
    with pytest.raises(OptimizeError, match=r"--export folder '.*project' is not empty and not a dlperf artifact "
                                            r"\(its manifest.json is not a dlperf manifest"):
        copy_artifact(folder, project, {})
    assert (project / "data" / "keep.csv").read_text() == "x"
    # an artifact someone added a file to is not replaced either
    old = copy_artifact(folder, tmp_path / "old", {"label": "first"})
    (old / "notes.txt").write_text("mine")
    with pytest.raises(OptimizeError, match=r"holds files an export does not write \(notes.txt\)"):
        copy_artifact(folder, old, {})
    assert (old / "notes.txt").exists()
    # a plain earlier export is replaced
    (old / "notes.txt").unlink()
    (old / "weights.pt").write_bytes(b"stale")
    copy_artifact(folder, old, {"label": "second"})
    assert read_manifest(old)["label"] == "second"
    assert (old / "weights.pt").read_bytes() == (folder / "weights.pt").read_bytes()


def test_export_paths_that_cannot_be_written_are_refused_up_front(tmp_path: Path) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    with pytest.raises(OptimizeError, match=r"--export '.*afile' is a file, not a folder"):
        check_export_dir(a_file)
    with pytest.raises(OptimizeError, match=r"'.*afile' is a file, not a folder: choose another path"):
        check_export_dir(a_file / "sub" / "dir")
    with pytest.raises(OptimizeError, match=r"--export '/proc/nope/x' cannot be created: no folder can be made in "
                                            r"'/proc'"):
        check_export_dir("/proc/nope/x")
    assert check_export_dir(tmp_path / "new" / "dir") == tmp_path / "new" / "dir"
    assert not (tmp_path / "new").exists()  # the check leaves nothing behind


def test_an_export_folder_through_a_link_or_over_the_working_folder_is_refused_up_front(tmp_path: Path) -> None:
    """Both failed only after the whole search: 'Cannot call rmtree on a symbolic link', and the working folder
    (full of candidates) 'is not empty and not a dlperf artifact'."""
    from dlperf.optimize.artifact import check_apart

    target = tmp_path / "v3"
    target.mkdir()
    (tmp_path / "current").symlink_to(target)
    with pytest.raises(OptimizeError, match=r"--export '.*current' is a symbolic link \(to '.*v3'\): give the "
                                            r"folder it points to"):
        check_export_dir(tmp_path / "current")
    work = tmp_path / "optimize"
    for export in (work, work / "best", tmp_path):
        with pytest.raises(OptimizeError, match="overlaps the search's working folder"):
            check_apart(export, work)
    check_apart(tmp_path / "exported", work)


def test_load_errors_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(OptimizeError, match=r"no manifest\.json"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "warp", "files": []}))
    with pytest.raises(OptimizeError, match="engine 'warp'"):
        load_artifact(tmp_path)
    # bench loaded it and failed in the model factory, where serve refused it up front
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "torch", "workload": "zoo:mlp", "outputs": []}))
    with pytest.raises(OptimizeError, match="field 'inputs' is missing: the artifact is damaged or edited"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "torch", "format_version": 99}))
    with pytest.raises(OptimizeError, match="upgrade dlperf"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format_version": 1, "engine": "torch", "files": ["weigh')
    with pytest.raises(OptimizeError, match=r"manifest\.json' is not valid JSON \(Unterminated string .*\): the "
                                            r"artifact is damaged \(a copy cut short\?\); export it again"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1, "engine": "torch", "workload": "zoo:mlp",
                                                        "inputs": [], "outputs": [],
                                                        "files": ["weights.pt", "trained.pt"]}))
    (tmp_path / "trained.pt").write_bytes(b"")
    with pytest.raises(OptimizeError, match=r"is incomplete: its manifest\.json lists weights\.pt, which the folder "
                                            r"does not hold: copy the whole folder, or export it again"):
        load_artifact(tmp_path)
    (tmp_path / "trained.pt").unlink()
    gone = str(tmp_path / "moved_away.py")
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "torch", "format": "dlperf-torch-recipe",
                                                        "inputs": [], "outputs": [], "pass_modules": [gone],
                                                        "workload": "zoo:mlp"}))
    with pytest.raises(OptimizeError, match=f"replays passes of the module '{gone}', which cannot be imported here"):
        load_artifact(tmp_path)


def test_a_tensorrt_artifact_without_torch_tensorrt_names_what_to_install(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dlperf.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "torch_tensorrt", None)  # importing it raises ImportError
    (tmp_path / "manifest.json").write_text(json.dumps({"engine": "tensorrt", "files": ["model.ep"],
                                                        "inputs": [], "outputs": []}))
    (tmp_path / "model.ep").write_bytes(b"")  # the folder is whole: what is missing is the package
    with pytest.raises(MissingDependency) as info:
        load_artifact(tmp_path)
    # no dlperf extra installs torch-tensorrt: it was "pip install dlperf[tensorrt]", an extra that does not exist
    assert str(info.value) == ("torch_tensorrt is not installed: install torch-tensorrt (the build that matches "
                               "your torch; no dlperf extra brings it)")


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


GOOD_WORKLOAD = """
import torch
import dlperf

def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4))

def inputs(batch_size):
    return (torch.randn(batch_size, 8, generator=torch.Generator().manual_seed(batch_size)),)

def named():  # no annotation: not found without its name
    return dlperf.Workload(name="named", make_model=model, make_inputs=inputs)
"""


def test_a_recipe_exported_from_a_relative_workload_loads_from_anywhere(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe recorded 'good.py' as given: loading it from another folder failed."""
    from dlperf.workload.loader import load_workload

    project = tmp_path / "project"
    project.mkdir()
    (project / "good.py").write_text(GOOD_WORKLOAD)
    monkeypatch.chdir(project)
    assert load_workload("good.py").source == str(project / "good.py")
    assert load_workload("./good.py:named").source == f"{project / 'good.py'}:named"
    settings = EvalSettings(source=load_workload("good.py").source, batch_size=1, warmup_iters=1, min_duration_s=0.0,
                            min_iters=1, max_duration_s=1.0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": [], "out_dir": str(tmp_path / "cand")},
                  lambda phase: None)
    exported = copy_artifact(tmp_path / "cand" / "artifact", tmp_path / "exp", {})
    monkeypatch.chdir(tmp_path)
    assert read_manifest(exported)["workload"] == str(project / "good.py")
    assert dlperf.load(exported)(torch.ones(2, 8)).shape == (2, 4)
    # an artifact whose workload file is gone says which artifact, and why
    manifest = json.loads((exported / "manifest.json").read_text())
    (exported / "manifest.json").write_text(json.dumps({**manifest, "workload": "gone.py"}))
    with pytest.raises(OptimizeError, match=r"artifact '.*exp': its recipe rebuilds the model from the workload "
                                            r"'gone.py', which does not load here: workload file 'gone.py' does not"):
        dlperf.load(exported)


def test_a_damaged_manifest_is_named_field_by_field(tmp_path: Path) -> None:
    """A missing or edited field came out of dlperf.load as KeyError: 'inputs', TypeError, ValueError or an
    AssertionError from torch (a CUDA export on a CPU-only machine)."""
    folder = _export(tmp_path, Candidate((HygieneConfig(),)))
    good = json.loads((folder / "manifest.json").read_text())

    def loaded_with(**fields: object) -> None:
        data = {k: v for k, v in {**good, **fields}.items() if v is not _GONE}
        (folder / "manifest.json").write_text(json.dumps(data))
        dlperf.load(folder)

    with pytest.raises(OptimizeError, match=r"field 'workload' is missing: the artifact is damaged or edited"):
        loaded_with(workload=_GONE)
    with pytest.raises(OptimizeError, match=r"field 'recipe' is \"hygiene\", not a list of passes"):
        loaded_with(recipe="hygiene")
    with pytest.raises(OptimizeError, match=r"field 'batch_size' is \"x\", not a batch size >= 1"):
        loaded_with(batch_size="x")
    with pytest.raises(OptimizeError, match=r"field 'format_version' is \"two\", not an integer"):
        loaded_with(format_version="two")
    if not torch.cuda.is_available():
        with pytest.raises(OptimizeError, match=r"exported for cuda, and this torch sees no CUDA device"):
            loaded_with(device="cuda")
    onnx_like: dict[str, object] = {"engine": "onnxruntime", "inputs": None, "outputs": [], "threads": "two",
                                    "opt_level": "bogus"}
    (folder / "manifest.json").write_text(json.dumps(onnx_like))
    with pytest.raises(OptimizeError) as raised:
        dlperf.load(folder)
    assert ("field 'threads' is \"two\", not a thread count >= 1; field 'inputs' is null, not a list of "
            "{name, dtype, shape}; field 'opt_level' is \"bogus\", not one of disable, basic, extended, all") in str(
        raised.value)
    with pytest.raises(OptimizeError, match="does not exist"):
        dlperf.load(tmp_path / "nope")
    with pytest.raises(OptimizeError, match="is a file, not an artifact folder"):
        dlperf.load(folder / "manifest.json")


_GONE = object()


def test_a_torch_recipe_is_served_under_its_workload_s_name(tmp_path: Path) -> None:
    """A torch recipe of the workload 'tiny-net' in tiny_net.py was served as 'tiny_net' (its file's name), while
    an engine artifact of it went by 'tiny-net': `dlperf load --model tiny-net` got a 404."""
    from dlperf.serve.instances import load_served_model

    path = tmp_path / "tiny_net.py"
    path.write_text("import torch, dlperf\n"
                    "workload = dlperf.Workload(name='tiny-net', make_model=lambda: torch.nn.Linear(4, 2),\n"
                    "    make_inputs=lambda b: (torch.ones(b, 4),))\n")
    settings = EvalSettings(source=str(path), batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    out = tmp_path / "cand"
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": Candidate((HygieneConfig(),)).to_list(),
                   "out_dir": str(out)}, lambda phase: None)
    assert read_manifest(out / "artifact")["name"] == "tiny-net"
    served = load_served_model(str(out / "artifact"))
    assert served.name == "tiny-net"
    # unnamed tensors are input__i and output__i as in engine artifacts and a served workload (tensor_name)
    assert [s.name for s in served.signature.inputs] == ["input__0"]
    assert [s.name for s in served.signature.outputs] == ["output__0"]


def test_a_recipe_pass_that_does_not_replay_on_the_device_asked_names_the_device() -> None:
    """Rebuilt on another device than its export's, a pass that does not apply there was blamed on the machine
    ('load it on a machine like the one it was measured on')."""
    from dlperf.errors import PassNotApplicable
    from dlperf.optimize.artifact import _replay_error

    said = _replay_error(Path("art"), {"device": "cpu", "exported_device": "cuda"}, "cuda_graphs",
                         PassNotApplicable("cuda_graphs: not applicable: CUDA graphs need a CUDA device"))
    assert said == ("artifact 'art': its recipe replays cuda_graphs, which does not apply here on cpu: CUDA graphs "
                    "need a CUDA device; it was exported for cuda: use it with --device cuda")
    same = _replay_error(Path("art"), {"device": "cpu"}, "precision", PassNotApplicable("precision: not applicable: x"))
    assert "load it on a machine like the one it was measured on" in same


def test_an_engine_s_batch_range_bounds_the_sizes_measured_both_ends_included() -> None:
    """A TensorRT engine built for batches 2 to 8 runs 2 and 8 (refusing 8 would refuse its own build size); the
    default sizes are cut to the range, and where none falls in it the smallest size it runs stands in (the
    largest would be the one most likely out of memory)."""
    from dlperf.optimize.artifact import artifact_batch_range, batch_sizes_for

    manifest = {"engine": "tensorrt", "batch_range": [2, 8]}
    assert artifact_batch_range(manifest) == (2, 8)
    assert batch_sizes_for("art", manifest, [2, 8], (1,)) == (2, 8)
    assert batch_sizes_for("art", manifest, None, (1, 2, 4, 8, 16)) == (2, 4, 8)
    with pytest.raises(OptimizeError, match=r"runs batches 2 to 8 \(its engine was built for them\), not 1, 9"):
        batch_sizes_for("art", manifest, [1, 4, 9], (1,))
    assert batch_sizes_for("art", {"engine": "tensorrt", "batch_range": [32, 64]}, None, (1, 2, 4)) == (32,)
    for damaged in ([0, 8], [8, 2], [1], "1-8", [1.0, 8]):  # any batch then: the caller's sizes stand
        assert artifact_batch_range({"batch_range": damaged}) is None


def test_an_exported_manifest_records_the_batch_size_and_a_newer_format_or_zero_threads_are_refused(
        tmp_path: Path) -> None:
    """The search's batch size is the artifact's default batch (`dlperf bench DIR`) and the batch its recipe replays
    at; a manifest of a newer format than this dlperf reads, or threads 0, is refused by name rather than loaded as
    whatever the fields happen to say."""
    from dlperf.optimize.artifact import artifact_workload

    path = tmp_path / "good.py"
    path.write_text(GOOD_WORKLOAD)
    settings = EvalSettings(source=f"{path}:named", batch_size=3, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": Candidate((HygieneConfig(),)).to_list(),
                   "out_dir": str(tmp_path / "cand")}, lambda phase: None)
    folder = tmp_path / "cand" / "artifact"
    manifest = read_manifest(folder)
    assert (manifest["batch_size"], manifest["device"]) == (3, "cpu")
    assert manifest["inputs"] == [{"name": "input__0", "dtype": "float32", "shape": [-1, 8]}]
    assert artifact_workload(folder).default_batch_size == 3
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format_version": 2}))
    with pytest.raises(OptimizeError, match="has format version 2, newer than this dlperf reads"):
        read_manifest(folder)
    (folder / "manifest.json").write_text(json.dumps({**manifest, "threads": 0}))
    with pytest.raises(OptimizeError, match="field 'threads' is 0, not a thread count >= 1"):
        read_manifest(folder)


def test_an_engine_artifact_measured_on_zeros_says_so_and_why(tmp_path: Path) -> None:
    """`dlperf bench DIR` of an ONNX Runtime artifact whose workload file was not on this machine measured it on
    zeros of the manifest's shapes, and nothing in its output said so."""
    from dlperf.optimize.artifact import artifact_workload, zero_inputs_note

    folder = tmp_path / "art"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not loaded here")
    manifest = {"format_version": 1, "engine": "onnxruntime", "files": ["model.onnx"], "name": "twoint",
                "workload": str(tmp_path / "gone.py"),
                "inputs": [{"name": "ids", "dtype": "int64", "shape": [-1, 32]}],
                "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 5]}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    zeros = artifact_workload(folder)
    (ids,) = zeros.make_inputs(2)
    assert ids.dtype == torch.int64 and ids.shape == (2, 32) and not ids.any()
    assert zero_inputs_note(zeros) == (
        f"the artifact in {folder} is measured on zeros of its manifest's input shapes, not its workload's inputs: its "
        f"workload '{tmp_path / 'gone.py'}' does not load here: workload file '{tmp_path / 'gone.py'}' does not exist; "
        "a model whose time depends on its input values measures otherwise on its data")
    (tmp_path / "gone.py").write_text(GOOD_WORKLOAD)
    assert zero_inputs_note(artifact_workload(folder)) is None  # its workload's own inputs: nothing to say


def test_an_engine_artifact_runs_on_its_kind_of_device_whatever_the_index() -> None:
    """A CUDA export runs with --device cuda:0 (or cuda when it says cuda:1), not on the CPU; an ONNX Runtime
    artifact of the CUDA or TensorRT provider that records no device was exported for CUDA."""
    from dlperf.optimize.artifact import artifact_device, check_artifact_device

    for made_for, asked in (("cuda", "cuda:0"), ("cuda:1", "cuda"), ("cpu", "cpu")):
        check_artifact_device("art", {"engine": "onnxruntime", "device": made_for}, asked)
    with pytest.raises(OptimizeError, match="the onnxruntime artifact 'art' was exported for cuda:1; use it with"):
        check_artifact_device("art", {"engine": "onnxruntime", "device": "cuda:1"}, "cpu")
    check_artifact_device("art", {"engine": "torch", "device": "cuda"}, "cpu")  # a recipe is rebuilt anywhere
    assert [artifact_device({"engine": "onnxruntime", "provider": p}) for p in ("cuda", "tensorrt", "cpu")] == [
        "cuda", "cuda", "cpu"]


NAMED_OUTPUTS = """
import torch


class Named(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return {"logits": self.head(x), "score": self.head(x).sum(1)}


def model():
    return Named()


def inputs(batch_size):
    return (torch.ones(batch_size, 4),)
"""


def test_a_torch_recipe_of_a_model_returning_a_dict_names_its_outputs_by_its_keys(tmp_path: Path) -> None:
    """The manifest said output_0 and output_1 of a model returning {'logits', 'score'}, where an engine artifact of
    the same model names them by the keys."""
    workload = tmp_path / "named.py"
    workload.write_text(NAMED_OUTPUTS)
    settings = EvalSettings(source=str(workload), batch_size=2, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0, paired_blocks=0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": [], "out_dir": str(tmp_path / "c")},
                  lambda phase: None)
    manifest = read_manifest(tmp_path / "c" / "artifact")
    assert [o["name"] for o in manifest["outputs"]] == ["logits", "score"]
    assert [o["shape"] for o in manifest["outputs"]] == [[-1, 3], [-1]]


def load_trial_engine(folder: Path, manifest: dict[str, object]) -> object:
    """The loader of test_a_new_engine_is_one_row_of_engines's engine: the manifest it was given."""
    return lambda *inputs: manifest


def test_a_new_engine_is_one_row_of_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new engine was named in LOADERS, ENGINE_INSTALL and a tuple in _check_fields: added to LOADERS alone, its
    manifest without `inputs` reached its loader unchecked. One row of ENGINES now gives them (every engine's manifest
    must carry `inputs` and `outputs`)."""
    from dlperf.optimize.artifact import ENGINES, Engine

    monkeypatch.setitem(ENGINES, "trial", Engine(f"{__name__}:load_trial_engine", "it with `pip install trial`"))
    spec = [{"name": "input_0", "dtype": "float32", "shape": [-1, 4]}]
    manifest = {"engine": "trial", "format_version": 1, "files": []}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OptimizeError, match="field 'inputs' is missing; field 'outputs' is missing"):
        load_artifact(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "inputs": spec, "outputs": spec}))
    assert load_artifact(tmp_path)()["inputs"] == spec
    monkeypatch.setitem(ENGINES, "trial", Engine("no_such_module_of_trial:load", "it with `pip install trial`"))
    with pytest.raises(OptimizeError, match=r"needs trial: install it with `pip install trial` \(No module"):
        load_artifact(tmp_path)
