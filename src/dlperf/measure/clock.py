"""Clocks that time one iteration: host `perf_counter_ns`, CUDA events, host time with CUDA synchronized, and a
fake one for tests.

A clock's `start()` returns a token and `stop(token)` returns the elapsed nanoseconds of what ran in
between. The CPU clock reads `time.perf_counter_ns` (monotonic, ~tens of ns resolution). The CUDA clock
records an event before and after on the timed device's current stream and synchronizes on the end event,
so the time is the device time of the enqueued work, not the host time of enqueuing it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, Protocol


class Clock(Protocol):
    name: str

    def start(self) -> Any: ...

    def stop(self, token: Any) -> int: ...


class CpuClock:
    """Wall time on the host, in ns."""

    name = "perf_counter_ns"

    def start(self) -> int:
        return time.perf_counter_ns()

    def stop(self, token: int) -> int:
        return time.perf_counter_ns() - token


def _cuda_torch() -> Any:
    """torch, once it is known to see a CUDA device (the CUDA clocks' common check)."""
    import torch

    if not torch.cuda.is_available():
        from dlperf.errors import MeasurementError

        raise MeasurementError("CUDA timing asked for, but torch.cuda.is_available() is False")
    return torch


class CudaEventClock:
    """Device time between two CUDA events on the current stream, synchronized on the end event."""

    name = "cuda_events"

    def __init__(self, device: Any = None) -> None:
        self._torch = _cuda_torch()
        self._device = device

    def start(self) -> Any:
        torch = self._torch
        torch.cuda.synchronize(self._device)
        stream = torch.cuda.current_stream(self._device)  # the timed device's, not whichever is current
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        return begin, end, stream

    def stop(self, token: Any) -> int:
        begin, end, stream = token
        end.record(stream)
        end.synchronize()
        return int(begin.elapsed_time(end) * 1e6)


class SyncedHostClock:
    """Host wall time with the given CUDA devices synchronized at both ends, so work a call only queued on a
    GPU is counted. For timing on one clock what runs on different devices (a CPU side against a CUDA side in
    an A/B); on one GPU alone, `CudaEventClock` leaves the host out."""

    name = "perf_counter_ns+cuda_sync"

    def __init__(self, devices: Sequence[str]) -> None:
        self._sync = _cuda_torch().cuda.synchronize
        self._devices = tuple(dict.fromkeys(devices))

    def start(self) -> int:
        for d in self._devices:
            self._sync(d)
        return time.perf_counter_ns()

    def stop(self, token: int) -> int:
        for d in self._devices:
            self._sync(d)
        return time.perf_counter_ns() - token


class FakeClock:
    """A deterministic clock for tests: each stop returns the next planned duration (plus seeded noise).

    Also exposes `now_ns()` so a timer's duration bound advances by exactly the planned time.
    """

    name = "fake"

    def __init__(self, durations_ns: list[int] | None = None, base_ns: int = 1_000, noise_ns: int = 0,
                 seed: int = 0) -> None:
        self._planned = list(durations_ns or [])
        self._base = base_ns
        self._noise = noise_ns
        self._rng = random.Random(seed)
        self._now = 0
        self.calls = 0

    def now_ns(self) -> int:
        return self._now

    def start(self) -> int:
        return self._now

    def stop(self, token: int) -> int:
        if self._planned:
            d = self._planned.pop(0)
        else:
            d = self._base + (self._rng.randint(-self._noise, self._noise) if self._noise else 0)
        self._now += d
        self.calls += 1
        return d


def clock_for(device: str) -> Clock:
    """The right clock for a device string ('cpu', 'cuda', 'cuda:1')."""
    if device.startswith("cuda"):
        return CudaEventClock(device)
    return CpuClock()
