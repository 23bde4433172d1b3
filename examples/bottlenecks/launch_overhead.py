"""Bottleneck: framework/launch overhead. The forward runs 1,200 operators (300 x index, mul, add, tanh) on
tensors of a few elements, so each step is dispatch cost, not arithmetic.

    dlperf profile examples/bottlenecks/launch_overhead.py --verify

A larger batch costs almost nothing extra per step; torch.compile fuses the chain into a few kernels.
"""

from __future__ import annotations

import torch
from torch import nn

import dlperf

LAYERS = 300
WIDTH = 8


class TinyChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.scales = nn.Parameter(torch.rand(LAYERS, WIDTH, generator=g) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(LAYERS):
            x = torch.tanh(x * self.scales[i] + 0.1)
        return x


workload = dlperf.Workload(
    name="launch-overhead",
    make_model=TinyChain,
    make_inputs=lambda batch_size: (torch.randn(batch_size, WIDTH, generator=torch.Generator().manual_seed(0)),),
    description=f"{LAYERS} x (index, mul, add, tanh) on [batch, {WIDTH}] tensors",
    kind="generic",
    default_batch_size=1,
)
