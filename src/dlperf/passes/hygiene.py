"""Inference hygiene: eval mode, no autograd (inference_mode) and the CPU thread count.

The baseline is measured under `torch.no_grad()` in eval mode (what a careful user does), so this pass
shows only what inference_mode and a thread setting add on top of that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from dlperf.errors import ConfigError
from dlperf.measure.env import check_threads, usable_cores
from dlperf.passes._torch_call import torch_call, torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from dlperf.workload.base import Workload


@dataclass(frozen=True)
class HygieneConfig(PassConfig):
    """`threads`: torch intra-op threads for this process (None keeps torch's default)."""

    name: ClassVar[str] = "hygiene"
    stage: ClassVar[str] = "prepare"
    order: ClassVar[int] = 10

    inference_mode: bool = True
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)):
            # an edited recipe's "16" raised TypeError from the comparison below; 2.5 set 2 threads unsaid
            raise ConfigError(f"hygiene: threads must be a whole number >= 1 (or null: torch's default), got "
                              f"{self.threads!r}")
        check_threads(self.threads, "hygiene: threads")

    def before_engine(self) -> str | None:
        # Engines take their thread count from the context (the same as the baseline's), not from torch.
        return "hygiene only changes how torch calls the model"


@register(HygieneConfig)
class Hygiene:
    def applicable(self, config: HygieneConfig, state: ModelState, ctx: PassContext) -> str | None:
        return torch_reason(state)

    def apply(self, config: HygieneConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import torch

        assert state.model is not None
        state.model.eval()
        for p in state.model.parameters():
            p.requires_grad_(False)
        call = torch_call(state)
        call.inference_mode = config.inference_mode
        if config.threads is not None:
            # Process-wide: the candidate runs in its own process, and a loaded artifact sets it again, at most to
            # the CPUs of the machine it is loaded on (the physical cores of a 16-core build machine, set on a 2-CPU
            # one, oversubscribed every call)
            threads = min(config.threads, usable_cores()) if ctx.replay else config.threads
            torch.set_num_threads(threads)
            state.notes.append(f"torch threads set to {threads}"
                               + (f" (the recipe's {config.threads}: more than this machine's CPUs)"
                                  if threads != config.threads else ""))
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[HygieneConfig]:
    import torch

    configs = [HygieneConfig()]
    physical = _physical_cores()
    if ctx.device == "cpu" and physical and physical != torch.get_num_threads():
        configs.append(HygieneConfig(threads=physical))
    return configs


def _physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count()
    except Exception:  # pragma: no cover - psutil is a dependency
        return os.cpu_count()
