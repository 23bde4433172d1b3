from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

from dlperf.errors import ConfigError, TrainError
from dlperf.train.loop import (
    PHASES,
    TRAINABLE_ZOO,
    PhaseTimer,
    StepConfig,
    TrainLoop,
    apply_checkpointing,
    base_config,
    batch_length,
    checkpointed_blocks,
    has_conv,
)
from dlperf.workload.base import Workload
from dlperf.workload.loader import load_workload
from dlperf.workload.zoo import ZOO

from ._workloads import BLOCK_WIDTH, CLASSES, FEATURES, _Encoder, blocks, char_lm, conv, nested, tiny

pytestmark = pytest.mark.unit


def _params(loop: TrainLoop) -> list[torch.Tensor]:
    return [p.detach().clone() for p in loop.model.parameters()]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch size"),
        ({"batch_size": 4, "accumulation_steps": 0}, "accumulation"),
        ({"batch_size": 4, "precision": "int4"}, "unknown precision"),
        ({"batch_size": 4, "precision": "fp16"}, "needs a CUDA device"),
        ({"batch_size": 4, "prefetch_factor": 4}, "num_workers > 0"),
        ({"batch_size": 4, "optimizer_impl": "magic"}, "optimizer implementation"),
        ({"batch_size": 4, "device": "tpu"}, "unknown device"),
        ({"batch_size": 4, "device": "cudax"}, "unknown device 'cudax'"),
        ({"batch_size": 4, "device": "cuda:one"}, "unknown device"),
        ({"batch_size": 4, "lr_scale": 0}, "lr_scale"),
        ({"batch_size": 4, "num_workers": -1}, "num_workers must be >= 0, got -1"),
        ({"batch_size": 4, "persistent_workers": True}, "num_workers > 0"),
        ({"batch_size": 4, "num_workers": 1, "prefetch_factor": 0}, "prefetch_factor must be >= 1, got 0"),
        ({"batch_size": 4, "device": "cuda:"}, "unknown device 'cuda:'"),
    ],
)
def test_step_config_rejects_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StepConfig(**kwargs)  # type: ignore[arg-type]


