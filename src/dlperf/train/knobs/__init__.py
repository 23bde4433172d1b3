"""Tuning knobs: one module per knob; each proposes changes to a StepConfig that the tuner measures.

A knob only proposes (`changes`) and says when it does not apply (`skip_reason`); the tuner measures every
proposal against the current best configuration and checks loss parity. A `sweep` knob's proposals are
tried in order and the sweep stops at the first one that does not help.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from dlperf.train.loop import StepConfig
from dlperf.workload.base import Workload


@dataclass(frozen=True)
class TuneContext:
    """What knobs may look at: the workload, the device, the machine and the user's constraints."""

    workload: Workload
    device: str = "cpu"
    cpu_count: int = 1
    memory_budget_bytes: int | None = None
    """CPU: the host memory one training step may use (the batch search's limit); CUDA: None = device memory."""
    safety_margin: float = 0.1
    conv_model: bool = False
    bf16_supported: bool = False
    compiler_missing: str | None = None
    """Why torch.compile cannot build code for the device here (passes.compile.compiler_reason), or None."""


@dataclass(frozen=True)
class Candidate:
    """One proposal: the StepConfig fields to change, and why (shown in the trial table)."""

    change: dict[str, Any]
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    required: bool = False
    """The current configuration breaks a constraint (its batch does not fit the memory budget): the change is
    kept when loss parity holds even if it is not faster; its A/B still reports what it costs."""


class Knob(Protocol):
    name: str
    sweep: bool

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        """Why this knob does not apply now, or None. Also asked once the time budget is spent, to tell a knob that
        does not apply from one left untried; a knob whose answer costs a probe (runs steps) sets a class attribute
        `skip_probes = True` and is then listed as not tried."""
        ...

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        """The proposals to try, in order, relative to `current`."""
        ...


def registry() -> dict[str, Knob]:
    """Every knob by name, in the order the tuner tries them.

    Threads come first: on a CPU, oversubscribed intra-op threads (OpenMP spinning against loader workers or
    other processes) can slow every step several-fold and hide what the other knobs do. The DataLoader
    knobs come next: a starved input pipeline is the most common training bottleneck.
    """
    from dlperf.train.knobs import (
        batch,
        channels_last,
        checkpointing,
        compile,
        dataloader,
        optimizer,
        precision,
        threads,
    )

    knobs: list[Knob] = [
        threads.Threads(), dataloader.Workers(), dataloader.Prefetch(), dataloader.Persistent(), dataloader.PinMemory(),
        batch.LargestBatch(), checkpointing.Checkpointing(), precision.MixedPrecision(),
        channels_last.ChannelsLast(), optimizer.OptimizerImpl(), compile.Compile(),
    ]
    return {k.name: k for k in knobs}


DEFAULT_KNOBS = ("threads", "workers", "prefetch", "persistent", "pin_memory", "batch", "checkpointing",
                 "precision", "channels_last", "optimizer", "compile")
