"""Pointing at the model class (`wl.py:MyNet`) instead of a workload says how to make one of it."""

from __future__ import annotations

import pytest

from dlperf.errors import WorkloadError
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.unit


def test_a_model_class_is_named_as_half_a_workload(tmp_path):
    path = tmp_path / "wl.py"
    path.write_text("import torch\n\nclass MyNet(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{path}:MyNet")
    message = str(info.value)
    assert message.startswith(f"'{path}:MyNet' returned MyNet, not a dlperf.Workload: a model is half a workload")
    assert "make_model=MyNet, make_inputs=lambda b:" in message  # was only "make it return a dlperf.Workload(...)"
