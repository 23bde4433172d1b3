"""A workload call that fails while being timed: the error says where in the user's code."""

from __future__ import annotations

import pytest
import torch

from dlperf.errors import MeasurementError
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
