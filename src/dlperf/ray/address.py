"""Starting Ray: whether an address answers, asked before `ray.init` (which retries an unreachable one for
minutes), what its failure means in dlperf's terms, and the signals held while it starts."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any


def why_unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why a HOST:PORT address does not answer TCP within `timeout_s`, or None when it does; 'auto', 'local' and
    ray:// client addresses are left to Ray (None)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return exc.strerror or f"no answer within {timeout_s:g} s"
    return None


def init_error(exc: BaseException, option: str, local_hint: str) -> str:
    """Ray's reason `ray.init` failed, in dlperf's terms: with 'auto' and no cluster on this machine Ray asks
    for an `--address` flag or `RAY_ADDRESS`, which are its own, not the option the user gave (`option`)."""
    text = str(exc).strip()
    if "Could not find any running Ray instance" in text:
        return (f"{option}: no Ray cluster is running on this machine for 'auto' to join: start one with "
                f"`ray start --head`, give another's address as HOST:6379, or {local_hint}")
    return f"{option}: cannot start or reach Ray: {text}"


@contextlib.contextmanager
def signals_held_while_ray_starts() -> Iterator[list[int]]:
    """SIGINT and SIGTERM held until `ray.init` returns; yields the signals that came (the first is taken after).

    Ctrl-C raised inside Ray's core worker while it was being built (a few hundred ms after 'Started a local Ray
    instance') left it half made, and the process died of SIGSEGV at exit after printing 'interrupted' (6 of 12
    tries here, exit -11 instead of 130). Ray's own SIGTERM handler (sys.exit), which it installs first thing in
    `ray.init`, is kept out for the same reason. Off the main thread nothing is held (signals go to that one)."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if not received:
            with contextlib.suppress(OSError):
                os.write(2, b"stopping once Ray has finished starting (a few seconds)\n")
        received.append(signum)

    utils: Any = None
    with contextlib.suppress(ImportError):  # where Ray keeps it (2.x); elsewhere its handler comes and is undone after
        import ray._private.utils as utils
    own_setter = getattr(utils, "set_sigterm_handler", None)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in saved:
        signal.signal(s, hold)
    if own_setter is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield received
    finally:
        if own_setter is not None:
            utils.set_sigterm_handler = own_setter
        for s, handler in saved.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def ray_processes_in_their_own_group() -> Iterator[None]:
    """The processes a local Ray instance starts (GCS, raylet, and the agents the raylet starts) put in process groups
    of their own, not this command's, while `ray.init` runs.

    In this command's group they took every signal sent to the group along with it: `timeout 60 dlperf serve --ray`
    (GNU timeout signals the whole group), `kill -TERM -- -PGID`, a supervisor stopping the group. The raylet and
    agents died with the SIGTERM meant for the command, while the command began to drain its replicas through them:
    its next call to the GCS hung until Ray's core worker gave up after 60 s and ended the process ('Failed to connect
    to GCS within 60 seconds'), and the replicas and the proxy, orphaned, held the port for a minute or two more. Now
    the command alone takes the signal, drains, and stops the instance as after a plain `kill`. Ray itself blocks
    SIGINT in them (a terminal's Ctrl-C) and makes them die with this process (fate sharing), which a new group keeps.
    Ray's worker processes already start groups of their own."""
    services: Any = None
    with contextlib.suppress(ImportError):  # where Ray keeps it (2.x); elsewhere the processes stay in this group
        import ray._private.services as services
    popen = getattr(services, "ConsolePopen", None)
    if popen is None or os.name != "posix":
        yield
        return

    class OwnGroupPopen(popen):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            inner = kwargs.get("preexec_fn")  # Ray's: SIGINT blocked, fate sharing

            def own_group() -> None:  # Popen's process_group= is Python 3.11+
                os.setpgid(0, 0)
                if inner is not None:
                    inner()

            kwargs["preexec_fn"] = own_group
            super().__init__(*args, **kwargs)

    services.ConsolePopen = OwnGroupPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


def shutdown_ray() -> None:
    """`ray.shutdown()`, then this process's SIGINT and SIGTERM handlers made to work again: Ray's shutdown resets
    SIGTERM to the default disposition underneath Python (`signal.getsignal` still names the handler), so a SIGTERM
    afterwards killed the process outright (exit -15) instead of ending the command as interrupted."""
    import ray

    ray.shutdown()
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(s)
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
