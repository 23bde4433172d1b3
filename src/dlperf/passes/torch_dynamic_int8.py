"""Dynamic int8 for nn.Linear in plain torch: int8 weights (per output channel), activations quantized
per row at run time, int8 x int8 -> int32 GEMM by `torch._int_mm`, then rescaled to fp32. nn.GRU and nn.LSTM
layers (`recurrent=True`, the default) become torch's own dynamically quantized ones
(`torch.ao.quantization.quantize_dynamic`: int8 weights, fp32 activations quantized at run time, fbgemm/onednn
kernels); an artifact replays the conversion on load, as it does the Linears'.

The quantized layer keeps only plain tensors (int8 weight, fp32 scales, bias) as buffers, so its
state_dict loads with `torch.load(weights_only=True)`. Whether it is faster depends on the CPU's int8
dot-product units (VNNI/AMX) and on the batch: at batch 1 quantizing the activations can cost more than
the GEMM saves; the search measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError
from dlperf.passes._torch_call import torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    import torch

    from dlperf.workload.base import Workload


@dataclass(frozen=True)
class DynamicInt8Config(PassConfig):
    """min_features: leave Linear layers with fewer input or output features, and GRU/LSTM layers with a smaller
    hidden size, in fp32 (tiny GEMMs). recurrent: quantize nn.GRU and nn.LSTM layers too."""

    name: ClassVar[str] = "dynamic_int8"
    order: ClassVar[int] = 40
    sets_precision: ClassVar[bool] = True
    saved_defaults: ClassVar[dict[str, Any]] = {"recurrent": False}  # saved before GRU/LSTM were covered

    min_features: int = 16
    skip: tuple[str, ...] = ()
    recurrent: bool = True

    def __post_init__(self) -> None:
        if self.min_features < 1:
            raise ConfigError(f"dynamic_int8: min_features must be >= 1, got {self.min_features}")

    def before_engine(self) -> str | None:
        return "its int8 layers are torch-only; the engine passes have their own int8"


def _int8_linear_class() -> type:
    import torch
    from torch import nn

    class DynamicInt8Linear(nn.Module):
        """y = (q(x) @ Wq^T) * sx * sw + b with per-row activation and per-channel weight scales."""

        weight_int8: torch.Tensor
        weight_scale: torch.Tensor
        bias: torch.Tensor | None

        def __init__(self, in_features: int, out_features: int, has_bias: bool) -> None:
            super().__init__()
            self.in_features = in_features
            self.out_features = out_features
            self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
            self.register_buffer("weight_scale", torch.ones(1, out_features))
            self.register_buffer("bias", torch.zeros(out_features) if has_bias else None)

        @classmethod
        def from_linear(cls, linear: nn.Linear) -> nn.Module:
            w = linear.weight.detach().float()
            scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
            q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
            mod: Any = cls(linear.in_features, linear.out_features, linear.bias is not None)
            mod.weight_int8.copy_(q)
            mod.weight_scale.copy_(scale[None, :])
            if linear.bias is not None:
                mod.bias.copy_(linear.bias.detach().float())
            return mod

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shape = x.shape
            x2 = x.reshape(-1, shape[-1]).float()
            sx = x2.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            xq = torch.round(x2 / sx).clamp(-127, 127).to(torch.int8)
            acc = torch._int_mm(xq, self.weight_int8.t())
            y = acc.float() * (sx * self.weight_scale)
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*shape[:-1], self.out_features).to(x.dtype)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, int8"

    return DynamicInt8Linear


_CLASS: Any = None


def int8_linear_class() -> Any:
    global _CLASS
    if _CLASS is None:
        _CLASS = _int8_linear_class()
    return _CLASS


def _reads_weights(module: Any) -> bool:
    """torch's transformer layers read their Linears' `weight` themselves (the fused fast path's arguments, checked
    in every forward): an int8 Linear in their place failed with "'DynamicInt8Linear' object has no attribute
    'weight'" on any model built of nn.TransformerEncoderLayer."""
    from torch import nn

    return isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer))


def eligible_linears(model: Any, config: DynamicInt8Config) -> list[tuple[Any, str, str]]:
    """(parent, child name, full name) of each nn.Linear the pass replaces: wide enough, not skipped, and not one
    whose parent reads its weight (`_reads_weights`)."""
    from torch import nn

    found = []
    for name, module in model.named_modules():
        if _reads_weights(module):
            continue
        for child_name, child in module.named_children():
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is not nn.Linear or full in config.skip:
                continue
            if min(child.in_features, child.out_features) < config.min_features:
                continue
            found.append((module, child_name, full))
    return found


def eligible_recurrent(model: Any, config: DynamicInt8Config) -> list[str]:
    """The full names of the nn.GRU / nn.LSTM layers the pass quantizes (`config.recurrent`): a hidden size of at least
    `min_features`, not skipped, and no LSTM projection (`proj_size`, which torch's dynamic LSTM does not take)."""
    from torch import nn

    if not config.recurrent:
        return []
    return [name for name, m in model.named_modules()
            if type(m) in (nn.GRU, nn.LSTM) and name and name not in config.skip
            and m.hidden_size >= config.min_features and not getattr(m, "proj_size", 0)]


