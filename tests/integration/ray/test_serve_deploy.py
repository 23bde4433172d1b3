"""`dlperf serve --ray` while it deploys (replicas the cluster has no CPUs for, a deadline, a signal, and what is
refused before Ray starts) and while it stops (drained before deleted). Each leaves no deployment behind."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import ServingError
from dlperf.serve.service import ServeConfig

from ..serve.helpers import cli_process, free_port, wait_until
from .gated_workload import gate_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GATED = Path(__file__).with_name("gated_workload.py")


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


# `--ray-address local` is Ray's own name for a new local instance: it was taken for a cluster's address (a warning
# for CPUs the instance lacks, then the wait for them until --deploy-timeout-s; no check of the port)
@pytest.mark.parametrize("address", [[], ["--ray-address", "local"]], ids=["default", "local"])
def test_a_local_instance_refuses_replicas_it_has_no_cpus_for(address: list[str]) -> None:
    done = _cli("--threads", "1000", "--port", str(free_port()), "--deploy-timeout-s", "20", *address)
    assert done.returncode == 2, done.stderr
    err = " ".join(done.stderr.split())
    assert "1 replica x 1000 CPUs each (--threads) need 1000 CPUs; the local Ray instance has" in err
    assert "give --threads" in err and "Traceback" not in err


@pytest.mark.parametrize("address", [[], ["--ray-address", "local"]], ids=["default", "local"])
def test_a_port_in_use_is_refused_before_ray_starts(address: list[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = _cli("--port", str(port), *address)
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; pick another --port" in done.stderr
    assert "Started a local Ray instance" not in done.stderr


def _post(url: str, x: list[float]) -> tuple[int, Any]:
    """One JSON inference request: (status, parsed body or text), or (-1, the error) when the connection was
    dropped."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": x}]}).encode()
    request = urllib.request.Request(f"http://{url}/v2/models/gated/infer", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except OSError as exc:
        return -1, repr(exc)
    try:
        return status, json.loads(raw)
    except ValueError:  # Ray's proxy answers in plain text
        return status, raw.decode(errors="replace")


def test_sigterm_drains_the_replicas_before_deleting(ray_cluster: Any, tmp_path: Path) -> None:
    """One replica that admits two requests (batches of one, one queued), four held requests (two wait in Ray's
    proxy), then SIGTERM and a fifth: the two in the replica finish, the rest get dlperf's 503 JSON. Deleting at
    once closed the proxy's two connections unanswered and answered the fifth with Ray's plain-text 404."""
    from dlperf.ray.serve import replica_stats

    url = f"127.0.0.1:{free_port()}"
    token = random.randrange(1, 2**20)
    gate = gate_path(token)
    gate.touch()
    replies: dict[int, tuple[int, Any]] = {}

    def send(i: int, first: float) -> None:
        replies[i] = _post(url, [first, float(i)])

    log = tmp_path / "serve.log"
    with cli_process(["serve", f"{GATED}:workload", "--ray", "--ray-address", ray_cluster.address, "--port",
                      url.rsplit(":", 1)[1], "--max-batch-size", "1", "--max-queue-delay-ms", "0"], log) as proc:
        try:
            wait_until(lambda: "serving on Ray Serve" in log.read_text() or proc.poll() is not None, 300,
                       "the deployment to be ready")
            assert proc.poll() is None, log.read_text()
            held = [threading.Thread(target=send, args=(i, float(token))) for i in range(4)]
            for t in held[:2]:
                t.start()
            wait_until(lambda: [(s.in_flight, s.pending) for s in replica_stats()] == [(2, 1)], 60,
                       "one request in the model and one queued")
            for t in held[2:]:
                t.start()
            time.sleep(1.0)  # the two the replica does not admit wait in the proxy (not observable from here)
            proc.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            late = threading.Thread(target=send, args=(4, 0.0))
            late.start()
        finally:
            gate.unlink(missing_ok=True)
        for t in [*held, late]:
            t.join(timeout=120)
        assert proc.wait(timeout=120) == 0, log.read_text()
    assert sorted(replies) == [0, 1, 2, 3, 4]
    answered = {i: r for i, r in replies.items() if r[0] == 200}
    assert sorted(answered) == [0, 1]  # the two in the replica, in their order
    for i, (_, body) in answered.items():
        assert body["outputs"][0]["data"] == [2.0 * token, 2.0 * i]
    for i in (2, 3, 4):
        status, body = replies[i]
        assert status == 503, replies[i]
        assert body == {"error": "server is shutting down: send the request to another replica"}
    wait_until(_gone, 60, "the deployment to be removed")
