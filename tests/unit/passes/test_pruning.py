"""Pruning: structured pruning really shrinks layers and keeps the interface; magnitude keeps its zeros
through fine-tuning; a pruned + fine-tuned artifact loads back to the same outputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import ConfigError
from dlperf.measure.memory import parameter_bytes
from dlperf.optimize.evaluate import EvalSettings, evaluate_here, fidelity_of
from dlperf.optimize.space import Candidate
from dlperf.passes.base import PassContext, apply_pass, initial_state, why_not
from dlperf.passes.pruning import PruneConfig, prunable_pairs, search_space
from dlperf.passes.qat import QatConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.workload.base import TrainSpec, Workload
from dlperf.workload.zoo import get

from .torch_models import cnn_workload, mlp_workload

pytestmark = pytest.mark.unit

CPU = PassContext()


def _flatten_cnn() -> Workload:
    def make_model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 10))

    def make_inputs(batch: int) -> tuple[Any, ...]:
        return (torch.randn(batch, 1, 8, 8, generator=torch.Generator().manual_seed(batch)),)

    return Workload(name="flat-cnn", make_model=make_model, make_inputs=make_inputs, kind="cnn")


def test_prunable_pairs_follow_sequential_chains() -> None:
    model = _flatten_cnn().build_model()
    pairs = [(p.producer, p.consumer, p.block) for p in prunable_pairs(model)]
    assert pairs == [(0, 3, 1), (3, 7, 16), (7, 9, 1)]


def test_structured_pruning_shrinks_layers_and_keeps_outputs_shape() -> None:
    state = initial_state(_flatten_cnn())
    before = parameter_bytes(state.model)
    x = state.workload.example_inputs(4)
    state = apply_pass(PruneConfig(amount=0.5, finetune_steps=0), state, CPU)
    model = state.model
    assert model[0].out_channels == 4 and model[1].num_features == 4 and model[3].in_channels == 4  # type: ignore[index]
    assert model[3].out_channels == 8 and model[7].in_features == 8 * 16  # type: ignore[index]
    assert model[7].out_features == 16 and model[9].in_features == 16 and model[9].out_features == 10  # type: ignore[index]
    assert parameter_bytes(model) < before / 2
    with torch.no_grad():
        assert state.predict(*x).shape == (4, 10)
    assert any("structured pruning" in n for n in state.notes)


def test_structured_pruning_keeps_each_layers_dtype_and_batch_norm_state() -> None:
    """A double-precision CNN whose batch norm has seen batches: every new layer is float64 like the one it
    replaces (the batch norm too), and the batch norm keeps its kept channels' statistics and its count."""
    wl = _flatten_cnn()
    base = wl.make_model
    model: Any = base().double()
    model.train()
    with torch.no_grad():
        model(torch.randn(16, 1, 8, 8, dtype=torch.float64))  # running statistics and num_batches_tracked move
    model.eval()
    bn_before = model[1]
    wl = dataclasses.replace(wl, make_model=lambda: model,
                             make_inputs=lambda b: (torch.randn(b, 1, 8, 8, dtype=torch.float64),))
    state = apply_pass(PruneConfig(amount=0.5, finetune_steps=0), initial_state(wl), CPU)
    pruned: Any = state.model
    assert {p.dtype for p in pruned.parameters()} == {torch.float64}
    bn = pruned[1]
    assert bn.running_mean.dtype == torch.float64 and bn.num_batches_tracked.item() == 1
    kept = torch.isin(bn_before.running_mean, bn.running_mean)
    assert int(kept.sum()) == 4
    with torch.no_grad():
        assert state.predict(*wl.example_inputs(2)).dtype == torch.float64


def test_structured_pruning_keeps_the_strongest_units() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    first: Any = model[0]
    with torch.no_grad():
        first.weight.copy_(torch.diag(torch.tensor([1.0, 5.0, 0.1, 3.0])))
    wl = Workload(name="t", make_model=lambda: model, make_inputs=lambda b: (torch.randn(b, 4),))
    state = apply_pass(PruneConfig(amount=0.5, finetune_steps=0), initial_state(wl), CPU)
    kept = state.model[0].weight.detach()  # type: ignore[index]
    torch.testing.assert_close(kept, torch.tensor([[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]]))


def test_magnitude_pruning_keeps_zeros_through_finetune() -> None:
    base = get("mlp")
    state = apply_pass(PruneConfig(method="magnitude", amount=0.5, finetune_steps=5), initial_state(base), CPU)
    for m in state.model.modules():  # type: ignore[union-attr]
        if isinstance(m, nn.Linear) and m.weight.numel() > 100:
            zeros = float((m.weight == 0).float().mean())
            assert 0.49 <= zeros <= 0.51
    assert any("fine-tuned 5 steps" in n for n in state.notes)
    assert any("no speedup is expected" in n for n in state.notes)


def test_pruning_applicability_and_validation() -> None:
    class NotSequential(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x)

    wl = Workload(name="ns", make_model=NotSequential, make_inputs=lambda b: (torch.randn(b, 4),))
    assert "no prunable" in (why_not(PruneConfig(), initial_state(wl), CPU) or "")
    assert why_not(PruneConfig(method="magnitude"), initial_state(wl), CPU) is None
    int8_state = apply_pass(DynamicInt8Config(min_features=1), initial_state(mlp_workload()), CPU)
    assert "not on a int8 one" in (why_not(PruneConfig(), int8_state, CPU) or "")
    with pytest.raises(ConfigError):
        PruneConfig(amount=1.0)
    assert [c.amount for c in search_space(cnn_workload(), CPU)] == [0.25, 0.5]
    assert search_space(get("mlp"), CPU)[0].finetune_steps == 100  # zoo:mlp has a training spec


