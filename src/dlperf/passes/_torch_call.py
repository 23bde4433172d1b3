"""The callable that torch-side passes build up: a module plus how to call it (grad mode, layout, dtype).

Torch passes change `state.model` and the fields of one `TorchCall` (state.predict), so that their
effects compose in any order: hygiene turns on inference mode, channels_last converts 4-D inputs,
precision casts or autocasts, compile swaps in the compiled module.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlperf.passes.base import ModelState

_TF32 = threading.Lock()
_tf32_calls = 0
"""tf32 calls running now, in any thread: the first sets the process-wide matmul precision to 'high' and the last
puts back what was there. Each call set and restored it on its own, so two overlapping calls (a server's instance
threads) left it at 'high' for good. The setting is process-wide, so an fp32 model called while a tf32 call runs
in another thread runs on TF32 too: torch has no per-thread setting."""
_tf32_before = "highest"


class TorchCall:
    """predict(*inputs) for a torch module, with the call-time settings passes chose."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.compiled: Any = None
        self.inference_mode = False
        self.channels_last = False
        self.autocast_dtype: Any = None
        self.device_type = "cpu"
        self.input_dtype: Any = None
        self.output_dtype: Any = None
        # fp32 matmuls on TF32 tensor cores (torch.set_float32_matmul_precision('high')) during the call only:
        # the setting is global, and an A/B runs this model beside the original in one process
        self.tf32 = False
        # torch's fused attention fast path (nn.TransformerEncoderLayer, nn.MultiheadAttention in eval under no_grad)
        # off during the call: on the CPU it ignores autocast and fails on the bf16 activations autocast hands it
        # ("expected scalar type Float but found BFloat16"), since it only checks CUDA's autocast
        self.mha_fastpath_off = False

    @property
    def target(self) -> Any:
        return self.compiled if self.compiled is not None else self.model

    def prepare_inputs(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        import torch

        if not (self.channels_last or self.input_dtype is not None):
            return inputs
        out = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                if self.input_dtype is not None and x.is_floating_point():
                    x = x.to(self.input_dtype)
                if self.channels_last and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
            out.append(x)
        return tuple(out)

    def __call__(self, *inputs: Any) -> Any:
        import torch

        if self.tf32:
            global _tf32_calls, _tf32_before
            with _TF32:
                if _tf32_calls == 0:
                    _tf32_before = torch.get_float32_matmul_precision()
                    torch.set_float32_matmul_precision("high")
                _tf32_calls += 1
            try:
                return self._call(inputs)
            finally:
                with _TF32:
                    _tf32_calls -= 1
                    if _tf32_calls == 0:
                        torch.set_float32_matmul_precision(_tf32_before)
        return self._call(inputs)

    def _call(self, inputs: tuple[Any, ...]) -> Any:
        import torch

        # Kept lean: at batch 1 a small model runs in ~100 µs, where an ExitStack alone would show.
        if self.channels_last or self.input_dtype is not None:
            inputs = self.prepare_inputs(inputs)
        target = self.target
        if self.mha_fastpath_off:
            before = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                out = self._autocast_call(target, inputs)
            finally:
                torch.backends.mha.set_fastpath_enabled(before)
        else:
            out = self._autocast_call(target, inputs)
        if self.output_dtype is not None:
            out = cast_floats(out, self.output_dtype)
        return out

    def _autocast_call(self, target: Any, inputs: tuple[Any, ...]) -> Any:
        import torch

        if self.autocast_dtype is not None:
            if self.inference_mode:
                with torch.inference_mode(), torch.autocast(self.device_type, dtype=self.autocast_dtype):
                    out = target(*inputs)
            else:
                with torch.autocast(self.device_type, dtype=self.autocast_dtype):
                    out = target(*inputs)
        elif self.inference_mode:
            with torch.inference_mode():
                out = target(*inputs)
        else:
            out = target(*inputs)
        return out


def cast_floats(value: Any, dtype: Any) -> Any:
    """Cast every floating tensor inside a (nested) output to `dtype`."""
    from dlperf.workload.base import map_tensors

    return map_tensors(value, lambda t: t.to(dtype) if t.is_floating_point() else t)


def torch_call(state: ModelState) -> TorchCall:
    """The state's TorchCall, created around state.model on first use."""
    if isinstance(state.predict, TorchCall):
        return state.predict
    if state.model is None:
        raise ValueError("this state has no torch model")
    call = TorchCall(state.model)
    state.predict = call
    return call


def torch_reason(state: ModelState) -> str | None:
    """Why a torch pass cannot apply to this state (an engine already converted it), or None."""
    if state.engine != "torch" or state.model is None:
        return f"the model was already converted to {state.engine}; torch passes apply before an engine"
    return None


def has_module(model: Any, type_names: tuple[str, ...]) -> bool:
    return any(type(m).__name__ in type_names for m in model.modules())
