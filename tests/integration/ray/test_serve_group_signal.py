"""`dlperf serve --ray` on a local instance, stopped by a SIGTERM sent to its whole process group (as GNU `timeout`,
`kill -TERM -- -PGID` or a supervisor sends it): the command drains and stops, and nothing of the instance is left."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ..serve.helpers import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _running(processes: list[psutil.Process]) -> list[str]:
    left = []
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {p.name()}")
    return left


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_sigterm_to_the_process_group_stops_the_command_and_every_ray_process(tmp_path: Path) -> None:
    """The local instance's GCS, raylet and agents were in the command's process group and died with its SIGTERM while
    the command drained through them: its next GCS call hung until Ray's core worker ended the process ('Failed to
    connect to GCS within 60 seconds', no exit code of dlperf's), and the orphaned replica and proxy held the port for
    a minute or two more."""
    pytest.importorskip("ray")
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "serve", "zoo:mlp", "--ray", "--port",
                                 str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    instance: list[psutil.Process] = []
    try:
        wait_until(lambda: proc.poll() is not None or "metrics at" in log.read_text(), 240, "the deployment")
        assert proc.poll() is None, log.read_text()
        instance = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(p.name() for p in instance)
        assert "raylet" in names and "gcs_server" in names, names
        os.killpg(proc.pid, signal.SIGTERM)  # the group: the command and every process still in its group
        code = proc.wait(timeout=180)
        text = log.read_text()
        assert code == 0, text
        assert "Failed to connect to GCS" not in text and "Traceback" not in text, text
        # Ray's own line at every stop, from serve.shutdown() on an instance that was about to be stopped anyway
        assert "ServeController.graceful_shutdown failed" not in text, text
        wait_until(lambda: not _running(instance), 30, "the local instance's processes to exit")
        assert _port_free(port)
    finally:  # what a failure left running
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in instance:
            with contextlib.suppress(psutil.Error):
                p.kill()
