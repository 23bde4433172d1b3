"""A training workload whose input pipeline is the bottleneck: each sample costs ~2 ms to "decode".

    dlperf train examples/slow_loader.py --tune

The per-sample cost is a sleep (like waiting on disk or a decoder that releases the GIL), so loader worker
processes hide it even on a busy machine; the model is a small MLP whose step takes a few milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dlperf

SAMPLES = 4096
FEATURES = 32
CLASSES = 4
DECODE_S = 0.002


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Fixed random features and labels, each read costing DECODE_S seconds."""

    def __init__(self, decode_s: float = DECODE_S) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(SAMPLES, FEATURES, generator=g)
        self.y = (self.x[:, :CLASSES].argmax(dim=1)).long()  # learnable: the loss goes down
        self.decode_s = decode_s

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.decode_s)
        return self.x[i], self.y[i]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def make_loader(batch_size: int, **dataloader_kwargs: Any) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    kwargs: dict[str, Any] = {"shuffle": True, "drop_last": True}
    kwargs.update(dataloader_kwargs)
    if "generator" not in kwargs:
        kwargs["generator"] = torch.Generator().manual_seed(0)
    return DataLoader(SlowDataset(), batch_size=batch_size, **kwargs)


def make_inputs(batch_size: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(batch_size, FEATURES),)


workload = dlperf.Workload(
    name="slow-loader",
    make_model=make_model,
    make_inputs=make_inputs,
    train=dlperf.TrainSpec(
        make_loader=make_loader,
        loss_fn=nn.functional.cross_entropy,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=16,
    ),
    description="small MLP behind a loader that spends ~2 ms per sample",
    kind="mlp",
)
