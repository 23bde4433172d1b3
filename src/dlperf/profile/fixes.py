"""The fixes dlperf can apply to a step by itself, each a frozen description of how the step changes.

A Fix changes StepOptions (loader keyword arguments, thread count, batch size, channels_last, autocast
precision, torch.compile, the optimizer's foreach or fused implementation); `verify.py` builds the step before
and after and measures both. `setting` names the dlperf option or pass that applies the same change outside a
profile.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dlperf.errors import ConfigError
from dlperf.profile.capture import StepOptions

FIX_IDS = ("loader", "threads", "batch", "compile", "channels_last", "bf16", "optimizer")


@dataclass(frozen=True)
class Fix:
    id: str
    label: str
    setting: str
    """The dlperf setting or pass that applies it, e.g. '--threads 2' or 'pass compile'."""
    loader_kwargs: tuple[tuple[str, Any], ...] = ()
    threads: int | None = None
    batch_factor: int = 1
    """For 'batch': the new batch is this many times the old one; A runs this many old steps per call."""
    channels_last: bool = False
    precision: str | None = None
    compile: bool = False
    optimizer_impl: str | None = None

    def __post_init__(self) -> None:
        if self.id not in FIX_IDS:
            raise ConfigError(f"unknown fix '{self.id}': one of {', '.join(FIX_IDS)}")
        if self.batch_factor < 1:
            raise ConfigError(f"batch_factor must be >= 1, got {self.batch_factor}")

    def apply(self, options: StepOptions, batch_size: int) -> StepOptions:
        """The step options with this fix applied (batch_size is the step's current batch)."""
        new = options
        if self.loader_kwargs:
            new = replace(new, loader_kwargs=tuple({**dict(new.loader_kwargs), **dict(self.loader_kwargs)}.items()))
        if self.threads is not None:
            new = replace(new, threads=self.threads)
        if self.batch_factor > 1:
            new = replace(new, batch_size=batch_size * self.batch_factor)
        if self.channels_last:
            new = replace(new, channels_last=True)
        if self.precision is not None:
            new = replace(new, precision=self.precision)
        if self.compile:
            new = replace(new, compile=True)
        if self.optimizer_impl is not None:
            new = replace(new, optimizer_impl=self.optimizer_impl)
        return new

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "setting": self.setting}


def loader_fix(suggested: dict[str, Any]) -> Fix:
    kwargs = tuple(sorted(suggested.items()))
    text = ", ".join(f"{k}={v}" for k, v in kwargs)
    return Fix("loader", f"DataLoader({text})", f"make_loader(batch_size, {text}); `dlperf train --tune` tunes it",
               loader_kwargs=kwargs)


def threads_fix(threads: int) -> Fix:
    return Fix("threads", f"{threads} intra-op thread{'' if threads == 1 else 's'}",
               f"--threads {threads} (torch.set_num_threads)",
               threads=threads)


def batch_fix(batch_size: int, factor: int = 4) -> Fix:
    return Fix("batch", f"batch {batch_size * factor} instead of {batch_size}",
               f"--batch-size {batch_size * factor}", batch_factor=factor)


def compile_fix() -> Fix:
    return Fix("compile", "torch.compile", "pass compile (dlperf optimize)", compile=True)


def channels_last_fix() -> Fix:
    return Fix("channels_last", "channels_last memory format", "pass channels_last (dlperf optimize)",
               channels_last=True)


def bf16_fix() -> Fix:
    return Fix("bf16", "bf16 autocast", "--precision bf16 / pass precision (dlperf optimize)", precision="bf16")


def optimizer_fix(impl: str) -> Fix:
    """The workload's optimizer rebuilt with `impl` ('fused' or 'foreach') on: one kernel, or one operator per
    step of the update, for all parameters instead of a few operators for each."""
    return Fix("optimizer", f"{impl} optimizer ({impl}=True)",
               f"make_optimizer returning it with {impl}=True; `dlperf train --tune` tunes it", optimizer_impl=impl)
