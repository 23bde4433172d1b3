"""The server's guards route by route, on real servers on 127.0.0.1: the bearer token on every HTTP route and gRPC
call but the three health calls, and every health call saying "no" while the server drains."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np
import pytest

from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig

from .helpers import gated_server, get_json, http_status, post_json, wait_until

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
shm = pytest.importorskip("tritonclient.utils.shared_memory")

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def guarded() -> Iterator[Running]:
    """zoo:mlp with a token, shared memory allowed and a gRPC port: every route and call it has is open."""
    running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, grpc_port=0, token=TOKEN, allow_client_shm=True))
    yield running
    running.stop()


@pytest.fixture
def region() -> Iterator[str]:
    """The key of a 4 KiB shared-memory object, unlinked afterwards."""
    key = f"/dlperf_guard_test_{os.getpid()}"
    handle = shm.create_shared_memory_region("guard", key, 4096)
    yield key
    shm.destroy_shared_memory_region(handle)


GETS = ["/v2", "/v2/models/stats", "/metrics", "/v2/models/mlp", "/v2/models/mlp/config", "/v2/models/mlp/stats",
        "/v2/models/mlp/versions/1", "/v2/models/mlp/versions/1/config", "/v2/models/mlp/versions/1/stats",
        "/v2/systemsharedmemory/status", "/v2/systemsharedmemory/region/guard/status"]


def test_every_http_route_but_the_health_calls_needs_the_token(guarded: Running, region: str) -> None:
    """A route served without the token (a route registered public by mistake) would hand its metadata,
    statistics or shared memory to anyone who can reach the port; the existing test only tried three routes.
    Without the token, or with it under another scheme, each is 401 with `WWW-Authenticate: Bearer`, and a
    register refused so registers nothing."""
    base = f"http://{guarded.url}"
    register = json.dumps({"key": region, "offset": 0, "byte_size": 4096}).encode()
    x = {"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
    posts = [("/v2/systemsharedmemory/region/guard/register", register),
             ("/v2/systemsharedmemory/region/guard/unregister", b""), ("/v2/systemsharedmemory/unregister", b""),
             ("/v2/models/mlp/infer", json.dumps(x).encode()),
             ("/v2/models/mlp/versions/1/infer", json.dumps(x).encode())]
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": TOKEN}, {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer "}):
        for path in GETS:
            status, reply = get_json(base + path, headers)
            assert (status, "missing or wrong bearer token" in reply["error"]) == (401, True), (path, headers)
        for path, body in posts:
            status, reply = post_json(base + path, body, {**headers, "Content-Type": "application/json"})
            assert (status, "missing or wrong bearer token" in reply["error"]) == (401, True), (path, headers)
    for path in GETS:  # with the token: served (region 'guard' is not registered yet: 400, not 401)
        assert http_status(base + path, AUTH) == (400 if "/region/" in path else 200), path
    # the refused registers registered nothing; with the token the same request does
    c = httpclient.InferenceServerClient(guarded.url)
    assert c.get_system_shared_memory_status(headers=AUTH) == []
    c.register_system_shared_memory("guard", region, 4096, headers=AUTH)
    try:
        assert [r["name"] for r in c.get_system_shared_memory_status(headers=AUTH)] == ["guard"]
    finally:
        c.unregister_system_shared_memory(headers=AUTH)
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/mlp/ready", "/v2/models/mlp/versions/1/ready"):
        assert http_status(base + path) == 200, path



def test_every_health_call_says_no_while_the_server_drains() -> None:
    """During the drain (SIGTERM's first step) a load balancer must stop sending: liveness, readiness and the
    model's readiness all turn false, over HTTP and gRPC, and a new inference request is refused with 503 /
    UNAVAILABLE, while the request already in the model still gets its answer. Only server readiness over HTTP
    was checked: a model still "ready" or a server still "live" kept Kubernetes probes routing to a replica on its
    way out."""
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, exit_timeout_s=60.0)
    with gated_server(config) as (running, gate):
        base = f"http://{running.url}"
        assert running.grpc_url is not None
        g = grpcclient.InferenceServerClient(running.grpc_url)
        health = ("/v2/health/live", "/v2/health/ready", "/v2/models/gated/ready", "/v2/models/gated/versions/1/ready")
        assert [http_status(base + path) for path in health] == [200] * 4
        assert g.is_server_live() and g.is_server_ready() and g.is_model_ready("gated")
        c = httpclient.InferenceServerClient(running.url)
        x = np.ones((1, 4), np.float32)
        held = c.async_infer("gated", [httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x)])
        assert gate.wait_entered()
        running.server.begin_shutdown()
        wait_until(lambda: http_status(f"{base}/v2/health/ready") == 400, 30, "readiness to turn false")
        for path in health:
            status, reply = get_json(base + path)
            assert status == 400 and reply["error"], path
        assert (g.is_server_live(), g.is_server_ready(), g.is_model_ready("gated")) == (False, False, False)
        fresh = httpclient.InferenceServerClient(running.url)
        with pytest.raises(InferenceServerException) as info:
            fresh.infer("gated", [httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x)])
        assert info.value.status() == "503" and "shutting down" in info.value.message()
        with pytest.raises(InferenceServerException) as info:
            g.infer("gated", [grpcclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x)])
        assert info.value.status() == "StatusCode.UNAVAILABLE" and "shutting down" in info.value.message()
        assert running.state.in_flight == 1  # still draining: the held request is in the model
        gate.open.set()
        np.testing.assert_array_equal(held.get_result().as_numpy("y"), x * 2)
        g.close()
        c.close()
        fresh.close()


def test_every_grpc_call_but_the_health_calls_needs_the_token(guarded: Running, region: str) -> None:
    """As over HTTP: a call served without the token would let anyone read the statistics, register shared memory
    (the server then maps and writes that object) or run inference on a stream; the existing test only tried
    ModelInfer and ModelMetadata. Each call is UNAUTHENTICATED without the token or with a wrong one, and a
    refused register registers nothing."""
    grpc = pytest.importorskip("grpc")
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    assert guarded.grpc_url is not None
    infer = service_pb2.ModelInferRequest(model_name="mlp")
    infer.inputs.add(name="x", datatype="FP32", shape=[1, 64])
    infer.raw_input_contents.append(np.zeros((1, 64), np.float32).tobytes())
    calls = [("ServerMetadata", service_pb2.ServerMetadataRequest()),
             ("ModelMetadata", service_pb2.ModelMetadataRequest(name="mlp")),
             ("ModelConfig", service_pb2.ModelConfigRequest(name="mlp")),
             ("ModelStatistics", service_pb2.ModelStatisticsRequest(name="mlp")),
             ("ModelStatistics", service_pb2.ModelStatisticsRequest()),
             ("ModelInfer", infer),
             ("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest()),
             ("SystemSharedMemoryRegister", service_pb2.SystemSharedMemoryRegisterRequest(
                 name="guard", key=region, offset=0, byte_size=4096)),
             ("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest(name="guard"))]
    with grpc.insecure_channel(guarded.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for metadata in (None, (("authorization", "Bearer wrong"),), (("authorization", f"Basic {TOKEN}"),)):
            for name, request in calls:
                with pytest.raises(grpc.RpcError) as info:
                    getattr(stub, name)(request, metadata=metadata, timeout=30)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, (name, metadata)
            with pytest.raises(grpc.RpcError) as info:
                list(stub.ModelStreamInfer(iter([infer]), metadata=metadata, timeout=30))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, ("ModelStreamInfer", metadata)
        auth = (("authorization", f"Bearer {TOKEN}"),)
        status = stub.SystemSharedMemoryStatus(service_pb2.SystemSharedMemoryStatusRequest(), metadata=auth,
                                               timeout=30)
        assert dict(status.regions) == {}  # the refused registers registered nothing
        for name, request in calls:
            if name != "ModelInfer":
                getattr(stub, name)(request, metadata=auth, timeout=30)
        streamed = list(stub.ModelStreamInfer(iter([infer]), metadata=auth, timeout=30))
        assert [r.error_message for r in streamed] == [""]
        assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30).live
        assert stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready
        assert stub.ModelReady(service_pb2.ModelReadyRequest(name="mlp"), timeout=30).ready


def test_only_the_two_infer_paths_infer_and_a_register_body_is_small(guarded: Running, region: str) -> None:
    """POST /v2/models/NAME/infer and /v2/models/NAME/versions/V/infer run the model; a path that only looks like
    them (another word where "versions" is) is the router's 404, not an inference of version V. A register
    request's body is a small JSON object: one past 64 KiB is 413, whatever it holds."""
    base = f"http://{guarded.url}"
    headers = {**AUTH, "Content-Type": "application/json"}
    x = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}).encode()
    assert post_json(f"{base}/v2/models/mlp/versions/1/infer", x, headers)[0] == 200
    status, reply = post_json(f"{base}/v2/models/mlp/other/1/infer", x, headers)
    assert status == 404 and "no endpoint at POST /v2/models/mlp/other/1/infer" in reply["error"]
    padded = json.dumps({"key": region, "offset": 0, "byte_size": 4096, "pad": " " * 70_000}).encode()
    status, reply = post_json(f"{base}/v2/systemsharedmemory/region/guard/register", padded, headers)
    assert status == 413 and "small JSON object" in reply["error"]
    c = httpclient.InferenceServerClient(guarded.url)
    assert c.get_system_shared_memory_status(headers=AUTH) == []


