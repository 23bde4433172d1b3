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
