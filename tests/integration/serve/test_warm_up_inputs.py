"""A served workload warms up on its own example inputs: random integers (0-99) made the warm-up of a model with an
embedding of 50 rows fail with "IndexError: index out of range in self", so `dlperf serve` could not start a model
that takes category or token ids below 100."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
    model = load_served_model(str(path), None, "cpu")
    (ids,) = model.example_arrays(3)
    np.testing.assert_array_equal(ids, [0, 1, 2])  # the workload's make_inputs, not random integers
    running = start_in_thread(ServeConfig(model=str(path), port=0, max_batch_size=4))  # warms up batches 1-4
    try:
        c = httpclient.InferenceServerClient(running.url)
        cat = httpclient.InferInput("cat", [2, 1], "INT64")
        cat.set_data_from_numpy(np.array([[3], [49]], dtype=np.int64))
        assert c.infer("rec", [cat]).as_numpy("score").shape == (2, 1)
        c.close()
    finally:
        running.stop()
