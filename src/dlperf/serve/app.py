"""The HTTP glue: Starlette routes of KServe v2 / OIP (+ Triton extensions) onto `ServerState`.

No serving logic here: read the body within the size limit, call the state, write the reply. A POST to
an infer route is answered by `_InferFirst` before Starlette's middleware and router see it (the one route
whose latency is measured); every other request, and a wrong method on an infer route, goes to Starlette.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from dlperf.serve.protocol import NOT_OFFERED, ProtocolError, header_length_of
from dlperf.serve.service import ClientGone, ClientWatch, Reply, ServerState, error_reply, internal_error, json_reply

Handler = Callable[[Request], Awaitable[Response]]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
log = logging.getLogger("dlperf.serve")
ALIGNMENT = 64
ALIGNED_MIN_BYTES = 64 * 1024
"""Bodies from this size on are read into an aligned writable buffer (below it, a copy costs less)."""
REGISTER_BODY_LIMIT = 64 * 1024
"""A shared-memory register request's body is a small JSON object: a larger one is refused (413) unread."""


def _respond(reply: Reply) -> Response:
    background = None
    if reply.after is not None:
        after = reply.after

        async def run_after() -> None:  # async: Starlette would run a plain function in its thread pool
            after()

        background = BackgroundTask(run_after)
    return Response(reply.body, reply.status, headers=reply.headers, media_type=reply.content_type,
                    background=background)


