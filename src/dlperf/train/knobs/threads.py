"""Intra-op threads on CPU: 1, half and all usable CPUs (loader workers compete for the same cores)."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig


class Threads:
    name = "threads"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if ctx.device.startswith("cuda"):
            return "thread settings are a CPU knob"
        return "only one usable CPU" if ctx.cpu_count < 2 else None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        import torch

        now = current.threads or torch.get_num_threads()
        counts = sorted({1, max(ctx.cpu_count // 2, 1), ctx.cpu_count} - {now})
        return [Candidate({"threads": n}, f"torch.set_num_threads({n})") for n in counts]
