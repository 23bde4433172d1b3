"""A minimal keep-alive HTTP/1.1 client on an asyncio Protocol: the load generator's transport.

Why not httpx or tritonclient: on a 2-core machine the load generator shares the CPU with the server,
and a general client spends several hundred µs of Python per request; this one sends a prebuilt
request and parses a Content-Length (or chunked, or until-close) response straight from the bytes the
event loop hands it, with one timer per request. Against a bare uvicorn app answering a 2 KB POST at
concurrency 1 (uvloop both sides, alternating blocks): 227 µs per round trip, against 247 µs for the
asyncio-streams client it replaced (`StreamReader` + `wait_for`) and 166 µs for a blocking socket.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from dlperf.errors import LoadGenError
from dlperf.serve.protocol import host_port


class Sender(Protocol):
    """What the level loop sends on: `Connection` (HTTP/1.1) or `grpc_client.GrpcConnection`."""

    send_ns: int
    recv_ns: int
    written_ns: int
    """When the last `send` wrote its request (perf_counter_ns), after any connect; 0 while it has not."""

    async def send(self, raw: bytes) -> Reply: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base_path: str = ""

    @property
    def authority(self) -> str:
        """host:port as a URL, a Host header and gRPC write it: an IPv6 address in brackets."""
        return host_port(self.host, self.port)


def parse_url(url: str) -> Endpoint:
    """'127.0.0.1:8000', 'http://127.0.0.1:8000' or 'http://host:port/base' -> Endpoint (http only)."""
    text = url if "://" in url else f"http://{url}"
    parts = urlsplit(text)
    if parts.scheme == "grpc":  # "only http:// targets" read as if gRPC could not be loaded at all
        raise LoadGenError(f"URL '{url}': write a gRPC endpoint as HOST:PORT, without grpc:// ({parts.netloc}), and "
                           "add --protocol grpc (-i grpc)")
    if parts.scheme != "http":
        raise LoadGenError(f"URL '{url}': only http:// targets are supported (got {parts.scheme}://)")
    if not parts.hostname:
        raise LoadGenError(f"URL '{url}' has no host: write e.g. 127.0.0.1:8000")
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise LoadGenError(f"URL '{url}' has a bad port") from exc
    return Endpoint(parts.hostname, port, parts.path.rstrip("/"))


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def build_request(endpoint: Endpoint, method: str, path: str, body: bytes = b"",
                  headers: dict[str, str] | None = None) -> bytes:
    """The raw bytes of one request (built once, sent many times)."""
    lines = [f"{method} {endpoint.base_path}{path} HTTP/1.1", f"Host: {endpoint.authority}"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse_reply(data: bytes | bytearray, closed: bool) -> tuple[Reply, int] | None:
    """The first complete response in `data` and how many bytes it took, or None while it is incomplete.

    `closed`: the server has closed the connection, so a response without Content-Length or chunked
    encoding ends here. Raises ValueError on a response that is not HTTP/1.x."""
    if _http2_frames(data):
        raise ValueError("the server answered with HTTP/2 frames, not HTTP/1.1: is this a gRPC port? Use "
                         "-i grpc for it, or give the server's HTTP port")
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if closed and data:
            raise ValueError(f"the connection closed inside a response head: {bytes(data[:80])!r}")
        return None
    lines = bytes(data[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, sep, v = line.partition(":")
        if sep:
            headers[k.strip().lower()] = v.strip()
    start = end + 4
    if status < 200 or status in (204, 304):
        return Reply(status, headers, b""), start
    if "content-length" in headers:
        stop = start + int(headers["content-length"])
        if len(data) < stop:
            return None
        return Reply(status, headers, bytes(data[start:stop])), stop
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        pos = start
        while True:
            line_end = data.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(data[pos:line_end]).split(b";")[0], 16)
            if size == 0:
                trailer_end = data.find(b"\r\n", line_end + 2)  # no trailers: an empty line follows
                if trailer_end < 0:
                    return None
                return Reply(status, headers, b"".join(chunks)), trailer_end + 2
            chunk_end = line_end + 2 + size
            if len(data) < chunk_end + 2:
                return None
            chunks.append(bytes(data[line_end + 2:chunk_end]))
            pos = chunk_end + 2
    if not closed:
        return None  # the body runs until the server closes the connection
    return Reply(status, headers, bytes(data[start:])), len(data)


def _http2_frames(data: bytes | bytearray) -> bool:
    """Whether `data` starts with an HTTP/2 SETTINGS frame (9-byte header, type 4, stream 0): what an HTTP/2-only
    server such as a gRPC port sends first, also to an HTTP/1.1 request."""
    return len(data) >= 9 and data[3] == 4 and data[5:9] == b"\0\0\0\0" and not data.startswith(b"HTTP/")


class _ReplyReader(asyncio.Protocol):
    """Buffers what arrives; completes `waiter` with the reply once `parse_reply` finds it whole."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.waiter: asyncio.Future[Reply] | None = None
        self.parse_ns = 0
        """Time spent parsing the current reply's bytes (perf_analyzer's "Client Recv")."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.check()

    def eof_received(self) -> bool:
        self.closed = True
        self.check()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.check()

    def check(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        start = time.perf_counter_ns()
        try:
            found = parse_reply(self.buffer, self.closed)
        except ValueError as exc:
            waiter.set_exception(exc)
            return
        finally:
            self.parse_ns += time.perf_counter_ns() - start
        if found is not None:
            reply, used = found
            del self.buffer[:used]
            waiter.set_result(reply)
        elif self.closed:
            waiter.set_exception(ConnectionResetError("the server closed the connection before its reply was whole"))


def _expire(waiter: asyncio.Future[Reply], timeout_s: float) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError(f"no reply within {timeout_s:g} s"))


class Connection:
    """One keep-alive connection; `send(raw)` writes a prebuilt request and reads the reply."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 60.0) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._reader: _ReplyReader | None = None
        self.send_ns = 0
        """The last `send`'s time handing the request to the transport (perf_analyzer's "Client Send")."""
        self.recv_ns = 0
        """The last `send`'s time parsing the reply (perf_analyzer's "Client Recv")."""
        self.written_ns = 0
        """When the last `send` handed its request to the transport (perf_counter_ns); 0 where it never did."""

    async def _connect(self) -> _ReplyReader:
        loop = asyncio.get_running_loop()
        _, reader = await loop.create_connection(_ReplyReader, self.endpoint.host, self.endpoint.port)
        self._reader = reader
        return reader

    async def send(self, raw: bytes) -> Reply:
        """Send; on a connection the server closed in between, reconnect once and resend. Raises OSError
        (ConnectionError) when the connection fails, asyncio.TimeoutError after `timeout_s` (connecting
        included: a connect waiting on SYN retransmits took 1 s under a 10 ms timeout), ValueError on a reply
        that is not HTTP."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        self.written_ns = 0
        for attempt in (0, 1):
            reader = self._reader
            if reader is None or reader.closed:
                await self.close()
                try:
                    reader = await asyncio.wait_for(self._connect(), max(0.0, deadline - loop.time()))
                except asyncio.TimeoutError:
                    raise asyncio.TimeoutError(f"no connection within {self.timeout_s:g} s") from None
            assert reader.transport is not None
            waiter: asyncio.Future[Reply] = loop.create_future()
            reader.waiter = waiter
            reader.parse_ns = 0
            start = self.written_ns = time.perf_counter_ns()
            reader.transport.write(raw)
            self.send_ns = time.perf_counter_ns() - start
            timer = loop.call_later(max(0.0, deadline - loop.time()), _expire, waiter, self.timeout_s)
            try:
                reply = await waiter
            except ConnectionError:
                await self.close()
                if attempt:
                    raise
                continue
            except BaseException:
                await self.close()  # a late reply must not be read as the next request's
                raise
            finally:
                timer.cancel()
                reader.waiter = None
                self.recv_ns = reader.parse_ns
            if reader.closed or reply.headers.get("connection", "").lower() == "close":
                await self.close()
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and reader.transport is not None:
            reader.transport.close()
            await asyncio.sleep(0)  # let the transport finish closing (connection_lost runs next)


async def fetch(endpoint: Endpoint, path: str, headers: dict[str, str] | None = None, method: str = "GET",
                body: bytes = b"", timeout_s: float = 30.0) -> Reply:
    """One request on a fresh connection (metadata, statistics, health)."""
    conn = Connection(endpoint, timeout_s)
    try:
        return await conn.send(build_request(endpoint, method, path, body, headers))
    except asyncio.TimeoutError as exc:
        raise LoadGenError(f"http://{endpoint.authority}{endpoint.base_path}{path} did not answer within "
                           f"{timeout_s:g} s") from exc
    except OSError as exc:
        raise LoadGenError(f"cannot reach http://{endpoint.authority}{endpoint.base_path}{path}: {exc}; "
                           "is the server running?") from exc
    except ValueError as exc:  # bytes that are not an HTTP/1.x reply
        raise LoadGenError(f"http://{endpoint.authority}{endpoint.base_path}{path} did not answer in HTTP/1.1: "
                           f"{exc}") from exc
    finally:
        await conn.close()
