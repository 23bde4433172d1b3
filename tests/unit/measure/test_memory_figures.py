"""The memory figures a run reports: model bytes (parameters, buffers, an artifact's stated size), the process's
lifetime peak in bytes, and the DataLoader-worker peak that is the most the workers held at once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
import torch
from torch import nn

from dlperf.measure.memory import WorkerMemorySampler, current_rss_bytes, lifetime_peak_rss_bytes, parameter_bytes

pytestmark = pytest.mark.unit

MIB = 2**20


def test_model_bytes_count_buffers_and_element_sizes() -> None:
    """BatchNorm's running statistics are model memory as much as its weights (a normalization-heavy model read
    smaller than it is), and the int64 batch counter is 8 bytes."""
    assert parameter_bytes(nn.BatchNorm1d(4)) == 4 * 4 * 4 + 8
    assert parameter_bytes(nn.Linear(3, 2).to(torch.float16)) == (3 * 2 + 2) * 2


def test_an_artifact_s_stated_size_is_its_model_bytes() -> None:
    """An exported engine's size is its files' (`artifact_workload` states it); its Python wrapper holds no tensors."""
    class Engine:
        dlperf_size_bytes = 12_345

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x

    assert parameter_bytes(Engine()) == 12_345


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
def test_the_lifetime_peak_is_in_bytes() -> None:
    """Linux reports ru_maxrss in KiB: read as bytes, the peak was a thousandth of the memory now resident. (Not
    `>=`: ru_maxrss lags the resident size by the pages touched since the kernel last folded its counters.)"""
    assert lifetime_peak_rss_bytes() > current_rss_bytes() / 2


def _holder(mib: int) -> subprocess.Popen[bytes]:
    """A process that keeps `mib` MiB of written (private) pages until killed."""
    return subprocess.Popen([sys.executable, "-c", f"b = b'\\x01' * ({mib} << 20); import time; time.sleep(120)"])


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [_holder(32), _holder(32)]
    try:
        deadline = time.monotonic() + 30
        while any(psutil.Process(p.pid).memory_info().rss < 32 * MIB for p in procs):
            assert time.monotonic() < deadline, "the holder processes did not start"
            time.sleep(0.05)
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="USS of another process")
def test_the_worker_peak_is_the_most_held_at_one_reading(holders: list[subprocess.Popen[bytes]]) -> None:
    """Two workers of 32 MiB each, then one (the other ended): the peak is the two together, over both workers, even
    though the last reading saw one and the list still named an ended process first."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = [p.pid for p in holders]
    with WorkerMemorySampler(lambda: [gone.pid, *alive], interval_s=3600.0) as workers:
        alive.pop()
    assert workers.processes == 2
    assert workers.peak_uss_bytes is not None and workers.peak_uss_bytes >= 2 * 30 * MIB
