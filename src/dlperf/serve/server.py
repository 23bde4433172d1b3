"""Run the server: uvicorn on the app, graceful shutdown on SIGTERM/SIGINT, or a server in a thread for tests.

Shutdown (first SIGTERM or Ctrl-C): readiness turns false and new inference requests get 503; requests
already in the server finish, for at most `exit_timeout_s`; those still waiting for their batch then get
a 503 (`ServerState.cut_waiting`), uvicorn closes its connections and the instances stop. A second signal
exits at once, answering what is still in flight with that 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from dlperf.errors import ServingError
from dlperf.serve.protocol import host_port
from dlperf.serve.service import ClientWatch, ServeConfig, ServerState, build_state


def _uvicorn_config(app: Any, config: ServeConfig) -> Any:
    import uvicorn

    return uvicorn.Config(
        app, host=config.host, port=config.port, log_level=config.log_level, access_log=False,
        loop="auto", http=_http_protocol(config.max_request_bytes), lifespan="off", timeout_keep_alive=30,
        timeout_graceful_shutdown=max(1, int(config.exit_timeout_s)),
        limit_concurrency=None, server_header=False, date_header=False,
        proxy_headers=False,  # nothing here reads the client's address; one ASGI layer less per request
    )


def _http_protocol(max_request_bytes: int) -> Any:
    """uvicorn's httptools protocol, except that the body of an infer request which the app reads into an
    aligned buffer anyway (`app.body_buffer_for`) is copied from the parser straight into that buffer, not
    into uvicorn's bytearray, then a `bytes` per 64 KiB ASGI message (reading paused and resumed around each),
    then the buffer; and that the app can ask whether the client has gone (`app.CLIENT_GONE_KEY`). "auto"
    where httptools is missing."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return "auto"
    from dlperf.serve.app import BODY_SCOPE_KEY, CLIENT_GONE_KEY, BodyBuffer, body_buffer_for

    class InferBodyProtocol(HttpToolsProtocol):
        into: BodyBuffer | None = None
        watches: Sequence[tuple[ClientWatch, weakref.ref[Any]]] = ()
        """The watches of this connection's requests not yet answered, with their request cycles (weakly): with
        pipelining, a request still in the app and those read behind it. uvicorn marks only the newest cycle
        disconnected when the connection closes; every one here is marked and told (`ClientWatch.lost`)."""

        def connection_lost(self, exc: Exception | None) -> None:
            watches, self.watches = self.watches, ()
            super().connection_lost(exc)
            for watch, ref in watches:
                cycle = ref()
                if cycle is not None and not cycle.response_complete:  # gone before its reply was complete
                    cycle.disconnected = True  # so its reply is dropped, not written to the closed transport
                    watch.lost()  # a queued request leaves the queue

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self.into = None
            cycle = _fitting_cycle(self)
            if cycle is not None:
                if self.scope["http_version"] == "1.0" and self.parser.should_keep_alive():
                    _keep_http10_alive(cycle)
                scope: Any = self.scope  # uvicorn's TypedDict has no room for a server's own key
                ref = weakref.ref(cycle)
                watch = scope[CLIENT_GONE_KEY] = ClientWatch(_gone_check(ref))
                watches = [wc for wc in self.watches if _unanswered(wc[1])]
                watches.append((watch, ref))
                self.watches = watches
                self.into = body_buffer_for(scope, max_request_bytes)
                if self.into is not None:
                    scope[BODY_SCOPE_KEY] = self.into  # the ASGI task has been created, not yet run

        def shutdown(self) -> None:
            cycle = self.cycle
            super().shutdown()
            if cycle is not None and _KEEP_ALIVE in getattr(cycle, "default_headers", ()) and not cycle.keep_alive:
                # closing after this reply (uvicorn adds connection: close): not keep-alive as well
                cycle.default_headers = [h for h in cycle.default_headers if h != _KEEP_ALIVE]

        def on_body(self, body: bytes) -> None:
            if self.into is None or self.cycle.response_complete:  # answered before its body (401, 503...)
                super().on_body(body)
            else:
                self.into.write(body)

        def send_400_response(self, msg: str) -> None:
            """A request the HTTP parser refused (a bad Content-Length, a header that is not one, no method):
            uvicorn answers a plain-text "Invalid HTTP request received."; this answers the server's JSON error,
            with the parser's reason (uvicorn calls it inside its `except HttpParserError`), and closes the
            connection as uvicorn does."""
            reason = sys.exc_info()[1]
            body = json.dumps({"error": f"invalid HTTP request: {reason or msg} (the connection is closed: "
                                        "check the request's framing, e.g. its Content-Length)"}).encode()
            head = [b"HTTP/1.1 400 Bad Request\r\n"]
            head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
            head += [b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode() +
                     b"\r\nconnection: close\r\n\r\n", body]
            self.transport.write(b"".join(head))
            self.transport.close()

    return InferBodyProtocol


