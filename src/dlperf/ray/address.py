"""Starting Ray: whether an address answers, asked before `ray.init` (which retries an unreachable one for
minutes), what its failure means in dlperf's terms, and the signals held while it starts."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


def _is_host_port(address: str) -> bool:
    """HOST:PORT, not 'auto', 'local' or a ray:// client address (those are left to Ray)."""
    _, sep, port = address.rpartition(":")
    return bool(sep) and "://" not in address and port.isdigit()


def address_shape_problem(address: str) -> str | None:
    """Why `address` cannot be a Ray cluster's address by its shape alone, or None: a URL of another scheme than
    ray:// (Ray's dashboard or jobs API, http://HOST:8265), or a host without a port. Both went to `ray.init`, which
    answered, 4-5 s later, "Invalid Ray address: 'http://bad:1'. It looks like you set RAY_ADDRESS to an HTTP
    address ... Unset RAY_ADDRESS" (the user had set no RAY_ADDRESS) and "Invalid address format: 127.0.0.1"."""
    text = address.strip()
    if text.lower() in ("auto", "local") or text.lower().startswith("ray://"):
        return None
    scheme, sep, _ = text.partition("://")
    if sep:
        return (f"{scheme}:// is a URL (Ray's dashboard and jobs API are http://HOST:8265), not a cluster's address: "
                "give the head node's GCS address as `ray start --head` prints it (HOST:6379), or ray://HOST:10001 "
                "for Ray's client server")
    if ":" not in text:
        return "no port: give HOST:PORT as `ray start --head` prints it (port 6379 by default)"
    return None


def why_unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why a HOST:PORT address does not answer TCP within `timeout_s`, or None when it does; 'auto', 'local' and
    ray:// client addresses are left to Ray (None)."""
    if not _is_host_port(address):
        return None
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return exc.strerror or f"no answer within {timeout_s:g} s"
    return None


GCS_PROBE_TIMEOUT_S = 10.0
"""How long the one request that asks whether an address is a Ray GCS may take (Ray's own answers in milliseconds)."""


def why_not_gcs(address: str, timeout_s: float | None = None) -> str | None:
    """Why a HOST:PORT address that answers TCP is not a Ray cluster's GCS, or None when it is, or may be.

    `ray.init` retried such an address for minutes ("Failed to connect to GCS at address ... within 5 seconds" every
    few seconds, then "Timed out while waiting for GCS to become available", again and again): with an HTTP server
    there (Ray's dashboard on 8265 is one; `python -m http.server` here) it had not given up after 400 s. One GCS
    request (`NodeInfoGcsService.GetClusterId`, through the grpc package and the stubs this Ray ships) settles it at
    once: a server that does not speak gRPC fails it as UNAVAILABLE, another gRPC server as UNIMPLEMENTED. Any other
    answer (the reply, or UNAUTHENTICATED from a cluster with token authentication) is a GCS. A server that says
    nothing within `timeout_s` (default GCS_PROBE_TIMEOUT_S, read at each call), TLS (`RAY_USE_TLS`), and a Ray without
    grpc or those stubs are left to Ray (None)."""
    answer = _gcs_answer(address, timeout_s)
    if answer is None:
        return None
    import grpc

    code, details = answer
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return ("a gRPC server answers there, but not a Ray GCS (Ray's client server, on port 10001, is one: give it "
                "as ray://HOST:10001)")
    if code == grpc.StatusCode.UNAVAILABLE:
        # "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:10.0.0.5:8265: Failed parsing ..."
        said = re.split(r"(?:ipv4|ipv6|unix):\S+: ", details)[-1] or details
        if "HTTP/2" in said:
            return ("an HTTP server answers there, not a Ray GCS (Ray's dashboard, on port 8265, is one; the GCS "
                    f"listens on 6379 by default): {said}")
        return f"something answers TCP there, but not a Ray GCS: {said}"
    return None


