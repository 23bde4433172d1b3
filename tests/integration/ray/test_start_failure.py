"""A local Ray instance that fails to start (its object store capped below Ray's minimum, through Ray's own
environment variable): Ray has started its GCS, autoscaler monitor and dashboard by then. `dlperf serve --ray` and
`dlperf optimize --executor ray` start Ray the same way (`dlperf.ray.address.start_ray`), and end the same way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ..serve.helpers import cli_process, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAILING = {**os.environ, "RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES": str(10**6), "RAY_ADDRESS": ""}
"""`ray.init(address="local")` fails with ValueError ('Attempting to cap object store memory usage at 1000000 bytes,
but the minimum allowed is 78643200 bytes') once the head's processes run, before the raylet."""

START = {
    "serve": ("from dlperf.ray.serve import RayServeOptions, start_on_ray\n"
              "from dlperf.serve.service import ServeConfig\n"
              "start_on_ray(ServeConfig(model='zoo:mlp', port=int(sys.argv[1])), RayServeOptions())\n"),
    "optimize": "from dlperf.ray.trials import RayExecutor\nRayExecutor()\n",
}
"""How each command starts a local instance, as a library call in a process that goes on afterwards."""
SCRIPT = ("import json, sys, psutil\n"
          "error = None\n"
          "try:\n{start}"
          "except Exception as exc:\n"
          "    error = f'{{type(exc).__name__}}: {{exc}}'\n"
          "left = []\n"
          "for p in psutil.Process().children(recursive=True):\n"
          "    try:\n"
          "        if p.status() != psutil.STATUS_ZOMBIE:\n"
          "            left.append(p.name())\n"
          "    except psutil.Error:\n"
          "        pass\n"
          "print(json.dumps({{'error': error, 'left': left}}))\n")


@pytest.mark.parametrize("command", sorted(START))
def test_a_failed_local_start_leaves_no_process_behind(command: str) -> None:
    """`start_on_ray` raised its ServingError and left the GCS, the monitor and the dashboard running under the
    process that called it (`dlperf serve --ray` exits then, and they die with it; a library caller goes on)."""
    start = "".join(f"    {line}\n" for line in START[command].splitlines())
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(start=start), str(free_port())], capture_output=True,
                          text=True, timeout=240, env=FAILING)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert "cannot start or reach Ray: Attempting to cap object store memory usage" in outcome["error"], outcome
    assert outcome["left"] == [], outcome


@pytest.mark.parametrize(("command", "last_line"), [
    (["serve", "zoo:mlp", "--ray"],
     "interrupted by SIGTERM while Ray was starting (it failed to): nothing was deployed"),
    (["optimize", "zoo:mlp", "--executor", "ray"], "terminated by SIGTERM")], ids=["serve", "optimize"])
def test_sigterm_while_a_local_start_fails_ends_the_command_as_terminated(tmp_path: Path, command: list[str],
                                                                          last_line: str) -> None:
    """A SIGTERM held while the local instance started, which then failed: `dlperf serve --ray` dropped it and ended
    with Ray's error (`error: --ray (a new local Ray instance): cannot start or reach Ray: ...`, exit 2); optimize
    ended as terminated. Both now end as terminated (exit 143)."""
    log = tmp_path / "command.log"
    argv = [*command, "--port", str(free_port())] if command[0] == "serve" else [
        *command, "--store", str(tmp_path / "runs.db"), "--workdir", str(tmp_path / "work")]
    with cli_process(argv, log, env=FAILING) as proc:

        def gcs_started() -> bool:
            try:
                names = {p.name() for p in psutil.Process(proc.pid).children(recursive=True)}
            except psutil.Error:
                names = set()
            return proc.poll() is not None or "gcs_server" in names

        wait_until(gcs_started, 120, "the local instance's GCS")  # ray.init runs: the start fails after it
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    text = log.read_text()
    assert "stopping once Ray has finished starting" in text, text  # held while ray.init ran
    assert code == 128 + signal.SIGTERM, text
    assert text.strip().splitlines()[-1] == last_line and "Traceback" not in text, text