log = logging.getLogger("dlperf.serve")

_KEEP_ALIVE = (b"connection", b"keep-alive")
"""The header an HTTP/1.0 keep-alive request's reply carries (`_http_protocol`)."""

_UVICORN_MISFIT: list[str] = []
"""Set (once, with the reason) when uvicorn's protocol lacks what the fast path reads: the server then runs as
plain uvicorn (bodies through ASGI messages, no client-gone check) instead of failing every request."""


def _fitting_cycle(protocol: Any) -> Any:
    """The request cycle of an HTTP (not upgrade) request when uvicorn's objects have every attribute the fast
    path reads (the protocol's `cycle` and `scope`, the cycle's `scope`, `response_complete`, `disconnected`:
    uvicorn internals, 0.54-0.55 here); else None, and the first misfit is logged once and turns it off."""
    if _UVICORN_MISFIT:
        return None
    try:
        cycle, scope = protocol.cycle, protocol.scope
        if cycle is None or cycle.scope is not scope:  # an upgrade, or no request
            return None
        _ = (cycle.response_complete, cycle.disconnected)  # read now: on_body and the gone check read them later
    except AttributeError as exc:
        import uvicorn

        _UVICORN_MISFIT.append(str(exc))
        log.warning("uvicorn %s's HTTP protocol is not what dlperf's body fast path expects (%s): serving "
                    "with uvicorn's own handling (bodies copied once more; no client-gone check)",
                    getattr(uvicorn, "__version__", "?"), exc)
        return None
    return cycle


def _keep_http10_alive(cycle: Any) -> None:
    """Keep the connection of an HTTP/1.0 request with Connection: keep-alive (ApacheBench's -k) open, its reply
    saying connection: keep-alive, which an HTTP/1.0 client needs to reuse it: uvicorn closes every HTTP/1.0
    connection after one reply; Triton's HTTP server (libevhtp) keeps it. Every reply of the app has a
    Content-Length (HTTP/1.0 has no chunked encoding). A uvicorn without these cycle attributes (other than
    0.54-0.55) keeps its own behaviour."""
    headers = getattr(cycle, "default_headers", None)
    if isinstance(headers, list) and isinstance(getattr(cycle, "keep_alive", None), bool):
        cycle.keep_alive = True
        cycle.default_headers = [*headers, _KEEP_ALIVE]


def _unanswered(ref: weakref.ref[Any]) -> bool:
    """Whether the request cycle behind `ref` is still alive and its reply not yet complete."""
    cycle = ref()
    return cycle is not None and not cycle.response_complete


def _gone_check(ref: weakref.ref[Any]) -> Callable[[], bool]:
    """Whether uvicorn's request cycle saw its connection close; `ref` holds the cycle weakly. The check lives in
    the cycle's own scope, and a strong reference back would make scope and cycle a reference cycle: each
    request's scope, with its body buffer, would then wait for the cyclic GC (under load, in its oldest
    generation) instead of going when uvicorn drops the cycle. A ResNet-18 server's idle RSS after a 2-minute
    c=64 load was 1.76x its idle RSS after the warm-up with the strong reference."""

    def gone() -> bool:
        c = ref()
        return c is None or bool(c.disconnected)

    return gone