def test_loader_kwargs_and_diff() -> None:
    base = StepConfig(batch_size=8)
    tuned = base.replace(num_workers=2, prefetch_factor=4, persistent_workers=True, accumulation_steps=2)
    assert base.loader_kwargs() == {}
    assert base.replace(pin_memory=True).loader_kwargs() == {"pin_memory": True}
    assert tuned.loader_kwargs() == {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    assert base.diff(tuned) == {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True,
                                "accumulation_steps": 2}
    assert tuned.effective_batch_size == 16
    assert StepConfig.from_dict({**tuned.to_dict(), "unknown": 1}) == tuned


def test_workload_without_training_spec_is_a_train_error() -> None:
    w = Workload(name="x", make_model=lambda: torch.nn.Linear(2, 2), make_inputs=lambda b: (torch.zeros(b, 2),))
    with pytest.raises(TrainError, match="no training spec"):
        base_config(w)


def test_accumulation_gives_the_same_update_as_the_whole_batch() -> None:
    w = tiny()
    whole = TrainLoop(w, StepConfig(batch_size=32, threads=1))
    split = TrainLoop(w, StepConfig(batch_size=8, accumulation_steps=4, threads=1))
    loss_whole = whole.step()
    loss_split = split.step()
    assert float(loss_split) == pytest.approx(float(loss_whole), rel=1e-5)
    for a, b in zip(_params(whole), _params(split), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_lr_scale_scales_the_sgd_update() -> None:
    w = tiny(lr=0.1)
    plain = TrainLoop(w, StepConfig(batch_size=32, threads=1))
    scaled = TrainLoop(w, StepConfig(batch_size=32, threads=1, lr_scale=3.0))
    before = _params(plain)
    plain.step()
    scaled.step()
    for b, p, s in zip(before, _params(plain), _params(scaled), strict=True):
        torch.testing.assert_close(s - b, 3.0 * (p - b), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_optimizer_implementations_match_the_default(impl: str) -> None:
    w = tiny(optimizer="adam", lr=0.01)
    default = TrainLoop(w, StepConfig(batch_size=32, threads=1))
    other = TrainLoop(w, StepConfig(batch_size=32, threads=1, optimizer_impl=impl))
    assert other.optimizer.defaults[impl] is True
    for _ in range(3):
        default.step()
        other.step()
    for a, b in zip(_params(default), _params(other), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_checkpointing_keeps_the_gradients() -> None:
    w = tiny()
    plain = TrainLoop(w, StepConfig(batch_size=32, threads=1))
    checkpointed = TrainLoop(w, StepConfig(batch_size=32, threads=1, checkpointing=True))
    plain.step()
    checkpointed.step()
    for a, b in zip(_params(plain), _params(checkpointed), strict=True):
        torch.testing.assert_close(a, b)


def test_checkpointing_needs_two_children() -> None:
    with pytest.raises(TrainError, match="at least two"):
        apply_checkpointing(torch.nn.Linear(2, 2))


def test_loop_restarts_the_loader_at_the_end_of_an_epoch() -> None:
    loop = TrainLoop(tiny(), StepConfig(batch_size=256, threads=1))  # 512 samples: two steps per epoch
    losses = [float(loop.step()) for _ in range(5)]
    assert loop.steps_done == 5
    assert all(loss > 0 for loss in losses)


def test_phase_timer_sums_each_phase() -> None:
    loop = TrainLoop(tiny(), StepConfig(batch_size=8, accumulation_steps=3, threads=1))
    timer = PhaseTimer("cpu")
    loop.step(timer)
    phases = timer.finish()
    assert set(phases) == set(PHASES)
    assert all(ns > 0 for ns in phases.values())


def _with(w: Workload, **changes: Any) -> Workload:
    assert w.train is not None
    return dataclasses.replace(w, train=dataclasses.replace(w.train, **changes))


def test_a_loader_of_dicts_is_named_not_unpacked_into_its_keys() -> None:
    """`inputs, target = {'x': ..., 'y': ...}` unpacked the keys, and the model failed on the string 'x'."""
    def dict_loader(batch_size: int, **kwargs: object) -> list[dict[str, torch.Tensor]]:
        return [{"x": torch.randn(batch_size, 16), "y": torch.zeros(batch_size, dtype=torch.long)}]

    loop = TrainLoop(_with(tiny(), make_loader=dict_loader), StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError, match=r"its loader must yield \(inputs, target\) pairs, got a dict with keys "
                                         r"\['x', 'y'\]: make make_loader \(or its collate_fn\) return"):
        loop.step()


def test_a_loader_factory_returning_no_iterable_is_named() -> None:
    """It failed at the first step as "a training step raised TypeError: 'int' object is not iterable"."""
    with pytest.raises(TrainError, match=r"^workload 'tiny': its loader factory returned int 5, not an iterable of "
                                         r"\(inputs, target\) batches: return a torch.utils.data.DataLoader$"):
        TrainLoop(_with(tiny(), make_loader=lambda batch_size, **kwargs: 5), StepConfig(batch_size=8, threads=1))


def test_a_loss_that_is_not_a_scalar_says_how_to_reduce_it() -> None:
    loop = TrainLoop(_with(tiny(), loss_fn=lambda out, target: (out - 1) ** 2), StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError, match=r"its loss_fn returned a tensor of shape \[8, 4\], not a scalar tensor: "
                                         r"reduce it \(e.g. `.mean\(\)`\)"):
        loop.step()


def test_a_loss_returned_as_a_float_is_told_to_return_the_tensor() -> None:
    """`.mean()` was the advice for a float, which has no graph left to reduce."""
    loop = TrainLoop(_with(tiny(), loss_fn=lambda out, target: 1.5), StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError, match=r"its loss_fn returned a float, not a scalar tensor: return the loss tensor "
                                         r"itself \(no .item\(\) or float\(\)\)"):
        loop.step()


def test_a_loader_factory_that_takes_no_batch_size_shows_its_def_line() -> None:
    """'loader() takes 0 positional arguments but 1 was given', with no file or line and no word of what dlperf
    passes."""
    def loader() -> Any:
        return []

    with pytest.raises(TrainError) as raised:
        TrainLoop(_with(tiny(), make_loader=loader), StepConfig(batch_size=8, threads=1))
    message = str(raised.value)
    assert "its loader factory cannot be called with 1 positional argument as dlperf calls it" in message
    assert f'File "{__file__}"' in message and "def loader() -> Any:" in message


def test_what_the_users_code_raises_in_a_step_names_the_workload_and_the_line() -> None:
    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise ValueError("labels out of range")

    loop = TrainLoop(_with(tiny(), loss_fn=loss_fn), StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError) as raised:
        loop.step()
    message = str(raised.value)
    assert message.startswith("workload 'tiny': a training step raised ValueError: labels out of range\n")
    assert 'raise ValueError("labels out of range")' in message  # the user's line
    assert isinstance(raised.value.__cause__, ValueError)


def test_a_step_error_names_the_part_of_the_step_that_raised() -> None:
    """loss_fn=F.cross_entropy on float targets printed `a training step raised RuntimeError: expected target dtype
    to be Long or Byte, but got Float` and a line of torch's functional.py: nothing said it was the loss, not the
    model, that refused them."""
    def float_targets(batch_size: int, **kwargs: Any) -> Any:
        return [(torch.randn(batch_size, 16), torch.rand(batch_size))]

    loop = TrainLoop(_with(tiny(), make_loader=float_targets, loss_fn=torch.nn.functional.cross_entropy),
                     StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError) as raised:
        loop.step()
    lines = str(raised.value).split("\n")
    assert lines[0].startswith("workload 'tiny': a training step raised RuntimeError: expected target dtype")
    assert lines[1] == "  raised by its loss_fn(output, target)"

    def wrong_width(batch_size: int, **kwargs: Any) -> Any:
        return [(torch.randn(batch_size, 3), torch.zeros(batch_size, dtype=torch.long))]

    loop = TrainLoop(_with(tiny(), make_loader=wrong_width), StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError, match=r"\n  raised by its model's forward\n  File "):
        loop.step()


def test_a_step_that_raises_on_a_short_last_batch_says_how_short_it_was() -> None:
    """BatchNorm on the last batch of an epoch, 1 sample at batch 4, raised 'Expected more than 1 value per channel
    when training' 449 steps into a run, and nothing said it was that batch."""
    from torch.utils.data import DataLoader, TensorDataset

    def loader(batch_size: int, **kwargs: Any) -> Any:
        x = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=batch_size, **kwargs)

    w = _with(tiny(), make_loader=loader)
    w = dataclasses.replace(w, make_model=lambda: torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8),
                                                                      torch.nn.Linear(8, 4)))
    loop = TrainLoop(w, StepConfig(batch_size=4, threads=1))
    loop.step()  # 4 samples: trains
    with pytest.raises(TrainError) as raised:
        loop.step()
    assert str(raised.value).startswith(
        "workload 'tiny': a training step raised ValueError: Expected more than 1 value per channel when training, "
        "got input size torch.Size([1, 8]) (on a batch of 1 sample, shorter than the batch size 4: the loader's last "
        "of an epoch? if the model cannot train on it, drop_last=True in the DataLoader leaves it out)\n")
    loop = TrainLoop(_with(tiny(), loss_fn=lambda out, target: 1 / 0), StepConfig(batch_size=8, threads=1))
    with pytest.raises(TrainError, match=r"raised ZeroDivisionError: division by zero\n"):  # a full batch: no word
        loop.step()


def test_a_zoo_workload_without_training_spec_names_the_zoo_workloads_that_have_one() -> None:
    with pytest.raises(TrainError, match=r"workload 'resnet18' has no training spec, which training needs: .*"
                                         r"or pick a workload that has one \(in the zoo: zoo:mlp, zoo:digits-cnn\)"):
        base_config(load_workload("zoo:resnet18"))
    for name, module in ZOO.items():  # the names in the message are the zoo's trainable workloads
        source = inspect.getsource(importlib.import_module(f"dlperf.workload.zoo.{module}"))
        assert (f"zoo:{name}" in TRAINABLE_ZOO) == ("train=TrainSpec(" in source), name


def test_a_loader_factory_without_keyword_arguments_says_to_pass_them_on() -> None:
    spec = tiny().train
    assert spec is not None

    def plain_loader(batch_size: int) -> Any:  # no **kwargs: num_workers cannot reach its DataLoader
        return spec.make_loader(batch_size)

    with pytest.raises(TrainError, match=r"its loader factory does not take num_workers \(.*\): give it \*\*kwargs "
                                         r"and pass them on to torch.utils.data.DataLoader"):
        TrainLoop(_with(tiny(), make_loader=plain_loader), StepConfig(batch_size=8, num_workers=2, threads=1))


def _dropping_kwargs() -> Workload:
    """The tiny workload whose make_loader takes **kwargs and drops them."""
    from torch.utils.data import DataLoader, TensorDataset

    def loader(batch_size: int, **dataloader_kwargs: Any) -> Any:
        x = torch.randn(128, 16, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=batch_size, drop_last=True)

    w = tiny()
    assert w.train is not None
    return dataclasses.replace(w, train=dataclasses.replace(w.train, make_loader=loader))


def test_a_loader_that_drops_the_dataloader_arguments_is_named() -> None:
    """`dlperf train W --num-workers 2` printed '(batch 32, fp32, 2 workers)' over a loader with no workers, and the
    tuner timed num_workers=2 against itself (a noisy A/B could accept it, and advise it)."""
    w = _dropping_kwargs()
    with pytest.raises(TrainError) as caught:
        TrainLoop(w, StepConfig(batch_size=32, threads=1, num_workers=2, persistent_workers=True))
    assert str(caught.value) == (
        "workload 'tiny': its make_loader was given num_workers=2, persistent_workers=True, but its DataLoader has "
        "num_workers=0, persistent_workers=False: pass make_loader's keyword arguments on (DataLoader(..., "
        "**dataloader_kwargs)); --num-workers and the loader knobs act through them")
    TrainLoop(w, StepConfig(batch_size=32, threads=1)).close()  # nothing asked, nothing dropped
    loop = TrainLoop(tiny(), StepConfig(batch_size=32, threads=1, num_workers=2, prefetch_factor=4))  # passed on
    loop.close()


def test_a_loader_that_is_no_dataloader_is_refused_the_dataloader_arguments() -> None:
    """A list of batches given num_workers=2 printed '(batch 32, fp32, 2 workers)' and 'its loader workers' memory
    could not be read' over no workers, and the tuner timed num_workers=2 against itself."""
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    y = x[:, :4].argmax(dim=1)

    def batches(batch_size: int, **dataloader_kwargs: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, 64, batch_size)]

    with pytest.raises(TrainError) as caught:
        TrainLoop(_with(tiny(), make_loader=batches), StepConfig(batch_size=32, threads=1, num_workers=2))
    assert str(caught.value) == (
        "workload 'tiny': its make_loader was given num_workers=2, but returned a list, which is not a torch "
        "DataLoader and holds none, so they cannot act on it: return a DataLoader built with make_loader's keyword "
        "arguments (DataLoader(..., **dataloader_kwargs)); --num-workers and the loader knobs act through them")
    TrainLoop(_with(tiny(), make_loader=batches), StepConfig(batch_size=32, threads=1)).close()  # nothing asked

    class Wrapper:  # a loader of the user's own around a DataLoader: checked on the DataLoader it holds
        def __init__(self, loader: Any) -> None:
            self.loader = loader

        def __iter__(self) -> Any:
            return iter(self.loader)

    def wrapped(batch_size: int, **dataloader_kwargs: Any) -> Wrapper:
        return Wrapper(tiny().train.make_loader(batch_size, **dataloader_kwargs))  # type: ignore[union-attr]

    TrainLoop(_with(tiny(), make_loader=wrapped), StepConfig(batch_size=32, threads=1, num_workers=2)).close()
    inner = _dropping_kwargs().train.make_loader  # type: ignore[union-attr]
    with pytest.raises(TrainError, match="but its DataLoader has num_workers=0"):
        TrainLoop(_with(tiny(), make_loader=lambda b, **kw: Wrapper(inner(b, **kw))),
                  StepConfig(batch_size=32, threads=1, num_workers=2))


