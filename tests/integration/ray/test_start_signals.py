"""Signals held while `ray.init` runs. Ctrl-C while it connects to an address that answers TCP but is no Ray cluster:
Ray's GCS client retries it for minutes inside C++, where dlperf's held signal waited (it said 'a few seconds') and
further Ctrl-Cs went unheard. SIGTERM while a local instance starts, which then starts: `dlperf serve --ray` went on to
start Ray Serve before it looked."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ..serve.helpers import cli_process, free_port, wait_until
from .processes import Watched

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
            # later than a copy of the first (GNU timeout's to the group), as a person's second Ctrl-C is
            time.sleep(0.2)
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


def test_sigterm_while_a_local_instance_starts_ends_serve_before_ray_serve_starts(tmp_path: Path) -> None:
    """The SIGTERM held while `ray.init` ran reached serve_on_ray's handler (which notes it) after the start, and the
    command started Ray Serve's controller, its proxy and the control actor (seconds) before the deployment loop
    looked, then said 'while deploying on Ray Serve: the deployment was removed'. It stops before Serve now."""
    pytest.importorskip("ray.serve")
    log = tmp_path / "serve.log"
    with cli_process(["serve", "zoo:mlp", "--ray", "--port", str(free_port())], log,
                     env={**os.environ, "RAY_ADDRESS": ""}) as proc:
        watched = Watched(proc)
        # the GCS is the first thing ray.init starts; it returns seconds later, once the raylet and agents run
        wait_until(lambda: watched.look() or "gcs_server" in watched.named(), 120, "the local instance's GCS")
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        wait_until(watched.look, 120, "the command to exit")
    text = log.read_text()
    assert "stopping once Ray has finished starting" in text, text  # held while ray.init ran, as meant
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert text.strip().splitlines()[-1] == "interrupted by SIGTERM while Ray was starting: nothing was deployed", text
    assert "Traceback" not in text, text
    assert "raylet" in watched.named(), watched.names  # Ray did finish starting: where Serve would have come next
    assert "Started Serve" not in text, text  # Ray Serve's controller logs it as serve.start runs
    wait_until(watched.all_gone, 60, "the local instance's processes to exit")


NOTING_CALLER = """
import json, os, signal, threading, time
import psutil
from dlperf.ray.trials import RayExecutor

noted = []
signal.signal(signal.SIGTERM, lambda signum, frame: noted.append(signum))  # notes it, as a server loop would


def gcs_runs():
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() == "gcs_server":
                return True
        except psutil.Error:  # a child that came and went
            pass
    return False


def sigterm_once_the_gcs_runs():
    while not gcs_runs():
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=sigterm_once_the_gcs_runs, daemon=True).start()
error = None
try:
    RayExecutor()
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
left = []
for p in psutil.Process().children(recursive=True):
    try:
        if p.status() != psutil.STATUS_ZOMBIE:
            left.append(p.name())
    except psutil.Error:
        pass
print(json.dumps({"error": error, "noted": noted, "left": left}))
"""


def test_a_caller_whose_handler_notes_a_sigterm_held_while_ray_started_gets_no_executor() -> None:
    """RayExecutor shut the new instance down and gave the held SIGTERM to the caller's handler; when that handler
    returned, `__init__` went on asking a Ray that was no longer there for its nodes."""
    pytest.importorskip("ray")
    done = subprocess.run([sys.executable, "-c", NOTING_CALLER], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert "stopping once Ray has finished starting" in done.stderr, done.stderr  # held while ray.init ran
    assert outcome["noted"] == [signal.SIGTERM], outcome
    assert outcome["error"] == ("OptimizeError: interrupted by SIGTERM while Ray was starting: the Ray executor was "
                                "not made"), outcome
    assert outcome["left"] == [], outcome
