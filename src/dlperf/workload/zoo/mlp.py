"""`zoo:mlp`: a tiny multi-layer perceptron on random features, for fast tests (no metric)."""

from __future__ import annotations

from typing import Any

from dlperf.workload.base import TrainSpec, Workload
from dlperf.workload.zoo.options import positive_ints

SUMMARY = "tiny 3-layer MLP (64 -> 256 -> 256 -> 10), random weights; for fast tests"


def _model(in_features: int, hidden: int, classes: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(in_features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def workload(in_features: int = 64, hidden: int = 256, classes: int = 10) -> Workload:
    import torch

    options = positive_ints("mlp", [("in_features", in_features, 64), ("hidden", hidden, 256),
                                    ("classes", classes, 10)])

    def make_inputs(batch_size: int) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(batch_size)
        return (torch.randn(batch_size, in_features, generator=g),)

    def make_loader(batch_size: int, **loader_kwargs: Any) -> Any:
        from torch.utils.data import DataLoader, TensorDataset

        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, in_features, generator=g)
        y = torch.randint(0, classes, (2048,), generator=g)
        return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, drop_last=True,
                          **loader_kwargs)

    return Workload(
        name="mlp" + options,
        make_model=lambda: _model(in_features, hidden, classes),
        make_inputs=make_inputs,
        train=TrainSpec(
            make_loader=make_loader,
            loss_fn=torch.nn.functional.cross_entropy,
            make_optimizer=lambda params: torch.optim.SGD(params, lr=0.05),
            batch_size=64,
        ),
        description=SUMMARY.replace("64 -> 256 -> 256 -> 10", f"{in_features} -> {hidden} -> {hidden} -> {classes}"),
        source="zoo:mlp" + options,
        kind="mlp",
        input_names=("x",),
        output_names=("logits",),
    )
