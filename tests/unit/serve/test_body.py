"""app._read_body fed by the infer route's ASGI helpers from a fake `receive`: the aligned writable buffer,
the limits, the fallbacks, a client that goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.app import ALIGNED_MIN_BYTES, ALIGNMENT, _binary_offset, _body_chunks, _headers, _read_body
from dlperf.serve.protocol import ProtocolError, Tensor, decode_request, encode_request

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


def test_a_client_that_goes_away_mid_body_is_a_400() -> None:
    body = b"x" * 10000
    with pytest.raises(ProtocolError, match="disconnected") as gone:
        asyncio.run(_read_body(*_request(body, 4096, {"content-length": "20000"}, disconnect=True), 1 << 20))
    assert gone.value.status == 400


def test_repeated_headers_keep_the_first_value() -> None:
    assert _headers([(b"x-a", b"1"), (b"x-a", b"2"), (b"x-b", b"\xe9")]) == {"x-a": "1", "x-b": "\u00e9"}