def _gcs_answer(address: str, timeout_s: float | None = None) -> tuple[Any, str] | None:
    """(gRPC status code, details) of one GCS request (`NodeInfoGcsService.GetClusterId`, without a token) to a
    HOST:PORT address; None where it is not asked (TLS, no grpc or Ray stubs, not HOST:PORT)."""
    if timeout_s is None:
        timeout_s = GCS_PROBE_TIMEOUT_S
    if not _is_host_port(address) or os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true", "yes"):
        return None
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return None
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]  # generated, untyped
            stub.GetClusterId(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            return exc.code(), str(exc.details() or "")
    return grpc.StatusCode.OK, ""


def token_auth_problem(address: str) -> str | None:
    """Before joining the cluster at `address` (HOST:PORT, or the RAY_ADDRESS 'auto' joins): where its GCS asks for
    a token (Ray's token authentication, on by default from Ray 2.59 for `ray start`) and RAY_AUTH_MODE is unset
    here, token authentication is turned on for this process as Ray turns it on for an instance it starts, with the
    token found here (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token). `ray.init` with an address sent no
    token, retried "Authentication token is missing or incorrect" for 20 s and failed with "Failed to connect", and
    the error's advice was to check the address. Returns why it cannot join where this machine has no token, or
    RAY_AUTH_MODE says another mode; else None."""
    import grpc

    target = joined_by_auto(address) or address
    answer = _gcs_answer(target)
    if answer is None or answer[0] != grpc.StatusCode.UNAUTHENTICATED:
        return None
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.strip().lower() != "token":
        return (f"the Ray cluster at {target} asks for a token (Ray's token authentication), and RAY_AUTH_MODE is "
                f"'{mode}' here: unset RAY_AUTH_MODE, or set it to token")
    if mode is not None:
        return None  # token mode: Ray loads the token itself
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication's setup: left to Ray
        return None
    with token_auth_notice_dropped():
        if maybe_enable_token_auth_if_token_available(warn_if_disabled=False):
            return None
    return (f"the Ray cluster at {target} asks for a token (Ray's token authentication), and this machine has none: "
            "set RAY_AUTH_TOKEN to the cluster's token (`ray get-auth-token` on its head node prints it), or save it "
            "as ~/.ray/auth_token")


TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
"""Where Ray (2.59 on) logs that it turned token authentication on by default for a new local instance."""


class _TokenAuthDefaultNotice(logging.Filter):
    """Drops Ray's notice that it turned token authentication on by default; its other lines (the token it generated
    and where it saved it, a warning that authentication is off) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


@contextlib.contextmanager
def token_auth_notice_dropped() -> Iterator[None]:
    """While a local instance starts, without Ray's line "Token authentication is enabled for this Ray cluster. Set
    RAY_AUTH_MODE=disabled to opt out", which it printed at every start: a notice of a default, whose only advice is
    to opt out of a protection that matters here (the instance's GCS and raylet listen on this machine's network
    address; without the token, anyone who reaches them can run code on it). The authentication itself is kept.

    Setting `RAY_AUTH_MODE=token`, which Ray takes as a choice and does not announce, was tried: set in this process
    once Ray is imported, the driver's core worker did not read it (Ray's own default refreshes its cached config),
    sent no token, and `ray.init` retried "Authentication token is missing or incorrect" for minutes."""
    log = logging.getLogger(TOKEN_AUTH_LOGGER)
    notice = _TokenAuthDefaultNotice()
    log.addFilter(notice)
    try:
        yield
    finally:
        log.removeFilter(notice)


def cluster_address(address: str | None) -> str | None:
    """`address`, or None where it asks for a new local instance: Ray's own name for one, 'local', was taken for a
    cluster's (`--executor ray:local` started without the timing resource; `--ray-address local` skipped the port
    and CPU checks of a local instance)."""
    return None if address is not None and address.strip().lower() == "local" else address


def joined_by_auto(address: str) -> str | None:
    """The address 'auto' joins when the environment names one (`RAY_ADDRESS`, which Ray takes first), else None
    (Ray then looks for a cluster started on this machine)."""
    if address.strip().lower() != "auto":
        return None
    named = os.environ.get("RAY_ADDRESS", "").strip()
    return named if named and named.lower() not in ("auto", "local") else None


def unreachable(address: str, timeout_s: float = 5.0) -> tuple[str, str] | None:
    """(where, why) when the cluster `address` leads to does not answer TCP within `timeout_s`, or answers but is no
    Ray GCS (`why_not_gcs`): `where` is the address itself, or for 'auto' the `RAY_ADDRESS` it joins ('127.0.0.1:6399
    (RAY_ADDRESS, which auto joins)').
    With RAY_ADDRESS naming nothing, 'auto' went to Ray, which retried for minutes with a warning every few seconds,
    and held a Ctrl-C or SIGTERM all that time. None when it answers, or when Ray is left to find it."""
    named = joined_by_auto(address)
    target = named or address
    why = why_unreachable(target, timeout_s)
    if why is None:
        why = why_not_gcs(target)
    if why is None:
        return None
    return (f"{target} (RAY_ADDRESS, which auto joins)" if named else target), why


def unreachable_reason(address: str, timeout_s: float, *, fix_auto: str, fix_address: str) -> str | None:
    """'cannot reach Ray at WHERE: WHY; FIX' when `unreachable(address)`, with `fix_auto` where 'auto' joined
    RAY_ADDRESS and `fix_address` where the address was given (each command names its own options); else None."""
    found = unreachable(address, timeout_s)
    if found is None:
        return None
    where, why = found
    return f"cannot reach Ray at {where}: {why}; {fix_auto if joined_by_auto(address) else fix_address}"


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
    """SIGINT and SIGTERM held until `ray.init` returns; yields the signals that came (the first is taken after). One
    the caller ignores stays ignored.

    Ctrl-C raised inside Ray's core worker while it was being built (a few hundred ms after 'Started a local Ray
    instance') left it half made, and the process died of SIGSEGV at exit after printing 'interrupted' (6 of 12
    tries here, exit -11 instead of 130). Ray's own SIGTERM handler (sys.exit), which it installs first thing in
    `ray.init`, is kept out for the same reason. Off the main thread nothing is held (signals go to that one)."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    # The handler above runs only when the main thread is back in Python; inside ray.init it can sit in Ray's C++
    # for minutes (an address that answers TCP but is no Ray: its GCS client retries), so the signals are watched
    # from a thread too, through the wakeup fd that Python's C-level handler writes to at once.
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    done = threading.Event()
    watcher = threading.Thread(target=_watch_while_ray_starts, args=(read_end, done, child_pids()),
                               name="dlperf-ray-start-signals", daemon=True)
    watcher.start()
    utils: Any = None
    with contextlib.suppress(ImportError):  # where Ray keeps it (2.x); elsewhere its handler comes and is undone after
        import ray._private.utils as utils
    own_setter = getattr(utils, "set_sigterm_handler", None)
    # a signal the caller ignores (SIG_IGN: a shell script's background job has SIGINT so) stays ignored: held, it was
    # announced as stopping the command and ended it 30 s later
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)
             if signal.getsignal(s) is not signal.SIG_IGN}
    for s in saved:
        signal.signal(s, hold)
    if own_setter is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield received
    finally:
        done.set()
        watcher.join()
        signal.set_wakeup_fd(previous_fd)
        os.close(read_end)
        os.close(write_end)
        if own_setter is not None:
            utils.set_sigterm_handler = own_setter
        for s, handler in saved.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


