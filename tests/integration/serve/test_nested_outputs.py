"""A model whose output nests a dict (or a plain value) in its tuple: `dlperf serve` served the tensors around it and
left it out without a word, and served a model returning `[{"logits": t}]` with no output at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import DlperfWarning, ServingError
from dlperf.serve.instances import load_served_model

pytestmark = pytest.mark.integration

WORKLOAD = '''
import torch
from torch import nn

import dlperf


class Net(nn.Module):
    def __init__(self, nested_only):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.nested_only = nested_only

    def forward(self, x):
        y = self.fc(x)
        return [{"logits": y}] if self.nested_only else (y, {"aux": y * 2}, None)


def nested(only: bool = False) -> dlperf.Workload:
    return dlperf.Workload(name="nested", make_model=lambda: Net(only), make_inputs=lambda b: (torch.randn(b, 8),))
'''


def test_an_output_nested_in_the_tuple_is_named_as_left_out(tmp_path: Path) -> None:
    path = tmp_path / "nested.py"
    path.write_text(WORKLOAD)
    with pytest.warns(DlperfWarning, match=r"workload 'nested': its model's output 1 \(dict\) is not a tensor.*"
                                           r"left out of the served outputs") as caught:
        served = load_served_model(f"{path}:nested", None, "cpu")
    assert len(caught) == 1  # the None at position 2 is nothing to serve, and not named
    assert [spec.name for spec in served.signature.outputs] == ["output__0"]


def test_a_model_whose_every_output_is_nested_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nested.py"
    path.write_text(WORKLOAD)
    with pytest.raises(ServingError, match=r"output 0 \(dict\) is not a tensor.*no output is left to serve"):
        load_served_model(f"{path}:nested?only=true", None, "cpu")


NAMED = '''
import torch
from torch import nn

import dlperf


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.fc(x)
        return y, None, y.sum(-1)


workload = dlperf.Workload(name="named", make_model=Net, make_inputs=lambda b: (torch.randn(b, 8),),
                           output_names=("logits", "aux", "score"))
'''


def test_a_declared_output_name_follows_its_position_past_a_none(tmp_path: Path) -> None:
    """`(logits, None, score)` with output_names (logits, aux, score) served `score`'s tensor as 'aux'."""
    path = tmp_path / "named.py"
    path.write_text(NAMED)
    served = load_served_model(str(path), None, "cpu")
    assert [(spec.name, spec.shape) for spec in served.signature.outputs] == [("logits", (-1, 4)), ("score", (-1,))]
