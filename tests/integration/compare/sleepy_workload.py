"""A test-only workload whose call sleeps 10 ms x $DLPERF_TEST_SLOWDOWN (default 1).

Sleeping, not computing, so the time is stable on a loaded machine: the check tests judge the gate, not
the machine. `DLPERF_TEST_SLOWDOWN=1.2` makes it 20% slower.
"""

from __future__ import annotations

import os
import time

import torch

import dlperf

BASE_S = 0.010


class Sleepy(torch.nn.Module):
    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.sleep_s = sleep_s
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return self.linear(x)


def workload() -> dlperf.Workload:
    slowdown = float(os.environ.get("DLPERF_TEST_SLOWDOWN", "1"))
    return dlperf.Workload(name="sleepy", make_model=lambda: Sleepy(BASE_S * slowdown),
                           make_inputs=lambda batch: (torch.zeros(batch, 4),))
