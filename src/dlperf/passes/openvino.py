"""OpenVINO engine pass: torch -> OpenVINO model (PyTorch or ONNX frontend) -> compiled CPU model.

Precisions: fp32; int8 weight compression (nncf.compress_weights: int8 weights, activations quantized
dynamically by the runtime); static int8 (nncf.quantize post-training quantization with calibration data,
TRANSFORMER model type and SmoothQuant for transformers, `ignored_scope` for layers kept fp32, found by
the sensitivity search when `keep_fp32="auto"`).
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError, MissingDependency, OptimizeError, PassError, require
from dlperf.passes import _engine
from dlperf.passes._sigstack import preserved_signal_stack
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dlperf.workload.base import Inputs, Workload

PRECISIONS = ("fp32", "int8-weights", "int8-static")
QUANTIZED_OP_TYPES = ("MatMul", "Convolution", "GroupConvolution")


@dataclass(frozen=True)
class OpenVinoConfig(PassConfig):
    """Convert to OpenVINO. `keep_fp32`: module names to leave fp32, or "auto" (sensitivity search)."""

    name: ClassVar[str] = "openvino"
    stage: ClassVar[str] = "engine"
    label_omits: ClassVar[tuple[str, ...]] = ("max_metric_drop",)

    precision: str = "fp32"
    frontend: str = "pytorch"
    weights_mode: str = "int8_asym"
    calibration_samples: int = 300
    model_type: str = "auto"
    preset: str = "auto"
    smooth_quant_alpha: float | None = None
    fast_bias_correction: bool = True
    keep_fp32: str | tuple[str, ...] = ()
    max_metric_drop: float = 0.01
    max_fallback_trials: int = 5
    inference_precision: str = "f32"
    static_shape: bool = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"openvino precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.frontend not in ("pytorch", "onnx"):
            raise ConfigError(f"openvino frontend must be 'pytorch' or 'onnx', got {self.frontend!r}")
        if self.model_type not in ("auto", "transformer", "default"):
            raise ConfigError(f"model_type must be auto|transformer|default, got {self.model_type!r}")
        if self.preset not in ("auto", "performance", "mixed"):
            raise ConfigError(f"preset must be auto|performance|mixed, got {self.preset!r}")
        if self.inference_precision not in ("f32", "bf16", "f16", "auto"):
            raise ConfigError(f"inference_precision must be f32|bf16|f16|auto, got {self.inference_precision!r}")
        if isinstance(self.keep_fp32, str) and self.keep_fp32 not in ("", "auto"):
            raise ConfigError("keep_fp32 must be 'auto' or a tuple of module names")
        if self.keep_fp32 and self.precision == "fp32":
            raise ConfigError("keep_fp32 only makes sense with an int8 precision")
        if self.calibration_samples < 1:
            raise ConfigError("calibration_samples must be >= 1")
        if self.max_metric_drop < 0:
            raise ConfigError(f"max_metric_drop must be >= 0, got {self.max_metric_drop}")

    def relative_cost(self) -> int:
        return _engine.quantize_cost(self.precision == "int8-static", self.keep_fp32)


def search_space(workload: Workload, ctx: PassContext) -> list[PassConfig]:
    """fp32, int8 weight compression and static int8 with accuracy-driven fp32 fallback (CPU only)."""
    if ctx.device != "cpu":
        return []
    if not _engine.installed("openvino"):
        return []
    configs: list[PassConfig] = [OpenVinoConfig()]
    if not _engine.installed("nncf"):
        return configs
    configs += [
        OpenVinoConfig(precision="int8-weights"),
        OpenVinoConfig(precision="int8-static", keep_fp32="auto"),
    ]
    return configs


def _nncf_ready() -> str | None:
    try:
        require("nncf", "openvino")
    except MissingDependency:
        return "install dlperf[openvino] (nncf is not installed)"
    return None


def _compile(ov_model: Any, threads: int, inference_precision: str) -> Any:
    ov: Any = require("openvino", "openvino")
    cfg: dict[str, Any] = {
        "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
    }
    if inference_precision != "auto":
        cfg["INFERENCE_PRECISION_HINT"] = inference_precision
    try:
        with preserved_signal_stack():  # the CPU plugin leaves a dangling alternate signal stack otherwise
            return ov.Core().compile_model(ov_model, "CPU", cfg)
    except Exception as exc:
        raise OptimizeError(f"OpenVINO could not compile the model: {type(exc).__name__}: {exc}") from exc


def _predict_fn(compiled: Any, spec: _engine.IOSpec, static: Any = None,
                static_shapes: list[tuple[int, ...]] | None = None) -> Callable[..., Any]:
    """Run `static` (compiled for exactly `static_shapes`) when the inputs match, else the dynamic model."""
    local = threading.local()  # an infer request is not thread-safe: one per calling thread
    n_out = len(spec.outputs)
    shapes = [tuple(s) for s in static_shapes] if static_shapes else None

    def predict(*inputs: Any, **named: Any) -> Any:
        arrays = _engine.to_numpy(_engine.positional(inputs, named, spec), spec)
        use_static = static is not None and [a.shape for a in arrays] == shapes
        key = "static_req" if use_static else "req"
        req = getattr(local, key, None)
        if req is None:
            req = (static if use_static else compiled).create_infer_request()
            setattr(local, key, req)
        try:
            req.infer(arrays)
        except RuntimeError as exc:  # a shape it was not compiled for: a page of C++ source lines, the reason inside
            raise _engine.refused("OpenVINO", spec, arrays, ov_reason(exc)) from exc
        return _engine.to_torch([req.get_output_tensor(i).data.copy() for i in range(n_out)], spec)

    return predict


def _compiled_predict(ov_model: Any, spec: _engine.IOSpec, threads: int, inference_precision: str,
                      static_shapes: list[tuple[int, ...]] | None) -> Callable[..., Any]:
    """Compile the (dynamic-batch) model, plus a copy reshaped to `static_shapes` when given."""
    static = None
    if static_shapes:
        ov: Any = require("openvino", "openvino")
        fixed = ov_model.clone()
        ports = zip(fixed.inputs, static_shapes, strict=False)
        fixed.reshape({port: ov.PartialShape(list(shape)) for port, shape in ports})
        static = _compile(fixed, threads, inference_precision)
    return _predict_fn(_compile(ov_model, threads, inference_precision), spec, static, static_shapes)


def _op_modules(name: str) -> set[str]:
    """Torch module paths an OpenVINO op may belong to, from its friendly name:
    '__module.a.b/aten::linear/MatMul' -> {'a.b'}; '/conv1/Conv/WithoutBiases' (ONNX) -> {'conv1', 'conv1.Conv'}."""
    if name.startswith("__module."):
        return {name[len("__module."):].split("/", 1)[0]}
    if name.startswith("/"):
        parts = [p for p in name.split("/") if p]
        return {_engine.onnx_scope_to_module("/" + "/".join(parts[:k]) + "/op") for k in range(1, len(parts))}
    return set()


def layer_ops(ov_model: Any, modules: Sequence[str]) -> list[str]:
    """Friendly names of the weighted ops (MatMul, Convolution) that belong to the torch `modules`."""
    wanted = set(modules)
    return [op.get_friendly_name() for op in ov_model.get_ops()
            if op.get_type_name() in QUANTIZED_OP_TYPES and _op_modules(op.get_friendly_name()) & wanted]


def _convert(config: OpenVinoConfig, model: Any, example: Inputs, spec: _engine.IOSpec, workdir: Path,
             workload: Workload | None = None, notes: list[str] | None = None) -> Any:
    """The OpenVINO model through `config.frontend`; where the PyTorch frontend cannot convert it, through an ONNX
    export, with a line in `notes` saying so."""
    notes = notes if notes is not None else []
    ov: Any = require("openvino", "openvino")
    import torch

    with _engine._quiet():
        src: Any = (_engine.export_onnx(model, example, spec, workdir / "model.onnx", workload=workload)
                    if config.frontend == "onnx" else None)
        try:
            if src is not None:
                ov_model = ov.convert_model(str(src))
            else:
                with torch.no_grad():
                    ov_model = ov.convert_model(model, example_input=tuple(example))
        except Exception as exc:  # OpenVINO's OpConversionFailure: C++ source locations, then the ops, then the graph
            said = f"OpenVINO's {'ONNX' if src is not None else 'PyTorch'} frontend could not convert the model: " \
                   f"{conversion_reason(exc)}"
            if src is not None or not _engine.installed("onnx"):
                raise PassError(said) from exc
            # the PyTorch frontend has no rule for some ops the ONNX exporters lower (nn.TransformerEncoder's fast
            # path: aten::_nested_tensor_from_mask): through an ONNX export instead, saying so
            try:
                ov_model = ov.convert_model(str(_engine.export_onnx(model, example, spec, workdir / "model.onnx",
                                                                    workload=workload)))
            except Exception as onnx_exc:
                raise PassError(f"{said}; and through an ONNX export: {_engine.first_line(str(onnx_exc))}") \
                    from onnx_exc
            notes.append(f"converted through the ONNX frontend: the PyTorch frontend could not "
                         f"({conversion_reason(exc)})")
    # Name the inputs and outputs like the workload does (the PyTorch frontend leaves the outputs unnamed, so the IR
    # was unusable by name in OpenVINO itself, its model server or Triton; the ONNX frontend keeps the export's) and
    # free the batch dimension (and any varying one).
    named: set[str] = set()
    for port, s in zip([*ov_model.inputs, *ov_model.outputs], [*spec.inputs, *spec.outputs], strict=False):
        tensor = port.get_tensor()
        if not named & set(tensor.get_names()):  # an output that is an input's (or an earlier output's) tensor
            tensor.set_names({s.name})
            named.add(s.name)
    shapes = {}
    for port, s in zip(ov_model.inputs, spec.inputs, strict=False):
        shapes[port] = ov.PartialShape([ov.Dimension(-1) if d == -1 else ov.Dimension(int(d)) for d in s.shape])
    ov_model.reshape(shapes)
    return ov_model


def _quantize(config: OpenVinoConfig, ov_model: Any, samples: list[Inputs], ignored: list[str],
              workload: Workload) -> Any:
    nncf: Any = require("nncf", "openvino")
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    ignored_scope = nncf.IgnoredScope(names=list(ignored), validate=False) if ignored else None
    with _engine._quiet(), preserved_signal_stack():  # nncf compiles models for calibration
        if config.precision == "int8-weights":
            mode = nncf.CompressWeightsMode(config.weights_mode)
            return nncf.compress_weights(ov_model, mode=mode, ignored_scope=ignored_scope)
        transformer = config.model_type == "transformer" or (
            config.model_type == "auto" and workload.kind == "transformer"
        )
        kwargs: dict[str, Any] = {"subset_size": len(samples), "fast_bias_correction": config.fast_bias_correction}
        if transformer:
            kwargs["model_type"] = nncf.ModelType.TRANSFORMER
        if config.preset != "auto":
            kwargs["preset"] = {"performance": nncf.QuantizationPreset.PERFORMANCE,
                                "mixed": nncf.QuantizationPreset.MIXED}[config.preset]
        if ignored_scope is not None:
            kwargs["ignored_scope"] = ignored_scope
        if config.smooth_quant_alpha is not None:
            kwargs["advanced_parameters"] = AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=config.smooth_quant_alpha)
            )
        data = [_engine.to_numpy(s) for s in samples]
        return nncf.quantize(ov_model, nncf.Dataset(data), **kwargs)


@register(OpenVinoConfig)
class OpenVinoPass:
    def applicable(self, config: OpenVinoConfig, state: ModelState, ctx: PassContext) -> str | None:
        try:
            require("openvino", "openvino")
        except MissingDependency:
            return "install dlperf[openvino] (openvino is not installed)"
        if config.precision != "fp32" and (reason := _nncf_ready()):
            return reason
        if config.frontend == "onnx":
            try:
                require("onnx", "onnx")
            except MissingDependency:
                return "the ONNX frontend needs onnx: install dlperf[onnx]"
        if ctx.device != "cpu":
            return f"this pass targets the OpenVINO CPU device, not {ctx.device}"
        return _engine.require_torch_model(state)

    def apply(self, config: OpenVinoConfig, state: ModelState, ctx: PassContext) -> ModelState:
        t0 = time.perf_counter()
        model = state.model
        assert model is not None
        wl = state.workload
        tmp = tempfile.TemporaryDirectory(prefix="dlperf-ov-")
        workdir = Path(tmp.name)
        example = wl.example_inputs(ctx.batch_size)
        samples = (_engine.calibration_samples(state, ctx, config.calibration_samples)
                   if config.precision == "int8-static" else [])
        spec = _engine.io_spec(wl, model, [example, *samples])  # a size the calibration data varies is dynamic
        converted: list[str] = []
        fp32_model = _convert(config, model, example, spec, workdir, wl, converted)
        threads = _engine.threads_for(ctx)
        static_shapes = [tuple(int(d) for d in x.shape) for x in example] if config.static_shape else None
        frontend = "onnx" if converted else config.frontend
        notes = [f"openvino CPU via the {frontend} frontend, {threads} thread{'' if threads == 1 else 's'}, "
                 f"inference precision {config.inference_precision}", *converted]
        few = _engine.calibration_note(state, ctx, samples, config.calibration_samples) if samples else None
        notes += [few] if few else []
        ov_model = fp32_model
        if config.precision != "fp32":

            def build(kept: tuple[str, ...]) -> tuple[Any, Any]:
                quantized = _quantize(config, fp32_model.clone(), samples, layer_ops(fp32_model, kept), wl)
                return _compiled_predict(quantized, spec, threads, config.inference_precision, None), quantized

            if config.keep_fp32 == "auto":
                from dlperf.passes import sensitivity

                rank_samples = samples or _engine.calibration_samples(state, ctx, 64)
                report = sensitivity.rank_layers(model, rank_samples)
                notes.append(report.describe())
                metric = sensitivity.workload_metric(state, ctx)
                result = sensitivity.fallback_search(
                    report.top(len(report.ranking)), build, metric, config.max_metric_drop, config.max_fallback_trials
                )
                notes.append(result.describe(metric.name, metric.data))
                ov_model, kept_fp32 = result.artifact, result.kept_fp32
            else:
                kept_fp32 = tuple(config.keep_fp32) if isinstance(config.keep_fp32, tuple) else ()
                _, ov_model = build(kept_fp32)
            if kept_fp32:
                notes.append("kept fp32: " + ", ".join(kept_fp32))
        predict = _compiled_predict(ov_model, spec, threads, config.inference_precision, static_shapes)
        tmp.cleanup()
        manifest = {
            "engine": "openvino",
            "precision": config.precision,
            "threads": threads,
            "inference_precision": config.inference_precision,
            "static_shapes": [list(x) for x in static_shapes] if static_shapes else None,
            **spec.manifest(),
        }
        final_model = ov_model

        def exporter(out_dir: Path) -> dict[str, Any]:
            ov: Any = require("openvino", "openvino")
            out_dir.mkdir(parents=True, exist_ok=True)
            ov.save_model(final_model, str(out_dir / "model.xml"), compress_to_fp16=False)
            return {**manifest, "files": ["model.xml", "model.bin"]}

        return ModelState(
            workload=wl, model=None, predict=predict, engine="openvino",
            precision="int8" if config.precision != "fp32" else "fp32",
            applied=list(state.applied), notes=[*state.notes, *notes], exporter=exporter,
            build_s=state.build_s + time.perf_counter() - t0,
        )


def load_artifact(dir: Path, manifest: dict[str, Any]) -> Callable[..., Any]:
    """A callable over an exported OpenVINO IR: torch tensors in, torch tensors out."""
    ov: Any = require("openvino", "openvino")
    import torch

    spec = _engine.IOSpec.from_manifest(manifest)
    xml = Path(dir) / "model.xml"
    if not xml.exists():
        raise OptimizeError(f"no OpenVINO IR at {xml}")
    threads = int(manifest.get("threads") or torch.get_num_threads())
    static = manifest.get("static_shapes")
    try:
        ov_model = ov.Core().read_model(str(xml))
        predict = _compiled_predict(ov_model, spec, threads, str(manifest.get("inference_precision", "f32")),
                                    [tuple(int(d) for d in s) for s in static] if static else None)
    except RuntimeError as exc:  # a missing or damaged model.bin, a damaged model.xml: OpenVINO's page of text
        raise OptimizeError(f"OpenVINO could not load the IR {xml} (weights {xml.with_suffix('.bin').name}): "
                            f"{ov_reason(exc)}; the artifact is damaged: export it again") from exc
    predict.threads = threads  # type: ignore[attr-defined]  # what it runs with, for a caller to report
    return predict


def conversion_reason(exc: BaseException) -> str:
    """The ops OpenVINO could not convert, from the summary of its OpConversionFailure ("-- No conversion rule found
    for operations: aten::special_i0e"), on one line; else the first meaningful line of the error. The whole error
    (C++ source locations, a log per op and the TorchScript graph) filled the optimizer's report."""
    lines = [line.strip() for line in str(exc).split("Torch IR graph at exception")[0].splitlines()]
    if "Summary:" in lines:
        summary = [line.lstrip("- ").strip() for line in lines[lines.index("Summary:") + 1:] if line.startswith("--")]
        if summary:
            return "; ".join(summary)
    return _engine.first_line(ov_reason(exc))


def ov_reason(exc: BaseException) -> str:
    """The message under OpenVINO's "Exception from ..." and "Check ... failed at ..." source lines."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return ([line for line in lines if not line.startswith(("Exception from", "Check '"))] or lines
            or [type(exc).__name__])[-1]

