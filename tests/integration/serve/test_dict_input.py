"""A workload whose model takes a dict: `dlperf serve` crashed with "AttributeError: 'dict' object has no attribute
'shape'" (a traceback) instead of saying that the protocol carries tensors and what to serve instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import ServingError
from dlperf.serve.instances import load_served_model

pytestmark = pytest.mark.integration

WORKLOAD = '''
import torch
from torch import nn

import dlperf


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, batch):
        return self.fc(batch["x"])


workload = dlperf.Workload(name="dictin", make_model=Net, make_inputs=lambda b: ({"x": torch.randn(b, 8)},))
'''


def test_a_dict_input_is_refused_with_what_to_serve(tmp_path: Path) -> None:
    path = tmp_path / "dictin.py"
    path.write_text(WORKLOAD)
    with pytest.raises(ServingError, match=r"input 0 is dict: the inference protocol carries tensors.*wrapper module"):
        load_served_model(str(path), None, "cpu")
