"""torch.compile of the model (its compile time is paid in the warm-up, and reported by the trial)."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig


class Compile:
    name = "compile"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if current.compile:
            return "already compiled"
        return ctx.compiler_missing

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"compile": True}, "torch.compile(model)")]
