"""Knowledge distillation into a smaller student: narrower (fewer units/channels, derived by structured
pruning of the teacher), shallower (every other block of the largest stack of identical blocks, e.g. a
transformer's layers), or one the user names ('file.py:function' returning an nn.Module).

The student learns to reproduce the teacher's outputs (mean squared error on every floating output), so
only inputs are needed: the training spec's batches, else the eval spec's calibration batches. The
student's structure is derived deterministically from the teacher's weights, so a saved artifact
rebuilds it and loads the distilled weights.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError, PassError
from dlperf.passes._torch_call import torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register
from dlperf.passes.pruning import LossCurve, _prune_pair, prunable_pairs
from dlperf.workload.base import call_user_factory

if TYPE_CHECKING:
    from torch import nn

    from dlperf.workload.base import Workload

STUDENTS = ("narrow", "shallow")


@dataclass(frozen=True)
class DistillConfig(PassConfig):
    """student: 'narrow' | 'shallow' | 'file.py:function'; ratio: share of units (narrow) or blocks
    (shallow) removed; steps: optimizer steps of distillation."""

    name: ClassVar[str] = "distill"
    changes_modules: ClassVar[bool] = True  # a student of its own layers
    order: ClassVar[int] = 10
    trains: ClassVar[bool] = True

    student: str = "narrow"
    ratio: float = 0.5
    steps: int = 200
    lr: float = 1e-3

    def __post_init__(self) -> None:
        if self.student not in STUDENTS and ":" not in self.student:
            raise ConfigError(f"distill: student must be narrow, shallow or file.py:function, got '{self.student}'")
        if not 0 < self.ratio < 1:
            raise ConfigError(f"distill: ratio must be in (0, 1), got {self.ratio}")
        if self.steps < 0 or self.lr <= 0:
            raise ConfigError("distill: steps must be >= 0 and lr > 0")

    def relative_cost(self) -> int:
        return 2 if self.steps else 0


def block_stack(model: nn.Module) -> tuple[str, Any] | None:
    """The longest nn.ModuleList of >= 2 children of one type (a transformer's layers), with its name."""
    from torch import nn

    best: tuple[str, Any] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) >= 2 and len({type(m) for m in module}) == 1 \
                and (best is None or len(module) > len(best[1])):
            best = (name, module)
    return best


def make_student(teacher: nn.Module, config: DistillConfig) -> nn.Module:
    from torch import nn

    if config.student == "narrow":
        student = copy.deepcopy(teacher)
        pairs = prunable_pairs(student)
        if not pairs:
            raise PassError("distill: no Linear/Conv2d chain inside an nn.Sequential to narrow")
        for pair in reversed(pairs):
            _prune_pair(pair, config.ratio)
        return student
    if config.student == "shallow":
        student = copy.deepcopy(teacher)
        found = block_stack(student)
        if found is None:
            raise PassError("distill: no stack of identical blocks (nn.ModuleList) to make shallower")
        name, stack = found
        n = len(stack)
        keep_n = max(1, n - round(n * config.ratio))
        keep = sorted({round(i * (n - 1) / max(keep_n - 1, 1)) for i in range(keep_n)}) if keep_n > 1 else [0]
        parent_name, _, attr = name.rpartition(".")
        parent = student.get_submodule(parent_name) if parent_name else student
        setattr(parent, attr, nn.ModuleList([stack[i] for i in keep]))
        return student
    from dlperf.workload.loader import _import_file

    path, _, fn_name = config.student.rpartition(":")
    from pathlib import Path

    module = _import_file(Path(path))
    factory = getattr(module, fn_name, None)
    if factory is None:
        raise PassError(f"distill: '{path}' defines no '{fn_name}'")
    student = factory()
    if not isinstance(student, nn.Module):
        raise PassError(f"distill: {config.student} returned {type(student).__name__}, not an nn.Module")
    return student


def input_batches(workload: Workload) -> Iterator[tuple[Any, ...]] | None:
    """Endless batches of inputs: the training spec's (inputs only), else the eval spec's calibration data."""
    if workload.train is not None:
        train = workload.train

        def from_train() -> Iterator[tuple[Any, ...]]:
            while True:
                for inputs, _ in call_user_factory(workload.name, "its loader factory", train.make_loader,
                                                   train.batch_size):
                    yield tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)

        return from_train()
    if workload.eval is not None and workload.eval.calibration_inputs is not None:
        make = workload.eval.calibration_inputs
        batches = list(make())
        if batches:
            return itertools.cycle([b if isinstance(b, tuple) else (b,) for b in batches])
    return None


def _floats(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for k in value for t in _floats(value[k])]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _floats(v)]
    return []


def distill(teacher: nn.Module, student: nn.Module, batches: Iterator[tuple[Any, ...]], steps: int,
            lr: float) -> LossCurve:
    import torch

    for p in student.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(student.parameters(), lr=lr)
    student.train()
    teacher.eval()
    device = next(student.parameters()).device  # the batches come from CPU loaders
    losses: list[float] = []
    try:
        for _ in range(steps):
            inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in next(batches))
            with torch.no_grad():
                targets = _floats(teacher(*inputs))
            with torch.enable_grad():
                outputs = _floats(student(*inputs))
                loss = sum(torch.nn.functional.mse_loss(o, t) for o, t in zip(outputs, targets, strict=True))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[union-attr]
                optimizer.step()
            losses.append(float(loss.detach()))  # type: ignore[union-attr]
    finally:
        student.eval()
    return LossCurve(tuple(losses))


@register(DistillConfig)
class Distill:
    def applicable(self, config: DistillConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        if state.precision != "fp32":
            return f"distillation trains an fp32 student, not a {state.precision} one"
        if input_batches(state.workload) is None and not ctx.replay:
            return "no training data: the workload has neither a training spec nor calibration inputs"
        assert state.model is not None
        if config.student == "narrow" and not prunable_pairs(state.model):
            return "no Linear/Conv2d chain inside an nn.Sequential to derive a narrower student from"
        if config.student == "shallow" and block_stack(state.model) is None:
            return "no stack of identical blocks to derive a shallower student from"
        return None

    def apply(self, config: DistillConfig, state: ModelState, ctx: PassContext) -> ModelState:
        from dlperf.measure.memory import parameter_bytes

        teacher = state.model
        assert teacher is not None
        frozen = not any(p.requires_grad for p in teacher.parameters())
        student = make_student(teacher, config).to(ctx.device)
        if not ctx.replay and config.steps:
            batches = input_batches(state.workload)
            assert batches is not None
            start = time.perf_counter()
            loss = distill(teacher, student, batches, config.steps, config.lr)
            trained_s = time.perf_counter() - start
            state.build_s += trained_s
            state.train_s += trained_s
            state.notes.append(f"distilled {config.steps} steps into a {config.student} student "
                               f"({loss.describe()})")
        if frozen:
            for p in student.parameters():
                p.requires_grad_(False)
        state.notes.append(f"student weights {parameter_bytes(student) / 2**20:.2f} MiB vs teacher "
                           f"{parameter_bytes(teacher) / 2**20:.2f} MiB")
        state.model = student
        if getattr(state.predict, "model", None) is not None:
            state.predict.model = student  # type: ignore[attr-defined]
        else:
            state.predict = student
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[DistillConfig]:
    if workload.kind not in ("mlp", "cnn", "generic") or input_batches(workload) is None:
        # Distilling a transformer takes longer than a default search: run it on purpose.
        return []
    try:
        model = workload.build_model()
    except Exception:
        return []
    return [DistillConfig(student="narrow", ratio=0.5)] if prunable_pairs(model) else []
