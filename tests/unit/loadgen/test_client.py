"""The load generator's HTTP client: reply parsing, and a Connection against a small asyncio server on
127.0.0.1 that misbehaves on purpose (closes, splits, stalls)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest

from dlperf.errors import LoadGenError
from dlperf.loadgen.client import Connection, build_request, parse_reply, parse_url

pytestmark = pytest.mark.unit

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello"


def test_parse_reply_content_length_and_what_follows() -> None:
    assert parse_reply(OK[:20], False) is None
    assert parse_reply(OK[:-1], False) is None
    reply, used = parse_reply(OK + b"HTTP/1.1 204", False)  # type: ignore[misc]
    assert (reply.status, reply.body, reply.headers["x-a"], used) == (200, b"hello", "b", len(OK))


def test_parse_reply_chunked_needs_the_last_chunk() -> None:
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
    for cut in (30, len(data) - 1, len(data) - 3):
        assert parse_reply(data[:cut], False) is None
    reply, used = parse_reply(data, False)  # type: ignore[misc]
    assert reply.body == b"abcde" and used == len(data)


def test_parse_reply_until_close_and_bodiless_statuses() -> None:
    data = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    assert parse_reply(data, False) is None
    reply, _ = parse_reply(data, True)  # type: ignore[misc]
    assert reply.body == b"all of it"
    reply, used = parse_reply(b"HTTP/1.1 204 No Content\r\n\r\n", False)  # type: ignore[misc]
    assert reply.body == b"" and used == 27


def test_parse_reply_refuses_what_is_not_http() -> None:
    with pytest.raises(ValueError, match="status line"):
        parse_reply(b"SSH-2.0-OpenSSH\r\n\r\n", False)
    with pytest.raises(ValueError, match="closed inside a response head"):
        parse_reply(b"HTTP/1.1 200", True)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]


async def _serve(handler: Handler) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A server that reads one request head at a time and lets `handler` answer (False: close)."""
    connections: list[int] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                n += 1
                if not await handler(reader, writer, n):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


def test_connection_keeps_alive_and_reads_replies_split_in_pieces() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        body = f"reply {n}".encode()
        data = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        for i in range(0, len(data), 7):  # in pieces, each flushed
            writer.write(data[i:i + 7])
            await writer.drain()
            await asyncio.sleep(0.001)
        return True

    async def main() -> None:
        server, port, connections = await _serve(handler)
        endpoint = parse_url(f"127.0.0.1:{port}")
        conn = Connection(endpoint)
        raw = build_request(endpoint, "POST", "/x", b"payload")
        bodies = [(await conn.send(raw)).body for _ in range(2)]
        start = time.perf_counter_ns()
        bodies.append((await conn.send(raw)).body)
        round_trip = time.perf_counter_ns() - start
        await conn.close()
        server.close()
        assert bodies == [b"reply 1", b"reply 2", b"reply 3"]
        assert len(connections) == 1
        # perf_analyzer's client send / receive: the write call and the parsing, not the waiting between
        # the reply's pieces (5 or more 1 ms sleeps)
        assert conn.send_ns > 0 and conn.recv_ns > 0
        assert conn.send_ns + conn.recv_ns < round_trip / 4

    asyncio.run(main())


def test_connection_reconnects_once_after_the_server_closed_it() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(OK)
        await writer.drain()
        return False  # close after every reply, without saying Connection: close

    async def main() -> None:
        server, port, connections = await _serve(handler)
        endpoint = parse_url(f"127.0.0.1:{port}")
        conn = Connection(endpoint)
        raw = build_request(endpoint, "GET", "/x")
        first = await conn.send(raw)
        await asyncio.sleep(0.05)  # the close arrives
        second = await conn.send(raw)
        await conn.close()
        server.close()
        assert first.body == second.body == b"hello"
        assert len(connections) == 2

    asyncio.run(main())


