"""Lower precision (bf16 / fp16), by autocast or by casting the weights, only where the hardware has it; on an
Ampere or newer GPU also TF32, fp32 matmuls on tensor cores (convolutions use TF32 there by torch's default).

Whether it helps is decided by measuring: the search space offers a dtype only when the device has
native support (CPU flags, CUDA capability) and, when this machine's calibrated ceilings are cached,
only when that dtype's GEMM ceiling beats fp32's (on a CPU without AMX, bf16 runs at half fp32 speed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError
from dlperf.measure.bench import half_dtype, has_fused_attention
from dlperf.passes._torch_call import torch_call, torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from dlperf.workload.base import Workload

CPU_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
UNAVAILABLE_REASON = ""


@dataclass(frozen=True)
class PrecisionConfig(PassConfig):
    """dtype: 'bf16' | 'fp16' | 'tf32' (CUDA only: fp32 weights and activations, matmuls on TF32 tensor cores);
    mode: 'autocast' (per-op, keeps fp32 where unsafe) | 'cast' (all weights; not for tf32)."""

    name: ClassVar[str] = "precision"
    order: ClassVar[int] = 60
    sets_precision: ClassVar[bool] = True

    dtype: str = "bf16"
    mode: str = "autocast"

    def __post_init__(self) -> None:
        if self.dtype not in ("bf16", "fp16", "tf32"):
            raise ConfigError(f"precision: dtype must be bf16, fp16 or tf32, got '{self.dtype}'")
        if self.mode not in ("autocast", "cast"):
            raise ConfigError(f"precision: mode must be autocast or cast, got '{self.mode}'")
        if self.dtype == "tf32" and self.mode == "cast":
            raise ConfigError("precision: tf32 keeps fp32 tensors (only matmuls run on TF32 tensor cores): it has no "
                              "cast mode; leave mode out")

    def before_engine(self) -> str | None:
        if self.mode == "autocast":
            return "autocast only changes how torch calls the model"
        return f"the engine passes convert an fp32 model, not a {self.dtype} one (they have their own precisions)"


def hardware_reason(dtype: str, device: str, cpu_flags: tuple[str, ...]) -> str | None:
    """Why `dtype` has no native support on `device`, or None when it has."""
    if device.startswith("cuda"):
        import torch

        from dlperf._device import cuda_bf16_native

        if dtype == "bf16" and not cuda_bf16_native(device):
            return "this GPU has no native bf16 (compute capability below 8.0: torch would emulate it, slower)"
        if dtype == "tf32" and torch.cuda.get_device_capability(device)[0] < 8:
            return "TF32 tensor cores need an Ampere or newer GPU (compute capability 8.0)"
        return None
    if dtype == "tf32":
        return "TF32 is a mode of NVIDIA GPUs' tensor cores (Ampere or newer), not of a CPU"
    wanted = CPU_FLAGS[dtype]
    if not set(wanted) & set(cpu_flags):
        return f"no native {dtype} on this CPU (flags lack {'/'.join(wanted)})"
    return None


@register(PrecisionConfig)
class Precision:
    def applicable(self, config: PrecisionConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        if state.precision != "fp32":
            return f"the model is already {state.precision}"
        return hardware_reason(config.dtype, ctx.device, ctx.cpu_flags)

    def apply(self, config: PrecisionConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import torch

        assert state.model is not None
        call = torch_call(state)
        call.device_type = "cuda" if ctx.device.startswith("cuda") else "cpu"
        if config.dtype == "tf32":
            call.tf32 = True
            state.precision = "tf32"
            return state
        dtype = half_dtype(config.dtype)  # bf16 or fp16: the config checks
        if config.mode == "autocast":
            call.autocast_dtype = dtype
            # torch's fused attention fast path ignores CPU autocast and fails on its bf16/fp16 activations
            call.mha_fastpath_off = call.device_type == "cpu" and has_fused_attention(state.model)
        else:
            state.model = state.model.to(dtype)
            call.model = state.model
            call.input_dtype = dtype
        # Outputs come back in fp32, like the original model's.
        call.output_dtype = torch.float32
        state.precision = config.dtype
        return state


def _ceiling_reason(dtype: str, device: str) -> str | None:
    """When ceilings are cached for this machine: why `dtype` is not worth trying (slower GEMMs than fp32)."""
    try:
        from dlperf.calibrate.ceilings import get_ceilings

        ceilings: Any = get_ceilings(device, measure_if_missing=False)
    except Exception:
        return None
    fp32 = ceilings.peak_flops("fp32")
    low = ceilings.peak_flops(dtype)
    if fp32 and low is not None and low < fp32:
        return f"{dtype} GEMM here peaks at {low / 1e9:.0f} GFLOP/s vs fp32 {fp32 / 1e9:.0f} (dlperf calibrate)"
    return None


def search_space(workload: Workload, ctx: PassContext) -> list[PrecisionConfig]:
    global UNAVAILABLE_REASON
    configs = []
    reasons = []
    for dtype in ("bf16", "fp16"):
        reason = hardware_reason(dtype, ctx.device, ctx.cpu_flags) or _ceiling_reason(dtype, ctx.device)
        if reason:
            reasons.append(reason)
            continue
        configs.append(PrecisionConfig(dtype=dtype, mode="autocast"))
        if ctx.device.startswith("cuda"):
            configs.append(PrecisionConfig(dtype=dtype, mode="cast"))
    if ctx.device.startswith("cuda"):
        reason = hardware_reason("tf32", ctx.device, ctx.cpu_flags)
        if reason:
            reasons.append(reason)
        else:
            configs.append(PrecisionConfig(dtype="tf32"))
    UNAVAILABLE_REASON = "; ".join(reasons)
    return configs