GIVE_UP_S = 30.0
"""How long after a held SIGINT or SIGTERM the command still waits for Ray to finish starting."""
SAME_DELIVERY_S = 0.05
"""The same signal again within this long of the first is its copy, not a second signal (GNU `timeout`'s to the
command's process group, `_watch_while_ray_starts`); a person's second Ctrl-C comes later."""


def _watch_while_ray_starts(read_end: int, done: threading.Event, before: set[int] | None = None) -> None:
    """Say that a SIGINT or SIGTERM waits for Ray, and for how long at most; at a second one, or GIVE_UP_S after the
    first, stop what Ray started under this process (not in `before`) and end the process now. It said 'a few
    seconds', and waited as long as Ray retried (minutes), deaf to further Ctrl-Cs; then, with the give-up, still 'a
    few seconds' for a wait of up to 30 s. The search has opened no run yet.

    The same signal within SAME_DELIVERY_S of the first is the same delivery: GNU `timeout` sends its SIGTERM to the
    command and then to the command's process group, which the command is in (`timeout -s TERM 5 dlperf optimize
    --executor ray` stopped at once, as at a second signal, and left two of Ray's agents running for a minute); the
    two were read 1.7 ms apart here, or together."""
    before = before or set()
    first: int | None = None
    first_at = give_up_at = math.inf
    while not done.is_set():
        ready, _, _ = select.select([read_end], [], [], 0.1)
        came = [b for b in (os.read(read_end, 64) if ready else b"") if b in (signal.SIGINT, signal.SIGTERM)]
        for signum in came:
            name = signal.Signals(signum).name
            if first is None:
                first, first_at, give_up_at = signum, time.monotonic(), time.monotonic() + GIVE_UP_S
                _say(f"stopping once Ray has finished starting (at most {GIVE_UP_S:g} s; {name} again to stop now)")
            elif signum == first and time.monotonic() - first_at < SAME_DELIVERY_S:
                continue  # the group's copy of the first one (GNU timeout)
            elif not done.is_set():
                _say(f"{name} again: stopping now, without waiting for Ray")
                _exit_now(128 + signum, before)
        if first is not None and time.monotonic() > give_up_at and not done.is_set():
            _say(f"Ray has not finished starting {GIVE_UP_S:g} s after {signal.Signals(first).name}: stopping now")
            _exit_now(128 + first, before)


