"""A trial's files (where it runs, the phase it reached) as the driver and the tests read them: whole, or not yet."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import pytest

from dlperf._files import write_text_atomic
from dlperf.ray.trials import trial_file

pytestmark = pytest.mark.unit


def test_a_trial_file_is_never_read_empty_or_half_written(tmp_path: Path) -> None:
    """`write_text` creates the file, then writes it: a reader that saw it exist could read it empty (a test slept
    0.05 s after seeing the start file, 'to let it land'). Written beside it and renamed over it, it is whole."""
    path = trial_file(tmp_path, 1, "json")
    text = json.dumps({"node_id": "f" * 56, "hostname": "node", "worker_pid": 12345, "attempt": 1})
    torn: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                seen = path.read_text()
                if seen != text:
                    torn.append(seen)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(2000):  # a trial's file is removed before each submission, then written by its worker
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            write_text_atomic(path, text)
    finally:
        stop.set()
        reader.join()
    assert not torn, f"{len(torn)} of the reads saw {sorted(set(torn))[:3]}"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left beside it