def create_app(state: ServerState) -> _InferFirst:
    """The ASGI app for `state` (run it with uvicorn; `dlperf.serve.server` does)."""

    def guarded(handler: Callable[[Request], Awaitable[Reply]], public: bool = False) -> Handler:
        async def endpoint(request: Request) -> Response:
            if not public and not state.authorized(request.headers):
                state.note_unauthenticated()
                return _respond(_unauthorized())
            try:
                return _respond(await handler(request))
            except ProtocolError as exc:
                return _respond(error_reply(exc.status, str(exc)))

        return endpoint

    async def live(request: Request) -> Reply:
        return Reply(200, b"") if not state.draining else error_reply(400, "server is shutting down")

    async def ready(request: Request) -> Reply:
        return Reply(200, b"") if state.ready else error_reply(400, "server is not ready")

    async def model_ready(request: Request) -> Reply:
        p = request.path_params
        try:
            state.entry(p["model"], p.get("version"))
        except ProtocolError as exc:
            if state.authorized(request.headers):
                raise
            # public (a probe sends no token): without the token it does not list the models served or their versions
            version = f" version '{p['version']}'" if p.get("version") else ""
            raise ProtocolError(f"unknown model '{p['model']}'{version} (with the server's token the error "
                                "names the models it serves)", exc.status) from None
        return Reply(200, b"") if state.ready else error_reply(400, f"model '{p['model']}' is not ready")

    async def server_metadata(request: Request) -> Reply:
        return json_reply(state.server_metadata())

    async def model_metadata(request: Request) -> Reply:
        p = request.path_params
        return json_reply(state.model_metadata(state.entry(p["model"], p.get("version"))))

    async def model_config(request: Request) -> Reply:
        p = request.path_params
        return json_reply(state.model_config(state.entry(p["model"], p.get("version"))))

    async def stats(request: Request) -> Reply:
        p = request.path_params
        return json_reply(state.stats(p.get("model"), p.get("version")))

    async def metrics(request: Request) -> Reply:
        body, content_type = state.metrics.exposition()
        return Reply(200, body, content_type=content_type)

    async def shm_status(request: Request) -> Reply:
        return json_reply(state.shm_registry().status(request.path_params.get("region")))

    async def shm_register(request: Request) -> Reply:
        registry = state.shm_registry()
        too_large = ProtocolError("a register request's body is a small JSON object {\"key\", \"offset\", "
                                  f"\"byte_size\"}} of at most {REGISTER_BODY_LIMIT // 1024} KiB", 413)
        # refused by its Content-Length before it is read, and a streamed one once it passes the limit: it was read
        # whole first (a 1 GiB body was waited for, 200 MiB held in memory) and --max-request-mb did not apply
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > REGISTER_BODY_LIMIT:
            raise too_large
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > REGISTER_BODY_LIMIT:
                    raise too_large
        except ClientDisconnect:  # uvicorn logged Starlette's traceback for a client gone mid-body
            raise ProtocolError("the client disconnected before its register request's body arrived") from None
        try:
            parsed = json.loads(bytes(body))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ProtocolError(f"the register request is not valid JSON: {exc}") from None
        registry.register(request.path_params["region"], parsed)
        return Reply(200, b"")

    async def shm_unregister(request: Request) -> Reply:
        state.shm_registry().unregister(request.path_params.get("region"))
        return Reply(200, b"")

    async def infer_reply(name: str, version: str | None, headers: Mapping[str, str],
                          chunks: AsyncIterator[bytes], into: BodyBuffer | None = None,
                          watch: ClientWatch | None = None) -> Reply:
        start_ns = time.monotonic_ns()
        entry, variant = state.pick_variant(name, version, headers)
        if state.draining:
            variant.recorder.failure("UNAVAILABLE", time.monotonic_ns() - start_ns)
            return error_reply(503, "server is shutting down: send the request to another replica")
        state.in_flight += 1
        state.received += 1
        task = asyncio.current_task()
        assert task is not None  # a coroutine the event loop runs
        try:
            state.reading[task] = None
            limit_s = state.config.body_timeout_s
            timer = None if not limit_s else asyncio.get_running_loop().call_later(
                limit_s, state.cut_reading, task, 408, "INVALID",  # a client fault, not the queue's
                f"the request's body did not all arrive within {limit_s:g} s of its headers (the server's "
                "--body-timeout-s): send it whole, or start the server with a longer --body-timeout-s")
            try:
                body = await _read_body(headers, chunks, state.config.max_request_bytes, _binary_offset(headers),
                                        into)
            except asyncio.CancelledError:
                cut = state.reading.get(task)
                if cut is None:  # Ray Serve cancels a request whose client went away, even mid-body
                    variant.recorder.failure("CANCELED", time.monotonic_ns() - start_ns)
                    raise
                # the exit timeout or the body timeout ended the read (`ServerState.cut_reading`): answered, not
                # cancelled (Python 3.10 keeps no count of cancellations to take back)
                uncancel = getattr(task, "uncancel", None)
                if uncancel is not None:
                    uncancel()
                status, reason, message = cut
                variant.recorder.failure(reason, time.monotonic_ns() - start_ns)
                return error_reply(status, message)
            except ClientGone as exc:  # no one reads this reply
                variant.recorder.failure("CANCELED", time.monotonic_ns() - start_ns)
                return error_reply(400, str(exc))
            finally:
                del state.reading[task]
                if timer is not None:
                    timer.cancel()
            return await state.infer(entry, variant, body, headers, start_ns, watch)
        except ProtocolError as exc:
            variant.recorder.failure("INVALID", time.monotonic_ns() - start_ns)
            return error_reply(exc.status, str(exc))
        except Exception:  # a fault in the server: answered 500 by the caller, counted here like every request
            variant.recorder.failure("OTHER", time.monotonic_ns() - start_ns)
            raise
        finally:
            state.in_flight -= 1

    async def infer(request: Request) -> Reply:
        p = request.path_params
        return await infer_reply(p["model"], p.get("version"), request.headers, request.stream())

    get, post = ["GET"], ["POST"]
    routes = [
        Route("/v2/health/live", guarded(live, public=True), methods=get),
        Route("/v2/health/ready", guarded(ready, public=True), methods=get),
        Route("/v2", guarded(server_metadata), methods=get),
        Route("/v2/models/stats", guarded(stats), methods=get),
        Route("/metrics", guarded(metrics), methods=get),
        Route("/v2/systemsharedmemory/status", guarded(shm_status), methods=get),
        Route("/v2/systemsharedmemory/region/{region}/status", guarded(shm_status), methods=get),
        Route("/v2/systemsharedmemory/region/{region}/register", guarded(shm_register), methods=post),
        Route("/v2/systemsharedmemory/unregister", guarded(shm_unregister), methods=post),
        Route("/v2/systemsharedmemory/region/{region}/unregister", guarded(shm_unregister), methods=post),
    ]
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        routes += [
            Route(base, guarded(model_metadata), methods=get),
            # model readiness is one of KServe's three health calls (Kubernetes probes send no token), public as
            # gRPC's ModelReady is; it was 401 without the token over HTTP
            Route(base + "/ready", guarded(model_ready, public=True), methods=get),
            Route(base + "/config", guarded(model_config), methods=get),
            Route(base + "/stats", guarded(stats), methods=get),
            Route(base + "/infer", guarded(infer), methods=post),
        ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _route_error})
    # a path with a trailing slash got a 307 to the one without, with an empty body, which tritonclient does not
    # follow: now a 404 whose JSON error names the path to use
    app.router.redirect_slashes = False
    return _InferFirst(app, state, infer_reply)


