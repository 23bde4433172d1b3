"""The processes a command under test started, and whether they are gone."""

from __future__ import annotations

import contextlib
import subprocess

import psutil


def descendants(pid: int) -> list[psutil.Process]:
    """Every process under `pid` now; none once it has exited."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def all_gone(processes: list[psutil.Process]) -> bool:
    """No process of `processes` runs (exited, or a zombie waiting for its parent)."""
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


class Watched:
    """Every process seen under a running command (`look()` while it runs), with the name each last had: a child
    caught between fork and exec is still named 'python', so names are read again at each look."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.seen: dict[int, psutil.Process] = {}
        self.names: dict[int, str] = {}

    def look(self) -> bool:
        """Record what runs under the command now; True once the command has exited."""
        for p in descendants(self.proc.pid):
            self.seen.setdefault(p.pid, p)
            with contextlib.suppress(psutil.Error):
                self.names[p.pid] = p.name()
        return self.proc.poll() is not None

    def named(self) -> set[str]:
        return set(self.names.values())

    def all_gone(self) -> bool:
        return all_gone(list(self.seen.values()))
