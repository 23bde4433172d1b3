"""Activation checkpointing when memory is the limit: recompute activations so a larger micro-batch fits."""

from __future__ import annotations

from typing import Any

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.knobs.batch import fit_function, search_largest_batch, smallest_batch, split_batch
from dlperf.train.loop import StepConfig


class Checkpointing:
    name = "checkpointing"
    sweep = False
    skip_probes = True  # skip_reason measures an unsplit step's memory

    def __init__(self) -> None:
        self.last_search: object | None = None
        self._largest: tuple[int, int] | None = None  # (largest checkpointed micro-batch, the current one)
        self._over_budget: str | None = None  # why the current batch, unsplit, does not fit (skip_reason's probe)

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
        self._over_budget = None
        if current.accumulation_steps == 1:
            # the batch knob splits a batch that does not fit; when it could not (not even a batch of 1 fits) or did
            # not run (--knobs checkpointing), the unsplit batch is no proof that memory is not the limit: probe it
            fits, budget = fit_function(ctx, current)
            ok, footprint = fits(current.batch_size)
            if ok:
                return "memory is not the limit (the whole batch fits without accumulation)"
            needs = f" (a step needs {footprint / 2**20:.4g} MiB)" if footprint else ""
            self._over_budget = (f"batch {current.batch_size} does not fit in {budget / 2**20:.4g} MiB{needs} "
                                 "without checkpointing")
        stats = running_stat_modules(ctx.workload.build_model())
        if stats:
            # the recomputation in backward runs their training-mode forward again: num_batches_tracked counted
            # 8 for 4 steps and the running variance moved (0.479 against 0.685), with the losses identical
            return (f"the model has modules with running statistics ({', '.join(stats)}): checkpointing recomputes "
                    "their forward in backward and updates the statistics twice a step, a different model in eval "
                    "mode that loss parity cannot see")
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        self._largest = None
        probe = current.replace(checkpointing=True)
        fits, budget = fit_function(ctx, probe)
        wanted = current.effective_batch_size
        smallest, why = smallest_batch(ctx.workload)
        search = search_largest_batch(fits, wanted, budget, ctx.safety_margin, min(smallest, wanted))
        self.last_search = search
        micro, steps = split_batch(wanted, search.largest_fitting, smallest, why)
        if self._over_budget is not None:  # the current configuration breaks the budget: checkpointing is needed
            if micro < current.batch_size and fit_function(ctx, current)[0](micro)[0]:
                # the same split fits without checkpointing (the batch knob's, which did not run): proposed with
                # checkpointing, it was "required" at 0.57x for a char-level transformer whose 8 x 2 fit plain
                return [Candidate({"batch_size": micro, "accumulation_steps": steps},
                                  f"{self._over_budget}: {micro} x {steps} accumulation steps fit without "
                                  "checkpointing, which would fit no larger micro-batch", search.to_dict(),
                                  required=True)]
            change: dict[str, Any] = {"checkpointing": True}
            if micro != current.batch_size:
                change.update(batch_size=micro, accumulation_steps=steps)
            return [Candidate(change, f"{self._over_budget}: checkpointed, {micro} x {steps} accumulation steps fit",
                              search.to_dict(), required=True)]
        if micro <= current.batch_size:
            self._largest = (micro, current.batch_size)
            return []
        return [Candidate({"checkpointing": True, "batch_size": micro, "accumulation_steps": steps},
                          f"checkpointed: {micro} x {steps} accumulation steps fit", search.to_dict())]


def running_stat_modules(model: Any) -> list[str]:
    """The kinds of module in `model` that update running statistics in a training forward (BatchNorm, an
    InstanceNorm with track_running_stats), sorted."""
    return sorted({type(m).__name__ for m in model.modules()
                   if getattr(m, "track_running_stats", False) and getattr(m, "running_mean", None) is not None})
