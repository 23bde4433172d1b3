"""A workload call that fails while being timed: the error says where in the user's code."""

from __future__ import annotations

import pytest
import torch

from dlperf.errors import MeasurementError, WorkloadError
from dlperf.measure.bench import BenchConfig, run_bench
from dlperf.measure.timer import TimerConfig
from dlperf.workload.base import Workload

pytestmark = pytest.mark.unit


class _FailsOnThirdCall(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("lost the cache on call 3")  # the line the error must show
        return x


def test_a_call_failing_after_the_checked_one_names_the_users_line() -> None:
    workload = Workload(name="flaky", make_model=_FailsOnThirdCall, make_inputs=lambda b: (torch.zeros(b, 4),))
    config = BenchConfig(batch_sizes=(1,), timer=TimerConfig(warmup_iters=5, min_duration_s=0.0, min_iters=3))
    with pytest.raises(MeasurementError) as caught:
        run_bench(workload, config)
    message = str(caught.value)
    assert message.startswith("workload 'flaky' at batch 1: the measured call raised RuntimeError: lost the cache")
    assert f'File "{__file__}"' in message and "in forward" in message
    assert 'raise RuntimeError("lost the cache on call 3")' in message


class _FailsAtBatch8(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 8:
            raise RuntimeError("no kernel for batch 8")
        return x


def test_a_batch_size_failing_after_a_smaller_one_ran_is_blamed_on_the_batch_size_not_the_inputs() -> None:
    """`--batch-sizes 1,8` with a model that fails at 8 read "the model rejected its example inputs", as if the
    inputs were wrong, though batch 1 of them had just been measured; the first batch size keeps the input hint."""
    workload = Workload(name="fails8", make_model=_FailsAtBatch8, make_inputs=lambda b: (torch.zeros(b, 4),))
    timer = TimerConfig(warmup_iters=1, min_duration_s=0.0, min_iters=3)
    with pytest.raises(WorkloadError) as caught:
        run_bench(workload, BenchConfig(batch_sizes=(1, 8), timer=timer))
    message = str(caught.value)
    assert message.startswith("workload 'fails8' at batch 8: the model raised on its first call at this batch size "
                              "(input 0: float32[8, 4]), where batch 1 ran: RuntimeError: no kernel for batch 8; "
                              "leave this batch size out if the model does not support it")
    assert "rejected" not in message
    assert 'raise RuntimeError("no kernel for batch 8")' in message
    with pytest.raises(WorkloadError, match=r"^workload 'fails8': the model rejected its example inputs \(input 0: "
                                            r"float32\[8, 4\]\)"):
        run_bench(workload, BenchConfig(batch_sizes=(8, 1), timer=timer))


def test_a_model_with_lazy_layers_is_measured_with_its_weights_counted_after_the_first_call() -> None:
    """`nn.LazyLinear` has no weights until its first call: the model size was taken before it, and bench died
    with 'ValueError: Attempted to use an uninitialized parameter' and a traceback."""
    import torch

    from dlperf.measure.bench import BenchConfig, run_bench
    from dlperf.measure.memory import parameter_bytes
    from dlperf.measure.timer import TimerConfig
    from dlperf.workload.base import Workload

    lazy = Workload(name="lazy", make_model=lambda: torch.nn.Sequential(torch.nn.LazyLinear(16), torch.nn.ReLU(),
                                                                         torch.nn.Linear(16, 4)),
                    make_inputs=lambda b: (torch.randn(b, 32),))
    assert parameter_bytes(lazy.build_model()) == (16 * 4 + 4) * 4  # the lazy layer's counts 0 before a call
    result = run_bench(lazy, BenchConfig(batch_sizes=(2,), timer=TimerConfig(warmup_iters=1, min_duration_s=0.01,
                                                                             min_iters=3)))
    assert result.model_bytes == (32 * 16 + 16 + 16 * 4 + 4) * 4
