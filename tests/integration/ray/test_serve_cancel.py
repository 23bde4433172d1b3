"""`dlperf serve --ray`: a client that goes away while its request is queued in a replica. Ray Serve's proxy
cancels the request in the replica; there it leaves the batcher's queue unrun and counts as CANCELED."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.serve.protocol import Tensor, encode_request
from dlperf.serve.service import ServeConfig

from ..serve.helpers import free_port, server_metrics, wait_until
from .gated_workload import gate_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

httpclient = pytest.importorskip("tritonclient.http")

WORKLOAD = Path(__file__).with_name("gated_workload.py")


@pytest.fixture(scope="module")
def one_replica(ray_cluster: Any) -> Iterator[Any]:
    from dlperf.ray.serve import RayServeOptions, start_on_ray

    # batches of one, no wait: a second request queues behind the one held in the model
    config = ServeConfig(model=f"{WORKLOAD}:workload", port=free_port(), max_batch_size=1, max_queue_delay_s=0.0)
    running = start_on_ray(config, RayServeOptions(replicas=1))
    try:
        yield running
    finally:
        running.stop()


def _stats(running: Any) -> Any:
    """The replica's counters, read through Ray: the proxy lets no more requests (such as /metrics) into a
    replica that holds its `max_ongoing_requests` (here 2)."""
    (stats,) = running.replica_stats()
    return stats


def _held(running: Any, in_flight: int, pending: int) -> bool:
    stats = _stats(running)
    return bool(stats.in_flight == in_flight and stats.pending == pending)


def test_a_client_gone_while_queued_in_a_replica_leaves_the_queue_unrun(one_replica: Any) -> None:
    before = _stats(one_replica)
    token = random.randrange(1, 2**20)  # exact in float32
    gate = gate_path(token)
    gate.touch()
    c = httpclient.InferenceServerClient(one_replica.url)
    try:
        x = np.array([[token, 1.0]], np.float32)
        inp = httpclient.InferInput("x", [1, 2], "FP32")
        inp.set_data_from_numpy(x)
        held = c.async_infer("gated", [inp])
        # (wait_until lets tritonclient's greenlet send it) the first request is in the model, held at the gate
        wait_until(lambda: _held(one_replica, in_flight=1, pending=0), 60, "the first request in the model")
        body, header_length = encode_request([Tensor("x", "FP32", np.array([[token, 2.0]], np.float32))])
        with socket.create_connection(("127.0.0.1", int(one_replica.url.rsplit(":", 1)[1])), 10) as sock:
            sock.sendall((f"POST /v2/models/gated/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: "
                          f"{header_length}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            wait_until(lambda: _held(one_replica, in_flight=2, pending=1), 60, "the second request queued")
        # the proxy sees the client go and cancels the request in the replica, which takes it out of the queue
        wait_until(lambda: _held(one_replica, in_flight=1, pending=0), 60, "the queued request withdrawn")
    finally:
        gate.unlink(missing_ok=True)
    np.testing.assert_array_equal(held.get_result().as_numpy("y"), x * 2)
    c.close()
    after = _stats(one_replica)
    assert after.failed - before.failed == 1  # CANCELED
    assert server_metrics(one_replica).failure_total["CANCELED"] == 1
    assert after.requests - before.requests == 1
    assert after.batches - before.batches == 1  # the abandoned request never reached the model
