"""Activation checkpointing when memory is the limit: recompute activations so a larger micro-batch fits."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.knobs.batch import fit_function, search_largest_batch, split_batch
from dlperf.train.loop import StepConfig


class Checkpointing:
    name = "checkpointing"
    sweep = False

    def __init__(self) -> None:
        self.last_search: object | None = None
        self._largest: tuple[int, int] | None = None  # (largest checkpointed micro-batch, the current one)

    def unchanged_reason(self, current: StepConfig) -> str:
        """Why no candidate: with checkpointing the micro-batch that fits is no larger than the current one."""
        if self._largest is None:
            return "nothing to change here"
        largest, now = self._largest
        return (f"with checkpointing the largest micro-batch that fits is {largest}, no larger than the {now} used "
                "now: recomputing activations would cost time for nothing")

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if current.checkpointing:
            return "already checkpointing"
        if current.accumulation_steps == 1:
            return "memory is not the limit (the whole batch fits without accumulation)"
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        self._largest = None
        probe = current.replace(checkpointing=True)
        fits, budget = fit_function(ctx, probe)
        wanted = current.effective_batch_size
        search = search_largest_batch(fits, wanted, budget, ctx.safety_margin)
        self.last_search = search
        micro, steps = split_batch(wanted, search.largest_fitting)
        if micro <= current.batch_size:
            self._largest = (micro, current.batch_size)
            return []
        return [Candidate({"checkpointing": True, "batch_size": micro, "accumulation_steps": steps},
                          f"checkpointed: {micro} x {steps} accumulation steps fit", search.to_dict())]
