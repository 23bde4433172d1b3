"""Which clock an A/B times with: the host clock, with CUDA synchronized when a side runs on a GPU."""

from __future__ import annotations

import pytest
import torch

from dlperf.compare.ab import _clock
from dlperf.compare.settings import parse_settings
from dlperf.errors import MeasurementError
from dlperf.measure.clock import CpuClock

pytestmark = pytest.mark.unit


def test_cpu_sides_use_the_plain_host_clock() -> None:
    assert isinstance(_clock(parse_settings("threads=1"), parse_settings("threads=2")), CpuClock)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_a_cuda_side_without_cuda_is_refused_with_the_reason() -> None:
    with pytest.raises(MeasurementError, match=r"torch\.cuda\.is_available\(\) is False"):
        _clock(parse_settings("device=cpu"), parse_settings("device=cuda"))
