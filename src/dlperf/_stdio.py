"""Keeping a command's `--json` document the only thing on stdout.

A workload's own `print` calls (at import, in its model factory, in forward), a child process's output and a C
library writing to file descriptor 1 would otherwise come before or inside the JSON, and `json.load` of the
output (compare.md's CI recipe) fails. `stdout_to_stderr()` sends all of that to stderr for the command's run and
hands out the one stream that still reaches the real stdout, for the JSON.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO

_json_out: list[TextIO] = []
"""The real stdout while `stdout_to_stderr` is active (innermost last)."""
_saved_fd: list[int] = []
"""A duplicate of the real file descriptor 1 while it points at stderr."""


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[TextIO]:
    """Inside, `sys.stdout` is `sys.stderr` and, where `sys.stdout` was file descriptor 1, descriptor 1 points at
    stderr too (child processes, C code); yields a stream on the real stdout (`json_stream()` returns it)."""
    old = sys.stdout
    old.flush()
    try:
        fd: int | None = old.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's capsys, an io.StringIO: no descriptor to move
        fd = None
    out: TextIO = old
    if fd == 1:
        saved = os.dup(1)
        os.dup2(2, 1)
        _saved_fd.append(saved)
        out = os.fdopen(os.dup(saved), "w", encoding=getattr(old, "encoding", None) or "utf-8")
    _json_out.append(out)
    sys.stdout = sys.stderr
    try:
        yield out
        out.flush()  # a reader gone away (`| head`) is a BrokenPipeError for `main` here, not lost in the close
    finally:
        sys.stderr.flush()
        sys.stdout = old
        _json_out.pop()
        if fd == 1:
            with contextlib.suppress(OSError):  # a reader that went away (`| head`): what is left goes nowhere
                out.close()
            saved = _saved_fd.pop()
            os.dup2(saved, 1)
            os.close(saved)


def json_stream() -> TextIO:
    """Where a `--json` document goes: the real stdout inside `stdout_to_stderr`, else `sys.stdout`."""
    return _json_out[-1] if _json_out else sys.stdout


def restore_for_exec() -> None:
    """Point file descriptor 1 back at the real stdout before this process replaces itself (`os.execve`), so the
    restarted command's JSON goes there; it moves its own stdout again."""
    if _saved_fd:
        os.dup2(_saved_fd[0], 1)


def silence_stdout() -> None:
    """The reader of stdout went away (`dlperf ... | head`): point file descriptor 1 at /dev/null, so that
    flushing what is left at exit does not raise BrokenPipeError again (Python's documented recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
    finally:
        os.close(devnull)
