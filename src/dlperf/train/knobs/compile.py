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
        if not ctx.compiler_available:
            return "no C++ compiler found (torch.compile's CPU backend needs one: install gcc or clang)"
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"compile": True}, "torch.compile(model)")]


def compiler_available(device: str) -> bool:
    import shutil

    return device.startswith("cuda") or any(shutil.which(c) for c in ("g++", "c++", "clang++"))