def test_base_config_takes_the_batch_size_asked_for_else_the_specs() -> None:
    w = tiny(batch_size=32)
    assert base_config(w).batch_size == 32
    assert base_config(w, 8).batch_size == 8


def test_a_step_without_a_thread_setting_runs_on_the_process_threads() -> None:
    seen: list[int] = []

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return torch.nn.functional.cross_entropy(out, target)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        loop = TrainLoop(_with(tiny(), loss_fn=loss_fn), StepConfig(batch_size=8))
        loop.step()
        TrainLoop(_with(tiny(), loss_fn=loss_fn), StepConfig(batch_size=8, threads=1)).step()
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 1]


def test_a_model_built_in_eval_mode_is_trained_in_training_mode() -> None:
    """A factory that returned model.eval() trained without dropout and with frozen BatchNorm statistics."""
    w = tiny()
    evaluated = dataclasses.replace(w, make_model=lambda: w.build_model().eval())
    loop = TrainLoop(evaluated, StepConfig(batch_size=8, threads=1))
    assert all(m.training for m in loop.model.modules())


def test_channels_last_converts_the_model_and_its_four_dimensional_inputs() -> None:
    def first_conv(loop: TrainLoop) -> torch.nn.Conv2d:
        return next(m for m in loop.model.modules() if isinstance(m, torch.nn.Conv2d))

    seen: list[bool] = []
    loop = TrainLoop(conv(), StepConfig(batch_size=8, threads=1, channels_last=True))
    first_conv(loop).register_forward_pre_hook(
        lambda module, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    assert first_conv(loop).weight.is_contiguous(memory_format=torch.channels_last)
    loop.step()
    assert seen == [True]
    plain = TrainLoop(conv(), StepConfig(batch_size=8, threads=1))
    assert not first_conv(plain).weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_bf16_runs_the_forward_under_cpu_autocast_in_bfloat16(precision: str, dtype: torch.dtype) -> None:
    seen: list[torch.dtype] = []

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        seen.append(out.dtype)
        return torch.nn.functional.cross_entropy(out, target)

    TrainLoop(_with(tiny(), loss_fn=loss_fn), StepConfig(batch_size=8, threads=1, precision=precision)).step()
    assert seen == [dtype]


def test_an_eager_step_runs_the_model_not_the_compiled_one() -> None:
    """`eager=True` is the step FLOPs are counted on: the compiled model's generated code hides its matmuls."""
    loop = TrainLoop(tiny(), StepConfig(batch_size=8, threads=1))
    calls: list[str] = []

    def compiled(x: torch.Tensor) -> torch.Tensor:
        calls.append("compiled")
        return loop.model(x)

    loop.forward_model = compiled
    loop.step(eager=True)
    assert calls == []
    loop.step()
    assert calls == ["compiled"]


def test_a_step_leaves_no_gradients_behind() -> None:
    """The next step's backward would add to them (set_to_none also frees their memory between steps)."""
    loop = TrainLoop(tiny(), StepConfig(batch_size=8, accumulation_steps=2, threads=1))
    loop.step()
    assert all(p.grad is None for p in loop.model.parameters())


@pytest.mark.parametrize(("target", "inputs", "expected"), [
    (torch.zeros(5), torch.zeros(5, 3), 5),
    (torch.zeros(3), torch.zeros(7, 3, 2), 3),  # a sequence-first input: the target's first dimension counts
    (torch.tensor(1.0), torch.zeros(6, 2), 6),  # a scalar target has no batch dimension
    (((torch.zeros(4),),), ((torch.zeros(4, 2),),), 4),  # nested tuples of targets
    (None, ([torch.zeros(2, 2)], torch.zeros(9)), 2),
    (None, "text", 8),
])
def test_batch_length_counts_the_first_dimension_of_the_target_then_the_inputs(
        target: Any, inputs: Any, expected: int) -> None:
    assert batch_length(target, inputs, 8) == expected


def test_checkpointing_needs_two_children_holding_parameters() -> None:
    one = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with pytest.raises(TrainError, match=r"at least two blocks to checkpoint .*; Sequential has 1"):
        apply_checkpointing(one)
    model = tiny().build_model()  # Linear, ReLU, Linear
    first, _, last = model.children()
    assert checkpointed_blocks(model) == [first, last]
    assert apply_checkpointing(model) == 2


def test_checkpointing_wraps_each_layer_of_a_stack_of_repeated_blocks() -> None:
    """An nn.TransformerEncoder child was checkpointed whole, recomputing every layer at once in backward, which
    saved no memory; its layers are checkpointed one by one, as users do, and train the same."""
    model = char_lm().build_model()
    layers = list(model.get_submodule("encoder.layers").children())
    assert checkpointed_blocks(model) == [model.get_submodule("embed"), *layers, model.get_submodule("head")]
    assert len(layers) == 2
    first, second, head = blocks().build_model().children()  # Sequential(Linear, ReLU, ...) blocks stay whole
    assert checkpointed_blocks(torch.nn.Sequential(first, second, head)) == [first, second, head]
    losses = {}
    for checkpointed in (False, True):
        loop = TrainLoop(char_lm(), StepConfig(batch_size=8, threads=1, checkpointing=checkpointed))
        try:
            losses[checkpointed] = [float(loop.step()) for _ in range(3)]  # dropout too: its RNG state is replayed
        finally:
            loop.close()
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)


