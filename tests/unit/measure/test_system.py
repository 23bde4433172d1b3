"""GPU sampling reads the GPU torch runs on: NVML numbers every GPU, CUDA only the visible ones."""

from __future__ import annotations

import pytest

from dlperf.measure.system import nvml_index

pytestmark = pytest.mark.unit


def test_nvml_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert (nvml_index(0), nvml_index(1)) == (3, 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_index(2) == 2


def test_cpu_percent_of_short_regions_is_within_the_machine() -> None:
    """Over a region of a few ms psutil's 10 ms clock ticks read as 482% on a 2-core machine; the process's CPU
    time at fine resolution stays within 100% per core (and near 100% for one busy thread)."""
    import time

    import psutil

    from dlperf.measure.system import UtilizationSampler

    readings = []
    for _ in range(30):
        with UtilizationSampler() as sampler:
            end = time.perf_counter() + 0.003
            while time.perf_counter() < end:
                pass
        readings.append(sampler.result.process_cpu_percent)
    assert max(readings) <= 100.0 * (psutil.cpu_count() or 1)
    assert sorted(readings)[len(readings) // 2] > 50.0  # one thread spinning, mostly on the CPU
