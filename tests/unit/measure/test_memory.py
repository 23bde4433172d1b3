"""CUDA peak resets, on a stand-in for torch.cuda (no GPU here): what is called, in which order."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from dlperf.measure.memory import cuda_reset_peak

pytestmark = pytest.mark.unit


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []

    @contextlib.contextmanager
    def device(d: object) -> Iterator[None]:
        made.append(f"device {d}")
        yield

    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: made.append(f"synchronize {d}"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: made.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: made.append(f"reset {d}"))
    monkeypatch.setattr(torch.cuda, "device", device)
    return made


def test_release_cached_empties_the_cache_of_that_device_before_the_peaks_restart(calls: list[str]) -> None:
    # the reserved peak restarts at what is reserved now: cached blocks a larger batch left counted for the next
    cuda_reset_peak("cuda:1", release_cached=True)
    assert calls == ["synchronize cuda:1", "device cuda:1", "empty_cache", "reset cuda:1"]


def test_by_default_the_cache_is_kept(calls: list[str]) -> None:
    # profile resets right before the steps it profiles: emptying would put cudaMalloc calls into them
    cuda_reset_peak("cuda")
    assert calls == ["synchronize cuda", "reset cuda"]


MIB = 2**20


def _spike(mib: int) -> None:
    """Touch `mib` MiB of fresh pages and unmap them again (a temporary, as a forward's intermediate). Mapped
    directly: a tensor of that size can reuse pages the allocator kept from earlier tests (in the full suite a 32
    MiB one moved the process's RSS by 0), so it would test the allocator, not the peak."""
    import mmap

    region = mmap.mmap(-1, mib * MIB)
    for offset in range(0, mib * MIB, mmap.PAGESIZE):
        region[offset] = 1
    region.close()


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/clear_refs"), reason="Linux high-water mark")
def test_the_peak_comes_from_the_kernel_high_water_mark_without_a_thread() -> None:
    """The sampling thread took the GIL every 2 ms inside the timed loop (zoo:mlp's batch-1 p99 47-63 us with it,
    33-38 us without); a short spike between two samples was missed. The kernel's mark sees every page."""
    import threading

    from dlperf.measure.memory import PeakRssSampler, lifetime_peak_rss_bytes

    _spike(160)
    before_threads = threading.active_count()
    with PeakRssSampler() as outer:
        _spike(96)
        with PeakRssSampler() as inner:
            assert threading.active_count() == before_threads and not inner.sampled
            _spike(32)
    # the outer region's 96 MiB spike came before the inner one reset the mark: still counted
    assert outer.peak_rss_bytes - outer.start_rss_bytes >= 90 * MIB
    assert 28 * MIB <= inner.peak_rss_bytes - inner.start_rss_bytes < 90 * MIB
    # the 160 MiB before either region is not theirs, but still the process's lifetime peak
    assert outer.peak_rss_bytes - outer.start_rss_bytes < 150 * MIB
    assert lifetime_peak_rss_bytes() - outer.start_rss_bytes >= 150 * MIB


def test_without_a_resettable_mark_a_thread_samples(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dlperf.measure import memory

    # a folder cannot be opened for writing (a path under '/nonexistent' could be, once something made that folder)
    monkeypatch.setattr(memory, "HWM_RESET", str(tmp_path))
    import mmap
    import time

    with memory.PeakRssSampler(interval_s=0.001) as rss:
        assert rss.sampled
        region = mmap.mmap(-1, 64 * MIB)  # fresh pages (see _spike)
        for offset in range(0, 64 * MIB, mmap.PAGESIZE):
            region[offset] = 1
        time.sleep(0.05)
        region.close()
    assert rss.peak_rss_bytes - rss.start_rss_bytes >= 60 * MIB
