"""Test-only passes that crash, hang or blow up memory inside the candidate process.

Imported only by tests, through OptimizeConfig(extra_modules=(this file,)), so the real search space
never sees them.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from dlperf.passes.base import ModelState, PassConfig, PassContext, register


@dataclass(frozen=True)
class CrashConfig(PassConfig):
    name: ClassVar[str] = "crash"
    how: str = "segfault"


@dataclass(frozen=True)
class HangConfig(PassConfig):
    name: ClassVar[str] = "hang"
    hold_lock: bool = False  # a multiprocessing lock: a named semaphore the kill leaves behind


@dataclass(frozen=True)
class HogConfig(PassConfig):
    name: ClassVar[str] = "hog"
    gib: float = 2.0


@register(CrashConfig)
class Crash:
    def applicable(self, config: CrashConfig, state: ModelState, ctx: PassContext) -> str | None:
        return None

    def apply(self, config: CrashConfig, state: ModelState, ctx: PassContext) -> ModelState:
        if config.how == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        os._exit(3)


@register(HangConfig)
class Hang:
    def applicable(self, config: HangConfig, state: ModelState, ctx: PassContext) -> str | None:
        return None

    def apply(self, config: HangConfig, state: ModelState, ctx: PassContext) -> ModelState:
        lock = multiprocessing.Lock() if config.hold_lock else None
        time.sleep(3600)
        del lock
        return state


@register(HogConfig)
class Hog:
    def applicable(self, config: HogConfig, state: ModelState, ctx: PassContext) -> str | None:
        return None

    def apply(self, config: HogConfig, state: ModelState, ctx: PassContext) -> ModelState:
        chunks: list[Any] = []
        for _ in range(int(config.gib * 16)):
            chunks.append(bytearray(64 * 2**20))  # touched: counts in RSS
            time.sleep(0.02)
        time.sleep(60)
        return state


def search_space(workload: Any, ctx: PassContext) -> list[PassConfig]:
    return [CrashConfig(), HangConfig(), HogConfig()]
