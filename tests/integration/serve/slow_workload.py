"""A workload whose model takes `x[0, 0]` seconds per batch (zeros: instant), for the shutdown test."""

from __future__ import annotations

import time
from typing import Any

import dlperf


def _model() -> Any:
    import torch

    class Slow(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(float(x[0, 0]))
            return x + 1

    return Slow()


def _inputs(batch_size: int) -> tuple[Any, ...]:
    import torch

    return (torch.zeros(batch_size, 2),)


workload = dlperf.Workload(name="slow", make_model=_model, make_inputs=_inputs, input_names=("x",),
                           output_names=("y",))
