"""The processes a command under test started, and whether they are gone."""

from __future__ import annotations

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
