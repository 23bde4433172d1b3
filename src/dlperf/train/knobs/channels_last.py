"""channels_last memory format for convolutional models (model and 4-D inputs)."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig


class ChannelsLast:
    name = "channels_last"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if not ctx.conv_model:
            return "the model has no 2-D convolutions"
        return "already channels_last" if current.channels_last else None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"channels_last": True}, "model and inputs in channels_last")]
