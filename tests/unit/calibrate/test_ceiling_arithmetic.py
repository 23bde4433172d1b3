"""The arithmetic behind each ceiling, on a fake clock: FLOP/s and bytes/s from the 10th percentile of the per-call
times, the GEMM size a slow probe allows, and what a calibration reports of itself (its steps, its thread count)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import dlperf.calibrate.kernels as kernels
from dlperf.calibrate import CACHE_ENV_VAR, get_ceilings
from dlperf.measure.clock import FakeClock
from dlperf.measure.timer import TimerConfig

pytestmark = pytest.mark.unit

MS = 1_000_000
CALLS_MS = [6, 1, 11, 2, 9, 3, 10, 4, 8, 5, 7]
"""Eleven calls of 1..11 ms: p10 is 2 ms, the median 6 ms."""
EXACT = TimerConfig(warmup_iters=0, min_duration_s=0.0, min_iters=len(CALLS_MS), max_iters=len(CALLS_MS))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_gemm_flops_are_two_n_cubed_over_the_p10_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GEMM of n^3 multiply-adds is 2 n^3 FLOPs; the ceiling is held to the 10th-percentile call, not the median
    (half the peak on a shared machine), and the details say which is which."""
    monkeypatch.setattr(kernels, "clock_for", lambda device: FakeClock([d * MS for d in CALLS_MS]))
    flops, how = kernels.measure_gemm("fp32", "cpu", n=64, timer=EXACT)
    assert flops == pytest.approx(2 * 64**3 / 0.002)
    assert how["n"] == 64 and how["samples"] == len(CALLS_MS)
    assert how["p10_s"] == pytest.approx(0.002) and how["median_s"] == pytest.approx(0.006)


def test_bandwidth_counts_the_bytes_read_and_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of N bytes reads N and writes N: 2N per p10 call; the details name the bytes copied (fp32 elements)."""
    monkeypatch.setattr(kernels, "clock_for", lambda device: FakeClock([d * MS for d in CALLS_MS]))
    bandwidth, how = kernels.measure_bandwidth("cpu", nbytes=2**20, timer=EXACT)
    assert bandwidth == pytest.approx(2 * 2**20 / 0.002)
    assert how["bytes"] == 2**20 and how["p10_s"] == pytest.approx(0.002)


@pytest.mark.parametrize(("probe_ms", "n"), [(0.1, 4096), (1.0, 2048), (100.0, 1024)])
def test_the_gemm_size_is_the_largest_whose_projected_call_fits_a_second(
        monkeypatch: pytest.MonkeyPatch, probe_ms: float, n: int) -> None:
    """A GEMM's time grows as n^3 from the 256^3 probe: a 1 ms probe projects 0.5 s at 2048 and 4.1 s at 4096."""
    monkeypatch.setattr(kernels, "clock_for", lambda device: FakeClock(base_ns=int(probe_ms * MS)))
    assert kernels._affordable_n("fp32", 4096, "cpu") == n


def test_a_load_average_above_the_core_count_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a core above the core count already queues work behind the measurement."""
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 0.5, 0.0, 0.0))
    (warning,) = kernels.busy_warnings()
    assert f"load average {cores + 0.5:.1f} on {cores} cores" in warning
    monkeypatch.setattr(os, "getloadavg", lambda: (cores - 0.5, 0.0, 0.0))
    assert kernels.busy_warnings() == []


def test_the_progress_steps_announced_are_the_ones_made(cache: Path) -> None:
    """`dlperf profile` sizes its progress bar by `measuring_steps`: one per GEMM dtype and one for the bandwidth,
    none once cached; a quick cache does not stand for a full measurement."""
    from dlperf.calibrate.ceilings import measuring_steps

    announced = measuring_steps("cpu", quick=True)
    steps: list[str] = []
    ceilings = get_ceilings("cpu", quick=True, on_progress=steps.append)
    assert announced == len(steps) == len(ceilings.gemm_flops) + 1
    assert measuring_steps("cpu", quick=True) == 0
    assert measuring_steps("cpu") == len(steps)


def test_threads_beyond_the_usable_cores_are_measured_at_the_usable_cores(cache: Path) -> None:
    """`--threads 16` on 2 cores measured the oversubscription and cached it as the 16-thread peak; torch's own count
    is restored afterwards."""
    import torch

    from dlperf.measure.env import usable_cores

    before = torch.get_num_threads()
    ceilings = get_ceilings("cpu", quick=True, threads=usable_cores() + 1)
    assert ceilings.threads == usable_cores()
    assert f"|threads={usable_cores()}|" in ceilings.machine_key
    assert torch.get_num_threads() == before
