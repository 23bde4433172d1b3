"""A served workload warms up on its own example inputs: random integers (0-99) made the warm-up of a model with an
embedding of 50 rows fail with "IndexError: index out of range in self", so `dlperf serve` could not start a model
that takes category or token ids below 100. An artifact warms up on the inputs of the workload it was exported from
(its ONNX export failed the same way: "indices element out of data bounds")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlperf.optimize.artifact import export_state
from dlperf.optimize.evaluate import EvalSettings
from dlperf.optimize.space import Candidate
from dlperf.passes.base import PassContext, apply_pass, initial_state
from dlperf.serve.instances import load_served_model
from dlperf.serve.server import start_in_thread
from dlperf.serve.service import ServeConfig

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")

WORKLOAD = '''
import torch
from torch import nn

import dlperf


class Rec(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 4)

    def forward(self, cat):
        return self.emb(cat).sum(dim=1, keepdim=True)


def make_inputs(batch_size):
    return (torch.arange(batch_size) % 50,)


workload = dlperf.Workload(name="rec", make_model=Rec, make_inputs=make_inputs, input_names=("cat",),
                           output_names=("score",))
'''


def test_a_model_taking_ids_below_100_warms_up_on_its_example_inputs_and_serves(tmp_path: Path) -> None:
    path = tmp_path / "rec.py"
    path.write_text(WORKLOAD)
    _served_and_answers(str(path))


def test_an_artifact_warms_up_on_the_inputs_of_the_workload_it_was_exported_from(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.workload.loader import load_workload

    path = tmp_path / "rec.py"
    path.write_text(WORKLOAD)
    spec = f"{path}:workload"
    config = OrtConfig()
    state = apply_pass(config, initial_state(load_workload(spec)), PassContext(threads=1))
    export_state(state, Candidate((config,)), EvalSettings(source=spec), None, tmp_path / "artifact")
    _served_and_answers(str(tmp_path / "artifact"))
    path.unlink()  # the workload no longer loads: random inputs, as before
    (ids,) = load_served_model(str(tmp_path / "artifact"), None, "cpu").example_arrays(3)
    assert ids.shape == (3,) and ids.dtype == np.int64


def _served_and_answers(spec: str) -> None:
    model = load_served_model(spec, None, "cpu")
    (ids,) = model.example_arrays(3)
    np.testing.assert_array_equal(ids, [0, 1, 2])  # the workload's make_inputs, not random integers
    running = start_in_thread(ServeConfig(model=spec, port=0, max_batch_size=4))  # warms up batches 1-4
    try:
        c = httpclient.InferenceServerClient(running.url)
        cat = httpclient.InferInput("cat", [2, 1], "INT64")
        cat.set_data_from_numpy(np.array([[3], [49]], dtype=np.int64))
        assert c.infer("rec", [cat]).as_numpy("score").shape == (2, 1)
        c.close()
    finally:
        running.stop()
