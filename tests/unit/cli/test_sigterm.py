"""SIGTERM under `cli.common.sigterm_interrupts` (dlperf load, dlperf serve's warm-up) ends the command as
Ctrl-C does, wherever it lands: in plain code, or inside an event loop's protocol callback, where uvloop took an
exception for the transport's fatal error and the command went on to exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from dlperf.cli.common import Terminated, sigterm_interrupts

uvloop = pytest.importorskip("uvloop")


def test_sigterm_in_plain_code_raises_terminated() -> None:
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or what an earlier test's library set (Ray sets one)
    with pytest.raises(Terminated, match="terminated by SIGTERM"), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes
            pass
    assert signal.getsignal(signal.SIGTERM) == before  # restored


def test_sigterm_inside_a_protocol_callback_ends_the_loop() -> None:
    seen: list[bytes] = []

    class Reader(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, inside uvloop's read callback
            seen.append(data)

    async def main() -> str:
        def answer(reader: Any, writer: Any) -> None:
            writer.write(b"reply")

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        await asyncio.get_running_loop().create_connection(Reader, "127.0.0.1", port)
        await asyncio.sleep(3)
        return "the loop went on"

    with pytest.raises(Terminated), sigterm_interrupts():
        uvloop.run(main())
    assert seen == [b"reply"]


class _SignalledInDel:
    """Sends this process a signal from its __del__, where Python reports an exception and goes on."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)
        for _ in range(1000):  # the handler runs here, inside __del__
            pass


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_landing_where_python_ignores_exceptions_is_delivered_again(signum: int, raised: type) -> None:
    """SIGTERM while a DataLoader started its workers landed in logging's os.fork callback: 'Exception ignored
    in: <function _releaseLock>', and `dlperf train --tune` ran to its end and exited 0 (2 of 4 tries)."""
    hook = __import__("sys").unraisablehook
    # Python's own Ctrl-C handler, also where this process was started with SIGINT ignored (a shell's background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _lost_or_raised(signum, raised)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert __import__("sys").unraisablehook is hook  # restored


def _lost_or_raised(signum: int, raised: type) -> None:
    with pytest.raises(raised), sigterm_interrupts():
        thing = _SignalledInDel(signum)
        del thing  # the exception raised in __del__ is swallowed there
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pass
        pytest.fail("the signal was lost")


@pytest.mark.parametrize(("interrupt", "code"), [(KeyboardInterrupt(), 130), (Terminated("terminated"), 143)])
def test_an_interrupt_turned_into_an_import_error_ends_as_the_interrupt(
        interrupt: KeyboardInterrupt, code: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C inside `import torch` can come out as an ImportError raised while handling it: a traceback and exit
    1. It ends as the interrupt would (130; SIGTERM's 143), and an ImportError of its own still propagates."""
    from dlperf.cli import bench, main

    def importing(args: Any) -> int:
        try:
            raise interrupt
        except KeyboardInterrupt:
            raise ImportError("cannot import name '_C' from partially initialized module 'torch'") from None

    monkeypatch.setattr(bench, "run", importing)
    assert main.main(["bench", "zoo:mlp"]) == code
    assert capsys.readouterr().err.strip() == (str(interrupt) or "interrupted")

    def broken(args: Any) -> int:
        raise ImportError("no module named 'onnx'")

    monkeypatch.setattr(bench, "run", broken)
    with pytest.raises(ImportError, match="onnx"):
        main.main(["bench", "zoo:mlp"])


def test_ctrl_c_while_the_commands_are_imported_ends_without_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`timeout -s INT 0.2 dlperf runs list` printed a KeyboardInterrupt traceback from build_parser."""
    from dlperf.cli import main as cli_main

    def interrupted() -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "build_parser", interrupted)
    assert cli_main.main(["runs", "list"]) == 130
    assert capsys.readouterr().err == "interrupted before the command started\n"
