"""Mixed precision: bf16 autocast where the hardware has bf16 units; fp16 autocast + GradScaler on CUDA."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig


class MixedPrecision:
    name = "precision"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if current.precision != "fp32":
            return f"already {current.precision}"
        if not ctx.bf16_supported and not ctx.device.startswith("cuda"):
            return "this CPU has no bf16 instructions (avx512_bf16 / amx_bf16)"
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        out = []
        if ctx.bf16_supported:
            out.append(Candidate({"precision": "bf16"}, "bf16 autocast"))
        if ctx.device.startswith("cuda"):
            out.append(Candidate({"precision": "fp16"}, "fp16 autocast + GradScaler"))
        return out


def bf16_supported(device: str) -> bool:
    """Whether bf16 matmuls run natively: compute capability 8.0 or newer on CUDA, or the CPU's avx512_bf16 /
    amx_bf16 flags."""
    import torch

    if device.startswith("cuda"):
        from dlperf._device import cuda_bf16_native

        return cuda_bf16_native(device)
    from dlperf.measure.env import cpu_flags

    if set(cpu_flags()) & {"avx512_bf16", "amx_bf16"}:
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
