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


class Programmed:
    """A fake clock whose every timed call lasts the next of the durations (ns) given."""

    name = "programmed"

    def __init__(self, durations_ns: list[int]) -> None:
        self.durations = iter(durations_ns)

    def start(self) -> None:
        return None

    def stop(self, token: None) -> int:
        return next(self.durations)


def test_the_block_size_comes_from_several_calls_not_the_first() -> None:
    """One timed call per side set the block size: a slow first call (a cache miss, another process) gave 5, 22 and
    28 calls per block for the same command."""
    from dlperf.compare.ab import _auto_iters

    # ns: one slow call of five
    clock = Programmed([10_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000] * 2)
    assert _auto_iters([lambda: None, lambda: None], clock) == 50  # 50 ms / a median of 1 ms


@pytest.mark.parametrize("order", ["slow-first", "slow-last"])
def test_the_block_size_comes_from_the_slower_side(order: str) -> None:
    """Calls per block are set for about 50 ms on the slower side (a 5 ms call: 10 a block), whichever side that
    is; sized from the faster side, each block of the slower one ran 250 ms."""
    from dlperf.compare.ab import _auto_iters

    slow, fast = [5_000_000] * 5, [1_000_000] * 5
    clock = Programmed(slow + fast if order == "slow-first" else fast + slow)
    assert _auto_iters([lambda: None, lambda: None], clock) == 10


def test_the_title_names_the_workload_as_given_not_side_a_with_its_options() -> None:
    from dlperf.compare.ab import run_ab
    from dlperf.compare.settings import parse_settings

    run = run_ab("zoo:mlp?hidden=64", parse_settings("threads=1,option.hidden=128"), parse_settings("threads=1"),
                 blocks=4, iters_per_block=1)
    assert run.workload == "zoo:mlp?hidden=64"


def test_sides_built_alike_share_one_model_and_their_inputs() -> None:
    """Two copies of one model differ in speed by where their memory landed: an A/A with a copy per side had its
    interval exclude 1 in 6 of 8 trials. Sides that differ only in how the model is called share the object;
    sides with other workload options each build their own."""
    from dlperf.compare.ab import run_ab
    from dlperf.workload.base import Workload

    calls: list[tuple[int, int]] = []
    built = 0
    real_build = Workload.build_model

    def counting_build(self: Workload) -> torch.nn.Module:
        nonlocal built
        built += 1
        return real_build(self)

    def spy(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], device: str, precision: str) -> object:
        calls.append((id(model), id(inputs)))
        return lambda: model(*inputs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Workload, "build_model", counting_build)
        mp.setattr("dlperf.measure.bench.make_call", spy)
        run_ab("zoo:mlp", parse_settings("threads=1"), parse_settings("threads=2,precision=bf16"), blocks=4,
               iters_per_block=1)
        assert built == 1 and calls[0] == calls[1]
        calls.clear()
        run_ab("zoo:mlp", parse_settings("batch_size=2"), parse_settings("batch_size=4"), blocks=4, iters_per_block=1)
        assert built == 2 and calls[0][0] == calls[1][0] and calls[0][1] != calls[1][1]
        calls.clear()
        run_ab("zoo:mlp", parse_settings("option.hidden=64"), parse_settings("option.hidden=128"), blocks=4,
               iters_per_block=1)
        assert built == 4 and calls[0][0] != calls[1][0]