def quantize_recurrent(model: Any, config: DynamicInt8Config) -> list[str]:
    """Replace the eligible GRU/LSTM layers in place by torch's dynamically quantized ones; returns their names."""
    import warnings

    import torch
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    names = eligible_recurrent(model, config)
    if names:
        with warnings.catch_warnings():  # torch 2.10+ says eager quantization moves to torchao; it still runs
            warnings.simplefilter("ignore")
            quantize_dynamic(model, {name: default_dynamic_qconfig for name in names}, dtype=torch.qint8,
                             inplace=True)
    return names


def quantize_linears(model: Any, config: DynamicInt8Config) -> list[str]:
    """Replace eligible nn.Linear children in place (`eligible_linears`); returns the names replaced."""
    cls = int8_linear_class()
    replaced = []
    for module, child_name, full in eligible_linears(model, config):
        setattr(module, child_name, cls.from_linear(getattr(module, child_name)))
        replaced.append(full)
    return replaced


def int8_note(model: Any, config: DynamicInt8Config, replaced: list[str]) -> str:
    """What the conversion did, naming the Linears left in fp32 and why: '2 Linear layers in dynamic int8' on a
    model of 3 did not say which one stayed fp32, nor that any did."""
    from torch import nn

    done = set(replaced)
    inside = {id(m) for parent in model.modules() if _reads_weights(parent) for m in parent.modules()}
    kept = []
    for name, module in model.named_modules():
        if type(module) is not nn.Linear or name in done:
            continue
        why = ("skipped" if name in config.skip else "inside a transformer layer" if id(module) in inside
               else f"fewer than {config.min_features} features")
        kept.append(f"{name} ({why})")
    note = f"{len(replaced)} of {len(replaced) + len(kept)} Linear layers in dynamic int8"
    if kept:
        shown = ", ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
        note += f"; kept fp32: {shown}"
    return note


def recurrent_note(model: Any, recurrent: list[str]) -> str | None:
    """What the conversion did to the GRU/LSTM layers (None for a model without any): those quantized and those
    left fp32."""
    from torch import nn

    kept = [name for name, m in model.named_modules() if type(m) in (nn.GRU, nn.LSTM)]
    if not recurrent and not kept:
        return None
    note = f"{len(recurrent)} of {len(recurrent) + len(kept)} GRU/LSTM layers in dynamic int8"
    return note + (f"; kept fp32: {', '.join(kept[:5])}" if kept else "")


@register(DynamicInt8Config)
class DynamicInt8:
    def applicable(self, config: DynamicInt8Config, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        if state.precision != "fp32":
            return f"the model is already {state.precision}"
        if ctx.device != "cpu":
            return "torch dynamic int8 (torch._int_mm) is used on CPU here; on GPU use an engine's int8"
        from torch import nn

        assert state.model is not None
        if not eligible_linears(state.model, config) and not eligible_recurrent(state.model, config):
            wide = [m for m in state.model.modules()
                    if type(m) is nn.Linear and min(m.in_features, m.out_features) >= config.min_features]
            if wide and any(_reads_weights(m) for m in state.model.modules()):
                return ("its nn.Linear layers are inside nn.TransformerEncoderLayer/DecoderLayer, which read their "
                        "weights directly (a fused fast path): use onnxruntime or openvino int8 for them")
            linears = [(name, m) for name, m in state.model.named_modules() if type(m) is nn.Linear]
            rnns = [name for name, m in state.model.named_modules() if type(m) in (nn.GRU, nn.LSTM)]
            rnn_why = (f"; its GRU/LSTM layers ({', '.join(rnns[:3])}) have a hidden size under "
                       f"{config.min_features}, an LSTM projection or are skipped" if rnns and config.recurrent
                       else "")
            if not linears:
                return "the model has no nn.Linear" + (rnn_why or (", nn.GRU or nn.LSTM" if config.recurrent else ""))
            # "no nn.Linear with at least 16 features" read as false of a model with nn.Linear(512, 10)
            name, widest = max(linears, key=lambda nm: min(nm[1].in_features, nm[1].out_features))
            return (f"the model has no nn.Linear with at least {config.min_features} input and output features "
                    f"(the widest, {name or 'the model'}, is {widest.in_features} -> {widest.out_features})"
                    + ("" if rnn_why or not config.recurrent else ", and no nn.GRU or nn.LSTM") + rnn_why)
        return None

    def apply(self, config: DynamicInt8Config, state: ModelState, ctx: PassContext) -> ModelState:
        assert state.model is not None
        recurrent = quantize_recurrent(state.model, config)
        replaced = quantize_linears(state.model, config)
        if getattr(state.predict, "model", None) is not None:
            state.predict.model = state.model  # type: ignore[attr-defined]
        state.precision = "int8"
        state.notes.append(int8_note(state.model, config, replaced))
        rnn = recurrent_note(state.model, recurrent)
        if rnn:
            state.notes.append(rnn)
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[DynamicInt8Config]:
    if ctx.device != "cpu":
        return []
    return [DynamicInt8Config()]
