"""Peak memory during a measured region: host RSS by a sampling thread, CUDA allocator stats, model bytes.

Host peak RSS is sampled by a background thread reading the process RSS (psutil) every `interval_s`
(default 2 ms) during the region, and the peak is max(sampled peak, RSS at start and end). getrusage's
ru_maxrss cannot be reset, so it only bounds the whole process lifetime; the sampler measures the region.
A spike shorter than the interval can be missed; benchmarks/harness_accuracy.py compares the two.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import psutil


class PeakRssSampler:
    """Context manager: `peak_rss_bytes` of this process while the block ran."""

    def __init__(self, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        self.peak_rss_bytes = 0
        self.start_rss_bytes = 0
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            rss = self._rss()
            if rss > self.peak_rss_bytes:
                self.peak_rss_bytes = rss

    def __enter__(self) -> PeakRssSampler:
        self.start_rss_bytes = self.peak_rss_bytes = self._rss()
        self._thread = threading.Thread(target=self._run, name="dlperf-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_rss_bytes = max(self.peak_rss_bytes, self._rss())


@dataclass
class CudaMemory:
    max_allocated_bytes: int
    max_reserved_bytes: int


def cuda_reset_peak(device: Any = None, release_cached: bool = False) -> None:
    """Start the allocator's peaks afresh (they restart at what is allocated and reserved now). `release_cached`
    first returns cached blocks no tensor uses to the driver, so the reserved peak is the region's own, not what
    an earlier, larger region left cached; for a region warmed up before it is timed, as its first allocations
    are the driver's again."""
    import torch

    torch.cuda.synchronize(device)
    if release_cached:
        with torch.cuda.device(device):  # empty_cache acts on the current device
            torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


def cuda_peak(device: Any = None) -> CudaMemory:
    import torch

    torch.cuda.synchronize(device)
    return CudaMemory(
        max_allocated_bytes=int(torch.cuda.max_memory_allocated(device)),
        max_reserved_bytes=int(torch.cuda.max_memory_reserved(device)),
    )


def parameter_bytes(model: Any) -> int:
    """Bytes held by a module's parameters and buffers (0 for a non-module callable)."""
    total = 0
    for getter in ("parameters", "buffers"):
        fn = getattr(model, getter, None)
        if fn is None:
            continue
        for t in fn():
            total += t.numel() * t.element_size()
    return total
