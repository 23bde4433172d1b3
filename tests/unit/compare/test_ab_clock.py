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


def test_the_block_size_comes_from_several_calls_not_the_first() -> None:
    """One timed call per side set the block size: a slow first call (a cache miss, another process) gave 5, 22 and
    28 calls per block for the same command."""
    from dlperf.compare.ab import _auto_iters

    durations = iter([10_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000] * 2)  # ns: one slow call of five

    class Programmed:
        name = "programmed"

        def start(self) -> None:
            return None

        def stop(self, token: None) -> int:
            return next(durations)

    assert _auto_iters([lambda: None, lambda: None], Programmed()) == 50  # 50 ms / a median of 1 ms


def test_the_title_names_the_workload_as_given_not_side_a_with_its_options() -> None:
    from dlperf.compare.ab import run_ab
    from dlperf.compare.settings import parse_settings

    run = run_ab("zoo:mlp?hidden=64", parse_settings("threads=1,option.hidden=128"), parse_settings("threads=1"),
                 blocks=4, iters_per_block=1)
    assert run.workload == "zoo:mlp?hidden=64"
