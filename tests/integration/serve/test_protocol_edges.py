"""Edges of the protocol that clients other than the usual tritonclient calls reach: an empty `outputs` list, a
binary body whose Inference-Header-Content-Length is missing or wrong, Triton's classification extension
asked of a server that does not offer it; a real zoo:mlp server on 127.0.0.1, over HTTP and gRPC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.server import Running

from .helpers import batching_mlp_server, get_json, mlp_reference, post_json

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
    return post_json(f"http://{running.url}/v2/models/mlp/infer", body, headers)


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


def test_nan_and_infinity_in_json_tensor_data_go_both_ways_as_in_triton(server: Running) -> None:
    """Triton (server PR 3870, its qa NanInfTest) reads and writes NaN, Infinity and -Infinity in JSON tensor data,
    and tritonclient sends and reads them so with binary_data=False; a number too large for a double, e.g. 1e999,
    is refused (Triton: "Number too big to be stored in double") where this server read it as infinity."""
    x = X[:1].copy()
    x[0, 0], x[0, 1], x[0, 2] = np.nan, np.inf, -np.inf
    inp = httpclient.InferInput("x", [1, 64], "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    result = httpclient.InferenceServerClient(server.url).infer(
        "mlp", [inp], outputs=[httpclient.InferRequestedOutput("logits", binary_data=False)])
    assert np.isnan(result.as_numpy("logits")).all()  # a NaN input runs through the model's sums
    data = ", ".join(["NaN", "Infinity", "-Infinity"] + ["0.5"] * 61)
    status, reply = _post(server, f'{{"inputs": [{{"name": "x", "shape": [1, 64], "datatype": "FP32", '
                                  f'"data": [{data}]}}]}}'.encode())
    assert status == 200 and np.isnan(reply["outputs"][0]["data"]).all()
    data = ", ".join(["1e999"] + ["0.5"] * 63)
    status, reply = _post(server, f'{{"inputs": [{{"name": "x", "shape": [1, 64], "datatype": "FP32", '
                                  f'"data": [{data}]}}]}}'.encode())
    assert status == 400
    assert reply["error"] == ("input 0 'x': element 0 of 'data' is a number too large for a double, which would be "
                              "read as infinity: send Infinity or -Infinity for an infinite value")


def test_a_parameter_that_is_not_a_string_number_or_boolean_is_refused_by_name(server: Running) -> None:
    tensor = {"name": "x", "shape": [1, 64], "datatype": "FP32", "data": X[0].tolist()}
    status, reply = _post(server, json.dumps({"inputs": [tensor], "parameters": {"tags": ["a", "b"]}}).encode())
    assert status == 400  # it was taken, though the protocol's $parameter is a string, number or boolean
    assert reply["error"] == ("the request: parameter 'tags' is a list ([\"a\", \"b\"]): a parameter's value must be "
                              "a string, a number or a boolean")
    status, reply = _post(server, json.dumps({"inputs": [{**tensor, "parameters": {"meta": {"k": 1}}}]}).encode())
    assert status == 400 and reply["error"].startswith("input 0 'x': parameter 'meta' is an object ({\"k\": 1})")
    fine = {"tag": "a", "n": 1.5, "b": True}
    status, _ = _post(server, json.dumps({"inputs": [tensor], "parameters": fine}).encode())
    assert status == 200


def test_inputs_that_are_not_a_list_are_told_what_was_given_and_what_is_expected(server: Running) -> None:
    status, reply = _post(server, b'{"inputs": 5}')
    assert status == 400  # it said "the request has no 'inputs' list", which it had, of the wrong type
    assert reply["error"] == ("the request's 'inputs' is a number (5): send 'inputs' as a list of at least one input "
                              'tensor, each an object {"name", "shape", "datatype", "data"}')


def _exchange(sock: Any, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send one request on `sock` and read its reply: (status line, headers lowercased, body by Content-Length);
    ("", {}, b"") once the server has closed the connection."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return "", {}, b""
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = (headers.get(name.strip().lower(), "") + "," + value.strip()).strip(",")
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return status, headers, body


@pytest.mark.parametrize("size", ["json", "binary"])
def test_an_http_1_0_keep_alive_connection_stays_open_as_triton_s_does(server: Running, size: str) -> None:
    """ApacheBench -k sends HTTP/1.0 with Connection: keep-alive; uvicorn answered connection: close and closed
    every connection; Triton's HTTP server (libevhtp) keeps it and answers Connection: keep-alive."""
    import socket

    from dlperf.serve.protocol import Tensor, encode_request

    x = np.random.default_rng(3).standard_normal((1 if size == "json" else 8, 64)).astype(np.float32)
    if size == "json":
        body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        extra = ""
    else:
        body, header_length = encode_request([Tensor("x", "FP32", x)], binary_outputs=False)
        extra = f"Inference-Header-Content-Length: {header_length}\r\n"
    infer = (f"POST /v2/models/mlp/infer HTTP/1.0\r\nConnection: keep-alive\r\n{extra}Content-Length: {len(body)}"
             "\r\n\r\n").encode() + body
    expected = mlp_reference()(x)
    with socket.create_connection((server.host, server.port), 10) as sock:
        for _ in range(3):
            status, headers, reply = _exchange(sock, infer)
            assert status.endswith("200 OK") and headers["connection"] == "keep-alive"
            (out,) = json.loads(reply)["outputs"]
            np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(out["shape"]), expected, rtol=1e-4,
                                       atol=1e-5)
        status, headers, _ = _exchange(sock, b"GET /v2/health/ready HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert status.endswith("200 OK") and headers["connection"] == "keep-alive"
    with socket.create_connection((server.host, server.port), 10) as sock:  # no keep-alive asked: closed
        status, headers, _ = _exchange(sock, b"GET /v2/health/ready HTTP/1.0\r\n\r\n")
        assert status.endswith("200 OK") and headers["connection"] == "close"
        assert sock.recv(1) == b""


def test_a_trailing_slash_is_a_404_naming_the_path_to_use_not_a_redirect(server: Running) -> None:
    """Starlette answered 307 to the path without the slash, with an empty body, which tritonclient does not follow."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}).encode()
    status, reply = post_json(f"http://{server.url}/v2/models/mlp/infer/", body)
    assert status == 404
    assert reply["error"] == "no endpoint at POST /v2/models/mlp/infer/: drop the trailing slash (/v2/models/mlp/infer)"
    status, reply = get_json(f"http://{server.url}/v2/health/ready/")
    assert status == 404 and reply["error"].endswith("drop the trailing slash (/v2/health/ready)")
    status, reply = get_json(f"http://{server.url}/v2/nothing/")
    assert status == 404 and "trailing slash" not in reply["error"]
    assert reply["error"].startswith("no endpoint at GET /v2/nothing/: this server speaks KServe v2 under /v2")


def test_a_wrong_datatype_is_named_before_the_data_that_does_not_fit_it(server: Running) -> None:
    """FP32 input sent as INT64 with float data was told "INT64 data must be integers": the client learned that the
    model takes FP32 only after fixing its data to integers."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "INT64", "data": [0.5] * 64}]}).encode()
    status, reply = _post(server, body)
    assert (status, reply["error"]) == (400, "input 'x' has datatype INT64, model 'mlp' expects FP32")
    # a data error with the model's own datatype keeps its message
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": ["a"] * 64}]}).encode()
    status, reply = _post(server, body)
    assert (status, reply["error"]) == (400, "input 0 'x': FP32 data must be numbers")