async def _route_error(request: Request, exc: Exception) -> Response:
    """The router's 404 (no such path) and 405 (wrong method) as `{"error"}` JSON like every other error, saying
    what the server has instead."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    where = f"{request.method} {request.url.path}"
    extension = request.url.path.split("/")[2] if request.url.path.startswith("/v2/") else ""
    trimmed = request.url.path.rstrip("/")
    if status == 404 and extension in NOT_OFFERED:
        message = f"no endpoint at {where}: {NOT_OFFERED[extension]}"
    elif status == 404 and trimmed != request.url.path and trimmed and any(
            getattr(r, "path_regex", None) and r.path_regex.match(trimmed) for r in request.app.router.routes):
        message = f"no endpoint at {where}: drop the trailing slash ({trimmed})"
    elif status == 404:
        message = (f"no endpoint at {where}: this server speaks KServe v2 under /v2 (e.g. /v2/health/ready, "
                   "/v2/models/NAME, POST /v2/models/NAME/infer) and serves /metrics")
    elif status == 405:
        allowed = next((v for k, v in headers.items() if k.lower() == "allow"), "another method")
        message = f"{where} is not allowed: use {allowed}"
    else:
        message = exc.detail if isinstance(exc, HTTPException) else str(exc)
    return _respond(error_reply(status, message, headers))


InferReply = Callable[[str, str | None, Mapping[str, str], AsyncIterator[bytes], "BodyBuffer | None",
                       "ClientWatch | None"], Awaitable[Reply]]


class _InferFirst:
    """The ASGI app: a POST to /v2/models/NAME[/versions/V]/infer is answered here, everything else by
    Starlette. The infer route skips Starlette's error and exception middleware, its router (a regex per
    route until one matches), and its Request and Response objects; at concurrency 1, where every step
    runs on caches the model has just flushed, that is measurable (docs/serve.md, "Measured here")."""

    def __init__(self, app: Starlette, state: ServerState, infer_reply: InferReply) -> None:
        self.app = app
        self.state = state
        self.infer_reply = infer_reply

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            target = _infer_target(_route_path(scope))
            if target is not None:
                await self._infer(scope, receive, send, *target)
                return
        await self.app(scope, receive, send)

    async def _infer(self, scope: Scope, receive: Receive, send: Send, name: str, version: str | None) -> None:
        headers = scope.get(HEADERS_SCOPE_KEY) or _headers(scope["headers"])
        client_gone = scope.get(CLIENT_GONE_KEY)
        try:
            if not self.state.authorized(headers):
                reply = _unauthorized()
                self.state.count_unauthorized(name, version, headers)
                self.state.note_unauthenticated()
            else:
                reply = await self.infer_reply(name, version, headers, _body_chunks(receive), scope.get(BODY_SCOPE_KEY),
                                               client_gone)
        except ProtocolError as exc:
            reply = error_reply(exc.status, str(exc))
        except Exception as exc:  # what Starlette's ServerErrorMiddleware would do, with the reason in the body
            log.exception("infer request to model '%s' failed", name)
            reply = error_reply(500, internal_error(exc))
        await send({"type": "http.response.start", "status": reply.status, "headers": _raw_headers(reply)})
        await send({"type": "http.response.body", "body": reply.body})
        if client_gone is not None and client_gone():
            if reply.gone is not None:
                reply.gone()
        elif reply.after is not None:
            reply.after()


def _route_path(scope: Scope) -> str:
    """The path below the app's root_path (as Starlette's router sees it; Ray Serve mounts apps there)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] == "/":
        return path[len(root):]
    return path


