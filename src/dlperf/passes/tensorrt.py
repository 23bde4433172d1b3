"""TensorRT engine pass through Torch-TensorRT (GPU only); the ONNX Runtime TensorRT provider is
`OrtConfig(provider="tensorrt")` in `dlperf.passes.onnxruntime`.

The artifact is Torch-TensorRT's serialized ExportedProgram (`model.ep`, TensorRT engines embedded).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import TORCH_TENSORRT_INSTALL, ConfigError, MissingDependency, OptimizeError, require
from dlperf.measure.bench import half_dtype
from dlperf.measure.env import gpu_index
from dlperf.passes import _engine
from dlperf.passes._torch_call import cast_floats
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from collections.abc import Callable

    from dlperf.workload.base import Workload

PRECISIONS = ("fp32", "fp16", "bf16")
DYNAMIC_MAX_BATCH = 32
"""The largest batch an engine is built for when the config names none (`dlperf serve`'s default max batch size):
a static engine (it was the default) runs its one batch size only, and serve's warm-up and bench's sweep failed."""


@dataclass(frozen=True)
class TensorRtConfig(PassConfig):
    """Compile with Torch-TensorRT for the target CUDA device; `precision` is the widest kernels allowed."""

    name: ClassVar[str] = "tensorrt"
    stage: ClassVar[str] = "engine"

    precision: str = "fp16"
    max_batch_size: int = 0  # 0: batches 1..max(the context's, DYNAMIC_MAX_BATCH)
    optimization_level: int = 3

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"tensorrt precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not 0 <= self.optimization_level <= 5:
            raise ConfigError("tensorrt optimization_level must be in 0..5")
        if self.max_batch_size < 0:
            raise ConfigError("max_batch_size must be >= 0")


def _why_not_here(ctx: PassContext) -> str | None:
    if not ctx.device.startswith("cuda"):
        return f"TensorRT needs a CUDA device (target device is {ctx.device})"
    import torch

    if not torch.cuda.is_available():
        return "TensorRT needs CUDA, and torch sees no CUDA device here"
    try:
        require("torch_tensorrt", "tensorrt", TORCH_TENSORRT_INSTALL)
    except MissingDependency:
        return f"torch_tensorrt is not installed: install {TORCH_TENSORRT_INSTALL}"
    return None


def search_space(workload: Workload, ctx: PassContext) -> list[PassConfig]:
    if _why_not_here(ctx) is not None:
        return []
    return [TensorRtConfig(precision="fp16"), TensorRtConfig(precision="fp32")]


@register(TensorRtConfig)
class TensorRtPass:
    def applicable(self, config: TensorRtConfig, state: ModelState, ctx: PassContext) -> str | None:
        if config.max_batch_size and ctx.batch_size > config.max_batch_size:
            # the Input range would be optimized for a batch above its max, which TensorRT's builder refuses
            return (f"an engine for batches up to max_batch_size {config.max_batch_size} cannot run the batch of "
                    f"{ctx.batch_size} it is measured at")
        return _why_not_here(ctx) or _engine.require_torch_model(state)

    def apply(self, config: TensorRtConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import torch

        trt: Any = require("torch_tensorrt", "tensorrt", TORCH_TENSORRT_INSTALL)
        t0 = time.perf_counter()
        model = state.model
        assert model is not None
        wl = state.workload
        example = tuple(x.to(ctx.device) for x in wl.example_inputs(ctx.batch_size))
        spec = _engine.io_spec(wl, model.to(ctx.device), [example])
        precisions = {"fp32": {torch.float32}, "fp16": {torch.float16, torch.float32},
                      "bf16": {torch.bfloat16, torch.float32}}[config.precision]
        max_b = config.max_batch_size or max(ctx.batch_size, DYNAMIC_MAX_BATCH)
        # fp16/bf16 here means "TensorRT may pick these kernels" (weak typing): Torch-TensorRT 2.10 made strongly
        # typed networks the default, which refuse enabled_precisions beyond fp32 (pytorch/TensorRT#4070), so
        # the weak typing this config asks for is requested explicitly.
        typing = {"use_explicit_typing": False} if config.precision != "fp32" else {}
        low = half_dtype(config.precision)
        cast: Any = None
        try:
            # device: the engine is built for the target GPU (without it Torch-TensorRT builds for the current
            # device, GPU 0 by default, whatever --device cuda:N said)
            specs = _input_specs(trt, example, max_b, None)
            compiled = trt.compile(model, ir="dynamo", inputs=specs, device=target_device(ctx.device),
                                   enabled_precisions=precisions, optimization_level=config.optimization_level,
                                   **typing)
        except Exception as exc:
            if low is None:
                raise OptimizeError(f"Torch-TensorRT could not compile the model: {type(exc).__name__}: {exc}") from exc
            # TensorRT 11 drops weak typing: a strongly typed network runs in the graph's own dtypes, so the
            # graph itself is cast (weights and floating inputs), and outputs come back as float32.
            try:
                typed = copy.deepcopy(model).to(low)
                specs = _input_specs(trt, example, max_b, low)
                compiled = trt.compile(typed, ir="dynamo", inputs=specs,
                                       device=target_device(ctx.device), use_explicit_typing=True,
                                       optimization_level=config.optimization_level)
                cast = low
            except Exception as typed_exc:
                raise OptimizeError(
                    f"Torch-TensorRT could not compile the model: weakly typed with {config.precision} allowed: "
                    f"{type(exc).__name__}: {exc}; strongly typed in {config.precision}: "
                    f"{type(typed_exc).__name__}: {typed_exc}"
                ) from typed_exc
        device = ctx.device
        predict = _predictor(compiled, device, cast)
        saved_example = cast_floats(list(example), cast) if cast is not None else list(example)

        # a batch range whenever the engine takes more than one size (at a search batch of 64, above the default 32,
        # `max_b > batch` made it a one-size engine, which serve then refused)
        dynamic = max_b > 1
        batch_range = [1, max_b] if dynamic else [ctx.batch_size, ctx.batch_size]
        manifest = {"engine": "tensorrt", "precision": config.precision, "device": device, **spec.manifest(),
                    "batch_range": batch_range}
        if cast is not None:
            manifest["typed_as"] = config.precision  # inputs cast to it on the way in, outputs to fp32 on the way out
        notes = [*state.notes, f"Torch-TensorRT {config.precision} on {device}"
                 + (" (strongly typed: the model cast to it)" if cast is not None else "")]

        def exporter(out_dir: Path) -> dict[str, Any]:
            out_dir.mkdir(parents=True, exist_ok=True)
            path = str(out_dir / "model.ep")
            if dynamic:
                # the Input ranges keep the batch dimension dynamic in the saved program (Torch-TensorRT's "saving
                # models with dynamic shapes"); example tensors alone save it at their one batch size
                try:
                    trt.save(compiled, path, arg_inputs=specs)
                    return {**manifest, "files": ["model.ep"]}
                except Exception as exc:  # an older Torch-TensorRT: saved static, and the manifest says so
                    notes.append(f"saved at batch {ctx.batch_size} only: this Torch-TensorRT could not save the "
                                 f"batch range ({type(exc).__name__}: {exc})")
            trt.save(compiled, path, inputs=saved_example)
            return {**manifest, "batch_range": [ctx.batch_size, ctx.batch_size], "files": ["model.ep"]}

        return ModelState(
            workload=wl, model=None, predict=predict, engine="tensorrt", precision=config.precision,
            applied=list(state.applied), notes=notes,
            exporter=exporter, build_s=state.build_s + time.perf_counter() - t0,
        )


def load_artifact(dir: Path, manifest: dict[str, Any]) -> Callable[..., Any]:
    """A callable over a saved Torch-TensorRT program (needs CUDA and torch-tensorrt)."""
    import torch

    # importing it registers the TensorRT runtime ops the program calls
    require("torch_tensorrt", "tensorrt", TORCH_TENSORRT_INSTALL)
    if not torch.cuda.is_available():
        raise OptimizeError("this artifact is a TensorRT engine: loading it needs a CUDA device")
    device = str(manifest.get("device", "cuda"))
    module = torch.export.load(str(Path(dir) / "model.ep")).module()
    return _predictor(module, device, half_dtype(str(manifest.get("typed_as", "fp32"))))


def target_device(device: str) -> str:
    """`device` as Torch-TensorRT takes it: 'cuda:N', with plain 'cuda' made torch's current device. Its `Device`
    reads the index after the colon and has no default: `device="cuda"` raised 'IndexError: list index out of
    range' inside `compile`, and every TensorRT candidate of a search on `--device cuda` failed."""
    return f"cuda:{gpu_index(device)}"


def _input_specs(trt: Any, example: tuple[Any, ...], max_batch: int, cast: Any) -> list[Any]:
    """Torch-TensorRT Input specs of the example inputs (floating ones in `cast` when given); a batch range
    1..max_batch (optimized for the example's batch) when max_batch is above 1."""
    specs = []
    for x in example:
        dtype = cast if cast is not None and x.is_floating_point() else x.dtype
        if max_batch > 1:
            lo, hi = (1, *x.shape[1:]), (max_batch, *x.shape[1:])
            specs.append(trt.Input(min_shape=lo, opt_shape=tuple(x.shape), max_shape=hi, dtype=dtype))
        else:
            specs.append(trt.Input(shape=tuple(x.shape), dtype=dtype))
    return specs


def _predictor(module: Any, device: str, cast: Any) -> Callable[..., Any]:
    """predict(*inputs) on `device`; for a strongly typed engine (`cast`), floating inputs in its dtype and
    floating outputs back in float32, as the original model returns them."""
    import torch

    def predict(*args: Any) -> Any:
        with torch.inference_mode():
            inputs = tuple(a.to(device) for a in args)
            out = module(*(cast_floats(inputs, cast) if cast is not None else inputs))
        return cast_floats(out, torch.float32) if cast is not None else out

    return predict
