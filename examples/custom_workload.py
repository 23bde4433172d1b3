"""An example workload file: a small classifier with an accuracy metric, the way a user would write one.

    dlperf bench examples/custom_workload.py
    dlperf optimize examples/custom_workload.py --max-metric-drop 1% --time-budget 90s

(without --time-budget the search runs up to its default 10 minutes)

dlperf finds the module-level `workload` (a dlperf.Workload). The model is defined and fitted here; in a
real project `make_model` would load your checkpoint instead (fast, deterministic, no network).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import dlperf

FEATURES = 2
CLASSES = 2


class RingClassifier(nn.Module):
    """Says whether a 2-D point lies inside the unit circle (class 0) or outside it (class 1)."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(FEATURES, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, CLASSES),
        )

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return self.net(points)


def points(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n points uniform in [-2, 2]^2 and their labels (1 outside the unit circle)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, FEATURES, generator=g) * 4 - 2
    y = (x.norm(dim=1) > 1.0).long()
    return x, y


TRAIN = points(512, seed=0)
HELD_OUT = points(1000, seed=1)


def make_model() -> nn.Module:
    """Fit the classifier (full-batch Adam, fixed seed; about a second on a CPU, once per candidate)."""
    torch.manual_seed(0)
    model = RingClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    x, y = TRAIN
    for _ in range(150):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.eval()


def make_inputs(batch_size: int) -> tuple[torch.Tensor]:
    """One call's positional inputs: a batch of held-out points."""
    x, _ = HELD_OUT
    return (x[torch.arange(batch_size) % len(x)],)


def accuracy(predict: Callable[[torch.Tensor], Any]) -> float:
    """Held-out accuracy of anything called like the model (the model itself, an optimized candidate...)."""
    x, y = HELD_OUT
    with torch.inference_mode():
        logits = torch.as_tensor(predict(x))
    return float((logits.argmax(dim=1) == y).float().mean())


def calibration_batches() -> list[tuple[torch.Tensor]]:
    """Training inputs in batches, for passes that calibrate (static int8 quantization)."""
    x, _ = TRAIN
    return [(x[i : i + 128],) for i in range(0, len(x), 128)]


workload = dlperf.Workload(
    name="ring-classifier",
    make_model=make_model,
    make_inputs=make_inputs,
    eval=dlperf.EvalSpec(evaluate=accuracy, metric_name="accuracy", higher_is_better=True,
                         calibration_inputs=calibration_batches),
    description="3-layer MLP: is a 2-D point inside the unit circle?",
    kind="mlp",
    default_batch_size=32,
    input_names=("points",),
    output_names=("logits",),
)
