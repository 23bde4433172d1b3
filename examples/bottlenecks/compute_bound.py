"""Bottleneck: compute. Four 512x512 linear layers on a batch of 256: large GEMMs, high arithmetic intensity.

    dlperf profile examples/bottlenecks/compute_bound.py
"""

from __future__ import annotations

import torch
from torch import nn

import dlperf

WIDTH = 512


def make_model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers)


workload = dlperf.Workload(
    name="compute-bound",
    make_model=make_model,
    make_inputs=lambda batch_size: (torch.randn(batch_size, WIDTH, generator=torch.Generator().manual_seed(0)),),
    description="4 x Linear(512, 512) at batch 256",
    kind="mlp",
    default_batch_size=256,
)
