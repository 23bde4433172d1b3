"""The HTTP glue: Starlette routes of KServe v2 / OIP (+ Triton extensions) onto `ServerState`.

No serving logic here: read the body within the size limit, call the state, write the reply.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

import numpy as np
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from dlperf.serve.protocol import HEADER_LENGTH, ProtocolError
from dlperf.serve.service import Reply, ServerState, error_reply, json_reply

Handler = Callable[[Request], Awaitable[Response]]
ALIGNMENT = 64
ALIGNED_MIN_BYTES = 64 * 1024
"""Bodies from this size on are read into an aligned writable buffer (below it, a copy costs less)."""


def _respond(reply: Reply) -> Response:
    background = None
    if reply.after is not None:
        after = reply.after

        async def run_after() -> None:  # async: Starlette would run a plain function in its thread pool
            after()

        background = BackgroundTask(run_after)
    return Response(reply.body, reply.status, headers=reply.headers, media_type=reply.content_type,
                    background=background)


def create_app(state: ServerState) -> Starlette:
    """The ASGI app for `state` (run it with uvicorn; `dlperf.serve.server` does)."""

    def guarded(handler: Callable[[Request], Awaitable[Reply]], public: bool = False) -> Handler:
        async def endpoint(request: Request) -> Response:
            if not public and not state.authorized(request.headers):
                return _respond(error_reply(401, "missing or wrong bearer token: send 'Authorization: Bearer "
                                                 "TOKEN' (the server's --token)", {"WWW-Authenticate": "Bearer"}))
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
        state.entry(p["model"], p.get("version"))
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

    async def infer(request: Request) -> Reply:
        start_ns = time.monotonic_ns()
        p = request.path_params
        entry, variant = state.pick_variant(p["model"], p.get("version"), request.headers)
        if state.draining:
            variant.recorder.failure("UNAVAILABLE", time.monotonic_ns() - start_ns)
            return error_reply(503, "server is shutting down: send the request to another replica")
        state.in_flight += 1
        try:
            body = await _read_body(request, state.config.max_request_bytes, _binary_offset(request.headers))
            return await state.infer(entry, variant, body, request.headers, start_ns)
        except ProtocolError as exc:
            variant.recorder.failure("INVALID", time.monotonic_ns() - start_ns)
            return error_reply(exc.status, str(exc))
        finally:
            state.in_flight -= 1

    get, post = ["GET"], ["POST"]
    routes = [
        Route("/v2/health/live", guarded(live, public=True), methods=get),
        Route("/v2/health/ready", guarded(ready, public=True), methods=get),
        Route("/v2", guarded(server_metadata), methods=get),
        Route("/v2/models/stats", guarded(stats), methods=get),
        Route("/metrics", guarded(metrics), methods=get),
    ]
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        routes += [
            Route(base, guarded(model_metadata), methods=get),
            Route(base + "/ready", guarded(model_ready), methods=get),
            Route(base + "/config", guarded(model_config), methods=get),
            Route(base + "/stats", guarded(stats), methods=get),
            Route(base + "/infer", guarded(infer), methods=post),
        ]
    return Starlette(routes=routes)


def _binary_offset(headers: Mapping[str, str]) -> int | None:
    """Where the binary tensor data starts in the body (its JSON header's length), if the request says."""
    value = headers.get(HEADER_LENGTH)
    if value is None or not value.isdigit():
        return None  # a malformed value is reported by the decoder
    return int(value)


async def _read_body(request: Request, limit: int, binary_offset: int | None = None) -> bytes | memoryview:
    """The body, refused with 413 before it is read when Content-Length says it is too large, or as soon
    as a streamed (chunked) body passes the limit.

    A body of ALIGNED_MIN_BYTES or more with a Content-Length is read into one writable buffer placed so
    that its binary tensor data (from `binary_offset` on) starts on a 64-byte boundary: the decoded input
    arrays are then writable, aligned views of the body, which the model takes without a copy (a `bytes`
    body is read-only, and torch refuses read-only memory). Measured with two servers answering
    ResNet-18 requests in alternating blocks: 0.8 ms less per request than copying the joined body."""
    length = request.headers.get("content-length")
    declared = None
    if length is not None:
        try:
            declared = int(length)
        except ValueError as exc:
            raise ProtocolError(f"Content-Length is not an integer: {length!r}") from exc
        if declared > limit:
            raise ProtocolError(f"the request body is {declared} bytes, above the server's limit of {limit} bytes "
                                "(--max-request-mb)", 413)
    buffer = None
    if declared is not None and binary_offset is not None and declared >= max(ALIGNED_MIN_BYTES, binary_offset):
        raw = np.empty(declared + ALIGNMENT, dtype=np.uint8)
        start = -(raw.ctypes.data + binary_offset) % ALIGNMENT
        buffer = raw[start:start + declared]
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
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
        raise ProtocolError("the client disconnected while sending the body", 400) from exc
    if buffer is not None:
        return buffer[:size].data
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
