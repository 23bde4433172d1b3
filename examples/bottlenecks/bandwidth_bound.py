"""Bottleneck: memory bandwidth. A chain of elementwise operators over a 16 MiB tensor: each reads and writes
the whole tensor for one or two FLOPs per element.

    dlperf profile examples/bottlenecks/bandwidth_bound.py
"""

from __future__ import annotations

import torch
from torch import nn

import dlperf

ELEMENTS_PER_ITEM = 1 << 20


class ElementwiseChain(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = x * 1.01
            x = x + 0.5
            x = torch.relu(x)
        return x


workload = dlperf.Workload(
    name="bandwidth-bound",
    make_model=ElementwiseChain,
    make_inputs=lambda batch_size: (
        torch.randn(batch_size, ELEMENTS_PER_ITEM, generator=torch.Generator().manual_seed(0)),),
    description="12 elementwise ops over [batch, 1M] fp32",
    kind="generic",
    default_batch_size=4,
)
