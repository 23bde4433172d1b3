"""Bottleneck: memory capacity. The forward materialises a 512 MiB intermediate (batch 4) for a result that
needs a few KiB, so the step's peak memory is far above what the model needs.

    dlperf profile examples/bottlenecks/memory_pressure.py --memory-budget 768MiB

With a budget (or a machine) that leaves less headroom than the intermediate, dlperf reports memory capacity
first: lower the batch, or compute the reduction without materialising the expanded tensor.
"""

from __future__ import annotations

import torch
from torch import nn

import dlperf

FEATURES = 1 << 15
REPEATS = 1024
INTERMEDIATE_BYTES_PER_ITEM = FEATURES * REPEATS * 4


class Expand(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = x.unsqueeze(1).expand(-1, REPEATS, -1).contiguous()  # [batch, 1024, 32768] fp32
        return big.sum(dim=1)


workload = dlperf.Workload(
    name="memory-pressure",
    make_model=Expand,
    make_inputs=lambda batch_size: (torch.randn(batch_size, FEATURES, generator=torch.Generator().manual_seed(0)),),
    description="a 128 MiB-per-item intermediate tensor",
    kind="generic",
    default_batch_size=4,
)
