"""Optimizer implementations: foreach (multi-tensor) and fused kernels, same optimizer and hyperparameters."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig


class OptimizerImpl:
    name = "optimizer"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return "already fused" if current.optimizer_impl == "fused" else None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"optimizer_impl": impl}, f"{impl}=True") for impl in ("foreach", "fused")
                if impl != current.optimizer_impl]
