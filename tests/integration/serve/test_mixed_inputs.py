"""A workload with a batched input beside one of a fixed shape (model(x, w) with x [batch, 8] and w [8, 2]): the
server cannot join such requests along a batch dimension, so it serves them unbatched, each request's tensors whole.
A real server on 127.0.0.1, over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from dlperf.serve.instances import load_served_model
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import get_json, post_json

pytestmark = pytest.mark.integration

WORKLOAD = '''
import torch
from torch import nn

import dlperf


class Project(nn.Module):
    def forward(self, x, w):
        return x @ w


workload = dlperf.Workload(name="project", make_model=Project,
                           make_inputs=lambda b: (torch.randn(b, 8), torch.randn(8, 2)))
'''


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    path = tmp_path_factory.mktemp("mixed") / "project.py"
    path.write_text(WORKLOAD)
    model = load_served_model(str(path), None, "cpu")
    config = ServeConfig(model=model.name, port=0, max_batch_size=8)
    running = start_in_thread(config, build_state(config, {model.name: model}))
    yield running
    running.stop()


def test_a_model_with_a_fixed_shape_input_is_served_unbatched_with_each_request_whole(mixed: Running) -> None:
    # with the fixed input taken as batched, w's 8 rows were read as a batch of 8 against x's 3: a 400
    status, config = get_json(f"http://{mixed.url}/v2/models/project/config")
    assert status == 200 and config["max_batch_size"] == 0  # Triton's word for "no batch dimension"
    assert [i["dims"] for i in config["input"]] == [[-1, 8], [8, 2]]
    rng = np.random.default_rng(0)
    for rows in (3, 1):
        x = rng.standard_normal((rows, 8)).astype(np.float32)
        w = rng.standard_normal((8, 2)).astype(np.float32)
        body = json.dumps({"inputs": [
            {"name": "input__0", "shape": [rows, 8], "datatype": "FP32", "data": x.ravel().tolist()},
            {"name": "input__1", "shape": [8, 2], "datatype": "FP32", "data": w.ravel().tolist()},
        ]}).encode()
        status, reply = post_json(f"http://{mixed.url}/v2/models/project/infer", body)
        assert status == 200, reply
        out = reply["outputs"][0]
        assert out["shape"] == [rows, 2]
        np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(rows, 2), x @ w, rtol=1e-5, atol=1e-5)


def test_dlperf_load_sends_such_a_model_one_whole_item_per_request(mixed: Running) -> None:
    """Its first input starts with -1, its second does not: no batch dimension, whatever the first's --shape or the
    workload's inputs give. Read as batched, --shape input__0=3,8 set w's first dimension to the batch (a [3, 2] w,
    refused with 400), and the workload's 3 rows of x were counted as 3 items."""
    from dlperf.loadgen.target import oip_target

    assert oip_target(mixed.url, "project", shapes={"input__0": [3, 8]}).items_per_request == 1
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)]
    assert oip_target(mixed.url, "project", inputs=inputs).items_per_request == 1
