"""`dlperf serve --ray` from the command line onto the two-node cluster: replicas on both nodes, requests
spread over them (shown by each replica's own statistics, read through Ray), a clean stop on SIGINT."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.serve.service import ServeConfig

from ..serve.helpers import cli_process, free_port, http_status, wait_until
from .gated_workload import gate_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

httpclient = pytest.importorskip("tritonclient.http")
import gevent  # noqa: E402  (tritonclient's event loop)

WORKLOAD = Path(__file__).with_name("gated_workload.py")
MAX_BATCH = 8


@dataclass
class CliServer:
    proc: subprocess.Popen[bytes]
    log: Path
    url: str


@pytest.fixture(scope="module")
def cli_server(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliServer]:
    port = free_port()
    log = tmp_path_factory.mktemp("cli") / "serve.log"
    with cli_process(["serve", f"{WORKLOAD}:workload", "--ray", "--replicas", "2", "--ray-address",
                      ray_cluster.address, "--port", str(port), "--max-batch-size", str(MAX_BATCH),
                      "--max-queue-delay-ms", "50", "--fixed-wait"], log) as proc:
        # the settings line comes last
        wait_until(lambda: "  batching: " in log.read_text() or proc.poll() is not None, 300,
                   "the deployment to be ready")
        assert proc.poll() is None, f"dlperf serve --ray exited early:\n{log.read_text()}"
        yield CliServer(proc, log, f"127.0.0.1:{port}")


def _input(x: np.ndarray) -> Any:
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_the_cli_deploys_two_replicas_one_on_each_node(cli_server: CliServer) -> None:
    import ray

    from dlperf.ray.serve import replica_stats

    log = cli_server.log.read_text()
    assert f"serving on Ray Serve at http://{cli_server.url}/v2  [2 replica(s) running" in log
    # what a replica serves and with which settings, as dlperf serve says it (the replicas told the driver)
    assert f"  each replica serves model 'gated' at http://{cli_server.url}/v2/models/gated  [variants: " in log
    assert f"  batching: max batch {MAX_BATCH}, queue delay 50 ms (fixed); 1 instance x " in log
    stats = replica_stats()
    assert {s.node_id for s in stats} == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(stats) == 2
    c = httpclient.InferenceServerClient(cli_server.url)
    assert c.is_server_ready() and c.is_model_ready("gated")
    config = c.get_model_config("gated")  # the batching flags reached the replicas
    assert config["max_batch_size"] == MAX_BATCH
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 50_000
    assert config["parameters"]["adaptive_wait"] == {"string_value": "false"}


def test_requests_spread_over_both_replicas_each_batching_its_share(cli_server: CliServer) -> None:
    from dlperf.ray.serve import max_ongoing_requests, replica_stats

    # Ray Serve lets at most `capacity` requests into one replica; hold more than that inside the replicas at
    # once, and the proxy must have sent some to each (whatever its preference for its own node's replica)
    capacity = max_ongoing_requests(ServeConfig(model=str(WORKLOAD), max_batch_size=MAX_BATCH))
    n = capacity + 8
    before = {s.replica: s for s in replica_stats()}
    assert len(before) == 2 and all(s.in_flight == 0 for s in before.values())
    token = random.randrange(1, 2**20)  # exact in float32
    gate = gate_path(token)
    gate.touch()
    c = httpclient.InferenceServerClient(cli_server.url, concurrency=n)
    try:
        xs = [np.stack([np.full(1 + i % 2, token), np.arange(1 + i % 2) + 10 * i], 1).astype(np.float32)
              for i in range(n)]
        pending = [c.async_infer("gated", [_input(x)], request_id=str(i)) for i, x in enumerate(xs)]
        deadline = time.monotonic() + 120
        while sum(s.in_flight for s in replica_stats()) < n:
            assert time.monotonic() < deadline, f"not every request reached a replica: {replica_stats()}"
            gevent.sleep(0.05)  # lets the client's greenlets finish sending
        held = {s.replica: s.in_flight for s in replica_stats()}
    finally:
        gate.unlink(missing_ok=True)
    results = [p.get_result() for p in pending]
    c.close()
    for i, (x, r) in enumerate(zip(xs, results, strict=True)):
        assert r.get_response()["id"] == str(i)
        np.testing.assert_array_equal(r.as_numpy("y"), x * 2)

    assert set(held) == set(before)
    assert max(held.values()) <= capacity and min(held.values()) >= n - capacity > 0
    after = {s.replica: s for s in replica_stats()}
    assert set(after) == set(before)
    for name, count in held.items():
        served = after[name].requests - before[name].requests
        batches = after[name].batches - before[name].batches
        assert served == count and after[name].failed == before[name].failed
        assert 0 < batches < served  # each replica batched its share
    assert sum(after[r].items - before[r].items for r in after) == sum(x.shape[0] for x in xs)


def test_sigint_stops_the_cli_and_removes_the_deployment(cli_server: CliServer) -> None:
    from ray import serve

    from dlperf.ray.serve import APP_NAME, replica_stats

    cli_server.proc.send_signal(signal.SIGINT)
    assert cli_server.proc.wait(timeout=120) == 0, cli_server.log.read_text()
    wait_until(lambda: not replica_stats(), 60, "the replicas to stop")
    assert APP_NAME not in serve.status().applications
    assert http_status(f"http://{cli_server.url}/v2/health/live") == -1  # no app was left, so no proxy either
