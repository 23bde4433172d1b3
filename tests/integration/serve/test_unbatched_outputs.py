"""--max-batch-size 0 (Triton's max_batch_size 0): each request runs alone and gets the model's outputs whole, whatever
their first dimension, e.g. a detector's [boxes, 6] for one image; a real server on 127.0.0.1, over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import post_json

pytestmark = pytest.mark.integration

SIG = Signature((TensorSpec("x", "FP32", (-1, 4)),),
                (TensorSpec("boxes", "FP32", (-1, 6)), TensorSpec("mean", "FP32", (1, 4))))


def _runner(index: int) -> Any:
    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        x = arrays[0]
        boxes = np.full((int(x[0, 0]), 6), x[0, 1], np.float32)  # as many rows as the input asks, not per item
        return [boxes, x.mean(axis=0, keepdims=True)]

    return run


def _server(max_batch_size: int) -> Running:
    config = ServeConfig(model="detector", port=0, max_batch_size=max_batch_size)
    return start_in_thread(config, build_state(config, {"detector": ServedModel("detector", SIG, _runner)}))


@pytest.fixture(scope="module")
def unbatched() -> Iterator[Running]:
    running = _server(0)
    yield running
    running.stop()


def _infer(running: Running, x: list[list[float]]) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"inputs": [{"name": "x", "shape": [len(x), 4], "datatype": "FP32",
                                   "data": [v for row in x for v in row]}]}).encode()
    return post_json(f"http://{running.url}/v2/models/detector/infer", body)


def test_outputs_that_do_not_follow_the_first_dimension_go_whole_without_batching(unbatched: Running) -> None:
    # it answered 500 "output 'boxes' has shape [3, 6], not a first dimension of 2 (the batch size)" to every
    # request whose first dimension differed from the output's, though nothing is batched here
    status, reply = _infer(unbatched, [[3, 0.5, 0, 0], [1, 1, 1, 1]])
    assert status == 200, reply
    outputs = {o["name"]: o for o in reply["outputs"]}
    assert outputs["boxes"]["shape"] == [3, 6] and outputs["boxes"]["data"] == [0.5] * 18
    assert outputs["mean"]["shape"] == [1, 4] and outputs["mean"]["data"] == [2.0, 0.75, 0.5, 0.5]
    status, reply = _infer(unbatched, [[5, 2, 0, 0]])
    assert status == 200 and reply["outputs"][0]["shape"] == [5, 6]


def test_with_batching_such_a_model_fails_naming_the_option_that_serves_it() -> None:
    running = _server(8)
    try:
        status, reply = _infer(running, [[3, 0.5, 0, 0], [1, 1, 1, 1]])
    finally:
        running.stop()
    assert status == 500
    assert "not a first dimension of 2 (the batch size)" in reply["error"]
    assert "--max-batch-size 0" in reply["error"]