def _infer_target(path: str) -> tuple[str, str | None] | None:
    """(model, version) for /v2/models/MODEL/infer or /v2/models/MODEL/versions/VERSION/infer, else None."""
    if not (path.startswith("/v2/models/") and path.endswith("/infer")):
        return None
    parts = path[len("/v2/models/"):-len("/infer")].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], None
    if len(parts) == 3 and parts[0] and parts[1] == "versions" and parts[2]:
        return parts[0], parts[2]
    return None


def _headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """ASGI header pairs (lower-case names) as a dict; the first of repeated names wins, as in Starlette."""
    out: dict[str, str] = {}
    for k, v in raw:
        out.setdefault(k.decode("latin-1"), v.decode("latin-1"))
    return out


async def _body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


def _raw_headers(reply: Reply) -> list[tuple[bytes, bytes]]:
    """The reply's headers as Starlette's Response would write them (charset only for text/ types)."""
    content_type = reply.content_type
    if content_type.startswith("text/") and "charset=" not in content_type.lower():
        content_type += "; charset=utf-8"
    out = [(b"content-length", str(len(reply.body)).encode()), (b"content-type", content_type.encode("latin-1"))]
    out += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
    return out


def _unauthorized() -> Reply:
    return error_reply(401, "missing or wrong bearer token: send 'Authorization: Bearer TOKEN' (the server's "
                            "--token)", {"WWW-Authenticate": "Bearer"})


def _binary_offset(headers: Mapping[str, str]) -> int | None:
    """Where the binary tensor data starts in the body (its JSON header's length), if the request says."""
    try:
        return header_length_of(headers)
    except ProtocolError:
        return None  # reported by the service, which reads the header again after any decompression


BODY_SCOPE_KEY = "dlperf.body"
"""Scope key of a `BodyBuffer` the HTTP protocol fills with the request body (`server.py`'s protocol)."""
HEADERS_SCOPE_KEY = "dlperf.headers"
"""Scope key of the request's headers as a dict (`_headers`), when the HTTP protocol already made it."""
CLIENT_GONE_KEY = "dlperf.client_gone"
"""Scope key of a `ClientWatch`, which says whether the client has closed its connection and acts the moment it
does (`server.py`'s protocol; an ASGI app cannot tell otherwise: after a reply, `receive()` says "disconnect"
either way, and while the request waits in the queue nothing reads `receive()`)."""


class BodyBuffer:
    """An infer request's body, written by the HTTP protocol as the parser hands it over, straight into one
    aligned buffer (see `_read_body`); the ASGI messages then carry no body, only its end or a disconnect."""

    __slots__ = ("buffer", "size")

    def __init__(self, buffer: np.ndarray) -> None:
        self.buffer = buffer
        self.size = 0

    def write(self, chunk: bytes) -> None:
        end = self.size + len(chunk)
        if end > len(self.buffer):  # the parser keeps to Content-Length; this would be a bug, not a client's error
            raise ValueError(f"request body longer than its Content-Length ({len(self.buffer)} bytes)")
        self.buffer[self.size:end] = np.frombuffer(chunk, dtype=np.uint8)
        self.size = end


