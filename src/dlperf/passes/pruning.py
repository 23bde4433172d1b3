"""Pruning: structured (remove whole hidden units / conv channels, so the model really gets smaller and
faster) or magnitude (zero the smallest weights; dense kernels still multiply the zeros, so expect no
speedup: the search measures real speed, not sparsity). A short fine-tune follows when the workload has
a training spec.

Structured pruning works on chains inside `nn.Sequential` containers: Linear -> (activations, dropout)
-> Linear, Conv2d -> (BatchNorm2d, activations, pooling) -> Conv2d, and Conv2d -> ... -> Flatten -> Linear.
The last layer of a chain (the model's outputs) is never pruned. Units are ranked by the L2 norm of
their weights, so the choice is deterministic given the weights: a saved artifact replays it, then loads
the fine-tuned weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError, DlperfError, WorkloadError
from dlperf.passes._torch_call import torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register
from dlperf.workload.base import _user_frame, call_loss, call_user_factory, error_text, loss_problem

if TYPE_CHECKING:
    from torch import nn

    from dlperf.workload.base import Workload

METHODS = ("structured", "magnitude")
PASS_THROUGH = ("ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "Dropout", "Identity",
                "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "BatchNorm2d", "BatchNorm1d")


@dataclass(frozen=True)
class PruneConfig(PassConfig):
    """amount: fraction of units/channels (structured) or of weights (magnitude) removed per layer."""

    name: ClassVar[str] = "pruning"
    changes_modules: ClassVar[bool] = True  # structured pruning narrows layers
    order: ClassVar[int] = 20
    trains: ClassVar[bool] = True

    method: str = "structured"
    amount: float = 0.25
    finetune_steps: int = 100

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"pruning: method must be one of {', '.join(METHODS)}, got '{self.method}'")
        if not 0 < self.amount < 1:
            raise ConfigError(f"pruning: amount must be in (0, 1), got {self.amount}")
        if self.finetune_steps < 0:
            raise ConfigError(f"pruning: finetune_steps must be >= 0, got {self.finetune_steps}")

    def relative_cost(self) -> int:
        return 2 if self.finetune_steps else 0


@dataclass
class _Pair:
    container: Any
    producer: int
    consumer: int
    between: list[int]
    # Input features of the consumer per producer channel (>1 when a Flatten sits between a conv and a Linear).
    block: int = 1


def prunable_pairs(model: nn.Module) -> list[_Pair]:
    """Producer -> consumer layer pairs inside nn.Sequential containers whose units can be removed."""
    from torch import nn

    pairs = []
    for container in model.modules():
        if not isinstance(container, nn.Sequential):
            continue
        children = list(container)
        producer: Any
        child: Any
        for i, producer in enumerate(children):
            if type(producer) not in (nn.Linear, nn.Conv2d):
                continue
            if isinstance(producer, nn.Conv2d) and producer.groups != 1:
                continue
            between: list[int] = []
            flatten = False
            for j in range(i + 1, len(children)):
                child = children[j]
                name = type(child).__name__
                if name in PASS_THROUGH:
                    between.append(j)
                    continue
                if isinstance(child, nn.Flatten) and isinstance(producer, nn.Conv2d):
                    flatten = True
                    between.append(j)
                    continue
                out_units = producer.out_features if isinstance(producer, nn.Linear) else producer.out_channels
                linear_pair = isinstance(producer, nn.Linear) and type(child) is nn.Linear
                conv_pair = isinstance(producer, nn.Conv2d) and type(child) is nn.Conv2d and child.groups == 1 \
                    and not flatten
                if linear_pair or conv_pair:
                    pairs.append(_Pair(container, i, j, between))
                elif isinstance(producer, nn.Conv2d) and flatten and type(child) is nn.Linear \
                        and child.in_features % out_units == 0:
                    pairs.append(_Pair(container, i, j, between, block=child.in_features // out_units))
                break
    return pairs


def _prune_pair(pair: _Pair, amount: float) -> tuple[int, int]:
    import torch
    from torch import nn

    producer: Any = pair.container[pair.producer]
    consumer: Any = pair.container[pair.consumer]
    weight = producer.weight.detach()
    units = weight.shape[0]
    keep_n = max(1, units - round(units * amount))
    if keep_n == units:
        return units, units
    scores = weight.reshape(units, -1).norm(dim=1)
    keep = torch.sort(torch.topk(scores, keep_n).indices).values
    where = {"device": weight.device, "dtype": weight.dtype}  # the new layers live where the old ones did
    with torch.no_grad():
        if isinstance(producer, nn.Linear):
            new_p: Any = nn.Linear(producer.in_features, keep_n, bias=producer.bias is not None, **where)
        else:
            new_p = nn.Conv2d(producer.in_channels, keep_n, producer.kernel_size, producer.stride,
                              producer.padding, producer.dilation, 1, producer.bias is not None,
                              producer.padding_mode, **where)
        new_p.weight.copy_(producer.weight[keep])
        if producer.bias is not None:
            new_p.bias.copy_(producer.bias[keep])
        for j in pair.between:
            bn: Any = pair.container[j]
            if type(bn).__name__ in ("BatchNorm1d", "BatchNorm2d"):
                bn_dtype = (bn.weight.dtype if bn.affine
                            else bn.running_mean.dtype if bn.track_running_stats else weight.dtype)
                new_bn: Any = type(bn)(keep_n, eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
                                      track_running_stats=bn.track_running_stats, device=weight.device,
                                      dtype=bn_dtype)
                if bn.affine:
                    new_bn.weight.copy_(bn.weight[keep])
                    new_bn.bias.copy_(bn.bias[keep])
                if bn.track_running_stats:
                    new_bn.running_mean.copy_(bn.running_mean[keep])
                    new_bn.running_var.copy_(bn.running_var[keep])
                    new_bn.num_batches_tracked.copy_(bn.num_batches_tracked)
                pair.container[j] = new_bn
        block = torch.arange(pair.block, device=keep.device)
        cols = keep if pair.block == 1 else (keep[:, None] * pair.block + block).reshape(-1)
        if isinstance(consumer, nn.Linear):
            new_c: Any = nn.Linear(len(cols), consumer.out_features, bias=consumer.bias is not None, **where)
        else:
            new_c = nn.Conv2d(keep_n, consumer.out_channels, consumer.kernel_size, consumer.stride,
                              consumer.padding, consumer.dilation, 1, consumer.bias is not None,
                              consumer.padding_mode, **where)
        new_c.weight.copy_(consumer.weight[:, cols])
        if consumer.bias is not None:
            new_c.bias.copy_(consumer.bias)
    pair.container[pair.producer] = new_p
    pair.container[pair.consumer] = new_c
    return units, keep_n


def _magnitude(model: nn.Module, amount: float) -> dict[str, Any]:
    """Zero the smallest |w| per Linear/Conv weight; returns the masks (kept at 1)."""
    import torch
    from torch import nn

    masks = {}
    for name, module in model.named_modules():
        if type(module) in (nn.Linear, nn.Conv2d):
            w = module.weight.detach()
            k = int(w.numel() * amount)
            if k < 1:
                continue
            threshold = w.abs().flatten().kthvalue(k).values
            mask = (w.abs() > threshold).to(w.dtype)
            with torch.no_grad():
                module.weight.mul_(mask)
            masks[name] = mask
    return masks


def _step(model: nn.Module, workload: Workload, batches: Iterator[Any], optimizer: Any, device: Any) -> Any:
    """One optimizer step on the next batch; returns the loss. What the user's code raises (the loader's dataset,
    the model, the loss) names the line in it, as `dlperf train` does: the pass's error gave only its message."""
    import torch

    train = workload.train
    assert train is not None
    try:
        inputs, target = next(batches)
        inputs = tuple(x.to(device) for x in (inputs if isinstance(inputs, (tuple, list)) else (inputs,)))
        target = target.to(device) if isinstance(target, torch.Tensor) else target
        optimizer.zero_grad(set_to_none=True)
        loss = call_loss(workload.name, train.loss_fn, model(*inputs), target)
        problem = loss_problem(loss)
        if problem is not None:  # said as `dlperf train` says it, not "'float' object has no attribute ..."
            raise WorkloadError(f"workload '{workload.name}': {problem}")
        loss.backward()
        optimizer.step()
    except DlperfError:
        raise
    except Exception as exc:
        raise WorkloadError(f"workload '{workload.name}': a fine-tuning step raised {error_text(exc)}\n"
                            f"{_user_frame(exc)}") from exc
    return loss


