"""BF16 through a real server: a torch model that takes and returns bfloat16 (before BF16 existed, such a model
could not be served at all: its signature had no datatype), tritonclient as the client, and `dlperf load`'s
target built from the workload's own bfloat16 inputs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dlperf.loadgen.target import oip_target
from dlperf.serve.protocol import BF16
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")

WORKLOAD = f"{Path(__file__).with_name('bf16_workload.py')}:workload"


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = start_in_thread(ServeConfig(model=WORKLOAD, port=0, max_batch_size=8, max_queue_delay_s=0.05,
                                          adaptive_wait=False))
    yield running
    running.stop()


def test_metadata_and_config_say_bf16(server: Running) -> None:
    c = httpclient.InferenceServerClient(server.url)
    meta = c.get_model_metadata("bf16")
    assert [(t["name"], t["datatype"]) for t in meta["inputs"]] == [("x", "BF16")]
    assert [(t["name"], t["datatype"]) for t in meta["outputs"]] == [("y", "BF16"), ("total", "FP32")]
    assert c.get_model_config("bf16")["input"][0]["data_type"] == "TYPE_BF16"


def test_concurrent_bf16_requests_get_their_own_answers(server: Running) -> None:
    c = httpclient.InferenceServerClient(server.url, concurrency=6)
    rng = np.random.default_rng(0)
    xs = [(rng.integers(-64, 64, (1 + i % 2, 4)) / 8).astype(BF16) for i in range(6)]  # exact in bfloat16
    pending = []
    for i, x in enumerate(xs):
        inp = httpclient.InferInput("x", list(x.shape), "BF16")
        inp.set_data_from_numpy(x)
        outputs = [httpclient.InferRequestedOutput("y", binary_data=i % 2 == 0),
                   httpclient.InferRequestedOutput("total")]
        pending.append(c.async_infer("bf16", [inp], outputs=outputs))
    for x, request in zip(xs, pending, strict=True):
        result = request.get_result()
        y = result.as_numpy("y")
        assert y.dtype == BF16
        np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32) * 2)
        np.testing.assert_array_equal(result.as_numpy("total"), x.astype(np.float32).sum(axis=1, keepdims=True))
    c.close()


def test_the_load_generator_sends_the_workloads_own_bf16_inputs(server: Running) -> None:
    target = oip_target(server.url, "bf16", inputs=load_workload(WORKLOAD).example_inputs(2))  # sends one: 200
    assert target.items_per_request == 2
