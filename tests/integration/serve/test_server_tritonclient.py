"""A real dlperf server on 127.0.0.1 (uvicorn in a thread), driven by tritonclient[http]."""

from __future__ import annotations

import json
import logging
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.metrics import parse_variant_metrics
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import (
    BAD_MLP_INPUTS,
    MLP_MAX_BATCH,
    batching_mlp_server,
    get_json,
    get_text,
    http_status,
    mlp_reference,
    wait_until,
)

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

MAX_BATCH = MLP_MAX_BATCH


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = batching_mlp_server()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reference() -> Any:
    return mlp_reference()


def _input(x: np.ndarray, binary: bool = True, name: str = "x", datatype: str = "FP32") -> Any:
    inp = httpclient.InferInput(name, list(x.shape), datatype)
    inp.set_data_from_numpy(x, binary_data=binary)
    return inp


def test_health_and_metadata(server: Running) -> None:
    c = httpclient.InferenceServerClient(server.url)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("mlp") and c.is_model_ready("mlp", "1")
    assert not c.is_model_ready("nope")
    meta = c.get_server_metadata()
    assert meta["name"] == "dlperf"
    assert {"binary_tensor_data", "statistics", "model_configuration"} <= set(meta["extensions"])
    model = c.get_model_metadata("mlp")
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}]
    assert model["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    config = c.get_model_config("mlp")
    assert config["max_batch_size"] == MAX_BATCH
    assert config["input"][0]["dims"] == [64]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 50_000
    # the HTTP config is Triton's ModelConfig message in JSON: adaptive_wait sat in dynamic_batching, which has no
    # 'parameters' field, so a strict parse (what a client turning it into the protobuf does) refused it
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    parsed = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    assert parsed.parameters["adaptive_wait"].string_value == "false"
    with pytest.raises(InferenceServerException) as info:
        c.get_model_metadata("nope")
    assert info.value.status() == "404"


@pytest.mark.parametrize(("binary_in", "binary_out"), [(True, True), (False, False), (True, False), (False, True)])
def test_binary_and_json_inference_give_the_models_outputs(server: Running, reference: Any, binary_in: bool,
                                                           binary_out: bool) -> None:
    c = httpclient.InferenceServerClient(server.url)
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    out = httpclient.InferRequestedOutput("logits", binary_data=binary_out)
    result = c.infer("mlp", [_input(x, binary_in)], outputs=[out], request_id="req-1", model_version="1")
    assert result.get_response()["id"] == "req-1"
    np.testing.assert_allclose(result.as_numpy("logits"), reference(x), rtol=1e-5, atol=1e-6)


def test_gzip_and_deflate_both_ways(server: Running, reference: Any) -> None:
    c = httpclient.InferenceServerClient(server.url)
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    for algorithm in ("gzip", "deflate"):
        result = c.infer("mlp", [_input(x)], request_compression_algorithm=algorithm,
                         response_compression_algorithm=algorithm)
        np.testing.assert_allclose(result.as_numpy("logits"), reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "shape", "datatype", "message"), BAD_MLP_INPUTS)
def test_bad_requests_are_400_with_an_error_message(server: Running, name: str, shape: tuple[int, ...],
                                                    datatype: str, message: str) -> None:
    c = httpclient.InferenceServerClient(server.url)
    x = np.zeros(shape, dtype=np.int64 if datatype == "INT64" else np.float32)
    with pytest.raises(InferenceServerException) as info:
        c.infer("mlp", [_input(x, name=name, datatype=datatype)])
    assert info.value.status() == "400"
    assert message in info.value.message()


def test_an_output_requested_twice_or_unknown_is_400(server: Running) -> None:
    """An output named twice was returned twice; Triton refuses it ("already exists in request")."""
    c = httpclient.InferenceServerClient(server.url)
    x = np.zeros((1, 64), np.float32)
    for outputs, message in (([httpclient.InferRequestedOutput("logits"), httpclient.InferRequestedOutput("logits")],
                              "the request names output 'logits' twice"),
                             ([httpclient.InferRequestedOutput("probs")], "unknown output 'probs' of model 'mlp'")):
        with pytest.raises(InferenceServerException) as info:
            c.infer("mlp", [_input(x)], outputs=outputs)
        assert info.value.status() == "400"
        assert message in info.value.message()


