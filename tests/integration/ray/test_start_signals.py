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

GIVE_UP_S = 3.0
"""`dlperf.ray.address.GIVE_UP_S` in the command without a second Ctrl-C: its 30 s were waited out here, two thirds of
the test's time; the same watcher reads the constant, so 3 s takes the same way out."""
PROBE_S = 2.0
"""`dlperf.ray.address.GCS_PROBE_TIMEOUT_S` in both commands: the server says nothing, so the probe's request runs to
its timeout (10 s) before `ray.init`, whatever it is; Ray's retries come after it as before."""
CLI = ("import runpy, sys\n"
       "import dlperf.ray.address as address\n"
       "address.GIVE_UP_S, address.GCS_PROBE_TIMEOUT_S = float(sys.argv.pop(1)), float(sys.argv.pop(1))\n"
       "runpy.run_module('dlperf.cli.main', run_name='__main__', alter_sys=True)\n")
"""`python -m dlperf.cli.main ARGS` in the same process, with those two constants set before it starts."""


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
        # with a second Ctrl-C, the give-up stays at its 30 s: that the command ends well before them shows the
        # second one ended it
        give_up_s = 30.0 if second_signal else GIVE_UP_S
        proc = subprocess.Popen([sys.executable, "-c", CLI, str(give_up_s), str(PROBE_S), "optimize", "zoo:mlp",
                                 "--executor", f"ray:127.0.0.1:{port}", "--store", str(tmp_path / "runs.db")],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or "Connecting to existing Ray cluster" in log.read_text(), 120,
                   "ray.init to start connecting")
        time.sleep(2.0)  # inside Ray's retries
        proc.send_signal(signal.SIGINT)
        # with the bound it waits (it said 'a few seconds' for a wait of up to 30 s)
        acknowledged = f"stopping once Ray has finished starting (at most {give_up_s:g} s; SIGINT again to stop now)"
        wait_until(lambda: proc.poll() is not None or acknowledged in log.read_text(), 30,
                   "the first Ctrl-C to be acknowledged")
        if second_signal:
            proc.send_signal(signal.SIGINT)
        # at once after a second Ctrl-C, else GIVE_UP_S after the first (it waited for Ray: minutes)
        code = proc.wait(timeout=20 if second_signal else GIVE_UP_S + 30)
        text = log.read_text()
        assert code == 130, text
        expected = ("SIGINT again: stopping now, without waiting for Ray" if second_signal
                    else f"Ray has not finished starting {GIVE_UP_S:g} s after SIGINT: stopping now")
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
