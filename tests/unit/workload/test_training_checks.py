"""What a TrainSpec's factories and loss give back, judged before a training step runs (`dlperf train` and
`profile --train` share these checks)."""

from __future__ import annotations

import pytest
import torch

from dlperf.errors import WorkloadError
from dlperf.workload.base import call_loss, call_user_factory, loss_problem, optimizer_problem, split_batch

pytestmark = pytest.mark.unit


def test_an_optimizer_without_zero_grad_is_named_before_the_step() -> None:
    """Its step() ran, and the step then failed at zero_grad() as an AttributeError deep in dlperf."""

    class StepOnly:
        def step(self) -> None:
            pass

    problem = optimizer_problem(StepOnly())
    assert problem is not None and problem.startswith("its optimizer factory returned StepOnly")
    assert optimizer_problem(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)) is None


def test_an_optimizer_holding_none_of_the_models_parameters_is_named_but_one_holding_some_is_not() -> None:
    """An optimizer built on a module-level model's parameters instead of those it was given ran its step() on
    them, and the measured model never trained; fine-tuning only a head (some of them) is the user's choice."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    other = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    problem = optimizer_problem(other, model)
    assert problem is not None and "holds none of the model's 4 trainable parameter tensors (it holds 2" in problem
    assert optimizer_problem(torch.optim.SGD(model[1].parameters(), lr=0.1), model) is None
    assert optimizer_problem(torch.optim.SGD(model.parameters(), lr=0.1), model) is None


def test_a_batch_of_three_is_not_taken_for_an_inputs_target_pair() -> None:
    """(inputs, target, weights) lost its weights without a word: the step trained on the first two."""
    x, y, w = torch.ones(4, 2), torch.ones(4), torch.ones(4)
    assert split_batch((x, y)) == (x, y)
    said = split_batch((x, y, w))
    assert isinstance(said, str) and said.startswith("its loader must yield (inputs, target) pairs, got a tuple of 3")


def test_a_one_element_loss_that_is_not_a_scalar_is_named() -> None:
    """backward() of a loss of shape [1] raised torch's 'grad can be implicitly created only for scalar outputs'."""
    problem = loss_problem(torch.ones(1, requires_grad=True) * 2)
    assert problem is not None and "a tensor of shape [1], not a scalar tensor" in problem
    assert loss_problem(torch.ones((), requires_grad=True) * 2) is None


def test_a_type_error_inside_the_loss_is_the_users_own_not_a_calling_convention() -> None:
    """Only a TypeError of the call itself says how dlperf calls the loss; one raised inside it stays as it was."""

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return output + "oops"  # type: ignore[operator]

    with pytest.raises(TypeError, match="unsupported operand"):
        call_loss("w", loss, torch.ones(2), torch.ones(2))
    with pytest.raises(WorkloadError, match=r"its loss_fn cannot be called as loss_fn\(output, target\)"):
        call_loss("w", lambda output: output, torch.ones(2), torch.ones(2))  # type: ignore[arg-type, misc]


def test_a_factory_failing_inside_with_loader_options_given_says_what_it_raised() -> None:
    """A loader factory that takes **kwargs and fails inside was said 'not to take num_workers': the user looked for
    a signature problem that was not there."""

    def make_loader(batch_size: int, **kwargs: object) -> object:
        raise ValueError("no such dataset")

    with pytest.raises(WorkloadError, match=r"^workload 'w': its loader factory raised ValueError: no such dataset"):
        call_user_factory("w", "its loader factory", make_loader, 8, num_workers=2)

    def narrow(batch_size: int) -> object:
        return []

    with pytest.raises(WorkloadError, match=r"^workload 'w': its loader factory does not take num_workers"):
        call_user_factory("w", "its loader factory", narrow, 8, num_workers=2)
