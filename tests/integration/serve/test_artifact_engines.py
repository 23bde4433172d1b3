"""`dlperf serve` on artifacts exported by the optimizer's engines (found by an audit of serving artifacts):
OpenVINO under the allocator it can run with, a damaged OpenVINO artifact, the served name, and the note on
ONNX Runtime's dynamic int8, whose outputs depend on the batch."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlperf.cli.main import main
from dlperf.measure import allocator
from dlperf.optimize.artifact import export_state
from dlperf.optimize.evaluate import EvalSettings
from dlperf.optimize.space import Candidate
from dlperf.passes.base import PassConfig, PassContext, apply_pass, initial_state
from dlperf.workload.zoo import get

from .helpers import cli_process, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::UserWarning")]

httpclient = pytest.importorskip("tritonclient.http")


def _export(config: PassConfig, out: Path) -> Path:
    """What `dlperf optimize --export` writes for a candidate of this one pass on zoo:digits-cnn."""
    state = apply_pass(config, initial_state(get("digits-cnn")), PassContext(threads=1))
    export_state(state, Candidate((config,)), EvalSettings(source="zoo:digits-cnn"), None, out)
    return out


@pytest.fixture(scope="module")
def openvino_artifact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    pytest.importorskip("openvino")
    from dlperf.passes.openvino import OpenVinoConfig

    yield _export(OpenVinoConfig(frontend="onnx"), tmp_path_factory.mktemp("ov") / "artifact")


def test_an_openvino_artifact_is_served_under_glibc_when_tcmalloc_is_preloaded(openvino_artifact: Path,
                                                                               tmp_path: Path) -> None:
    """OpenVINO aborts under a preloaded tcmalloc or jemalloc (free(): invalid pointer): the default allocator,
    tcmalloc, crashed every OpenVINO artifact at start (exit 134). `auto` now restarts it without the preload."""
    if allocator.find_library("tcmalloc") is None:
        pytest.skip("no tcmalloc library on this machine")
    port = free_port()
    log = tmp_path / "serve.log"
    with cli_process(["serve", str(openvino_artifact), "--port", str(port)], log,
                     allocator.preload_environment("tcmalloc")) as proc:
        wait_until(lambda: "memory:" in log.read_text() or proc.poll() is not None, 120, "the server to be ready")
        assert proc.poll() is None, log.read_text()
        text = log.read_text()
        assert ("memory: glibc malloc (openvino artifact: OpenVINO aborts under a preloaded jemalloc or tcmalloc)"
                in text)
        # served under the workload's name from the manifest, not the folder's ('artifact')
        assert f"serving model 'digits-cnn' at http://127.0.0.1:{port}/v2/models/digits-cnn" in text
        x = get("digits-cnn").example_inputs(3)[0].numpy()
        inp = httpclient.InferInput("image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = httpclient.InferenceServerClient(f"127.0.0.1:{port}").infer("digits-cnn", [inp]).as_numpy("logits")
        from dlperf.optimize.artifact import load_artifact

        want = load_artifact(openvino_artifact)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_an_allocator_openvino_cannot_run_under_is_refused(openvino_artifact: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(openvino_artifact), "--allocator", "jemalloc", "--port", "0"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--allocator jemalloc does not go with openvino artifacts: OpenVINO aborts under a preloaded" in err
    assert "use --allocator glibc" in err and "loading" not in err


@pytest.mark.parametrize(("damage", "said"), [
    # a deleted file is refused before OpenVINO reads the folder: the manifest lists it (e38ba05)
    ("delete", "its manifest.json lists model.bin, which the folder does not hold"),
    ("truncate", "OpenVINO could not load the IR {xml} (weights model.bin): Incorrect weights in bin file!"),
])
def test_a_damaged_openvino_artifact_is_a_one_line_error(openvino_artifact: Path, tmp_path: Path, damage: str,
                                                        said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """It was OpenVINO's RuntimeError with a traceback (exit 1); ONNX Runtime's already said which file."""
    broken = Path(shutil.copytree(openvino_artifact, tmp_path / "broken"))
    weights = broken / "model.bin"
    if damage == "delete":
        weights.unlink()
    else:
        os.truncate(weights, 1000)
    assert main(["serve", str(broken), "--allocator", "glibc", "--port", "0"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert said.format(xml=broken / "model.xml") in err
    assert "export it again" in err and "Traceback" not in err


def test_onnxruntime_dynamic_int8_is_noted_as_batch_dependent(tmp_path: Path) -> None:
    """One activation scale per batch: a request batched with a larger input gets other outputs (the note
    says so at start); static int8 and fp32 do not."""
    pytest.importorskip("onnxruntime")
    from dlperf.cli.serve import batch_dependence_notes
    from dlperf.optimize.artifact import load_artifact
    from dlperf.passes.onnxruntime import OrtConfig

    dynamic = _export(OrtConfig(precision="int8-dynamic"), tmp_path / "dynamic")
    fp32 = _export(OrtConfig(), tmp_path / "fp32")
    x = get("digits-cnn").example_inputs(2)[0]
    a, b = x[:1], x[1:] * 50

    def shift(folder: Path) -> float:
        run: Any = load_artifact(folder)
        return float((run(a) - run(torch.cat([a, b]))[:1]).abs().max())

    assert shift(dynamic) > 0.1 and shift(fp32) < 1e-5
    (note,) = batch_dependence_notes([str(dynamic), str(fp32), "zoo:mlp"])
    assert note.startswith(f"{dynamic} quantizes activations dynamically with one scale per batch")
    assert "--max-batch-size 1" in note


def test_threads_set_an_engine_artifact_s_own_threads(tmp_path: Path) -> None:
    """--threads reached torch only: an ONNX Runtime artifact ran with the threads it was exported with, per
    instance, and the start-up line did not say how many."""
    pytest.importorskip("onnxruntime")
    from dlperf.cli.serve import settings_line
    from dlperf.optimize.artifact import load_artifact, read_manifest
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.serve.instances import load_served_model
    from dlperf.serve.service import ServeConfig

    folder = _export(OrtConfig(), tmp_path / "ort")

    def threads_now() -> int:
        return len(os.listdir("/proc/self/task"))

    before = threads_now()
    one = load_artifact(folder, threads=1)
    with_one = threads_now()
    four = load_artifact(folder, threads=4)
    # ONNX Runtime's intra-op pool: threads - 1 workers beside the caller
    assert (threads_now() - with_one) - (with_one - before) == 3
    del one, four
    assert load_served_model(str(folder), threads=3).engine_threads == 3
    own = load_served_model(str(folder))
    assert own.engine_threads == read_manifest(folder)["threads"]
    # exported on a larger machine: served (and so reported) at this machine's CPUs, as load_artifact runs it; the
    # settings line said the manifest's 16 while each instance ran 2
    from dlperf.measure.env import usable_cores
    from dlperf.optimize.artifact import write_manifest

    write_manifest(folder, {**{k: v for k, v in read_manifest(folder).items() if k != "format_version"},
                            "threads": usable_cores() + 14})
    assert load_served_model(str(folder)).engine_threads == usable_cores()
    line = settings_line(ServeConfig(model=str(folder), instances=2), 32, None, "onnxruntime", 2)
    assert "; 2 instances x 2 onnxruntime threads (the artifact's; --threads sets others);" in line


def test_variants_on_different_engines_each_show_their_threads(tmp_path: Path) -> None:
    """`--variant a=zoo:mlp --variant b=ORT_ARTIFACT` printed '1 instance x 2 torch threads' for both: the settings
    line is the first variant's, and the artifact runs on ONNX Runtime's threads, not torch's."""
    pytest.importorskip("onnxruntime")
    from rich.console import Console

    from dlperf.cli.serve import _print_model
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.serve.service import ServeConfig, build_state

    folder = _export(OrtConfig(), tmp_path / "ort")
    config = ServeConfig(variants=(("a", "zoo:digits-cnn"), ("b", str(folder))), model_name="cnn", threads=1)
    threads_before = torch.get_num_threads()  # the server sets torch's threads for its process: put back after
    state = build_state(config)
    try:
        (model,) = state.served_models().values()
        assert [tuple(v) for v in model["variant_threads"]] == [("a", torch.get_num_threads(), None, None),
                                                                ("b", None, "onnxruntime", 1)]
        console = Console(record=True, width=200, file=open(os.devnull, "w"))  # noqa: SIM115
        _print_model(console, config, "127.0.0.1:8000", "cnn", model, None, False)
        shown = console.export_text()
        assert (f"threads per variant: a: 1 instance x {torch.get_num_threads()} torch thread"
                in shown) and "b: 1 instance x 1 onnxruntime thread (--threads)" in shown
    finally:
        state.close(5.0)
        torch.set_num_threads(threads_before)
