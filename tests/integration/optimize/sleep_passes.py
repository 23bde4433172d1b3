"""Test-only passes for the sleeping workload (tests/integration/compare/sleepy_workload.py): `shorten` halves
its sleep, `tidy` changes nothing. So `shorten` and `tidy + shorten` are equally fast, 2x the original, and
the time is sleep, stable on a loaded machine. Imported through OptimizeConfig(extra_modules=(this file,))."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dlperf.passes.base import ModelState, PassConfig, PassContext, register


@dataclass(frozen=True)
class ShortenConfig(PassConfig):
    name: ClassVar[str] = "shorten"
    factor: float = 0.5


@dataclass(frozen=True)
class TidyConfig(PassConfig):
    name: ClassVar[str] = "tidy"
    stage: ClassVar[str] = "prepare"


@register(ShortenConfig)
class Shorten:
    def applicable(self, config: ShortenConfig, state: ModelState, ctx: PassContext) -> str | None:
        return None if hasattr(state.model, "sleep_s") else "the model does not sleep"

    def apply(self, config: ShortenConfig, state: ModelState, ctx: PassContext) -> ModelState:
        model: Any = state.model
        model.sleep_s *= config.factor
        return state


@register(TidyConfig)
class Tidy:
    def applicable(self, config: TidyConfig, state: ModelState, ctx: PassContext) -> str | None:
        return None

    def apply(self, config: TidyConfig, state: ModelState, ctx: PassContext) -> ModelState:
        return state


def search_space(workload: Any, ctx: PassContext) -> list[PassConfig]:
    return [ShortenConfig(), TidyConfig()]
