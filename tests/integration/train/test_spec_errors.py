"""A training spec's mistakes are named alike by `dlperf train` and `dlperf profile --train`: profile said "the
step raised RuntimeError: grad can be implicitly created only for scalar outputs" (with a frame inside torch)
where train said the loss was not a scalar, and a step raised "'str' object has no attribute 'step'" in both for
an optimizer factory returning a string."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main

pytestmark = pytest.mark.integration

WORKLOAD = '''import torch
import dlperf

def loader(batch_size, **kw):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch_size, 4, generator=g), torch.randint(0, 2, (batch_size,), generator=g))
            for _ in range(20)]

workload = dlperf.Workload(name="spec", make_model=lambda: torch.nn.Linear(4, 2),
                           make_inputs=lambda b: (torch.randn(b, 4),),
                           train=dlperf.TrainSpec(make_loader=LOADER, loss_fn=LOSS, make_optimizer=OPTIMIZER,
                                                  batch_size=8))
'''
GOOD = {"LOADER": "loader", "LOSS": "torch.nn.functional.cross_entropy",
        "OPTIMIZER": "lambda params: torch.optim.SGD(params, lr=0.1)"}


@pytest.mark.parametrize(("change", "message"), [
    ({"LOSS": "lambda o, y: torch.nn.functional.cross_entropy(o, y, reduction='none')"},
     "its loss_fn returned a tensor of shape [8], not a scalar tensor: reduce it"),
    ({"LOSS": "lambda o, y: torch.nn.functional.cross_entropy(o, y).item()"},
     "its loss_fn returned a float, not a scalar tensor: return the loss tensor itself"),
    ({"LOADER": "lambda b, **kw: [torch.randn(b, 4) for _ in range(4)]"},
     "its loader must yield (inputs, target) pairs, got a Tensor: make make_loader (or its collate_fn) return"),
    ({"OPTIMIZER": "lambda params: 'adam'"},
     "its optimizer factory returned str 'adam', not a torch.optim.Optimizer: return one built on the parameters"),
    # an optimizer over another module's parameters trained nothing, and the run said nothing of it
    ({"OPTIMIZER": "lambda params: torch.optim.SGD(torch.nn.Linear(3, 3).parameters(), lr=0.1)"},
     "its optimizer factory's SGD holds none of the model's 2 trainable parameter tensors (it holds 2 "
     "others), so its step() would train nothing: build it on the parameters make_optimizer is given"),
    ({"LOADER": "lambda b, **kw: 42"},
     "its loader factory returned int 42, not an iterable of (inputs, target) batches"),
    # backward() said "element 0 of tensors does not require grad", with a frame inside torch
    ({"LOSS": "lambda o, y: (o.argmax(1) != y).float().mean()"},
     "its loss_fn returned a tensor that does not require grad (no grad_fn): compute the loss from the model's"),
    # a builtin (no signature to check when the spec is made) said only torch's "mean() received an invalid
    # combination of arguments - got (Tensor, Tensor)"
    ({"LOSS": "torch.mean"},
     "its loss_fn cannot be called as loss_fn(output, target) (TypeError: mean() received an invalid combination of "
     "arguments - got (Tensor, Tensor), but expected one of): dlperf calls loss_fn(output, target): the model's "
     "output and the batch's target, returning a scalar loss tensor"),
])
def test_train_and_profile_name_a_spec_mistake_alike(change: dict[str, str], message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = WORKLOAD
    for key, value in {**GOOD, **change}.items():
        text = text.replace(key, value)
    (tmp_path / "spec.py").write_text(text)
    spec, store = str(tmp_path / "spec.py"), str(tmp_path / "runs.db")
    errors = []
    for argv in (["train", spec, "--steps", "2", "--no-mfu"], ["profile", spec, "--train", "--steps", "1"]):
        assert main([*argv, "--store", store]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, lines
        errors.append(lines[0])
    assert errors[0] == errors[1]
    assert errors[0].startswith("error: workload 'spec': ") and message in errors[0]