def test_checkpointing_finds_a_stack_of_blocks_nested_below_the_top_level_and_wraps_each() -> None:
    """A stack at model.backbone.encoder.layers was checkpointed whole (as [backbone, head]): the step needed as much
    memory as without checkpointing (9.95 MiB at batch 256 either way), so no larger micro-batch could fit."""
    from dlperf.train.knobs.batch import step_footprint_bytes

    model = nested().build_model()
    layers = list(model.get_submodule("backbone.encoder.layers").children())
    assert len(layers) == 6 and checkpointed_blocks(model) == [*layers, model.get_submodule("head")]
    base = StepConfig(batch_size=256, threads=1)
    plain = step_footprint_bytes(nested(), base)
    assert step_footprint_bytes(nested(), base.replace(checkpointing=True)) < 0.8 * plain  # 7.45 MiB
    # a stack inside each of two repeated stages: the stages' 2 x 3 layers, not the 2 stages
    stages = torch.nn.Sequential(_Encoder(3), _Encoder(3))
    outer = torch.nn.Sequential(torch.nn.Linear(FEATURES, BLOCK_WIDTH), stages)
    inner = [layer for stage in stages.children() for layer in stage.get_submodule("layers").children()]
    assert len(inner) == 6 and checkpointed_blocks(outer) == [outer[0], *inner]
    # the same outputs and gradients as the model unwrapped
    x = torch.randn(8, FEATURES, generator=torch.Generator().manual_seed(1))
    y = torch.arange(8) % CLASSES
    grads, outputs = [], []
    for checkpointed in (False, True):
        net = nested().build_model()
        if checkpointed:
            assert apply_checkpointing(net) == 7
        out = net(x)
        torch.nn.functional.cross_entropy(out, y).backward()
        outputs.append(out.detach())
        grads.append([p.grad for p in net.parameters()])
    assert torch.equal(outputs[0], outputs[1])
    assert all(torch.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(*grads, strict=True))