def _aligned(declared: int | None, binary_offset: int | None) -> np.ndarray | None:
    """A writable buffer of `declared` bytes whose byte `binary_offset` is 64-byte aligned, for a body worth it."""
    if declared is None or binary_offset is None or declared < max(ALIGNED_MIN_BYTES, binary_offset):
        return None
    raw = np.empty(declared + ALIGNMENT, dtype=np.uint8)
    start = -(raw.ctypes.data + binary_offset) % ALIGNMENT
    return raw[start:start + declared]


def body_buffer_for(scope: Scope, limit: int) -> BodyBuffer | None:
    """The `BodyBuffer` for a request the app will read into an aligned buffer anyway (a POST to an infer
    route, Content-Length within `limit` and at least ALIGNED_MIN_BYTES, binary tensor data), else None."""
    if scope.get("method") != "POST" or _infer_target(_route_path(scope)) is None:
        return None
    headers = scope[HEADERS_SCOPE_KEY] = _headers(scope["headers"])
    length = headers.get("content-length")
    if length is None or not (length.isascii() and length.isdigit()) or "transfer-encoding" in headers:
        return None
    declared = int(length)
    buffer = _aligned(declared, _binary_offset(headers)) if declared <= limit else None
    return None if buffer is None else BodyBuffer(buffer)


async def _read_body(headers: Mapping[str, str], stream: AsyncIterator[bytes], limit: int,
                     binary_offset: int | None = None, into: BodyBuffer | None = None) -> bytes | memoryview:
    """The body, refused with 413 before it is read when Content-Length says it is too large, or as soon
    as a streamed (chunked) body passes the limit.

    A body of ALIGNED_MIN_BYTES or more with a Content-Length is read into one writable buffer placed so
    that its binary tensor data (from `binary_offset` on) starts on a 64-byte boundary: the decoded input
    arrays are then writable, aligned views of the body, which the model takes without a copy (a `bytes`
    body is read-only, and torch refuses read-only memory). Measured with two servers answering
    ResNet-18 requests in alternating blocks: 0.8 ms less per request than copying the joined body.

    `into`: the body as the HTTP protocol already wrote it into such a buffer (`BodyBuffer`); the stream
    then only says when it ended or that the client went away."""
    length = headers.get("content-length")
    declared = None
    if length is not None:
        try:
            declared = int(length)
        except ValueError as exc:
            raise ProtocolError(f"Content-Length is not an integer: {length!r}") from exc
        if declared > limit:
            raise ProtocolError(f"the request body is {declared} bytes, above the server's limit of {limit} bytes "
                                "(--max-request-mb)", 413)
    if into is not None:
        try:
            async for chunk in stream:
                into.write(chunk)
        except ClientDisconnect as exc:
            raise ClientGone("the client disconnected while sending the body") from exc
        return into.buffer[:into.size].data
    buffer = _aligned(declared, binary_offset)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in stream:
            n = len(chunk)
            if buffer is not None and size + n <= declared:  # type: ignore[operator]
                buffer[size:size + n] = np.frombuffer(chunk, dtype=np.uint8)
            elif n:
                if buffer is not None:  # more than Content-Length said: keep what came, the decoder complains
                    chunks.append(buffer[:size].tobytes())
                    buffer = None
                chunks.append(chunk)
            size += n
            if size > limit:
                raise ProtocolError(f"the request body passed the server's limit of {limit} bytes "
                                    "(--max-request-mb)", 413)
    except ClientDisconnect as exc:
        raise ClientGone("the client disconnected while sending the body") from exc
    if buffer is not None:
        return buffer[:size].data
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
