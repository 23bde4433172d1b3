"""`signals_held_while_ray_starts` holds SIGINT and SIGTERM while `ray.init` runs, but not one the caller ignores."""

from __future__ import annotations

import json
import subprocess
import sys

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
