"""CUDA peak resets, on a stand-in for torch.cuda (no GPU here): what is called, in which order."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