def _exit_now(status: int, before: set[int]) -> None:
    """End the process at once, after stopping what Ray started under it: its agents, in process groups of their own,
    outlived the process by a minute."""
    with contextlib.suppress(Exception):
        _freeze_and_kill_new(before)
    os._exit(status)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode())


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


def child_pids() -> set[int]:
    """The processes under this one, now: what a `ray.init` about to run did not start."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process().children(recursive=True)}
    return set()


def stop_started(before: set[int]) -> None:
    """Stop what a failed or interrupted `ray.init` started under this process (not in `before`, from `child_pids`):
    each process is frozen as it is found, so none can start another that would outlive it (the raylet starts its
    agents), then all are killed, then Ray's own state is reset."""
    _freeze_and_kill_new(before)
    with contextlib.suppress(Exception):
        shutdown_ray()
    _freeze_and_kill_new(before)  # whatever Ray's own threads started meanwhile, and the shutdown left


def _freeze_and_kill_new(before: set[int]) -> None:
    """Kill the processes under this one that are not in `before`, each frozen as it is found first."""
    import psutil

    frozen: dict[int, psutil.Process] = {}
    while True:
        try:
            new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.pid not in frozen]
        except psutil.Error:
            new = []
        if not new:
            break
        for process in new:
            with contextlib.suppress(psutil.Error):
                process.suspend()
            frozen[process.pid] = process
    for process in frozen.values():
        with contextlib.suppress(psutil.Error):
            process.kill()
    # gone, not only signalled, when this returns: a caller that goes on (and a test that looks at once) found one
    # still there beside two other Ray test sessions
    psutil.wait_procs(list(frozen.values()), timeout=10)


def start_ray(init: Callable[[], object], *, local: bool, refused: Callable[[BaseException], Exception]) -> list[int]:
    """`init()`, the caller's `ray.init`, as `optimize --executor ray` and `serve --ray` start Ray: SIGINT and SIGTERM
    held while it runs (`signals_held_while_ray_starts`), the processes it starts in process groups of their own, and
    for a new local instance (`local`) without Ray's token authentication notice. Returns the signals held, for the
    caller to take once it has Ray.

    When `init` raises: what it had started under this process is stopped (`stop_started`); a signal held meanwhile
    goes to the caller's handler first, as if it came now (a command ends as interrupted, not with Ray's error); then
    Ray's error (ConnectionError, RuntimeError, ValueError) is raised as `refused(exc)`, and Ray's own SIGTERM exit
    (its sys.exit handler, should it be set past the hold) goes to the caller's SIGTERM handler. `serve --ray` had a
    copy of its own without the first two: a local start that failed (`RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES`
    below Ray's minimum) left its GCS, autoscaler monitor and dashboard running under a caller that went on, and a
    SIGTERM held meanwhile was dropped: `error: --ray (...): cannot start or reach Ray: ...`, exit 2, not 143."""
    # ray.init replaces the SIGTERM handler with its own sys.exit: the caller's (the CLI's) is put back
    on_sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    before = child_pids()
    held: list[int] = []
    quiet = token_auth_notice_dropped() if local else contextlib.nullcontext()
    try:
        with signals_held_while_ray_starts() as held, ray_processes_in_their_own_group(), quiet:
            init()
    except BaseException as exc:
        # Ctrl-C or SIGTERM while a local instance starts left its agents running, orphaned; a failed start its GCS
        stop_started(before)
        if held:  # a signal held while ray.init failed comes first
            signal.raise_signal(held[0])
        if isinstance(exc, (ConnectionError, RuntimeError, ValueError)):
            raise refused(exc) from exc
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM and callable(on_sigterm):
            signal.signal(signal.SIGTERM, on_sigterm)
            on_sigterm(signal.SIGTERM, None)  # the CLI's raises its `Terminated`
        raise
    finally:
        if on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
    return held


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
