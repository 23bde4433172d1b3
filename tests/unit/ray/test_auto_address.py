"""`ray:auto` / `--ray-address auto` with no Ray cluster on this machine: Ray's reason asked for an `--address` flag
or RAY_ADDRESS, neither of which is an option of the command the user ran; the error names dlperf's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.unit


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    from ray._private.services import find_gcs_addresses  # how ray.init("auto") finds a cluster: its GCS process

    if find_gcs_addresses():
        pytest.skip("a Ray cluster runs on this machine: 'auto' joins it")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "dlperf.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_optimize_on_ray_auto(tmp_path: Path) -> None:
    done = _run("optimize", "zoo:mlp", "--executor", "ray:auto", "--store", str(tmp_path / "runs.db"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --executor ray:auto: no Ray cluster is running on this machine for 'auto' to join: start one with "
        "`ray start --head`, give another's address as HOST:6379, or use --executor ray for a new local instance"]


def test_serve_on_ray_auto(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = _run("serve", "zoo:mlp", "--ray", "--ray-address", "auto", "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --ray-address auto: no Ray cluster is running on this machine for 'auto' to join: start one with "
        "`ray start --head`, give another's address as HOST:6379, or leave out --ray-address for a new local "
        "instance")


def test_a_misspelt_workload_is_refused_before_ray_starts(tmp_path: Path) -> None:
    """`--executor ray` started a local Ray instance (seconds, and its processes) before the workload was loaded, so
    `zoo:nosuch` was refused only after that; now it is refused first, with no Ray line before the error."""
    done = subprocess.run([sys.executable, "-m", "dlperf.cli.main", "optimize", "zoo:nosuch", "--executor", "ray",
                           "--store", str(tmp_path / "runs.db")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: no zoo workload 'nosuch': choose one of mlp, digits-cnn, resnet18, minilm (`dlperf zoo` lists them)"]


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # free a moment ago: nothing answers there
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("command", ["optimize", "serve"])
def test_auto_with_a_ray_address_nothing_answers_at_is_refused_at_once(tmp_path: Path, command: str) -> None:
    """'auto' joins RAY_ADDRESS first: one nothing answers at went to ray.init, which retried it for minutes with a
    warning every few seconds (and held a Ctrl-C all that time); it is checked as an address given directly is."""
    port = _closed_port()
    args = (["optimize", "zoo:mlp", "--executor", "ray:auto", "--store", str(tmp_path / "runs.db")]
            if command == "optimize" else ["serve", "zoo:mlp", "--ray", "--ray-address", "auto", "--port", "8000"])
    done = subprocess.run([sys.executable, "-m", "dlperf.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"cannot reach Ray at 127.0.0.1:{port} (RAY_ADDRESS, which auto joins): Connection refused; correct " \
           "RAY_ADDRESS or unset it" in last, done.stderr
    assert "Connecting to existing Ray cluster" not in done.stderr
