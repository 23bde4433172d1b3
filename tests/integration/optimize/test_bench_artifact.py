"""`dlperf bench DIR` measures an artifact exported by `dlperf optimize`: it said "workload file 'DIR' is a folder,
not a file: point at a .py file", so the exported model could only be measured served or by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.cli.main import main
from dlperf.errors import ConfigError, WorkloadError
from dlperf.measure.memory import parameter_bytes
from dlperf.optimize.artifact import artifact_size, artifact_workload
from dlperf.optimize.space import Candidate
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.onnxruntime import OrtConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.report.terminal import fmt_mib
from dlperf.workload.zoo import get
from tests.unit.optimize.artifacts import export_candidate

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def ort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_candidate(tmp_path_factory.mktemp("ort"), Candidate((OrtConfig(),)))


def test_an_engine_artifact_is_measured_on_its_workload_s_inputs(ort: Path) -> None:
    result = dlperf.bench(str(ort), batch_sizes=(1, 4), min_duration_s=0.05, min_iters=5, warmup_iters=1)
    assert [p.batch_size for p in result.points] == [1, 4]
    assert result.workload == "mlp (onnxruntime artifact)"
    assert result.model_bytes == artifact_size(ort) > 0 and result.model_bytes_of == "the artifact's files"
    # the model measured is the artifact: its outputs are the eager model's on the workload's inputs
    workload = artifact_workload(ort, threads=1)
    model = workload.build_model()
    assert model.fn.threads == 1  # --threads sets the engine's own threads
    x = workload.example_inputs(4)
    eager = get("mlp").build_model().eval()
    with torch.inference_mode():
        assert torch.allclose(model(*x), eager(*x), atol=1e-4)


def test_an_engine_artifact_refuses_another_precision_or_device(ort: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--precision bf16 \(precision='bf16'\): the onnxruntime "
                                          r"artifact .* runs in the precision it was exported in; "
                                          r"leave --precision \(precision\) out"):
        dlperf.bench(str(ort), precision="bf16", min_duration_s=0.01)
    with pytest.raises(ConfigError, match=r"^--device cuda \(device='cuda'\): the onnxruntime "
                                          r"artifact .* was exported for cpu; use it with --device cpu "
                                          r"\(device='cpu'\)$"):
        dlperf.bench(str(ort), device="cuda", min_duration_s=0.01)


def test_the_cli_measures_a_torch_recipe_and_records_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = export_candidate(tmp_path / "cand", Candidate((HygieneConfig(),)))
    store = str(tmp_path / "runs.db")
    assert main(["bench", str(recipe), "--batch-sizes", "2", "--min-duration", "0.05s", "--json",
                 "--store", store]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["result"]["workload"] == "mlp (torch artifact)"
    assert data["result"]["model_bytes"] == parameter_bytes(get("mlp").build_model())
    assert [p["batch_size"] for p in data["result"]["points"]] == [2]


def test_a_dynamic_int8_recipe_s_bench_gives_the_loaded_model_s_size_and_precision(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A torch recipe's files are the original fp32 weights, quantized again on load: its bench said 'model size:
    0.3 MiB (the artifact's files)' and 'precision fp32' for the int8 model it measured (0.09 MiB)."""
    recipe = export_candidate(tmp_path / "cand", Candidate((DynamicInt8Config(),)))
    loaded = parameter_bytes(dlperf.load(str(recipe)))
    assert loaded < artifact_size(recipe) / 2
    store = str(tmp_path / "runs.db")
    assert main(["bench", str(recipe), "--batch-sizes", "2", "--min-duration", "0.05s", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "precision int8 (the artifact's)" in next(x for x in out.splitlines() if x.startswith("scenario"))
    assert f"model size: {fmt_mib(loaded)} MiB (the loaded model's parameters + buffers)" in out
    assert main(["bench", str(recipe), "--batch-sizes", "2", "--min-duration", "0.05s", "--json",
                 "--store", store]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["artifact"]["precision"] == "int8" and data["result"]["model_bytes"] == loaded
    assert data["result"]["model_bytes_of"] == "the loaded model's parameters + buffers"


def test_an_engine_artifact_s_bench_says_and_records_its_own_precision(ort: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """An int8 artifact's bench said 'precision fp32', bench's autocast setting, not what ran."""
    manifest = json.loads((ort / "manifest.json").read_text())
    store = str(tmp_path / "runs.db")
    assert main(["bench", str(ort), "--batch-sizes", "2", "--min-duration", "0.05s", "--store", store]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("scenario"))
    assert f"precision {manifest['precision']} (the artifact's)" in line and "artifact onnxruntime" in line
    assert main(["bench", str(ort), "--batch-sizes", "2", "--min-duration", "0.05s", "--json", "--store", store]) == 0
    recorded = json.loads(capsys.readouterr().out)["config"]["artifact"]
    assert recorded["engine"] == "onnxruntime" and recorded["precision"] == manifest["precision"]
    # the library records it as the command does
    from dlperf.store import Store

    library = dlperf.bench(str(ort), batch_sizes=(2,), min_duration_s=0.01, min_iters=3, store=store)
    assert library.run_id is not None and Store(store).get(library.run_id).config["artifact"] == recorded


def test_a_torch_recipe_is_rebuilt_on_the_device_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A torch recipe stayed on the device it was exported on while bench and serve sent inputs to their own: one
    exported on a GPU failed on CPU inputs ('Expected all tensors to be on the same device'), and without a GPU it
    did not load at all. Its manifest is edited to say cuda here (no GPU on CI): bench, serve and dlperf.load with
    a device rebuild it there; without one, it still asks for its own."""
    from dlperf.errors import OptimizeError
    from dlperf.optimize.artifact import load_artifact
    from dlperf.serve.instances import load_served_model

    recipe = export_candidate(tmp_path / "cand", Candidate((HygieneConfig(),)))
    manifest = json.loads((recipe / "manifest.json").read_text())
    (recipe / "manifest.json").write_text(json.dumps({**manifest, "device": "cuda"}))
    with pytest.raises(OptimizeError, match="was exported for cuda"):
        load_artifact(recipe)  # its own device, which this machine lacks
    x = get("mlp").example_inputs(4)
    eager = get("mlp").build_model().eval()
    with torch.inference_mode():
        assert torch.allclose(load_artifact(recipe, device="cpu")(*x), eager(*x))
    result = dlperf.bench(str(recipe), batch_sizes=(2,), device="cpu", min_duration_s=0.01, min_iters=3,
                          warmup_iters=1)
    assert [p.batch_size for p in result.points] == [2]
    # without a device, the library and the command line take the artifact's own, as dlperf.load does (and refuse
    # it here); the library's message names its own argument
    with pytest.raises(ConfigError, match=r"device='cuda' asked for, but no CUDA device .* use device='cpu'"):
        dlperf.bench(str(recipe), min_duration_s=0.01)
    assert main(["bench", str(recipe), "--min-duration", "0.01s", "--store", str(tmp_path / "r.db")]) == 2
    assert "--device cuda asked for, but no CUDA device is available" in " ".join(capsys.readouterr().err.split())
    served = load_served_model(str(recipe), device="cpu")
    run = served.make_runner(0)
    (out,) = run([x[0].numpy()])
    assert torch.allclose(torch.from_numpy(out), eager(*x))


def test_an_engine_built_for_some_batch_sizes_is_measured_and_served_at_those_only(ort: Path, tmp_path: Path) -> None:
    """A TensorRT engine runs the batch sizes it was built for (its manifest's batch_range), while the manifest's
    shapes said any: bench's sweep and serve's warm-up failed at the first other size. An ONNX Runtime artifact
    with the field written in stands for one here (no GPU on CI)."""
    import shutil

    from dlperf.serve.service import ServeConfig, build_state

    art = tmp_path / "ranged"
    shutil.copytree(ort, art)
    manifest = json.loads((art / "manifest.json").read_text())
    (art / "manifest.json").write_text(json.dumps({**manifest, "batch_range": [1, 4]}))
    with pytest.raises(ConfigError, match=r"runs batches 1 to 4 \(its engine was built for them\), not 8, 32"):
        dlperf.bench(str(art), batch_sizes=(1, 8, 32), min_duration_s=0.01)
    result = dlperf.bench(str(art), min_duration_s=0.01, min_iters=3, warmup_iters=1)
    assert [p.batch_size for p in result.points] == [1]  # the default sweep 1, 8, 32 cut to the range
    with pytest.raises(ConfigError, match=r"runs batches 1 to 4 .*, not 8"):  # multi-stream's batch of 8
        dlperf.bench(str(art), scenario="multi-stream", min_duration_s=0.01)
    with pytest.raises(ConfigError, match=r"--max-batch-size 8: model .* runs batches up to 4 .* give --max-batch"):
        build_state(ServeConfig(model=str(art), port=0, max_batch_size=8))
    build_state(ServeConfig(model=str(art), port=0, max_batch_size=4)).close()
    (art / "manifest.json").write_text(json.dumps({**manifest, "batch_range": [4, 4]}))
    with pytest.raises(ConfigError, match=r"runs batch 4 only .* dynamic batching makes batches of 1 up to"):
        build_state(ServeConfig(model=str(art), port=0, max_batch_size=4))


def test_other_commands_name_the_artifact_and_where_to_measure_it(ort: Path) -> None:
    with pytest.raises(WorkloadError, match=r"is an artifact folder .* `dlperf bench .*` measures it"):
        dlperf.load_workload(str(ort))


def test_an_artifact_s_bench_is_a_baseline_dlperf_check_re_measures(ort: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf check` re-measures the baseline's workload: an artifact's baseline failed to load there."""
    store = str(tmp_path / "runs.db")
    assert main(["bench", str(ort), "--batch-sizes", "4", "--min-duration", "0.2s", "--json", "--store", store]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["baseline", "set", "art", run_id, "--store", store]) == 0
    capsys.readouterr()
    rc = main(["check", str(ort), "--baseline", "art", "--max-regression", "500%", "--duration", "0.2", "--json",
               "--store", store])
    out = capsys.readouterr()
    assert rc == 0, out.err
    data = json.loads(out.out)
    assert [p["batch_size"] for p in data["points"]] == [4] and not data["points"][0]["failed"]
