"""torchao int8 in torch: static int8 PTQ through PT2E (X86InductorQuantizer, calibrated), or `quantize_`
with weight-only int8 / dynamic int8 configs. In torch 2.13 the PT2E flow lives in torchao, not torch.ao.

On CPU the int8 kernels come from inductor: without `compile=True` the quantized graph runs as reference
quantize/dequantize ops (correct, slow). Layers in `keep_fp32` are left out of quantization.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError, MissingDependency, require
from dlperf.passes import _engine
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from dlperf.workload.base import Workload

METHODS = ("int8-static-pt2e", "int8-weight-only", "int8-dynamic")


@dataclass(frozen=True)
class TorchAoConfig(PassConfig):
    name: ClassVar[str] = "torchao"
    stage: ClassVar[str] = "transform"
    sets_precision: ClassVar[bool] = True

    method: str = "int8-static-pt2e"
    compile: bool = True
    calibration_samples: int = 64
    keep_fp32: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"torchao method must be one of {METHODS}, got {self.method!r}")
        if self.calibration_samples < 1:
            raise ConfigError("calibration_samples must be >= 1")

    def before_engine(self) -> str | None:
        return "its int8 layers are torch-only; the engine passes have their own int8"

    def relative_cost(self) -> int:
        return 3 if self.compile else 1


def search_space(workload: Workload, ctx: PassContext) -> list[PassConfig]:
    if not _engine.installed("torchao"):
        return []
    if ctx.device != "cpu":
        return [TorchAoConfig(method="int8-weight-only")]
    return [TorchAoConfig(method="int8-static-pt2e"), TorchAoConfig(method="int8-dynamic")]


def _pt2e(model: Any, config: TorchAoConfig, samples: list[Any], example: tuple[Any, ...]) -> Any:
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    for name in config.keep_fp32:
        quantizer.set_module_name_qconfig(name, None)
    dynamic = tuple({0: torch.export.Dim.AUTO} for _ in example)  # batch 1 would specialize a named Dim
    with _engine._quiet():
        exported = torch.export.export(model, tuple(example), dynamic_shapes=dynamic).module()
        prepared = prepare_pt2e(exported, quantizer)
        with torch.no_grad():
            for s in samples:
                prepared(*s)
        return _drop_unused(convert_pt2e(prepared))


def _drop_unused(graph_module: Any) -> Any:
    """`graph_module` without the parameters and buffers its graph no longer reads. convert_pt2e folds each
    quantized weight into a new int8 constant and keeps the fp32 weight it came from: the int8 model held both, and
    its size read 1.28x the fp32 model's on a 3-Linear MLP."""
    used = {str(node.target) for node in graph_module.graph.nodes if node.op == "get_attr"}
    for name, _ in [*graph_module.named_parameters(), *graph_module.named_buffers()]:
        # a get_attr of a submodule (a nested graph) reads all of its tensors
        if not any(name == target or name.startswith(target + ".") for target in used):
            owner, _, attr = name.rpartition(".")
            delattr(graph_module.get_submodule(owner) if owner else graph_module, attr)
    return graph_module


def _quantize_(model: Any, config: TorchAoConfig) -> Any:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    weight_only = config.method == "int8-weight-only"
    ao_config = Int8WeightOnlyConfig() if weight_only else Int8DynamicActivationInt8WeightConfig()
    keep = set(config.keep_fp32)

    def wanted(module: Any, fqn: str) -> bool:
        return type(module).__name__ == "Linear" and fqn not in keep

    with _engine._quiet():
        quantize_(model, ao_config, filter_fn=wanted)
    return model


@register(TorchAoConfig)
class TorchAoPass:
    def applicable(self, config: TorchAoConfig, state: ModelState, ctx: PassContext) -> str | None:
        try:
            # torchao's import logs a warning for each optional kernel library its build cannot load ("Failed to load
            # .../_C_mxfp8...so: Could not load this library"), printed by every dlperf.load of a torchao recipe
            with _engine._quiet():
                require("torchao", "quant")
        except MissingDependency:
            return "install dlperf[quant] (torchao is not installed)"
        if state.engine != "torch" or state.model is None:
            return f"torchao quantizes torch models; this one is already converted to {state.engine}"
        if config.method == "int8-static-pt2e" and ctx.device != "cpu":
            return "the PT2E X86 inductor quantizer targets CPUs"
        if state.precision != "fp32":
            return f"the model is already {state.precision}"
        return None

    def apply(self, config: TorchAoConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import copy

        import torch

        t0 = time.perf_counter()
        assert state.model is not None
        model = copy.deepcopy(state.model).eval()
        example = state.workload.example_inputs(max(2, ctx.batch_size))
        notes = [*state.notes, f"torchao {config.method}"]
        if config.method == "int8-static-pt2e":
            # the recipe recalibrates when it is loaded: the same samples then, however they are drawn
            with _engine.reproducible_rng():
                samples = _engine.calibration_samples(state, ctx, config.calibration_samples)
            few = _engine.calibration_note(state, ctx, samples, config.calibration_samples)
            notes += [few] if few else []
            model = _pt2e(model, config, samples, example)
        else:
            model = _quantize_(model, config)
        predict: Any = model
        if config.compile:
            with _engine._quiet():
                predict = torch.compile(model)
                with torch.no_grad():
                    predict(*example)  # compile now, so build_s holds the cost and measurement does not
        return ModelState(
            workload=state.workload, model=model, predict=predict, engine="torch", precision="int8",
            applied=list(state.applied), notes=notes,
            exporter=None, build_s=state.build_s + time.perf_counter() - t0,
        )