def test_has_conv_finds_a_2d_convolution_or_transposed_convolution_anywhere() -> None:
    from torch import nn

    assert has_conv(nn.Sequential(nn.Sequential(nn.Conv2d(1, 2, 3)), nn.Flatten()))
    assert has_conv(nn.Sequential(nn.ConvTranspose2d(2, 1, 3)))
    assert not has_conv(nn.Sequential(nn.Conv1d(1, 2, 3), nn.Linear(2, 2)))


def test_an_optimizer_without_the_implementation_asked_for_is_a_train_error() -> None:
    w = tiny()
    assert w.train is not None
    rmsprop = dataclasses.replace(w, train=dataclasses.replace(
        w.train, make_optimizer=lambda params: torch.optim.RMSprop(params, lr=0.01)))
    with pytest.raises(TrainError, match=r"^RMSprop has no fused implementation here: .*'fused'"):
        TrainLoop(rmsprop, StepConfig(batch_size=8, threads=1, optimizer_impl="fused"))


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_the_optimizer_implementation_asked_for_is_the_one_its_step_runs(impl: str) -> None:
    """The rebuilt optimizer kept the param groups of the user's, each with its own foreach=None and fused=None, which
    step() reads rather than the defaults: every foreach and fused trial ran the default implementation."""
    def two_groups(params: Any) -> torch.optim.Optimizer:
        first, *rest = params
        return torch.optim.Adam([{"params": [first], "lr": 0.02}, {"params": rest}], lr=0.01)

    w = tiny()
    assert w.train is not None
    workload = dataclasses.replace(w, train=dataclasses.replace(w.train, make_optimizer=two_groups))
    loop = TrainLoop(workload, StepConfig(batch_size=32, threads=1, optimizer_impl=impl, lr_scale=2.0))
    other = "fused" if impl == "foreach" else "foreach"
    assert [(g[impl], bool(g[other]), g["lr"]) for g in loop.optimizer.param_groups] == [(True, False, 0.04),
                                                                                          (True, False, 0.02)]


