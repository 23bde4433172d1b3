"""profile holds a step to the ceilings of the thread count it runs with (`--threads N`), not torch's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dlperf.calibrate.kernels as kernels
from dlperf.calibrate import CACHE_ENV_VAR, Ceilings
from dlperf.profile.session import load_ceilings

pytestmark = pytest.mark.unit


def test_ceilings_are_measured_at_the_profiled_thread_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dlperf.measure import env

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(env, "usable_cores", lambda: 64)  # no clamp here (the next test's subject)
    seen: list[tuple[str, int]] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        threads = torch.get_num_threads()
        seen.append((key, threads))
        return Ceilings(device, key, {"fp32": 1e9 * threads}, 1e9, "t", threads, quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    before = torch.get_num_threads()
    target = 1 if before > 1 else 2
    ceilings = load_ceilings("cpu", quick=True, threads=target)
    assert seen == [(ceilings.machine_key, target)] and f"|threads={target}|" in ceilings.machine_key
    assert torch.get_num_threads() == before
    default = load_ceilings("cpu", quick=True)
    assert default.threads == before and len(seen) == 2


def test_ceilings_are_measured_at_no_more_threads_than_usable_cores(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile --threads 16` on 2 cores calibrated 16 oversubscribed threads and cached that as the machine's
    16-thread peak (half the real one), then held the step to it: 121% of peak, 'up to 12.54x'."""
    import torch

    from dlperf.measure import env

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(env, "usable_cores", lambda: 1)
    seen: list[int] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        seen.append(torch.get_num_threads())
        return Ceilings(device, key, {"fp32": 1e9}, 1e9, "t", seen[-1], quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    before = torch.get_num_threads()
    ceilings = load_ceilings("cpu", quick=True, threads=16)
    assert seen == [1] and "|threads=1|" in ceilings.machine_key
    assert torch.get_num_threads() == before
