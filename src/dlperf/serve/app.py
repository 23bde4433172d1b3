"""The HTTP glue: Starlette routes of KServe v2 / OIP (+ Triton extensions) onto `ServerState`.

No serving logic here: read the body within the size limit, call the state, write the reply.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from dlperf.serve.protocol import ProtocolError
from dlperf.serve.service import Reply, ServerState, error_reply, json_reply

Handler = Callable[[Request], Awaitable[Response]]


def _respond(reply: Reply) -> Response:
    return Response(reply.body, reply.status, headers=reply.headers, media_type=reply.content_type)


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
            body = await _read_body(request, state.config.max_request_bytes)
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


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 before it is read when Content-Length says it is too large, or as soon
    as a streamed (chunked) body passes the limit."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError as exc:
            raise ProtocolError(f"Content-Length is not an integer: {length!r}") from exc
        if declared > limit:
            raise ProtocolError(f"the request body is {declared} bytes, above the server's limit of {limit} bytes "
                                "(--max-request-mb)", 413)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProtocolError(f"the request body passed the server's limit of {limit} bytes "
                                    "(--max-request-mb)", 413)
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise ProtocolError("the client disconnected while sending the body", 400) from exc
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
