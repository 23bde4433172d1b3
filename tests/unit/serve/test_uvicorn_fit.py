"""The body fast path's guard on uvicorn's internals: it reads the protocol's request cycle only when every
attribute it uses is there, and otherwise turns itself off once, with a warning, so the server keeps
serving as plain uvicorn (objects shaped like uvicorn's, with one attribute missing as a new uvicorn might); and
the HTTP/1.0 keep-alive reply cut by a shutdown, on uvicorn's real protocol over a fake transport."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from dlperf.serve import server

pytestmark = pytest.mark.unit


def protocol(**cycle_attrs: object) -> SimpleNamespace:
    scope: dict[str, object] = {"type": "http"}
    cycle = SimpleNamespace(scope=scope, **cycle_attrs)
    return SimpleNamespace(cycle=cycle, scope=scope)


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "_UVICORN_MISFIT", [])


def test_a_cycle_with_what_the_fast_path_reads_is_used() -> None:
    p = protocol(response_complete=False, disconnected=False)
    assert server._fitting_cycle(p) is p.cycle
    upgrade = protocol(response_complete=False, disconnected=False)
    upgrade.scope = {"type": "websocket"}  # uvicorn's cycle holds another scope: not a plain request
    assert server._fitting_cycle(upgrade) is None
    assert server._fitting_cycle(SimpleNamespace(cycle=None, scope={})) is None
    assert server._UVICORN_MISFIT == []


def test_a_missing_attribute_turns_the_fast_path_off_once_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="dlperf.serve"):
        assert server._fitting_cycle(protocol(response_complete=False)) is None  # no 'disconnected'
        assert server._fitting_cycle(protocol(response_complete=False, disconnected=False)) is None  # off now
        assert server._fitting_cycle(SimpleNamespace(scope={})) is None
    assert len(server._UVICORN_MISFIT) == 1 and "disconnected" in server._UVICORN_MISFIT[0]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "is not what dlperf's body fast path expects" in warnings[0]


def test_http_1_0_keep_alive_is_kept_only_where_the_cycle_has_what_it_sets() -> None:
    cycle = SimpleNamespace(keep_alive=False, default_headers=[(b"server", b"x")])
    server._keep_http10_alive(cycle)
    assert cycle.keep_alive is True and cycle.default_headers == [(b"server", b"x"), (b"connection", b"keep-alive")]
    other = SimpleNamespace(keep_alive=False)  # a uvicorn without per-cycle default headers: left as it is
    server._keep_http10_alive(other)
    assert other.keep_alive is False and server._UVICORN_MISFIT == []  # and the body fast path stays on


class _Transport:
    """Just enough of an asyncio transport for uvicorn's protocol: what it writes, whether it closed."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_an_http_1_0_keep_alive_reply_cut_by_shutdown_says_close_only() -> None:
    """The server shutting down while an HTTP/1.0 keep-alive request is in the app: uvicorn closes the connection
    after the reply and says `connection: close`; the reply must not also say keep-alive (it said both)."""
    import asyncio

    pytest.importorskip("httptools")
    import uvicorn
    from uvicorn.server import ServerState

    async def scenario() -> _Transport:
        release = asyncio.Event()

        async def app(scope: object, receive: object, send: object) -> None:
            await release.wait()
            await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                        "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

        config = uvicorn.Config(app, lifespan="off", date_header=False, server_header=False)
        config.load()
        protocol = server._http_protocol(1 << 20)(config=config, server_state=ServerState(), app_state={})
        transport = _Transport()
        protocol.connection_made(transport)
        protocol.data_received(b"GET /v2/health/ready HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        await asyncio.sleep(0)  # the app is waiting: the reply is not complete
        protocol.shutdown()
        release.set()
        for _ in range(100):
            if transport.closed:
                break
            await asyncio.sleep(0.01)
        return transport

    transport = asyncio.run(scenario())
    head = transport.written.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 200")
    assert b"connection: close" in head and b"keep-alive" not in head
    assert transport.closed