def _make_server_class() -> Any:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn.Server whose first exit signal drains in-flight requests before stopping."""

        state: ServerState
        exit_timeout_s: float = 30.0
        on_drain: Callable[[], None] | None = None
        dropped = 0
        """Requests in flight when a second signal forced the exit (their clients get a 503)."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.state.draining:
                self.dropped = self.state.in_flight
                if self.loop is not None:  # answer them with dlperf's 503 (uvicorn's cancel sent a plain-text 500
                    # and logged a traceback per request); its shutdown gives the replies 0.1 s to go out
                    with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to answer
                        self.loop.call_soon_threadsafe(self.state.cut_waiting, "it exited at a second signal")
                self.should_exit = True
                self.force_exit = True
                return
            self.begin_shutdown()

        grpc_server: Any = None
        loop: asyncio.AbstractEventLoop | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            """The gRPC endpoint first (on this event loop, so both protocols share the batchers' callbacks): a
            port it cannot bind fails the start before HTTP says it is listening."""
            config = self.state.config
            if config.grpc_port is not None:
                from dlperf.serve.grpc_service import available, create_server

                missing = available()
                if missing is not None:
                    raise ServingError(missing)
                self.grpc_server, port = create_server(self.state, config.host, config.grpc_port)
                await self.grpc_server.start()
                self.state.grpc_address = host_port(config.host, port)
            self.loop = asyncio.get_running_loop()
            await super().startup(sockets=sockets)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.grpc_server is not None:
                await self.grpc_server.stop(grace=1.0)  # in-flight gRPC requests were drained with HTTP's
            await super().shutdown(sockets=sockets)

        def begin_shutdown(self) -> None:
            self.state.begin_drain()
            # the drain's start and end in the server's log: an operator saw a replica stop answering and exit
            # with not a word of why, how long it would wait, or what became of its requests
            log.warning("shutting down: readiness is false and new inference requests get 503; waiting up to %g s "
                        "(--exit-timeout-s) for %d request(s) in flight", self.exit_timeout_s, self.state.in_flight)
            threading.Thread(target=self._drain, name="dlperf-drain", daemon=True).start()

        def _drain(self) -> None:
            start = time.monotonic()
            deadline = start + self.exit_timeout_s
            while time.monotonic() < deadline and self.state.in_flight > 0:
                time.sleep(0.01)
            left = self.state.in_flight
            if left:
                log.warning("drain cut off after the exit timeout (--exit-timeout-s %g): %d request(s) still in "
                            "flight get a 503; stopping", self.exit_timeout_s, left)
            else:
                log.warning("drained in %.1f s: every request in flight finished; stopping", time.monotonic() - start)
            if self.state.in_flight > 0 and self.loop is not None:
                # fail what still waits for its batch with dlperf's 503, and give the replies a moment to go out
                # (uvicorn's own cut closes the connection or answers a plain-text 500)
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to answer
                    self.loop.call_soon_threadsafe(self.state.cut_waiting)
                    cut_end = time.monotonic() + 0.5
                    while time.monotonic() < cut_end and self.state.in_flight > 0:
                        time.sleep(0.01)
            # uvicorn then waits for its request tasks once more: only for what is left of the exit timeout (it
            # waited a whole one again, so a drain took up to twice --exit-timeout-s)
            remaining = max(0.1, deadline - time.monotonic())  # a float, which uvicorn's wait_for takes
            self.config.timeout_graceful_shutdown = remaining  # type: ignore[assignment]
            self.should_exit = True

    return DrainingServer


def listening_socket(config: ServeConfig) -> socket.socket:
    """The HTTP socket bound to --host/--port (IPv4 or IPv6 by the host's form); ServingError saying what to
    change when it cannot be bound."""
    sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as exc:
        sock.close()
        fix = ("pick another --port or stop what uses it" if exc.errno == errno.EADDRINUSE else
               "give --host an address of this machine (127.0.0.1, 0.0.0.0 for every interface, ::1)")
        raise ServingError(f"cannot listen on {host_port(config.host, config.port)}: {exc.strerror}; {fix}") from exc
    return sock


@dataclass
class Running:
    """A server running in a background thread (tests, benchmarks): `url` is host:port, no scheme."""

    state: ServerState
    server: Any
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        return host_port(self.host, self.port)

    @property
    def grpc_url(self) -> str | None:
        """host:port of the gRPC endpoint (`ServeConfig.grpc_port`), None without one."""
        return self.state.grpc_address

    def stop(self, timeout_s: float = 30.0) -> None:
        self.server.begin_shutdown()
        self.thread.join(timeout_s)
        self.state.close(timeout_s)

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(config: ServeConfig, state: ServerState | None = None, ready_timeout_s: float = 60.0) -> Running:
    """Start the server in a thread (port 0 picks a free port); returns when it accepts connections."""
    from dlperf.serve.app import create_app

    state = state or build_state(config)
    sock = listening_socket(config)
    port = sock.getsockname()[1]
    server = _make_server_class()(_uvicorn_config(create_app(state), config))
    server.state = state
    server.exit_timeout_s = config.exit_timeout_s
    failed: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except Exception as exc:  # e.g. the gRPC port: raised to the caller below, not lost in this thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="dlperf-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            state.close(1.0)
            sock.close()
            if failed and isinstance(failed[0], ServingError):
                raise failed[0]
            raise ServingError(f"the server did not start on {config.host}:{port}"
                               + (f": {failed[0]}" if failed else ""))
        time.sleep(0.01)
    return Running(state, server, thread, config.host, port)


