"""A torch workload that takes and returns bfloat16, as a bf16-cast or autocast model does, for the BF16 test."""

from __future__ import annotations

from typing import Any

import dlperf


def _model() -> Any:
    import torch

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if x.dtype != torch.bfloat16:
                raise TypeError(f"expected a bfloat16 input, got {x.dtype}")
            return x * 2, x.float().sum(dim=1, keepdim=True)

    return Double()


def _inputs(batch_size: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch_size, 4).to(torch.bfloat16),)


workload = dlperf.Workload(name="bf16", make_model=_model, make_inputs=_inputs, input_names=("x",),
                           output_names=("y", "total"))
