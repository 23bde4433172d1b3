"""`dlperf serve --ray` while it deploys: replicas the cluster has no CPUs for, a deadline, a signal, and what is
refused before Ray starts. Each leaves no deployment behind."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import ServingError
from dlperf.serve.service import ServeConfig

from ..serve.helpers import cli_process, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _gone() -> bool:
    from ray import serve

    from dlperf.ray.serve import APP_NAME, replica_stats

    return APP_NAME not in serve.status().applications and not replica_stats()


def test_replicas_the_cluster_cannot_place_are_removed_at_the_deadline(ray_cluster: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.ray import serve as ray_serve
    from dlperf.ray.serve import RayServeOptions, start_on_ray

    monkeypatch.setattr(ray_serve, "REPORT_EVERY_S", 5.0)
    heard: list[str] = []
    config = ServeConfig(model="zoo:mlp", port=free_port())
    start = time.monotonic()
    # the cluster has two CPUs and a replica asks for one
    with pytest.raises(ServingError) as caught:
        start_on_ray(config, RayServeOptions(replicas=3, deploy_timeout_s=15), on_wait=heard.append)
    assert time.monotonic() - start < 60
    message = " ".join(str(caught.value).split())
    assert "the deployment was not running after 15 s (" in message and "of 3 replicas running" in message
    assert "so it was removed" in message and "--deploy-timeout-s" in message
    assert any("need 3 CPUs; the Ray cluster has 2 now" in h for h in heard), heard
    assert any(h.startswith("still deploying after ") and "of 3 replicas running" in h for h in heard), heard
    wait_until(_gone, 60, "the deployment to be removed")


def test_sigterm_while_deploying_removes_the_deployment_and_exits_143(ray_cluster: Any, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with cli_process(["serve", "zoo:mlp", "--ray", "--replicas", "3", "--ray-address", ray_cluster.address,
                      "--port", str(free_port())], log) as proc:
        # said once it joined Ray (and took SIGTERM back from ray.init); the third replica then waits forever
        wait_until(lambda: "the Ray cluster has 2 now" in log.read_text() or proc.poll() is not None, 120,
                   "the CPU warning")
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM, log.read_text()
    assert "interrupted by SIGTERM while deploying on Ray Serve: the deployment was removed" in log.read_text()
    assert "Traceback" not in log.read_text()
    wait_until(_gone, 60, "the deployment to be removed")


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dlperf.cli.main", "serve", "zoo:mlp", "--ray", *argv],
                          capture_output=True, text=True, timeout=180)


def test_a_local_instance_refuses_replicas_it_has_no_cpus_for() -> None:
    done = _cli("--threads", "1000", "--port", str(free_port()))
    assert done.returncode == 2, done.stderr
    err = " ".join(done.stderr.split())
    assert "1 replica x 1000 CPUs each (--threads) need 1000 CPUs; the local Ray instance has" in err
    assert "give --threads" in err and "Traceback" not in err


def test_a_port_in_use_is_refused_before_ray_starts() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = _cli("--port", str(port))
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; pick another --port" in done.stderr
    assert "Started a local Ray instance" not in done.stderr
