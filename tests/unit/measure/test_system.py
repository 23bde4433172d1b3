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
