"""`signals_held_while_ray_starts` holds SIGINT and SIGTERM while `ray.init` runs, but not one the caller ignores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.unit

SCRIPT = """
import json, os, signal, time
from dlperf.ray.address import signals_held_while_ray_starts

signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell script's background job has it
with signals_held_while_ray_starts() as held:
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.3)  # the watcher thread reads the wakeup fd every 0.1 s
print(json.dumps({"held": held, "sigint ignored": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
                  "sigterm default": signal.getsignal(signal.SIGTERM) is signal.SIG_DFL}))
"""


def test_a_signal_the_caller_ignores_is_not_held() -> None:
    """An ignored SIGINT was held like a handled one: the command said it would stop once Ray had started, and the
    watcher ended it 30 s after the signal (`os._exit(130)`) where the caller had asked for SIGINT to be ignored."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"held": [15], "sigint ignored": True, "sigterm default": True}, outcome
    # announced once, for the SIGTERM that is held, not for the ignored SIGINT
    assert done.stderr.count("stopping once Ray has finished starting") == 1, done.stderr
    assert "(at most 30 s; SIGTERM again to stop now)" in done.stderr, done.stderr


TWICE = """
import json, os, signal, sys, time
from dlperf.ray.address import signals_held_while_ray_starts

sent = signal.Signals[sys.argv[2] if len(sys.argv) > 2 else "SIGTERM"]
with signals_held_while_ray_starts() as held:
    os.kill(os.getpid(), sent)
    os.kill(os.getpid(), sent)  # GNU timeout: to the command, then to its process group
    time.sleep(0.6)
    if sys.argv[1] == "later":
        os.kill(os.getpid(), sent)  # a second one, deliberately
        time.sleep(0.6)
print(json.dumps({"held": held}))
"""


@pytest.mark.parametrize("later", ["", "later"])
def test_the_same_signal_twice_at_once_is_one_delivery_a_later_one_a_second(later: str) -> None:
    """`timeout -s TERM 5 dlperf optimize --executor ray` was taken as a second SIGTERM ("stopping now, without
    waiting for Ray") and left two of Ray's agents running for a minute."""
    done = subprocess.run([sys.executable, "-c", TWICE, later], capture_output=True, text=True, timeout=120)
    if not later:
        assert done.returncode == 0 and "again: stopping now" not in done.stderr, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"held": [15, 15]}
        assert done.stderr.count("stopping once Ray has finished starting") == 1, done.stderr
    else:
        assert done.returncode == 143 and "SIGTERM again: stopping now, without waiting for Ray" in done.stderr, \
            done.stderr


def test_a_second_ctrl_c_while_ray_starts_stops_the_command_at_once() -> None:
    """Ctrl-C is held and announced as SIGTERM is; a second one, a moment later, ends the command (exit 130)."""
    done = subprocess.run([sys.executable, "-c", TWICE, "later", "SIGINT"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 130, done.stderr
    assert "(at most 30 s; SIGINT again to stop now)" in done.stderr, done.stderr
    assert "SIGINT again: stopping now, without waiting for Ray" in done.stderr, done.stderr


def test_a_second_signal_stops_only_what_ray_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher's forced stop kills the processes under this one that were not there before `ray.init`."""
    from dlperf.ray import address

    done = threading.Event()
    stopped: list[tuple[int, set[int]]] = []

    def exit_now(status: int, before: set[int]) -> None:
        stopped.append((status, before))
        done.set()

    ticks = iter(range(1000))  # one second a reading: the second signal comes well after the first
    monkeypatch.setattr(address, "time", SimpleNamespace(monotonic=lambda: float(next(ticks))))
    monkeypatch.setattr(address, "_exit_now", exit_now)
    monkeypatch.setattr(address, "_say", lambda line: None)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, bytes([signal.SIGTERM, signal.SIGTERM]))
        address._watch_while_ray_starts(read_end, done, {4242})
    finally:
        os.close(read_end)
        os.close(write_end)
    assert stopped == [(128 + signal.SIGTERM, {4242})]
