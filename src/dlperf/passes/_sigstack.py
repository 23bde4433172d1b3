"""Keep the calling thread's alternate signal stack across a library call that replaces it.

OpenVINO's CPU plugin installs an alternate signal stack for the calling thread when it compiles a model
and frees that memory later (when the compiled model goes away) without restoring the previous one. The
thread is then left with a dangling alternate stack: the next signal whose handler runs on it (Python
installs every handler with SA_ONSTACK: SIGINT, SIGTERM, SIGCHLD ...) makes the kernel kill the process
with SIGSEGV. `preserved_signal_stack()` puts the thread's previous alternate stack back after the call.
Linux and glibc only; elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager


class _StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sigaltstack.argtypes = [ctypes.POINTER(_StackT), ctypes.POINTER(_StackT)]
        return libc
    except (OSError, AttributeError):
        return None


def current_signal_stack() -> tuple[int, int, int] | None:
    """(ss_sp, ss_flags, ss_size) of the calling thread's alternate signal stack, or None where unknown."""
    libc = _libc()
    if libc is None:
        return None
    old = _StackT()
    if libc.sigaltstack(None, ctypes.byref(old)) != 0:
        return None
    return (old.ss_sp or 0, old.ss_flags, old.ss_size)


@contextmanager
def preserved_signal_stack() -> Iterator[None]:
    """Run the body, then restore the calling thread's alternate signal stack as it was before."""
    libc = _libc()
    saved = _StackT()
    if libc is None or libc.sigaltstack(None, ctypes.byref(saved)) != 0:
        yield
        return
    try:
        yield
    finally:
        now = _StackT()
        libc.sigaltstack(None, ctypes.byref(now))
        if (now.ss_sp, now.ss_flags, now.ss_size) != (saved.ss_sp, saved.ss_flags, saved.ss_size):
            restore = _StackT(saved.ss_sp, saved.ss_flags & 2, saved.ss_size)  # SS_DISABLE or enabled
            libc.sigaltstack(ctypes.byref(restore), None)
