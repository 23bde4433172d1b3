"""bf16 counts as native on a GPU of compute capability 8.0 or newer only: `torch.cuda.is_bf16_supported()` says
True on a T4 or V100 too (emulated, slower than fp32), so calibration, the precision pass and the tuner's precision
knob took them for bf16 GPUs. The capability asked is the named device's, not the current one's."""

from __future__ import annotations

import pytest
import torch

from dlperf._device import cuda_bf16_native
from dlperf.passes.precision import hardware_reason
from dlperf.train.knobs.precision import bf16_supported

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("capability", "native"), [((7, 5), False), ((7, 0), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_is_native_from_compute_capability_8(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int],
                                                   native: bool) -> None:
    asked: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # as on a T4
    def capability_of(d: object = None) -> tuple[int, int]:
        asked.append(d)
        return capability

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability_of)
    assert cuda_bf16_native("cuda:1") is native
    assert asked == [torch.device("cuda:1")]
    assert bf16_supported("cuda:1") is native
    assert (hardware_reason("bf16", "cuda:1", ()) is None) is native


def test_no_gpu_no_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_bf16_native() is False
