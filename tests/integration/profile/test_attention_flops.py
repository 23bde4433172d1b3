"""Scaled-dot-product attention's FLOPs in a real profiled training step: the forward by its query, key and value,
the backward by its own arguments (grad_out first) as 2x the forward, the model FLOPs train's MFU counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dlperf.profile.analyzers import operators
from dlperf.profile.capture import CaptureConfig, StepOptions, capture
from dlperf.workload.base import TrainSpec, Workload
from tests.unit.profile.builders import CEILINGS

pytestmark = pytest.mark.integration

B, H, L, S, D, DV = 2, 4, 8, 24, 16, 16  # cross-attention, L queries over S keys (DV != D: math path)


class CrossAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(H * D, H * D)
        self.memory_k = torch.nn.Parameter(torch.randn(1, H, S, D))
        self.memory_v = torch.nn.Parameter(torch.randn(1, H, S, DV))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q(x).view(x.shape[0], L, H, D).transpose(1, 2)
        k, v = self.memory_k.expand(x.shape[0], -1, -1, -1), self.memory_v.expand(x.shape[0], -1, -1, -1)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.shape[0], L, H * DV)


def test_attention_backward_counts_twice_the_forward_by_its_own_arguments() -> None:
    def loader(batch_size: int, **kwargs: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.randn(batch_size, L, H * D), torch.zeros(batch_size, L, H * DV))]

    def sgd(params: object) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.01)  # type: ignore[arg-type]

    workload = Workload(name="cross-attention", make_model=CrossAttention,
                        make_inputs=lambda b: (torch.randn(b, L, H * D),),
                        train=TrainSpec(make_loader=loader, loss_fn=F.mse_loss, make_optimizer=sgd, batch_size=B))
    trace = capture(workload, CaptureConfig(mode="train", steps=1, warmup_steps=1, unprofiled_min_duration_s=0.05,
                                            options=StepOptions(threads=1)))
    forward_flops = 2.0 * B * H * L * S * (D + DV)  # QK^T and attention x V
    sdpa = [o for o in trace.ops if o.step >= 0 and "scaled_dot_product" in o.name and o.input_shapes
            and len(o.input_shapes[0]) == 4]
    forward = [o for o in sdpa if "backward" not in o.name]
    backward = [o for o in sdpa if "backward" in o.name]
    assert forward and backward, [o.name for o in sdpa]
    assert {operators.op_bytes_and_flops(o)[1] for o in forward} == {forward_flops}
    # grad_out [B, H, L, DV] first: read as the query it gave L x L x DV scores, 1x the forward's formula
    assert {operators.op_bytes_and_flops(o)[1] for o in backward} == {2 * forward_flops}
    assert operators.op_bytes_and_flops(backward[0])[0] >= B * H * (L * D + S * D + S * DV) * 4  # 3 gradients
    analysis = operators.analyze(trace, CEILINGS)
    row = next(r for r in analysis.operators if r.name == backward[0].name)
    assert row.flops == pytest.approx(2 * forward_flops * len(backward) / len(trace.steps))