def test_unknown_model_and_version_are_404(server: Running) -> None:
    c = httpclient.InferenceServerClient(server.url)
    x = np.zeros((1, 64), np.float32)
    for kwargs in ({"model_name": "nope"}, {"model_name": "mlp", "model_version": "7"}):
        with pytest.raises(InferenceServerException) as info:
            c.infer(inputs=[_input(x)], **kwargs)
        assert info.value.status() == "404"


def test_concurrent_distinct_requests_are_batched_and_routed_back(server: Running, reference: Any) -> None:
    before = httpclient.InferenceServerClient(server.url).get_inference_statistics("mlp")["model_stats"][0]
    n = 24
    c = httpclient.InferenceServerClient(server.url, concurrency=n)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1 + i % 3, 64)).astype(np.float32) for i in range(n)]
    pending = [c.async_infer("mlp", [_input(x)], request_id=str(i)) for i, x in enumerate(xs)]
    results = [p.get_result() for p in pending]
    for i, (x, r) in enumerate(zip(xs, results, strict=False)):
        assert r.get_response()["id"] == str(i)
        np.testing.assert_allclose(r.as_numpy("logits"), reference(x), rtol=1e-5, atol=1e-6)
    after = c.get_inference_statistics("mlp")["model_stats"][0]
    items = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert items == sum(x.shape[0] for x in xs)
    assert executions < n  # requests shared batches
    assert max(b["batch_size"] for b in after["batch_stats"]) <= MAX_BATCH
    c.close()


