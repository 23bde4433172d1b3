"""A model with a tensor of one value per item (shape [batch]: a per-item scale in, a per-item sum out), served with
batching: its config, metadata, requests and replies as Triton has them (dims [1] with reshape [], shape [-1, 1]),
the [batch] form dlperf's clients sent before still taken; a real server on 127.0.0.1, over HTTP and gRPC, with
tritonclient and `dlperf load`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.cli.main import main
from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import post_json

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

SIG = Signature((TensorSpec("x", "FP32", (-1, 4)), TensorSpec("scale", "FP32", (-1,))),
                (TensorSpec("y", "FP32", (-1, 4)), TensorSpec("total", "FP32", (-1,))))
SHAPES_SEEN: list[tuple[int, ...]] = []


def _runner(index: int) -> Any:
    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        x, scale = arrays
        SHAPES_SEEN.append(scale.shape)
        y = x * scale[:, None]  # a [batch, 1] scale here would broadcast to [batch, batch, 4]
        return [y, y.sum(axis=1)]

    return run


def _server(max_batch_size: int) -> Running:
    config = ServeConfig(model="peritem", port=0, max_batch_size=max_batch_size, grpc_port=0)
    return start_in_thread(config, build_state(config, {"peritem": ServedModel("peritem", SIG, _runner)}))


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = _server(8)
    yield running
    running.stop()


def _get(running: Running, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{running.url}{path}", timeout=30) as reply:
        return dict(json.loads(reply.read()))


def _post(running: Running, scale_shape: list[int]) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"inputs": [
        {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 1, 1, 1, 1]},
        {"name": "scale", "shape": scale_shape, "datatype": "FP32", "data": [2, 3]}]}).encode()
    return post_json(f"http://{running.url}/v2/models/peritem/infer", body)


def test_config_and_metadata_give_a_per_item_tensor_triton_s_dims_1_with_an_empty_reshape(server: Running) -> None:
    config = _get(server, "/v2/models/peritem/config")
    # it said dims [], which Triton's config never has (its check: "must specify 'dims'")
    assert config["input"][1] == {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}}
    assert config["output"][1] == {"name": "total", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}}
    assert config["input"][0] == {"name": "x", "data_type": "TYPE_FP32", "dims": [4]}
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    parsed = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    assert list(parsed.input[1].dims) == [1] and parsed.input[1].HasField("reshape")
    meta = _get(server, "/v2/models/peritem")  # Triton's metadata: -1, then the dims
    assert [(t["name"], t["shape"]) for t in meta["inputs"] + meta["outputs"]] == [
        ("x", [-1, 4]), ("scale", [-1, 1]), ("y", [-1, 4]), ("total", [-1, 1])]
    assert server.grpc_url is not None
    over_grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert list(over_grpc.get_model_metadata("peritem").inputs[1].shape) == [-1, 1]
    assert list(over_grpc.get_model_config("peritem").config.output[1].dims) == [1]


def test_triton_s_batch_by_1_and_the_bare_batch_form_both_reach_the_model_as_batch(server: Running) -> None:
    SHAPES_SEEN.clear()
    for scale_shape in ([2, 1], [2]):  # Triton's, and what dlperf's clients sent while the metadata said [-1]
        status, reply = _post(server, scale_shape)
        assert status == 200, reply
        outputs = {o["name"]: o for o in reply["outputs"]}
        assert outputs["total"]["shape"] == [2, 1] and outputs["total"]["data"] == [20.0, 12.0]
        assert outputs["y"]["data"] == [2.0, 4.0, 6.0, 8.0, 3.0, 3.0, 3.0, 3.0]
    assert SHAPES_SEEN and all(shape == (2,) for shape in SHAPES_SEEN)
    status, reply = _post(server, [1, 2])
    assert status == 400 and reply["error"] == ("input 'scale' has shape [1, 2], model 'peritem' expects [-1, 1] "
                                                "(-1 = any size)")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_sends_the_metadata_s_shape_and_reads_batch_by_1(server: Running, protocol: str) -> None:
    client_module = httpclient if protocol == "http" else grpcclient
    url = server.url if protocol == "http" else server.grpc_url
    client = client_module.InferenceServerClient(url)
    x = client_module.InferInput("x", [3, 4], "FP32")
    x.set_data_from_numpy(np.ones((3, 4), np.float32))
    scale = client_module.InferInput("scale", [3, 1], "FP32")
    scale.set_data_from_numpy(np.array([[1], [2], [3]], np.float32))
    total = client.infer("peritem", [x, scale]).as_numpy("total")
    assert total.shape == (3, 1) and total.ravel().tolist() == [4.0, 8.0, 12.0]


def test_dlperf_load_sends_what_the_metadata_says(server: Running, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.json"  # perf_analyzer's format: one item per entry, without the batch dimension
    data.write_text(json.dumps({"data": [{"x": [1, 2, 3, 4], "scale": [2]}],
                                "validation_data": [{"y": [2, 4, 6, 8], "total": [20]}]}))
    assert main(["load", server.url, "--model", "peritem", "--input-data", str(data), "--concurrency", "1",
                 "--requests", "20", "--duration", "3s", "--window-s", "0.5", "--warmup-s", "0.1", "--json",
                 "--store", str(tmp_path / "runs.db")]) == 0
    (level,) = json.loads(capsys.readouterr().out)["levels"]
    assert level["errors"] == 0 and level["requests_ok"] > 0


def test_without_batching_a_per_item_tensor_keeps_its_own_shape() -> None:
    running = _server(0)  # max_batch_size 0: the first dimension is part of the tensor, dims [-1] as in Triton
    try:
        config = _get(running, "/v2/models/peritem/config")
        assert config["input"][1] == {"name": "scale", "data_type": "TYPE_FP32", "dims": [-1]}
        assert _get(running, "/v2/models/peritem")["inputs"][1]["shape"] == [-1]
        status, reply = _post(running, [2])
        assert status == 200 and reply["outputs"][1]["shape"] == [2]
    finally:
        running.stop()


@pytest.mark.parametrize("shape", [["scale=3"], ["x=3,4", "scale=3"], ["scale=3,1"]])
def test_dlperf_load_takes_a_per_item_input_s_shape_as_its_batch_size(server: Running, tmp_path: Path, shape: list[str],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # --shape scale=3 was refused ("input 'scale' has 2 dimensions [-1, 1] ... e.g. --shape scale=8,1") once the
    # metadata said [-1, 1]: the number a user writes for a one-value-per-item input is its batch size
    SHAPES_SEEN.clear()
    args = [a for s in shape for a in ("--shape", s)]
    assert main(["load", server.url, "--model", "peritem", *args, "--concurrency", "1", "--requests", "5",
                 "--duration", "1s", "--window-s", "0.5", "--warmup-s", "0.1", "--json",
                 "--store", str(tmp_path / "runs.db")]) == 0
    (level,) = json.loads(capsys.readouterr().out)["levels"]
    assert level["errors"] == 0 and level["items_per_request"] == 3 and level["requests_ok"] == 5
    assert SHAPES_SEEN and set(SHAPES_SEEN) == {(3,)}