def test_connection_times_out_and_does_not_read_the_late_reply_as_the_next_one() -> None:
    answered: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        answered.append(n)
        if len(answered) == 1:  # the first request of all, not of each connection
            await asyncio.sleep(0.3)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
        else:
            writer.write(OK)
        await writer.drain()
        return True

    async def main() -> None:
        server, port, connections = await _serve(handler)
        endpoint = parse_url(f"127.0.0.1:{port}")
        conn = Connection(endpoint, timeout_s=0.1)
        raw = build_request(endpoint, "GET", "/x")
        with pytest.raises(asyncio.TimeoutError):
            await conn.send(raw)
        conn.timeout_s = 5.0
        reply = await conn.send(raw)
        await conn.close()
        server.close()
        assert reply.body == b"hello"
        assert len(connections) == 2  # the timed-out connection was dropped

    asyncio.run(main())


def test_connection_raises_when_the_server_closes_before_replying_twice() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        return False

    async def main() -> None:
        server, port, connections = await _serve(handler)
        endpoint = parse_url(f"127.0.0.1:{port}")
        conn = Connection(endpoint)
        with pytest.raises(ConnectionError):
            await conn.send(build_request(endpoint, "GET", "/x"))
        server.close()
        assert len(connections) == 2  # tried, reconnected once, gave up

    asyncio.run(main())


def test_an_ipv6_host_is_bracketed_where_a_url_or_host_header_carries_it() -> None:
    endpoint = parse_url("http://[::1]:8000/base")
    assert (endpoint.host, endpoint.authority) == ("::1", "[::1]:8000")
    assert b"Host: [::1]:8000\r\n" in build_request(endpoint, "GET", "/v2")
    assert parse_url("127.0.0.1:8001").authority == "127.0.0.1:8001"


def test_a_grpc_url_is_told_to_drop_the_scheme_not_that_only_http_is_supported() -> None:
    """`dlperf load grpc://host:port -i grpc` said "only http:// targets are supported", as if gRPC could not be
    loaded; perf_analyzer and dlperf take a gRPC endpoint as host:port."""
    with pytest.raises(LoadGenError, match=r"write a gRPC endpoint as HOST:PORT, without grpc:// \(127.0.0.1:8001\), "
                                           r"and add --protocol grpc \(-i grpc\)"):
        parse_url("grpc://127.0.0.1:8001")
    with pytest.raises(LoadGenError, match=r"only http:// targets are supported \(got https://\)"):
        parse_url("https://127.0.0.1:8001")


def test_http2_frames_are_named_as_such() -> None:
    """A gRPC port answers an HTTP/1.1 request with an HTTP/2 SETTINGS frame (and GOAWAY)."""
    settings = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64"
    for closed in (False, True):
        with pytest.raises(ValueError, match=r"HTTP/2 frames.*-i grpc"):
            parse_reply(settings, closed)


def test_json_output_has_null_where_a_figure_is_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dlperf.cli.common import print_json

    print_json({"p50_s": float("nan"), "levels": [{"max": float("inf"), "ok": 1.5}], "n": 3})
    out = capsys.readouterr().out
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}")) == {
        "p50_s": None, "levels": [{"max": None, "ok": 1.5}], "n": 3}


def test_the_request_timeout_covers_connecting() -> None:
    """A connect waiting on SYN retransmits (a full accept backlog) was not under the timeout: successes came back
    at 1.01 s under --request-timeout-s 0.01, and here the old client waited until the kernel gave up."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)  # never accepted: once the backlog is full, further SYNs are dropped
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        fillers.append(s)
    time.sleep(0.1)

    async def send() -> float:
        conn = Connection(parse_url(f"127.0.0.1:{port}"), timeout_s=0.2)
        start = time.perf_counter()
        with pytest.raises(asyncio.TimeoutError, match=r"no connection within 0\.2 s"):
            await conn.send(build_request(parse_url(f"127.0.0.1:{port}"), "GET", "/v2"))
        return time.perf_counter() - start

    try:
        assert asyncio.run(asyncio.wait_for(send(), 30)) < 10  # not a wall-clock assertion: the old client hung
    finally:
        for s in (*fillers, server):
            s.close()