def test_metrics_parse_and_add_up(server: Running) -> None:
    c = httpclient.InferenceServerClient(server.url)
    before = parse_variant_metrics(get_text(f"http://{server.url}/metrics"))["default"]
    x = np.zeros((2, 64), np.float32)
    for _ in range(3):
        c.infer("mlp", [_input(x)])
    with pytest.raises(InferenceServerException):
        c.infer("mlp", [_input(np.zeros((1, 5), np.float32))])
    after = parse_variant_metrics(get_text(f"http://{server.url}/metrics"))["default"]
    assert after.success_total - before.success_total == 3
    assert after.failure_total["INVALID"] - before.failure_total["INVALID"] == 1
    assert after.requests_total - before.requests_total == 4
    assert after.inference_count_total - before.inference_count_total == 6
    assert after.request_duration.count - before.request_duration.count == 4
    assert after.queue_duration.count - before.queue_duration.count == 3
    assert after.batch_size.count == after.exec_count_total
    stats = c.get_inference_statistics("mlp")["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == after.success_total
    assert stats["fail"]["count"] == sum(after.failure_total.values())


def test_request_too_large_is_413_before_it_is_read() -> None:
    config = ServeConfig(model="zoo:mlp", port=0, max_request_bytes=4096)
    state = build_state(config)
    with start_in_thread(config, state) as running:
        c = httpclient.InferenceServerClient(running.url)
        big = np.zeros((32, 64), np.float32)  # 8 KiB of binary data
        with pytest.raises(InferenceServerException) as info:
            c.infer("mlp", [_input(big)])
        assert info.value.status() == "413"
        small = np.zeros((1, 64), np.float32)
        assert c.infer("mlp", [_input(small)]).as_numpy("logits").shape == (1, 10)


def test_bearer_token_protects_all_but_health(caplog: pytest.LogCaptureFixture) -> None:
    config = ServeConfig(model="zoo:mlp", port=0, token="s3cret")
    with start_in_thread(config) as running, caplog.at_level(logging.WARNING, logger="dlperf.serve"):
        base = f"http://{running.url}"
        assert http_status(f"{base}/v2/health/ready") == 200
        assert http_status(f"{base}/v2/health/live") == 200
        assert http_status(f"{base}/v2/models/mlp/ready") == 200  # the third health call, as over gRPC
        assert http_status(f"{base}/v2/models/mlp/versions/1/ready") == 200
        # an unknown model there names the models served only to a client with the token
        for headers, said in (({}, "unknown model 'nosuch' (with the server's token the error names the models"),
                              ({"Authorization": "Bearer s3cret"}, "unknown model 'nosuch': this server serves mlp")):
            status, reply = get_json(f"{base}/v2/models/nosuch/ready", headers)
            assert status == 404 and reply["error"].startswith(said)
        status, reply = get_json(f"{base}/v2/models/mlp/versions/7/ready")
        assert status == 404 and "it has version" not in reply["error"]
        assert http_status(f"{base}/v2/models/mlp") == 401
        assert http_status(f"{base}/metrics") == 401
        assert http_status(f"{base}/v2/models/mlp", {"Authorization": "Bearer wrong"}) == 401
        assert http_status(f"{base}/v2/models/mlp", {"Authorization": "Bearer s3cret"}) == 200
        c = httpclient.InferenceServerClient(running.url)
        x = np.zeros((1, 64), np.float32)
        with pytest.raises(InferenceServerException) as info:
            c.infer("mlp", [_input(x)])
        assert info.value.status() == "401"
        r = c.infer("mlp", [_input(x)], headers={"Authorization": "Bearer s3cret"})
        assert r.as_numpy("logits").shape == (1, 10)
        # the refused inference request is counted like any 4xx: a client with a wrong token shows on /metrics
        m = parse_variant_metrics(get_text(f"{base}/metrics", {"Authorization": "Bearer s3cret"}))["default"]
        assert m.failure_total["INVALID"] == 1 and m.success_total == 1 and m.requests_total == 2
    # and in the log (it wrote nothing, at any --log-level): the first refusal at once, the three after it within
    # 10 s counted for one line, written when the server stops if the 10 s have not passed by then
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")]
    what = "a missing or wrong bearer token (401 / UNAUTHENTICATED; the server's --token)"
    assert refused[0] == f"refused 1 request: {what}"
    assert re.fullmatch(rf"refused 3 requests in the last \d+ s: {re.escape(what)}", refused[1]) and len(refused) == 2


def test_json_request_without_content_type_from_plain_http(server: Running) -> None:
    body = json.dumps({"id": "plain", "inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
                                                   "data": [0.5] * 64}]}).encode()
    request = urllib.request.Request(f"http://{server.url}/v2/models/mlp/infer", data=body, method="POST")
    request.remove_header("Content-type")
    with urllib.request.urlopen(request, timeout=10) as response:
        reply = json.loads(response.read())
        assert response.headers["Content-Type"].startswith("application/json")
    assert reply["id"] == "plain" and reply["model_name"] == "mlp"
    assert reply["outputs"][0]["shape"] == [1, 10] and len(reply["outputs"][0]["data"]) == 10


def test_streamed_body_is_refused_with_413_as_soon_as_it_passes_the_limit() -> None:
    config = ServeConfig(model="zoo:mlp", port=0, max_request_bytes=4096)
    with start_in_thread(config) as running, socket.create_connection((running.host, running.port), 10) as sock:
        sock.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"{" + b" " * 5000
        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        # the terminating chunk is never sent: the server must answer from what it has read so far
        reply = b""
        while b"\r\n\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
        assert reply.startswith(b"HTTP/1.1 413")


