"""channels_last memory layout for convolutional models (NHWC kernels are often faster on CPU and GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from dlperf.passes._torch_call import has_module, torch_call, torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from dlperf.workload.base import Workload

CONV_TYPES = ("Conv2d", "ConvTranspose2d")


@dataclass(frozen=True)
class ChannelsLastConfig(PassConfig):
    name: ClassVar[str] = "channels_last"
    stage: ClassVar[str] = "prepare"
    order: ClassVar[int] = 20

    def before_engine(self) -> str | None:
        return "an engine chooses its own memory layout"


@register(ChannelsLastConfig)
class ChannelsLast:
    def applicable(self, config: ChannelsLastConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        assert state.model is not None
        if not has_module(state.model, CONV_TYPES):
            return "the model has no 2-D convolution; channels_last only changes conv layouts"
        return None

    def apply(self, config: ChannelsLastConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import torch

        assert state.model is not None
        state.model = state.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        call = torch_call(state)
        call.model = state.model
        call.channels_last = True
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[ChannelsLastConfig]:
    if workload.kind not in ("cnn", "generic"):
        return []
    try:
        model = workload.build_model()
    except Exception:
        return []
    return [ChannelsLastConfig()] if has_module(model, CONV_TYPES) else []
