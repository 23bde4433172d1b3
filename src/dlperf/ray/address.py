"""Whether a Ray address answers, asked before `ray.init`, which retries an unreachable one for minutes."""

from __future__ import annotations

import socket


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
