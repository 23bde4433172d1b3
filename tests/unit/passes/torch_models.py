"""Tiny in-memory workloads for the torch-side pass tests."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from dlperf.workload.base import Workload


def mlp_workload() -> Workload:
    def make_model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 4))

    def make_inputs(batch: int) -> tuple[Any, ...]:
        return (torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch)),)

    return Workload(name="tiny-mlp", make_model=make_model, make_inputs=make_inputs, kind="mlp")


class ValueDependent(nn.Module):
    """A forward whose Python arithmetic reads the input's values (`.tolist()`): Dynamo breaks the graph there and
    specialises what follows on those values, so each new input compiles again."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = sum(math.tanh(v) for v in x[0, :4].tolist())
        return self.linear(x) * scale


def value_dependent_workload() -> Workload:
    def make_inputs(batch: int) -> tuple[Any, ...]:
        return (torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch)),)

    return Workload(name="value-dependent", make_model=ValueDependent, make_inputs=make_inputs, kind="mlp")


def cnn_workload() -> Workload:
    def make_model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def make_inputs(batch: int) -> tuple[Any, ...]:
        return (torch.randn(batch, 3, 12, 12, generator=torch.Generator().manual_seed(batch)),)

    return Workload(name="tiny-cnn", make_model=make_model, make_inputs=make_inputs, kind="cnn")


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(1).float(), b.flatten(1).float()).min())


class MaskedEncoder(torch.nn.Module):
    """nn.TransformerEncoder (nested tensors on, as by default) over [B, 8, 32] with a padding mask, then a head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x, src_key_padding_mask=pad)[:, 0])


def masked_inputs(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of 8, 6, 7 and 5 real positions, the rest padding (True)."""
    pad = torch.arange(8)[None, :] >= torch.tensor([8, 6, 7, 5] * batch_size)[:batch_size, None]
    return torch.randn(batch_size, 8, 32, generator=torch.Generator().manual_seed(batch_size)), pad


def masked_encoder_workload() -> Workload:
    return Workload(name="masked", make_model=MaskedEncoder, make_inputs=masked_inputs)
