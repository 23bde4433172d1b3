"""`dlperf load`'s server-side columns (queue, compute, batch) come from the model's statistics, which count every
client's requests: beside other traffic (a flood beside a --priority probe, as docs/serve.md suggests) they are
not the load's own. A real server on 127.0.0.1 whose model takes 20 ms a batch."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.loadgen.generator import LoadConfig, run_level
from dlperf.loadgen.target import oip_target
from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

pytestmark = pytest.mark.integration

SIG = Signature((TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1, 4)),))


def _runner(index: int) -> Any:
    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.02)
        return [arrays[0] * 2]

    return run


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    config = ServeConfig(model="slow", port=0, max_batch_size=16)
    running = start_in_thread(config, build_state(config, {"slow": ServedModel("slow", SIG, _runner)}))
    yield running
    running.stop()


def _flood(url: str, stop: threading.Event) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()
    while not stop.is_set():
        request = urllib.request.Request(f"http://{url}/v2/models/slow/infer", body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()


def test_a_load_beside_other_traffic_does_not_report_the_other_traffic_s_server_times(server: Running) -> None:
    config = LoadConfig(concurrency=(1,), duration_s=3.0, window_s=0.5, warmup_s=0.3)
    target = oip_target(server.url, "slow")
    alone = run_level(target, config, 1.0)
    assert alone.server is not None and not any("other clients" in w for w in alone.warnings)

    stop = threading.Event()
    flood = [threading.Thread(target=_flood, args=(server.url, stop), daemon=True) for _ in range(8)]
    for t in flood:
        t.start()
    try:
        time.sleep(0.3)
        probe = run_level(target, config, 1.0)
    finally:
        stop.set()
        for t in flood:
            t.join(30)
    # it showed the model's means over every client as the probe's own (a probe at priority 1 beside a flood: a
    # 141 ms mean queue time against its own p99 of 102 ms)
    assert probe.server is None
    shared = [w for w in probe.warnings if "other clients share the model" in w]
    assert len(shared) == 1 and "this load" in shared[0]
