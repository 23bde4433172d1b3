"""Quantization-aware training to dynamic int8: torchao's QAT flow fake-quantizes the Linear layers
(int8 weights per output channel, symmetric; int8 activations per token, asymmetric in training: close to the
`dynamic_int8` pass), the workload's own training loop fine-tunes through the fake quantization, and
the result is converted to `dynamic_int8`'s layers (plain int8 buffers, `torch._int_mm`).

Needs a training spec (labels and a loss). On replay (loading an artifact) the layers are converted
directly and the trained int8 weights are loaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError
from dlperf.passes._torch_call import torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register
from dlperf.passes.pruning import finetune
from dlperf.passes.torch_dynamic_int8 import (
    DynamicInt8,
    DynamicInt8Config,
    eligible_linears,
    int8_note,
    quantize_linears,
)

if TYPE_CHECKING:
    from dlperf.workload.base import Workload


@dataclass(frozen=True)
class QatConfig(PassConfig):
    name: ClassVar[str] = "qat"
    order: ClassVar[int] = 30
    trains: ClassVar[bool] = True
    sets_precision: ClassVar[bool] = True

    steps: int = 100
    min_features: int = 16

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"qat: steps must be >= 1, got {self.steps}")

    def relative_cost(self) -> int:
        return 2

    def before_engine(self) -> str | None:
        return "it ends in torch-only int8 layers; the engine passes have their own int8"


def torchao_reason() -> str | None:
    import importlib.util

    # find_spec, not import: importing torchao takes seconds, and the search space is built in the parent.
    if importlib.util.find_spec("torchao") is None:
        return "torchao is not installed: install dlperf[quant]"
    return None


@register(QatConfig)
class Qat:
    def applicable(self, config: QatConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        if ctx.device != "cpu":
            return "QAT here targets dynamic_int8 (torch._int_mm), a CPU path"
        if state.precision != "fp32":
            return f"the model is already {state.precision}"
        if state.workload.train is None and not ctx.replay:
            return "no training spec: QAT needs labelled batches and a loss"
        # the Linears it would train for are those dynamic_int8 replaces: none, and it has nothing to do
        linears_only = DynamicInt8Config(min_features=config.min_features, recurrent=False)
        reason = DynamicInt8().applicable(linears_only, state, ctx)
        if reason:
            return reason
        return None if ctx.replay else torchao_reason()

    def apply(self, config: QatConfig, state: ModelState, ctx: PassContext) -> ModelState:
        model = state.model
        assert model is not None
        int8 = DynamicInt8Config(min_features=config.min_features, recurrent=False)  # QAT trains Linears only
        if not ctx.replay:
            import torch
            from torch import nn
            from torchao.quantization import quantize_
            from torchao.quantization.qat import IntxFakeQuantizeConfig, QATConfig
            from torchao.quantization.qat.linear import FakeQuantizedLinear

            # torchao fake-quantizes per-token activations only asymmetrically; the int8 kernel is symmetric.
            activation = IntxFakeQuantizeConfig(torch.int8, "per_token", is_symmetric=False)
            weight = IntxFakeQuantizeConfig(torch.int8, "per_channel", is_symmetric=True)

            # the Linears dynamic_int8 replaces after the fine-tuning, and only those (those inside torch's
            # transformer layers were fake-quantized, then left in fp32)
            chosen = {id(getattr(parent, child)) for parent, child, _ in eligible_linears(model, int8)}

            def eligible(module: Any, fqn: str) -> bool:
                return type(module) is nn.Linear and id(module) in chosen

            quantize_(model, QATConfig(activation_config=activation, weight_config=weight, step="prepare"),
                      filter_fn=eligible)
            start = time.perf_counter()
            loss = finetune(model, state.workload, config.steps)
            trained_s = time.perf_counter() - start
            state.build_s += trained_s
            state.train_s += trained_s
            state.notes.append(f"QAT: {config.steps} steps through fake int8 ({loss.describe()})")
            for module in list(model.modules()):
                for child_name, child in list(module.named_children()):
                    if isinstance(child, FakeQuantizedLinear):
                        setattr(module, child_name, child.to_linear())
        replaced = quantize_linears(model, int8)
        state.precision = "int8"
        state.notes.append(int8_note(model, int8, replaced))
        if getattr(state.predict, "model", None) is not None:
            state.predict.model = model  # type: ignore[attr-defined]
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[QatConfig]:
    if ctx.device != "cpu" or workload.train is None or torchao_reason() is not None:
        return []
    return [QatConfig()]
