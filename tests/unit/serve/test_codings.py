"""Request and reply content codings (Content-Encoding, Accept-Encoding) and the priority parameter's range."""

from __future__ import annotations

import gzip
import zlib

import pytest

from dlperf.serve.protocol import ProtocolError
from dlperf.serve.service import Reply, _compress, _decompress, _preferred_coding, _priority, _timeout

pytestmark = pytest.mark.unit

BODY = b'{"inputs": []}' * 50


@pytest.mark.parametrize("encoding", ["gzip", "GZIP", "gzip, identity", " Gzip "])
def test_gzip_bodies_are_read_whatever_the_coding_s_case(encoding: str) -> None:
    assert _decompress(gzip.compress(BODY), encoding, 1 << 20) == BODY


def test_every_member_of_a_gzip_body_is_read() -> None:
    assert _decompress(gzip.compress(BODY[:100]) + gzip.compress(BODY[100:]), "gzip", 1 << 20) == BODY


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        # mtime=0: the same bytes, so the same test ids, in every pytest-xdist worker (ids differed by a second)
        (gzip.compress(BODY, mtime=0)[:-8], "gzip", "truncated"),  # CRC and length cut off: the CRC was never checked
        (gzip.compress(BODY, mtime=0)[:20], "gzip", "truncated"),
        (gzip.compress(BODY, mtime=0) + b"garbage", "gzip", "does not decompress"),
        (zlib.compress(BODY) + b"more", "deflate", "4 bytes after the end"),
        (b"not compressed", "deflate", "does not decompress"),
    ],
)
def test_broken_compressed_bodies_are_400(body: bytes, encoding: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as info:
        _decompress(body, encoding, 1 << 20)
    assert info.value.status == 400


def test_unknown_or_stacked_codings_are_415_and_a_bomb_413() -> None:
    for encoding in ("br", "gzip, deflate"):
        with pytest.raises(ProtocolError, match="unsupported Content-Encoding") as info:
            _decompress(BODY, encoding, 1 << 20)
        assert info.value.status == 415
    with pytest.raises(ProtocolError, match="more than 1000 bytes") as info:
        _decompress(gzip.compress(b"\0" * 100_000), "gzip", 1000)
    assert info.value.status == 413


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip, deflate", "gzip"),
        ("gzip;q=0", None),  # RFC 9110: q=0 is "not acceptable"
        ("gzip;q=0, deflate", "deflate"),
        ("deflate;q=0.5, gzip;q=0.4", "deflate"),
        ("GZIP ; Q=0.8", "gzip"),
        ("*", "gzip"),
        ("*;q=0.2, gzip;q=0", "deflate"),
        ("identity", None),
        ("br", None),
        ("gzip;q=x", None),
        (None, None),
    ],
)
def test_the_reply_coding_follows_the_client_s_weights(accept: str | None, coding: str | None) -> None:
    assert _preferred_coding(accept) == coding
    reply = Reply(200, BODY)
    _compress(reply, accept)
    assert reply.headers.get("Content-Encoding") == coding
    assert _decompress(reply.body, coding, 1 << 20) == BODY


def test_priority_is_an_unsigned_64_bit_integer() -> None:
    assert _priority({}) == 0 and _priority({"priority": 2**64 - 1}) == 2**64 - 1
    for bad in (-1, 2**64, 10**30, 1.0, "1", True):
        with pytest.raises(ProtocolError, match="priority"):
            _priority({"priority": bad})


def test_a_timeout_is_a_finite_number_of_microseconds() -> None:
    assert _timeout({"timeout": 2_000_000}, None) == 2.0 and _timeout({"timeout": 3_000_000}, 1.0) == 1.0
    for bad in (-1, "5", True):
        with pytest.raises(ProtocolError, match="'timeout' must be a non-negative number of microseconds"):
            _timeout({"timeout": bad}, None)


@pytest.mark.parametrize("double", [2.5, 2_000_000.0, 0.0, float("inf"), float("nan")])
def test_a_timeout_sent_as_a_double_is_refused_as_triton_refuses_it(double: float) -> None:
    # 2.5 (meant as seconds) was read as 2.5 µs; Triton takes only an int64_param (a JSON integer over HTTP)
    with pytest.raises(ProtocolError, match=r"^parameter 'timeout' must be an integer number of microseconds \(gRPC: "
                                            r"int64_param, as Triton takes it; JSON: an integer\), got the double "):
        _timeout({"timeout": double}, 5.0)