def _register_reply(running: Running, head: bytes, body: bytes) -> bytes:
    """The status line a register request of these headers and body gets (the server must answer before the body
    its Content-Length announces has arrived: a refused request is not read)."""
    import socket

    with socket.create_connection((running.host, running.port), 30) as sock:
        sock.sendall(b"POST /v2/systemsharedmemory/region/big/register HTTP/1.1\r\nHost: x\r\n"
                     + f"Authorization: Bearer {TOKEN}\r\n".encode() + head + b"\r\n" + body)
        sock.settimeout(30)
        return sock.recv(200).split(b"\r\n")[0]


def test_a_register_body_past_its_limit_is_refused_before_it_is_read(guarded: Running) -> None:
    """A register request was read whole before its 64 KiB limit was checked: one announcing 1 GiB got no answer
    until all of it arrived (--max-request-mb did not apply), and one of 200 MiB was held in memory. It is refused
    by its Content-Length unread, and a chunked one (no length) once it passes the limit."""
    announced = _register_reply(guarded, f"Content-Length: {1 << 30}\r\n".encode(), b"{" + b" " * 100_000)
    assert announced.startswith(b"HTTP/1.1 413")
    chunk = b" " * 70_000
    chunked = _register_reply(guarded, b"Transfer-Encoding: chunked\r\n",
                              f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")  # no last chunk: more would follow
    assert chunked.startswith(b"HTTP/1.1 413")
