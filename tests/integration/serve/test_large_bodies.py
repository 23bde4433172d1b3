"""Infer bodies of ALIGNED_MIN_BYTES or more: the server's HTTP protocol writes them straight into aligned
buffers (`server._http_protocol`, `app.BodyBuffer`). Real server on 127.0.0.1, tritonclient and raw sockets."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve import app, server
from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.metrics import parse_variant_metrics
from dlperf.serve.protocol import Tensor, encode_request
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import get_text, wait_until

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

WIDTH = 40_000  # 160 KB of FP32 per row: every request is above ALIGNED_MIN_BYTES
SIG = Signature((TensorSpec("x", "FP32", (-1, WIDTH)),), (TensorSpec("y", "FP32", (-1, 2)),))


class Seen:
    """What the model got: per batch, (rows, 64-byte aligned, writable); and the bytes the protocol wrote."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[tuple[int, bool, bool]] = []
        self.protocol_bytes = 0

    def runner(self, index: int) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            x = arrays[0]
            with self.lock:
                self.batches.append((x.shape[0], x.ctypes.data % app.ALIGNMENT == 0, x.flags.writeable))
            return [_expected(x)]

        return run


@pytest.fixture()
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Running, Seen]]:
    seen = Seen()
    write = app.BodyBuffer.write

    def counted(self: app.BodyBuffer, chunk: bytes) -> None:
        with seen.lock:
            seen.protocol_bytes += len(chunk)
        write(self, chunk)

    monkeypatch.setattr(app.BodyBuffer, "write", counted)
    config = ServeConfig(model="wide", port=0, max_batch_size=4, max_queue_delay_s=0.02, token="s3cret")
    state = build_state(config, {"wide": ServedModel("wide", SIG, seen.runner)})
    with start_in_thread(config, state) as running:
        yield running, seen


def auth() -> dict[str, str]:
    return {"Authorization": "Bearer s3cret"}  # a new dict each time: tritonclient adds its own headers to it


def _input(x: np.ndarray, binary: bool = True) -> Any:
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    return inp


def _expected(x: np.ndarray) -> np.ndarray:
    return np.stack([x[:, 0], x.sum(axis=1, dtype=np.float64).astype(np.float32)], axis=1)


def test_concurrent_distinct_large_requests_get_their_own_answers(served: tuple[Running, Seen]) -> None:
    running, seen = served
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1 + i % 2, WIDTH)).astype(np.float32) for i in range(16)]
    c = httpclient.InferenceServerClient(running.url, concurrency=8)
    pending = [c.async_infer("wide", [_input(x)], headers=auth()) for x in inputs]
    for x, p in zip(inputs, pending, strict=True):
        np.testing.assert_allclose(p.get_result().as_numpy("y"), _expected(x), rtol=1e-5)
    c.close()
    body_bytes = sum(x.nbytes for x in inputs)
    # every body went through the protocol's buffer, not uvicorn's (unless this uvicorn does not fit the fast path)
    assert seen.protocol_bytes >= body_bytes, f"uvicorn misfit: {server._UVICORN_MISFIT}"
    # one at a time, each request is a batch of its own: the model gets views of the body buffer itself
    with seen.lock:
        seen.batches.clear()
    c = httpclient.InferenceServerClient(running.url)
    for x in inputs[:3]:
        np.testing.assert_allclose(c.infer("wide", [_input(x)], headers=auth()).as_numpy("y"), _expected(x), rtol=1e-5)
    assert seen.batches == [(x.shape[0], True, True) for x in inputs[:3]]


def test_a_large_json_request_still_takes_the_plain_path(served: tuple[Running, Seen]) -> None:
    running, seen = served
    x = np.linspace(-1, 1, WIDTH, dtype=np.float32)[None]
    before = seen.protocol_bytes
    c = httpclient.InferenceServerClient(running.url)
    np.testing.assert_allclose(c.infer("wide", [_input(x, binary=False)], headers=auth()).as_numpy("y"), _expected(x),
                               rtol=1e-4, atol=1e-3)
    assert seen.protocol_bytes == before  # no binary data: nothing worth aligning