def test_the_infer_route_answers_versions_and_leaves_other_methods_to_the_router(server: Running) -> None:
    c = httpclient.InferenceServerClient(server.url)
    version = c.get_model_metadata("mlp")["versions"][0]
    x = np.ones((1, 64), np.float32)
    assert c.infer("mlp", [_input(x)], model_version=version).as_numpy("logits").shape == (1, 10)
    assert http_status(f"http://{server.url}/v2/models/mlp/infer") == 405  # a GET
    assert http_status(f"http://{server.url}/v2/models/mlp/versions/{version}/infer") == 405
    assert http_status(f"http://{server.url}/v2/models//infer") == 404
    # the router's errors are {"error"} JSON too, saying what to do instead
    for path, status, says in (("/v2/models/mlp/infer", 405, "GET /v2/models/mlp/infer is not allowed: use POST"),
                               ("/v3", 404, "no endpoint at GET /v3: this server speaks KServe v2 under /v2"),
                               # Triton's extensions it does not offer say why and what instead
                               ("/v2/repository/index", 404, "no model repository to index, load or unload"),
                               ("/v2/cudasharedmemory/status", 404, "system shared memory only"),
                               ("/v2/trace/setting", 404, "no request tracing"),
                               ("/v2/logging", 404, "give --log-level there")):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://{server.url}{path}", timeout=10)
        assert info.value.code == status and says in json.loads(info.value.read())["error"]
        assert info.value.headers["content-type"] == "application/json"


def test_an_unexpected_error_while_inferring_is_a_500_with_its_reason_and_serving_goes_on() -> None:
    config = ServeConfig(model="zoo:mlp", port=0)
    state = build_state(config)
    original = state.infer
    calls: list[int] = []

    async def first_call_breaks(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return await original(*args, **kwargs)

    state.infer = first_call_breaks  # type: ignore[method-assign]
    with start_in_thread(config, state) as running:
        c = httpclient.InferenceServerClient(running.url)
        x = np.zeros((1, 64), np.float32)
        with pytest.raises(InferenceServerException) as info:
            c.infer("mlp", [_input(x)])
        assert info.value.status() == "500"
        assert "RuntimeError: boom" in info.value.message()
        assert c.infer("mlp", [_input(x)]).as_numpy("logits").shape == (1, 10)


def test_answered_requests_are_freed_at_once_not_by_the_cyclic_gc() -> None:
    """A queued request (with its input arrays, views of its body) must not sit in a reference cycle: with
    the GC left to find it, a ResNet-18 server kept tens of bodies alive at c=1 and its RSS under load grew
    by 20% (docs/serve.md, Memory)."""
    import gc
    import weakref

    config = ServeConfig(model="zoo:mlp", port=0)
    state = build_state(config)
    batcher = state.models["mlp"].variants[0].batcher
    refs: list[weakref.ref[Any]] = []
    submit = batcher.submit

    def tracked(work: Any) -> None:
        refs.append(weakref.ref(work))
        submit(work)

    batcher.submit = tracked  # type: ignore[method-assign]
    gc.disable()
    try:
        with start_in_thread(config, state) as running:
            c = httpclient.InferenceServerClient(running.url, concurrency=4)
            pending = [c.async_infer("mlp", [_input(np.full((1, 64), i, np.float32))]) for i in range(12)]
            for p in pending:
                p.get_result()
            wait_until(lambda: all(r() is None for r in refs), 10.0, "the answered requests to be freed")
            c.close()
    finally:
        gc.enable()
    assert len(refs) == 12


def test_without_batching_a_request_counts_as_one_inference_as_in_triton() -> None:
    """--max-batch-size 0: /config says dims [-1, 64], the first dimension part of the tensor, so a [3, 64]
    request is one inference (Triton's statistics), not three items of a batch."""
    with start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=0)) as running:
        c = httpclient.InferenceServerClient(running.url)
        x = np.zeros((3, 64), np.float32)
        inp = httpclient.InferInput("x", [3, 64], "FP32")
        inp.set_data_from_numpy(x)
        assert c.infer("mlp", [inp]).as_numpy("logits").shape == (3, 10)
        stats = c.get_inference_statistics("mlp")["model_stats"][0]
        assert (stats["inference_count"], stats["execution_count"]) == (1, 1)
        assert [b["batch_size"] for b in stats["batch_stats"]] == [1]
        assert parse_variant_metrics(get_text(f"http://{running.url}/metrics"))["default"].inference_count_total == 1
