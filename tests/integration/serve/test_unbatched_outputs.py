"""--max-batch-size 0 (Triton's max_batch_size 0): each request runs alone and gets the model's outputs whole, whatever
their first dimension, e.g. a detector's [boxes, 6] for one image; a real server on 127.0.0.1, over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.errors import ConfigError
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


def test_with_batching_a_model_whose_warm_up_outputs_do_not_follow_the_batch_is_refused_naming_the_option() -> None:
    # it started, and every request failed with 500 "output 'boxes' has shape [0, 6], not a first dimension of 1"
    with pytest.raises(ConfigError) as err:
        _server(8)
    assert "cannot be served with dynamic batching" in str(err.value)
    assert "output 'boxes' has shape [0, 6], not a first dimension of 1" in str(err.value)
    assert "--max-batch-size 0" in str(err.value)


def test_a_scalar_output_is_refused_with_batching_and_served_whole_without() -> None:
    sig = Signature((TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("loss", "FP32", ()),))

    def runner(index: int) -> Any:
        return lambda arrays: [np.asarray(arrays[0].sum(), np.float32)]

    def server(max_batch_size: int) -> Running:
        config = ServeConfig(model="loss", port=0, max_batch_size=max_batch_size)
        return start_in_thread(config, build_state(config, {"loss": ServedModel("loss", sig, runner)}))

    with pytest.raises(ConfigError, match=r"at batch 1, output 'loss' has shape \[\], not a first dimension of 1"):
        server(4)
    running = server(0)
    try:
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                       "data": [1.0] * 8}]}).encode()
        status, reply = post_json(f"http://{running.url}/v2/models/loss/infer", body)
    finally:
        running.stop()
    assert status == 200, reply
    assert reply["outputs"][0]["shape"] == [] and reply["outputs"][0]["data"] == [8.0]


def test_outputs_that_stop_following_the_batch_after_the_warm_up_still_fail_naming_the_option() -> None:
    # the warm-up's own inputs ask for as many boxes as items, so it starts; a request that asks for others fails
    sig = Signature(SIG.inputs, (TensorSpec("boxes", "FP32", (-1, 6)),))

    def runner(index: int) -> Any:
        return lambda arrays: [np.zeros((int(arrays[0][0, 0]), 6), np.float32)]

    def examples(batch: int) -> list[np.ndarray]:
        return [np.full((batch, 4), batch, np.float32)]

    config = ServeConfig(model="detector", port=0, max_batch_size=8)
    running = start_in_thread(config, build_state(config, {
        "detector": ServedModel("detector", sig, runner, examples=examples)}))
    try:
        status, reply = _infer(running, [[3, 0.5, 0, 0], [1, 1, 1, 1]])
    finally:
        running.stop()
    assert status == 500
    assert "not a first dimension of 2 (the batch size)" in reply["error"]
    assert "--max-batch-size 0" in reply["error"]