def test_finetune_restores_inference_settings() -> None:
    wl = get("mlp")
    assert isinstance(wl.train, TrainSpec)
    state = initial_state(wl)
    for p in state.model.parameters():  # type: ignore[union-attr]
        p.requires_grad_(False)
    state = apply_pass(PruneConfig(amount=0.25, finetune_steps=3), state, CPU)
    assert not state.model.training  # type: ignore[union-attr]
    assert not any(p.requires_grad for p in state.model.parameters())  # type: ignore[union-attr]


def test_pruned_finetuned_artifact_loads_to_identical_outputs(tmp_path: Path) -> None:
    settings = EvalSettings(source="zoo:mlp", batch_size=2, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    cand = Candidate((PruneConfig(amount=0.5, finetune_steps=10), DynamicInt8Config()))
    row = evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": cand.to_list(),
                         "out_dir": str(tmp_path)}, lambda phase: None)
    assert row["artifact"]["fields"]["files"] == ["weights.pt", "trained.pt"]
    assert row["artifact"]["fields"]["trained_after"] == 0
    loaded = dlperf.load(tmp_path / "artifact")
    x = get("mlp").example_inputs(2)
    # The candidate's outputs were compared with the original's in the row; the reloaded model must give
    # exactly the candidate's outputs, which differ from a replay without the trained weights.
    out = loaded(*x)
    fresh = apply_pass(PruneConfig(amount=0.5, finetune_steps=0), initial_state(get("mlp")), CPU)
    with torch.no_grad():
        untrained = fresh.predict(*x)
    assert out.shape == (2, 10)
    assert not torch.allclose(out, untrained, atol=1e-3)
    with torch.no_grad():
        ref = get("mlp").build_model().eval()(*x)
    # Same inputs as the candidate process used: the reloaded model reproduces the candidate's fidelity.
    assert fidelity_of([out], [ref], 2)["mean_cosine"] == pytest.approx(row["fidelity"]["mean_cosine"], abs=1e-6)


def test_a_failing_loader_factory_in_the_fine_tune_is_named_with_the_users_frame() -> None:
    """The fine-tune called the training factories bare: the pass failed with the loader's own words only."""
    from dlperf.errors import PassError

    def broken_loader(batch_size: int, **kwargs: Any) -> Any:
        raise FileNotFoundError("no such file: /data/train.npz")

    base = _flatten_cnn()
    workload = dataclasses.replace(base, train=TrainSpec(
        make_loader=broken_loader, loss_fn=nn.functional.cross_entropy,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.01)))
    with pytest.raises(PassError, match=r"its loader factory raised FileNotFoundError: no such file: /data/train.npz"
                                        r"\n.*test_pruning.py.*in broken_loader"):
        apply_pass(PruneConfig(amount=0.5, finetune_steps=2), initial_state(workload), CPU)


def test_a_loss_that_returns_a_float_in_the_fine_tune_says_so_as_dlperf_train_does() -> None:
    """The fine-tune called loss.backward() on whatever loss_fn returned: a loss ending in .item() failed pruning and
    QAT with "'float' object has no attribute 'backward'", where `dlperf train` says what to return instead."""
    from dlperf.errors import PassError

    def loader(batch_size: int, **kwargs: Any) -> Any:
        return [(torch.randn(batch_size, 1, 8, 8), torch.randint(0, 10, (batch_size,)))]

    def float_loss(output: Any, target: Any) -> Any:
        return nn.functional.cross_entropy(output, target).item()

    base = _flatten_cnn()
    workload = dataclasses.replace(base, train=TrainSpec(
        make_loader=loader, loss_fn=float_loss, make_optimizer=lambda params: torch.optim.SGD(params, lr=0.01)))
    with pytest.raises(PassError, match=r"workload 'flat-cnn': its loss_fn returned a float, not a scalar tensor"):
        apply_pass(PruneConfig(amount=0.5, finetune_steps=2), initial_state(workload), CPU)


def _raising_loss(output: Any, target: Any) -> Any:
    raise ValueError("labels out of range")  # the user's line the error must name


@pytest.mark.parametrize("config", [PruneConfig(amount=0.5, finetune_steps=2), QatConfig(steps=2)],
                         ids=["pruning", "qat"])
def test_a_loss_that_raises_in_the_fine_tune_is_named_with_the_users_frame(config: Any) -> None:
    """A loss_fn that raised failed pruning and QAT with its own words only ("pruning(...) failed: ValueError: labels
    out of range"), where `dlperf train` names the file and line of the user's code that raised."""
    from dlperf.errors import PassError

    def loader(batch_size: int, **kwargs: Any) -> Any:
        return [(torch.randn(batch_size, 1, 8, 8), torch.randint(0, 10, (batch_size,)))]

    base = _flatten_cnn()
    workload = dataclasses.replace(base, train=TrainSpec(
        make_loader=loader, loss_fn=_raising_loss, make_optimizer=lambda params: torch.optim.SGD(params, lr=0.01)))
    with pytest.raises(PassError, match=r"workload 'flat-cnn': a fine-tuning step raised ValueError: labels out of "
                                        r"range\n.*test_pruning.py\", line \d+, in _raising_loss\n.*raise ValueError"):
        apply_pass(config, initial_state(workload), CPU)
