"""Ctrl-C while `ray.init` connects to an address that answers TCP but is no Ray cluster: Ray's GCS client retries it
for minutes inside C++, where dlperf's held signal waited (it said 'a few seconds') and further Ctrl-Cs went unheard."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ..serve.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("second_signal", [True, False])
def test_ctrl_c_while_ray_retries_an_address_ends_the_command(tmp_path: Path, second_signal: bool) -> None:
    pytest.importorskip("ray")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # answers TCP, says nothing: not a Ray GCS
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    log = tmp_path / "optimize.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "optimize", "zoo:mlp", "--executor",
                                 f"ray:127.0.0.1:{port}", "--store", str(tmp_path / "runs.db")], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or "Connecting to existing Ray cluster" in log.read_text(), 120,
                   "ray.init to start connecting")
        time.sleep(2.0)  # inside Ray's retries
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: proc.poll() is not None or "stopping once Ray has finished starting" in log.read_text(),
                   30, "the first Ctrl-C to be acknowledged")
        if second_signal:
            proc.send_signal(signal.SIGINT)
        # at once after a second Ctrl-C, else 30 s after the first (it waited for Ray: minutes)
        code = proc.wait(timeout=20 if second_signal else 60)
        text = log.read_text()
        assert code == 130, text
        expected = ("SIGINT again: stopping now, without waiting for Ray" if second_signal
                    else "Ray has not finished starting 30 s after SIGINT: stopping now")
        assert expected in text and "Traceback" not in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()