@pytest.mark.parametrize("optimizer", [torch.optim.RMSprop, torch.optim.NAdam])
def test_foreach_is_built_for_an_optimizer_without_a_fused_argument(
        optimizer: Callable[..., torch.optim.Optimizer]) -> None:
    """RMSprop, NAdam, RAdam, Adamax, Adadelta, ASGD and Rprop have a foreach implementation but no fused argument:
    dlperf passed fused=False beside foreach=True, and the trial failed with 'RMSprop has no foreach implementation
    here: ... unexpected keyword argument 'fused''."""
    w = tiny()
    assert w.train is not None
    workload = dataclasses.replace(w, train=dataclasses.replace(
        w.train, make_optimizer=lambda params: optimizer(params, lr=0.01)))
    default = TrainLoop(workload, StepConfig(batch_size=32, threads=1))
    foreach = TrainLoop(workload, StepConfig(batch_size=32, threads=1, optimizer_impl="foreach"))
    assert type(foreach.optimizer) is optimizer and foreach.optimizer.param_groups[0]["foreach"] is True
    for _ in range(2):
        default.step()
        foreach.step()
    for a, b in zip(_params(default), _params(foreach), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adamw_is_rebuilt_with_the_implementation_asked_for_and_trains_as_the_default(impl: str) -> None:
    """AdamW records decoupled_weight_decay=True in its defaults but takes no such argument: its rebuild raised
    TypeError, and both optimizer trials of every AdamW workload read 'failed: AdamW has no foreach implementation
    here: ... unexpected keyword argument 'decoupled_weight_decay''."""
    w = tiny()
    assert w.train is not None
    workload = dataclasses.replace(w, train=dataclasses.replace(
        w.train, make_optimizer=lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.5)))
    default = TrainLoop(workload, StepConfig(batch_size=32, threads=1))
    other = TrainLoop(workload, StepConfig(batch_size=32, threads=1, optimizer_impl=impl))
    group = other.optimizer.param_groups[0]
    assert type(other.optimizer) is torch.optim.AdamW
    assert (group[impl], group["decoupled_weight_decay"], group["weight_decay"]) == (True, True, 0.5)
    for _ in range(2):
        default.step()
        other.step()
    for a, b in zip(_params(default), _params(other), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_batch_of_dicts_and_lists_has_every_tensor_moved_and_the_loaders_containers_kept() -> None:
    """A dict of inputs stayed as the loader gave it: on CUDA the model met host tensors, and channels_last (seen
    here on the CPU) left its images as they were."""
    loop = TrainLoop(conv(), StepConfig(batch_size=4, threads=1, channels_last=True))
    images = torch.zeros(2, 3, 8, 8)
    batch = ({"image": images, "extra": [images]}, images[:, 0, 0, 0])
    moved = loop._to_device(batch)
    for t in (moved[0]["image"], moved[0]["extra"][0]):
        assert t.is_contiguous(memory_format=torch.channels_last)
    assert batch[0]["image"] is images  # the loader's own dict is not changed


def test_bench_moves_a_dict_given_as_one_input() -> None:
    from dlperf.measure.bench import to_device

    (moved,) = to_device(({"x": torch.zeros(2), "n": 3},), "meta")
    assert moved["x"].device.type == "meta" and moved["n"] == 3