@dataclass(frozen=True)
class LossCurve:
    """The loss of each step of a fine-tune or a distillation, so its note says whether training lowered it: a
    last loss alone (`last loss 0.0104`) said neither where it started nor whether it fell."""

    losses: tuple[float, ...]

    @property
    def last(self) -> float:
        return self.losses[-1] if self.losses else float("nan")

    def describe(self) -> str:
        """`loss 0.0111 -> 0.0022, mean of the first and last 10 steps`: single steps' losses vary by batch."""
        if not self.losses:
            return "no steps"
        k = max(1, min(10, len(self.losses) // 4))
        first, last = sum(self.losses[:k]) / k, sum(self.losses[-k:]) / k
        return f"loss {first:.4g} -> {last:.4g}, mean of the first and last {k} step{'s' if k != 1 else ''}"


def finetune(model: nn.Module, workload: Workload, steps: int, masks: dict[str, Any] | None = None) -> LossCurve:
    """A few optimizer steps of the workload's own training loop; returns each step's loss."""
    import torch

    train = workload.train
    assert train is not None
    flags = {p: p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(True)
    modules = dict(model.named_modules())
    device = next(model.parameters()).device  # the loader's batches are on the CPU
    optimizer = call_user_factory(workload.name, "its optimizer factory", train.make_optimizer, model.parameters())
    model.train()
    losses: list[float] = []
    try:
        with torch.enable_grad():
            batches = itertools.cycle(call_user_factory(workload.name, "its loader factory", train.make_loader,
                                                        train.batch_size))
            for _ in range(steps):
                loss = _step(model, workload, batches, optimizer, device)
                if masks:
                    with torch.no_grad():
                        for name, mask in masks.items():
                            modules[name].weight.mul_(mask)
                losses.append(float(loss.detach()))
    finally:
        model.eval()
        for p, flag in flags.items():
            p.requires_grad_(flag)
    return LossCurve(tuple(losses))


@register(PruneConfig)
class Prune:
    def applicable(self, config: PruneConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        if state.precision != "fp32":
            return f"pruning runs on the fp32 model, not on a {state.precision} one"
        assert state.model is not None
        if config.method == "structured" and not prunable_pairs(state.model):
            return ("no prunable Linear/Conv2d chain inside an nn.Sequential (structured pruning needs to know "
                    "which layer consumes the removed units)")
        return None

    def apply(self, config: PruneConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import time

        from dlperf.measure.memory import parameter_bytes

        model = state.model
        assert model is not None
        before = parameter_bytes(model)
        frozen = not any(p.requires_grad for p in model.parameters())
        masks = None
        if config.method == "structured":
            removed = []
            # Prune in reverse order so earlier pairs still see their consumers at the recorded index.
            for pair in reversed(prunable_pairs(model)):
                units, kept = _prune_pair(pair, config.amount)
                removed.append(f"{units}->{kept}")
            state.notes.append(f"structured pruning: units {', '.join(reversed(removed))}; weights "
                               f"{before / 2**20:.2f} -> {parameter_bytes(model) / 2**20:.2f} MiB")
        else:
            masks = _magnitude(model, config.amount)
            state.notes.append(f"magnitude pruning: {config.amount:.0%} of each layer's weights zeroed; dense "
                               "kernels still multiply zeros, so no speedup is expected")
        if config.finetune_steps and state.workload.train is not None and not ctx.replay:
            start = time.perf_counter()
            loss = finetune(model, state.workload, config.finetune_steps, masks)
            trained_s = time.perf_counter() - start
            state.build_s += trained_s
            state.train_s += trained_s
            state.notes.append(f"fine-tuned {config.finetune_steps} steps ({loss.describe()})")
        elif state.workload.train is None:
            state.notes.append("no training spec: not fine-tuned")
        if frozen:  # e.g. after hygiene: the new layers must not bring autograd back
            for p in model.parameters():
                p.requires_grad_(False)
        if getattr(state.predict, "model", None) is not None:
            state.predict.model = model  # type: ignore[attr-defined]
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[PruneConfig]:
    if workload.kind not in ("mlp", "cnn", "generic"):
        return []
    try:
        model = workload.build_model()
    except Exception:
        return []
    if not prunable_pairs(model):
        return []
    steps = 100 if workload.train is not None else 0
    return [PruneConfig(amount=0.25, finetune_steps=steps), PruneConfig(amount=0.5, finetune_steps=steps)]
