"""app._read_body fed by the infer route's ASGI helpers from a fake `receive`: the aligned writable buffer,
the limits, the fallbacks, a client that goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.app import (
    ALIGNED_MIN_BYTES,
    ALIGNMENT,
    BodyBuffer,
    _binary_offset,
    _body_chunks,
    _headers,
    _read_body,
    body_buffer_for,
)
from dlperf.serve.protocol import ProtocolError, Tensor, decode_request, encode_request
from dlperf.serve.service import ClientGone

pytestmark = pytest.mark.unit


def _request(body: bytes, chunk: int, headers: dict[str, str],
             disconnect: bool = False) -> tuple[dict[str, str], AsyncIterator[bytes]]:
    """(headers, body chunks) as the infer route gets them from uvicorn: ASGI header pairs and messages."""
    parts = [body[i:i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages: list[dict[str, Any]] = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
                                      for i, p in enumerate(parts)]
    if disconnect:
        messages[-1]["more_body"] = True
        messages.append({"type": "http.disconnect"})

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    return _headers([(k.encode(), v.encode()) for k, v in headers.items()]), _body_chunks(receive)


def _infer_body(array: np.ndarray) -> tuple[bytes, int]:
    body, header_length = encode_request([Tensor("x", "FP32", array)])
    assert header_length is not None
    return body, header_length


def test_a_large_binary_body_becomes_writable_aligned_input_arrays() -> None:
    array = np.arange(3 * 224 * 224, dtype=np.float32).reshape(1, 3, 224, 224)  # 602112 bytes of data
    body, header_length = _infer_body(array)
    headers = {"content-length": str(len(body)), "inference-header-content-length": str(header_length)}
    read = asyncio.run(_read_body(*_request(body, 65536, headers), 1 << 30, _binary_offset(headers)))
    assert isinstance(read, memoryview) and bytes(read) == body
    decoded = decode_request(read, header_length).inputs[0].data
    np.testing.assert_array_equal(decoded, array)
    assert decoded.flags.writeable and decoded.ctypes.data % ALIGNMENT == 0


def test_small_bodies_and_bodies_without_a_length_stay_bytes() -> None:
    small, header_length = _infer_body(np.ones((1, 4), np.float32))
    assert len(small) < ALIGNED_MIN_BYTES
    headers = {"content-length": str(len(small)), "inference-header-content-length": str(header_length)}
    assert asyncio.run(_read_body(*_request(small, 7, headers), 1 << 20, header_length)) == small

    large, header_length = _infer_body(np.ones((1, 40000), np.float32))
    chunked = {"transfer-encoding": "chunked", "inference-header-content-length": str(header_length)}
    assert asyncio.run(_read_body(*_request(large, 65536, chunked), 1 << 20, header_length)) == large


def test_a_body_longer_than_its_content_length_is_kept_whole_for_the_decoder_to_judge() -> None:
    body = b"{}" + b"\0" * ALIGNED_MIN_BYTES
    headers = {"content-length": str(len(body) - 10), "inference-header-content-length": "2"}
    read = asyncio.run(_read_body(*_request(body, 4096, headers), 1 << 20, 2))
    assert bytes(read) == body


def test_the_limit_is_enforced_before_and_while_reading() -> None:
    body = b"x" * (ALIGNED_MIN_BYTES * 2)
    with pytest.raises(ProtocolError, match="above the server's limit") as before:
        asyncio.run(_read_body(*_request(body, 4096, {"content-length": str(len(body))}), ALIGNED_MIN_BYTES))
    assert before.value.status == 413
    with pytest.raises(ProtocolError, match="passed the server's limit"):
        asyncio.run(_read_body(*_request(body, 4096, {}), ALIGNED_MIN_BYTES))


def test_the_binary_offset_header() -> None:
    assert _binary_offset({"inference-header-content-length": "120"}) == 120
    assert _binary_offset({"inference-header-content-length": "x1"}) is None  # the decoder reports it
    assert _binary_offset({}) is None


def test_a_client_that_goes_away_mid_body_is_gone_not_a_bad_request() -> None:
    body = b"x" * 10000
    with pytest.raises(ClientGone, match="disconnected"):
        asyncio.run(_read_body(*_request(body, 4096, {"content-length": "20000"}, disconnect=True), 1 << 20))


def test_repeated_headers_keep_the_first_value() -> None:
    assert _headers([(b"x-a", b"1"), (b"x-a", b"2"), (b"x-b", b"\xe9")]) == {"x-a": "1", "x-b": "\u00e9"}


def _scope(method: str, path: str, headers: dict[str, str], root_path: str = "") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": root_path,
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}


def test_the_protocol_reads_into_a_buffer_only_what_the_app_would_align() -> None:
    body, header_length = _infer_body(np.ones((1, 40000), np.float32))
    headers = {"content-length": str(len(body)), "inference-header-content-length": str(header_length)}
    into = body_buffer_for(_scope("POST", "/v2/models/m/infer", headers), 1 << 20)
    assert into is not None and len(into.buffer) == len(body)
    assert (into.buffer.ctypes.data + header_length) % ALIGNMENT == 0
    assert body_buffer_for(_scope("POST", "/v2/models/m/versions/2/infer", headers), 1 << 20) is not None
    assert body_buffer_for(_scope("POST", "/serve/v2/models/m/infer", headers, "/serve"), 1 << 20) is not None
    # not an infer POST, over the limit, no binary data, too small, chunked, a bad length: the plain path
    assert body_buffer_for(_scope("GET", "/v2/models/m/infer", headers), 1 << 20) is None
    assert body_buffer_for(_scope("POST", "/v2/models/m/ready", headers), 1 << 20) is None
    assert body_buffer_for(_scope("POST", "/v2/models/m/infer", headers), len(body) - 1) is None
    no_binary = {"content-length": str(len(body))}
    assert body_buffer_for(_scope("POST", "/v2/models/m/infer", no_binary), 1 << 20) is None
    small = {"content-length": "1000", "inference-header-content-length": "100"}
    assert body_buffer_for(_scope("POST", "/v2/models/m/infer", small), 1 << 20) is None
    chunked = {**headers, "transfer-encoding": "chunked"}
    assert body_buffer_for(_scope("POST", "/v2/models/m/infer", chunked), 1 << 20) is None
    bad = {**headers, "content-length": "-5"}
    assert body_buffer_for(_scope("POST", "/v2/models/m/infer", bad), 1 << 20) is None


def test_a_body_the_protocol_wrote_is_read_as_aligned_writable_arrays() -> None:
    array = np.arange(40000, dtype=np.float32).reshape(1, 40000)
    body, header_length = _infer_body(array)
    headers = {"content-length": str(len(body)), "inference-header-content-length": str(header_length)}
    into = body_buffer_for(_scope("POST", "/v2/models/m/infer", headers), 1 << 20)
    assert into is not None
    for i in range(0, len(body), 65536):  # as the parser hands it over
        into.write(body[i:i + 65536])
    # the ASGI messages then carry no body, only its end
    read = asyncio.run(_read_body(*_request(b"", 1, headers), 1 << 20, header_length, into))
    assert isinstance(read, memoryview) and bytes(read) == body
    decoded = decode_request(read, header_length).inputs[0].data
    np.testing.assert_array_equal(decoded, array)
    assert decoded.flags.writeable and decoded.ctypes.data % ALIGNMENT == 0
    with pytest.raises(ValueError, match="longer than its Content-Length"):
        into.write(b"x")


def test_a_client_gone_before_the_protocol_had_the_whole_body_is_gone() -> None:
    headers = {"content-length": "100000", "inference-header-content-length": "10"}
    into = BodyBuffer(np.empty(100000, np.uint8))
    into.write(b"x" * 5000)
    with pytest.raises(ClientGone, match="disconnected"):
        asyncio.run(_read_body(*_request(b"", 1, headers, disconnect=True), 1 << 20, 10, into))


def test_a_request_cancelled_while_its_body_is_read_counts_as_canceled() -> None:
    """Ray Serve cancels a request whose client went away, also while the replica still reads its body: the
    request is counted (CANCELED), so the counters add up, and it leaves the in-flight count."""
    from dlperf.serve.app import create_app
    from dlperf.serve.metrics import parse_variant_metrics
    from dlperf.serve.service import ServeConfig, build_state

    state = build_state(ServeConfig(model="zoo:mlp", port=0))
    try:
        app = create_app(state)
        first = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not first.is_set():
                first.set()
                return {"type": "http.request", "body": b'{"inputs": [', "more_body": True}
            await asyncio.Event().wait()  # the rest of the body never comes
            raise AssertionError("unreachable")

        async def send(message: Any) -> None:
            raise AssertionError(f"nothing is sent for a cancelled request: {message}")

        async def run() -> None:
            scope = {"type": "http", "method": "POST", "path": "/v2/models/mlp/infer", "root_path": "",
                     "headers": [(b"content-length", b"100")]}
            task = asyncio.ensure_future(app(scope, receive, send))
            await first.wait()
            await asyncio.sleep(0.01)
            assert state.in_flight == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(run())
        assert state.in_flight == 0
        metrics = parse_variant_metrics(state.metrics.exposition()[0].decode())["default"]
        assert metrics.failure_total["CANCELED"] == 1 and metrics.requests_total == 1
    finally:
        state.close(5.0)


def _served(receive: Any, body_headers: list[tuple[bytes, bytes]] | None = None) -> tuple[list[Any], Any]:
    """Run one infer request through the app of a zoo:mlp server with this `receive`: (messages sent, the
    server's metrics of the default variant)."""
    from dlperf.serve.app import create_app
    from dlperf.serve.metrics import parse_variant_metrics
    from dlperf.serve.service import ServeConfig, build_state

    state = build_state(ServeConfig(model="zoo:mlp", port=0))
    sent: list[Any] = []
    try:
        app = create_app(state)

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v2/models/mlp/infer", "root_path": "",
                 "headers": body_headers or [(b"content-length", b"100")]}
        asyncio.run(app(scope, receive, send))
        assert state.in_flight == 0
        return sent, parse_variant_metrics(state.metrics.exposition()[0].decode())["default"]
    finally:
        state.close(5.0)


def test_a_client_that_disconnects_mid_body_counts_as_canceled_not_invalid() -> None:
    messages: list[dict[str, Any]] = [{"type": "http.request", "body": b'{"inputs": [', "more_body": True},
                                      {"type": "http.disconnect"}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    _, metrics = _served(receive)
    assert metrics.failure_total["CANCELED"] == 1 and metrics.failure_total["INVALID"] == 0
    assert metrics.requests_total == 1


def test_a_fault_in_the_server_is_a_500_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception that is not the request's fault (here: the decoder itself failing) answers 500 with its
    reason and still counts the request once (OTHER), so success + failure add up to the requests."""
    import dlperf.serve.service as service

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(service, "decode_request", broken)
    body = b'{"inputs": []}'
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    sent, metrics = _served(receive, [(b"content-length", str(len(body)).encode())])
    assert sent[0]["status"] == 500 and b"a bug" in sent[1]["body"]
    assert metrics.failure_total["OTHER"] == 1 and metrics.requests_total == 1