def test_refused_before_its_body_then_the_connection_serves_the_next_request(served: tuple[Running, Seen]) -> None:
    running, _ = served
    x = np.ones((1, WIDTH), np.float32)
    c = httpclient.InferenceServerClient(running.url)  # one keep-alive connection for both requests
    with pytest.raises(InferenceServerException) as info:
        c.infer("wide", [_input(x)])  # no token: 401, answered before the body has been read
    assert info.value.status() == "401"
    np.testing.assert_allclose(c.infer("wide", [_input(x * 3)], headers=auth()).as_numpy("y"), _expected(x * 3))


def test_a_client_gone_halfway_through_its_body_is_counted_and_serving_goes_on(served: tuple[Running, Seen]) -> None:
    running, _ = served
    x = np.full((1, WIDTH), 2.0, np.float32)
    body, header_length = encode_request([Tensor("x", "FP32", x)])
    head = (f"POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
            f"Inference-Header-Content-Length: {header_length}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection((running.host, running.port), 10) as sock:
        sock.sendall(head + body[:len(body) // 2])
    metrics_url = f"http://{running.url}/metrics"

    def failures() -> dict[str, float]:
        return parse_variant_metrics(get_text(metrics_url, auth()))["default"].failure_total

    # the client went away (CANCELED), it did not send a bad request (INVALID)
    wait_until(lambda: failures().get("CANCELED") == 1.0, 10.0, "the abandoned request to be counted as CANCELED")
    assert failures().get("INVALID", 0.0) == 0.0
    c = httpclient.InferenceServerClient(running.url)
    np.testing.assert_allclose(c.infer("wide", [_input(x)], headers=auth()).as_numpy("y"), _expected(x))


@pytest.mark.parametrize("value", [b"12x", b"\xb2", b"-5"])
def test_a_malformed_header_length_is_a_400_that_names_it(served: tuple[Running, Seen], value: bytes) -> None:
    """Not a byte count (b'\\xb2' is '²' in latin-1, a digit to str.isdigit): the body takes the plain path,
    the service answers 400 naming the header, and the connection serves the next request."""
    running, seen = served
    x = np.full((1, WIDTH), 2.0, np.float32)
    body, _ = encode_request([Tensor("x", "FP32", x)])
    head = (b"POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
            b"Inference-Header-Content-Length: " + value + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n\r\n")
    before = seen.protocol_bytes
    with socket.create_connection((running.host, running.port), 10) as sock:
        sock.sendall(head + body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"Inference-Header-Content-Length is not a byte count" in reply
    assert seen.protocol_bytes == before  # no aligned buffer for a body whose layout is unknown
    c = httpclient.InferenceServerClient(running.url)
    np.testing.assert_allclose(c.infer("wide", [_input(x)], headers=auth()).as_numpy("y"), _expected(x))


def test_each_body_buffer_is_freed_when_uvicorn_moves_to_the_next_request(
        served: tuple[Running, Seen], monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol puts a client-gone check and the body buffer in the request's scope; nothing in the scope
    may point back at uvicorn's request cycle (which holds the scope), or every body waits for the cyclic GC:
    under load that is its oldest generation, and a ResNet-18 server's idle RSS after 2 minutes at c=64 was
    1.76x its idle RSS after the warm-up. With the GC off, the buffers of all but the connection's last
    request must be gone by reference counting alone."""
    import gc
    import weakref

    running, _ = served
    refs: list[weakref.ref[np.ndarray]] = []  # the buffers (a BodyBuffer has __slots__, no weak references)
    init = app.BodyBuffer.__init__

    def tracked(self: app.BodyBuffer, buffer: np.ndarray) -> None:
        init(self, buffer)
        refs.append(weakref.ref(buffer))

    monkeypatch.setattr(app.BodyBuffer, "__init__", tracked)
    c = httpclient.InferenceServerClient(running.url)  # one keep-alive connection
    x = np.ones((1, WIDTH), np.float32)
    gc.disable()
    try:
        for _ in range(4):
            np.testing.assert_allclose(c.infer("wide", [_input(x)], headers=auth()).as_numpy("y"), _expected(x),
                                       rtol=1e-5)
        wait_until(lambda: sum(r() is None for r in refs) >= 3, 10.0, "the earlier requests' bodies to be freed")
    finally:
        gc.enable()
        c.close()
    assert len(refs) == 4
