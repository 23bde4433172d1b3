"""Bottleneck: the input pipeline. Each sample costs 5 ms to "decode" and the DataLoader has no workers.

    dlperf profile examples/bottlenecks/slow_input.py --train --verify

The cost is a sleep (like disk reads or a decoder that releases the GIL), so worker processes hide it even
on a busy machine; the model is a small MLP whose step takes a millisecond or two. The data is one cluster
per class, so the loss falls within the 16 steps of `dlperf train --tune`'s loss-parity check (2.3 to 0.5):
parity then tells a candidate that breaks training from the baseline.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dlperf

SAMPLES = 512
FEATURES = 64
CLASSES = 8
DECODE_S = 0.005


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample is its class's centre plus unit noise. (The label was the argmax of 8 of 64 random features:
    learnable, but too slowly for the loss to fall within 16 steps, so loss parity vouched for nothing.)"""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        centres = torch.randn(CLASSES, FEATURES, generator=g)
        self.y = torch.randint(0, CLASSES, (SAMPLES,), generator=g)
        self.x = centres[self.y] + torch.randn(SAMPLES, FEATURES, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(DECODE_S)
        return self.x[i], self.y[i]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def make_loader(batch_size: int, **dataloader_kwargs: Any) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    return DataLoader(SlowDataset(), batch_size=batch_size, shuffle=True, drop_last=True, **dataloader_kwargs)


workload = dlperf.Workload(
    name="slow-input",
    make_model=make_model,
    make_inputs=lambda batch_size: (torch.randn(batch_size, FEATURES),),
    train=dlperf.TrainSpec(
        make_loader=make_loader,
        loss_fn=nn.functional.cross_entropy,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=16,
    ),
    description="small MLP behind a DataLoader that spends 5 ms per sample, no workers",
    kind="mlp",
)
