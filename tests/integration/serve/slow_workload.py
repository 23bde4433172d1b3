"""A workload whose model holds every batch with `x[0, 0] >= HELD` until the test creates the file named by
$DLPERF_TEST_GATE (other values, such as the warm-up's random normal ones, pass at once), for the shutdown tests;
with $DLPERF_TEST_LOADING its loading waits for the gate as well."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import dlperf

GATE_ENV = "DLPERF_TEST_GATE"
HELD = 100.0
LOADING_ENV = "DLPERF_TEST_LOADING"
"""When set, a file the model's loading creates, after which the loading waits for the gate too (a model that
takes long to load, for a signal during the load)."""


def entered(gate: Path) -> Path:
    """The file a held batch creates once it is in the model."""
    return gate.with_name(gate.name + ".entered")


def _model() -> Any:
    import torch

    gate = Path(os.environ[GATE_ENV])
    loading = os.environ.get(LOADING_ENV)
    if loading:
        Path(loading).touch()
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    class Held(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if float(x[0, 0]) >= HELD:
                entered(gate).touch()  # for a test to know a request is in the model, not only queued
                deadline = time.monotonic() + 60  # a broken test must not hang the server forever
                while not gate.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            return x + 1

    return Held()


def _inputs(batch_size: int) -> tuple[Any, ...]:
    import torch

    return (torch.zeros(batch_size, 2),)


workload = dlperf.Workload(name="slow", make_model=_model, make_inputs=_inputs, input_names=("x",),
                           output_names=("y",))
