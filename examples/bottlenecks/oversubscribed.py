"""Bottleneck: host threads. The model factory sets torch's intra-op threads to 8x the cores (a setting
copied from a big server), so every parallel operator waits for threads that cannot run.

    dlperf profile examples/bottlenecks/oversubscribed.py --verify

(`--threads 16` on any workload shows the same thing.) dlperf restores the thread count when it is done.
"""

from __future__ import annotations

import os

import torch
from torch import nn

import dlperf

WIDTH = 256
THREADS = 8 * (os.cpu_count() or 1)


def make_model() -> nn.Module:
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return nn.Sequential(*layers)


workload = dlperf.Workload(
    name="oversubscribed",
    make_model=make_model,
    make_inputs=lambda batch_size: (torch.randn(batch_size, WIDTH, generator=torch.Generator().manual_seed(0)),),
    description=f"8 x (Linear(256), GELU) at batch 64 with {THREADS} intra-op threads",
    kind="mlp",
    default_batch_size=64,
)
