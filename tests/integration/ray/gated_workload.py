"""y = 2x, where a batch whose x[0, 0] is a token N > 0 waits while the file `gate_path(N)` exists.

The gate works across processes (Ray Serve replicas), so a test can hold every request inside the replicas,
look at where each one landed, then release them. Warm-up batches (zeros) never wait.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import dlperf

GATE_TIMEOUT_S = 120.0


def gate_path(token: int) -> Path:
    return Path(tempfile.gettempdir()) / f"dlperf-ray-gate-{token}"


def _model() -> Any:
    import torch

    class Gated(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            token = int(x[0, 0])
            if token > 0:
                deadline = time.monotonic() + GATE_TIMEOUT_S
                while gate_path(token).exists():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"gate {gate_path(token)} was never opened")
                    time.sleep(0.01)
            return x * 2

    return Gated()


def _inputs(batch_size: int) -> tuple[Any, ...]:
    import torch

    return (torch.zeros(batch_size, 2),)


workload = dlperf.Workload(name="gated", make_model=_model, make_inputs=_inputs, input_names=("x",),
                           output_names=("y",))
