"""Edges of the protocol that clients other than the usual tritonclient calls reach: an empty `outputs` list, a
binary body whose Inference-Header-Content-Length is missing or wrong, Triton's classification extension
asked of a server that does not offer it; a real zoo:mlp server on 127.0.0.1, over HTTP and gRPC."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.server import Running

from .helpers import batching_mlp_server, mlp_reference

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

X = np.random.default_rng(7).standard_normal((2, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = batching_mlp_server(grpc_port=0)
    yield running
    running.stop()


def _post(running: Running, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://{running.url}/v2/models/mlp/infer", data=body, method="POST",
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_empty_outputs_list_returns_every_output_as_without_one_and_over_grpc(server: Running) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32", "data": X.ravel().tolist()}],
                       "outputs": []}).encode()
    status, reply = _post(server, body)
    assert status == 200
    # it answered no outputs at all, where Triton (and this server over gRPC, for the same request) answer all
    assert [o["name"] for o in reply["outputs"]] == ["logits"]
    np.testing.assert_allclose(np.array(reply["outputs"][0]["data"]).reshape(2, 10), mlp_reference()(X),
                               rtol=1e-5, atol=1e-6)
    assert server.grpc_url is not None
    inp = grpcclient.InferInput("x", [2, 64], "FP32")
    inp.set_data_from_numpy(X)
    over_grpc = grpcclient.InferenceServerClient(server.grpc_url).infer("mlp", [inp], outputs=[])
    assert [o.name for o in over_grpc.get_response().outputs] == ["logits"]


def test_binary_data_without_its_header_length_is_told_how_to_send_it(server: Running) -> None:
    head = json.dumps({"inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32",
                                   "parameters": {"binary_data_size": X.nbytes}}]}).encode()
    status, reply = _post(server, head + X.tobytes())
    assert status == 400
    # it said only "not valid JSON: 'utf-8' codec can't decode byte 0x..." about the tensor bytes
    assert f"Inference-Header-Content-Length: {len(head)}" in reply["error"]
    assert f"{X.nbytes} bytes after a JSON part of {len(head)} bytes" in reply["error"]
    status, reply = _post(server, head + X.tobytes(), {"Inference-Header-Content-Length": str(len(head) + 8)})
    assert status == 400
    assert f"its JSON part is {len(head)} bytes but Inference-Header-Content-Length says {len(head) + 8}" \
        in reply["error"]
    status, reply = _post(server, head + X.tobytes(), {"Inference-Header-Content-Length": str(len(head))})
    assert status == 200


def test_a_classification_request_is_refused_not_answered_with_the_full_tensor(server: Running) -> None:
    inp = httpclient.InferInput("x", [2, 64], "FP32")
    inp.set_data_from_numpy(X)
    out = httpclient.InferRequestedOutput("logits", class_count=3)
    # it answered the FP32 logits, which a client expecting Triton's BYTES "value:index" top classes misreads
    with pytest.raises(InferenceServerException) as caught:
        httpclient.InferenceServerClient(server.url).infer("mlp", [inp], outputs=[out])
    assert caught.value.status() == "400"
    assert "classification=3" in caught.value.message()
    assert server.grpc_url is not None
    ginp = grpcclient.InferInput("x", [2, 64], "FP32")
    ginp.set_data_from_numpy(X)
    with pytest.raises(InferenceServerException) as caught:
        grpcclient.InferenceServerClient(server.grpc_url).infer(
            "mlp", [ginp], outputs=[grpcclient.InferRequestedOutput("logits", class_count=3)])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "classification=3" in caught.value.message()
    # class_count=0, tritonclient's default, asks for no classification
    plain = httpclient.InferenceServerClient(server.url).infer(
        "mlp", [inp], outputs=[httpclient.InferRequestedOutput("logits", class_count=0)])
    assert plain.as_numpy("logits").shape == (2, 10)