def serve(config: ServeConfig, on_ready: Callable[[ServerState, str], None] | None = None,
          on_warmup: Callable[[str, int, int], None] | None = None, state: ServerState | None = None) -> int:
    """Load, warm up, serve until SIGTERM/SIGINT, drain, stop. Returns the exit code (0 after a clean drain).
    `on_warmup(variant, done, total)` after each warm-up call, `on_ready(state, host:port)` once listening.
    `state`: one `build_state` made already (loaded and warmed up), served instead of building one."""
    from dlperf.serve.app import create_app

    set_switch_interval()
    if state is None:
        state = build_state(config, on_warmup=on_warmup)
    freeze_heap()
    start_memory_trimmer(state)
    server: Any = None
    try:
        sock = listening_socket(config)
        server = _make_server_class()(_uvicorn_config(create_app(state), config))
        server.state = state
        server.exit_timeout_s = config.exit_timeout_s
        if on_ready is not None:
            port = sock.getsockname()[1]
            threading.Thread(target=_notify_when_started, args=(server, on_ready, state, host_port(config.host, port)),
                             daemon=True).start()
        server.run(sockets=[sock])
    finally:
        forced = server is not None and server.force_exit  # a second signal: exit now, not after the batches
        stopped = state.close(0.0 if forced else config.exit_timeout_s)
    if forced:  # the instances were not waited for: the status says whether requests were dropped
        if server.dropped:
            log.warning("a second signal: exited without waiting for %d request(s) in flight (answered with a 503)",
                        server.dropped)
        return 1 if server.dropped else 0
    return 0 if stopped else 1


def freeze_heap() -> int:
    """Collect, then move every object alive now (torch, the model, the app: about 400k for zoo:minilm) into the
    garbage collector's permanent generation, where no later collection scans them; returns how many.

    Under load the collector still runs its oldest generation now and then (8 times in a 60 s load of 70k
    requests on zoo:mlp), and each such collection walked the whole heap with the GIL held: 44-109 ms on a
    busy machine, 51 ms for zoo:minilm's heap when idle, a pause every in-flight request waits out (the model's
    instance threads need the GIL between ops). Frozen, it walks only what serving made since: 0.002 ms.
    What startup made lives as long as the server anyway; cycles among it that die later are not collected.
    Only `serve()` freezes: it owns its process, where `start_in_thread` runs in someone else's."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


SWITCH_INTERVAL_S = float(os.environ.get("DLPERF_SWITCH_INTERVAL_S", "0.0005"))


def set_switch_interval() -> None:
    """Shorten the GIL switch interval (default 5 ms): the event loop thread and the instance threads hand
    the GIL back and forth at every torch op, and each handoff to a waiting thread can take a whole
    interval (the convoy effect), which on small models multiplies the batch time."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


IDLE_TRIM_S = 5.0
"""The server gives its freed heap memory back to the OS once it has had no inference request for this long."""


class IdleTrimmer:
    """Calls `trim` once per idle spell: when no inference request has arrived for `idle_s` and none is in
    flight. `activity()` returns (requests received so far, requests in flight); `tick()` is called
    periodically.

    Not on a fixed period under load: each trim hands back pages that the next batch faults in again. With
    `malloc_trim` every 10 s regardless (before), a ResNet-18 server at c=1 took 37-51 minor page faults per
    request (about 9000 refaulted after each trim, paid by the request that came next); without trimming,
    0-7 (docs/serve.md, Memory)."""

    def __init__(self, activity: Callable[[], tuple[int, int]], trim: Callable[[], object], idle_s: float = IDLE_TRIM_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.activity = activity
        self.trim = trim
        self.idle_s = idle_s
        self.clock = clock
        self.trims = 0
        self._seen: int | None = None
        self._since = clock()
        self._trimmed = False

    def tick(self) -> bool:
        """Trim if the server has been idle for `idle_s` and has not trimmed since; True if it did."""
        received, in_flight = self.activity()
        now = self.clock()
        if received != self._seen or in_flight:
            self._seen, self._since, self._trimmed = received, now, False
            return False
        if self._trimmed or now - self._since < self.idle_s:
            return False
        self.trim()
        self._trimmed = True
        self.trims += 1
        return True


def start_memory_trimmer(state: ServerState, idle_s: float = IDLE_TRIM_S, poll_s: float = 1.0) -> IdleTrimmer | None:
    """Return freed heap memory to the OS (glibc's `malloc_trim`, jemalloc's purge or tcmalloc's
    `ReleaseFreeMemory`, whichever allocator runs: `measure.allocator`) whenever the server has been idle for
    `idle_s` (`IdleTrimmer`); None where unavailable.

    Request bodies (hundreds of KiB, on the event loop thread) and joined batches (MiBs, on the instance
    threads) are freed into the allocator, which keeps the pages; releasing them gives them back, so an idle
    server's RSS follows its live memory (benchmarks/serve_vs_offline.py checks RSS stays flat)."""
    from dlperf.measure.allocator import releaser

    release = releaser()
    if release is None:
        return None
    trimmer = IdleTrimmer(lambda: (state.received, state.in_flight), release, idle_s)

    def loop() -> None:
        while True:
            time.sleep(poll_s)
            trimmer.tick()

    threading.Thread(target=loop, name="dlperf-malloc-trim", daemon=True).start()
    return trimmer


def _notify_when_started(server: Any, on_ready: Callable[[ServerState, str], None], state: ServerState,
                         url: str) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.01)
    if server.started:
        on_ready(state, url)
