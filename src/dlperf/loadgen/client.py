"""A minimal keep-alive HTTP/1.1 client on asyncio streams: the load generator's transport.

Why not httpx or tritonclient: on a 2-core machine the load generator shares the CPU with the server,
and a general client spends several hundred µs of Python per request; this one sends a prebuilt
request and reads a Content-Length (or chunked) response, which keeps the generator's share small.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from urllib.parse import urlsplit

from dlperf.errors import LoadGenError


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base_path: str = ""

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"


def parse_url(url: str) -> Endpoint:
    """'127.0.0.1:8000', 'http://127.0.0.1:8000' or 'http://host:port/base' -> Endpoint (http only)."""
    text = url if "://" in url else f"http://{url}"
    parts = urlsplit(text)
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


class Connection:
    """One keep-alive connection; `send(raw)` writes a prebuilt request and reads the reply."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 60.0) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.endpoint.host, self.endpoint.port)

    async def send(self, raw: bytes) -> Reply:
        """Send; on a connection the server closed in between, reconnect once and resend."""
        for attempt in (0, 1):
            if self._writer is None:
                await self._connect()
            assert self._reader is not None and self._writer is not None
            try:
                self._writer.write(raw)
                return await asyncio.wait_for(self._read(self._reader), self.timeout_s)
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, reader: asyncio.StreamReader) -> Reply:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(chunks)
        else:
            body = await reader.read()
            await self.close()
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Reply(status, headers, body)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None


async def fetch(endpoint: Endpoint, path: str, headers: dict[str, str] | None = None, method: str = "GET",
                body: bytes = b"", timeout_s: float = 30.0) -> Reply:
    """One request on a fresh connection (metadata, statistics, health)."""
    conn = Connection(endpoint, timeout_s)
    try:
        return await conn.send(build_request(endpoint, method, path, body, headers))
    except (OSError, asyncio.TimeoutError) as exc:
        raise LoadGenError(f"cannot reach http://{endpoint.authority}{endpoint.base_path}{path}: {exc}; "
                           "is the server running?") from exc
    finally:
        await conn.close()
