"""ONNX Runtime engine pass: torch -> ONNX (dynamic batch) -> ORT session, fp32 or int8 (dynamic / static QDQ).

Static int8 uses QDQ with per-channel weights, calibrated on the workload's calibration data; with
`keep_fp32="auto"` the most int8-sensitive layers (found by `dlperf.passes.sensitivity`) stay fp32 until
the metric is within `max_metric_drop`. The transformer optimizer fuses attention only for an
eager-attention export; it is offered for transformer workloads.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError, MissingDependency, OptimizeError, PassError, PassNotApplicable, require
from dlperf.passes import _engine
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from collections.abc import Callable

    from dlperf.workload.base import Inputs, Workload

PRECISIONS = ("fp32", "int8-dynamic", "int8-static")
OPT_LEVELS = ("disable", "basic", "extended", "all")
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}


@dataclass(frozen=True)
class OrtConfig(PassConfig):
    """Convert to ONNX Runtime. `keep_fp32`: module names to leave fp32, or "auto" (sensitivity search)."""

    name: ClassVar[str] = "onnxruntime"
    stage: ClassVar[str] = "engine"
    label_omits: ClassVar[tuple[str, ...]] = ("max_metric_drop",)

    precision: str = "fp32"
    provider: str = "cpu"
    opt_level: str = "all"
    transformer_optimizer: bool = False
    per_channel: bool = True
    activation_type: str = "uint8"
    calibration_samples: int = 128
    calibrate_method: str = "minmax"
    keep_fp32: str | tuple[str, ...] = ()
    max_metric_drop: float = 0.01
    max_fallback_trials: int = 5

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"onnxruntime precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.opt_level not in OPT_LEVELS:
            raise ConfigError(f"onnxruntime opt_level must be one of {OPT_LEVELS}, got {self.opt_level!r}")
        if self.provider not in PROVIDERS:
            raise ConfigError(f"onnxruntime provider must be one of {sorted(PROVIDERS)}, got {self.provider!r}")
        if self.activation_type not in ("uint8", "int8"):
            raise ConfigError(f"activation_type must be 'uint8' or 'int8', got {self.activation_type!r}")
        if self.calibrate_method not in ("minmax", "entropy", "percentile"):
            raise ConfigError(f"calibrate_method must be minmax|entropy|percentile, got {self.calibrate_method!r}")
        if isinstance(self.keep_fp32, str) and self.keep_fp32 not in ("", "auto"):
            raise ConfigError("keep_fp32 must be 'auto' or a tuple of module names")
        if self.keep_fp32 and self.precision == "fp32":
            raise ConfigError("keep_fp32 only makes sense with an int8 precision")
        if not self.max_metric_drop >= 0:
            raise ConfigError(f"max_metric_drop must be >= 0, got {self.max_metric_drop}")
        if self.calibration_samples < 1:
            raise ConfigError("calibration_samples must be >= 1")

    def relative_cost(self) -> int:
        return _engine.quantize_cost(self.precision == "int8-static", self.keep_fp32)


def search_space(workload: Workload, ctx: PassContext) -> list[PassConfig]:
    """fp32, dynamic int8 and static int8 (with accuracy-driven fp32 fallback) on the CPU provider; the GPU
    providers when present."""
    if not _engine.installed("onnxruntime", "onnx"):
        return []
    configs: list[PassConfig] = [OrtConfig()]
    if workload.kind == "transformer":
        configs.append(OrtConfig(transformer_optimizer=True))
    if ctx.device == "cpu":
        configs += [OrtConfig(precision="int8-dynamic"), OrtConfig(precision="int8-static", keep_fp32="auto")]
    if ctx.device.startswith("cuda"):
        try:
            ort = require("onnxruntime", "onnx")
        except MissingDependency:
            return []
        available = ort.get_available_providers()  # type: ignore[attr-defined]
        for p in ("cuda", "tensorrt"):
            if PROVIDERS[p] in available:
                configs.append(OrtConfig(provider=p))
    return configs


TRT_MAX_BATCH = 32
"""The largest batch the TensorRT provider's optimization profile covers (at least the batch measured)."""


def tensorrt_options(inputs: Sequence[_engine.TensorSpec], batch: int, cache_dir: Path | None) -> dict[str, str]:
    """The TensorRT provider's options for a model of dynamic batch: an optimization profile from batch 1 to
    max(`batch`, TRT_MAX_BATCH) at `batch` (without one the provider built its engine for the shapes it had seen and
    built it again for each batch outside them: a server's warm-up over batch 1..32 built dozens), and an engine
    cache in `cache_dir`, so a restart does not build them again. No profile where a dimension past the batch is
    dynamic (its range is not known)."""
    options: dict[str, str] = {}
    if cache_dir is not None:
        options.update(trt_engine_cache_enable="True", trt_engine_cache_path=str(cache_dir))
    if not inputs or any(d < 0 for spec in inputs for d in spec.shape[1:]):
        return options

    def shapes(b: int) -> str:
        return ",".join(f"{spec.name}:{'x'.join(str(d) for d in (b, *spec.shape[1:]))}" for spec in inputs)

    options.update(trt_profile_min_shapes=shapes(1), trt_profile_opt_shapes=shapes(batch),
                   trt_profile_max_shapes=shapes(max(batch, TRT_MAX_BATCH)))
    return options


def provider_list(provider: str, device: str = "cpu", trt: dict[str, str] | None = None) -> list[Any]:
    """The providers an ONNX Runtime session gets for `provider`, with its fallbacks; the GPU ones on `device`'s
    index: without a device_id the CUDA and TensorRT providers run on GPU 0, so a candidate for cuda:1 was measured
    on another GPU than its baseline. `trt`: the TensorRT provider's options besides (`tensorrt_options`)."""
    # TensorRT's provider hands what it cannot build to CUDA's, and both to the CPU's (ONNX Runtime's advice)
    fallbacks = {"cpu": [], "tensorrt": ["cuda", "cpu"]}
    index = int(device.split(":", 1)[1]) if device.startswith("cuda:") and device[5:].isdigit() else 0

    def entry(p: str) -> Any:
        if p == "tensorrt":
            return PROVIDERS[p], {"device_id": index, **(trt or {})}
        return (PROVIDERS[p], {"device_id": index}) if p == "cuda" else PROVIDERS[p]

    return [entry(p) for p in (provider, *fallbacks.get(provider, ["cpu"]))]


def _session(path: Path, provider: str, opt_level: str, threads: int, device: str = "cpu",
             inputs: Sequence[_engine.TensorSpec] = (), batch: int = 1) -> Any:
    ort: Any = require("onnxruntime", "onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[opt_level]
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    trt = tensorrt_options(inputs, batch, _trt_cache_dir()) if provider == "tensorrt" else None
    try:
        sess = ort.InferenceSession(str(path), sess_options=so, providers=provider_list(provider, device, trt))
    except Exception as exc:
        if not trt:
            raise OptimizeError(f"ONNX Runtime could not load {path}: {type(exc).__name__}: {exc}") from exc
        try:  # a provider build that refuses the profile or the cache: its own defaults, as before
            sess = ort.InferenceSession(str(path), sess_options=so, providers=provider_list(provider, device))
        except Exception as plain:
            raise OptimizeError(f"ONNX Runtime could not load {path}: {type(plain).__name__}: {plain}") from plain
    # A provider that fails to initialise (CUDA or cuDNN libraries missing, a driver too old) only logs a
    # warning, and the session runs on the next one: a "CUDA" candidate would be measured on the CPU.
    got = sess.get_providers()
    if not got or got[0] != PROVIDERS[provider]:
        raise OptimizeError(
            f"ONNX Runtime did not start its {PROVIDERS[provider]} for {path} (the session runs on "
            f"{', '.join(got) or 'nothing'}; available here: {', '.join(ort.get_available_providers())}): check "
            "that onnxruntime-gpu matches this machine's CUDA and cuDNN, or use provider 'cpu'"
        )
    return sess


def _predict_fn(sess: Any, spec: _engine.IOSpec) -> Callable[..., Any]:
    names = [s.name for s in spec.inputs]

    def predict(*inputs: Any, **named: Any) -> Any:
        inputs = _engine.positional(inputs, named, spec)
        arrays = _engine.to_numpy(inputs, spec)
        try:
            results = sess.run(None, dict(zip(names, arrays, strict=False)))
        except Exception as exc:  # onnxruntime's InvalidArgument, on three lines
            if "INVALID_ARGUMENT" not in str(exc):
                raise
            said = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise _engine.refused("onnxruntime", spec, arrays, said) from exc
        out = _engine.to_torch(results, spec)
        device = getattr(inputs[0], "device", None) if inputs else None
        if device is None or device.type == "cpu":
            return out
        return tuple(t.to(device) for t in out) if isinstance(out, tuple) else out.to(device)  # like the original

    return predict


class _Reader:
    """onnxruntime.quantization CalibrationDataReader over single-sample inputs."""

    def __init__(self, samples: list[Inputs], names: list[str]) -> None:
        self._it = iter([dict(zip(names, _engine.to_numpy(s), strict=False)) for s in samples])

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)

    def rewind(self) -> None:  # pragma: no cover - not used by MinMax calibration
        pass


def _quantize(config: OrtConfig, src: Path, dst: Path, spec: _engine.IOSpec, samples: list[Inputs],
              exclude_nodes: list[str]) -> Path:
    """Quantize the weighted layers (MatMul/Gemm/Conv with a weight) except `exclude_nodes`; products of two
    activations (attention scores) stay fp32, so keeping every layer fp32 gives back the fp32 model."""
    require("onnx", "onnx")
    import onnx
    from onnxruntime import quantization as q

    extra: dict[str, Any] = {}
    if config.transformer_optimizer:
        extra["DefaultTensorType"] = onnx.TensorProto.FLOAT  # fused ops lack type info for the quantizer
    excluded = set(exclude_nodes)
    targets = [n for n in _engine.onnx_weighted_nodes(src) if n not in excluded]
    if not targets:
        shutil.copyfile(src, dst)
        return dst
    with _engine._quiet():
        if config.precision == "int8-dynamic":
            q.quantize_dynamic(src, dst, per_channel=config.per_channel, weight_type=q.QuantType.QInt8,
                               nodes_to_quantize=_with_gemm_rewrites(src, targets), extra_options=extra)
        else:
            reader = _Reader(samples, [s.name for s in spec.inputs])
            method = {"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
                      "percentile": q.CalibrationMethod.Percentile}[config.calibrate_method]
            act = q.QuantType.QUInt8 if config.activation_type == "uint8" else q.QuantType.QInt8
            extra.update({"WeightSymmetric": True, "ActivationSymmetric": config.activation_type == "int8"})
            q.quantize_static(src, dst, reader, quant_format=q.QuantFormat.QDQ, per_channel=config.per_channel,
                              activation_type=act, weight_type=q.QuantType.QInt8, nodes_to_quantize=targets,
                              calibrate_method=method, extra_options=extra)
    return dst


def _with_gemm_rewrites(src: Path, targets: list[str]) -> list[str]:
    """`targets` plus the names their Gemm nodes get inside `quantize_dynamic`: it first rewrites each Gemm as
    MatMul + Add named '<gemm>_MatMul' and '<gemm>_Add' (onnxruntime.quantization.onnx_model's
    replace_gemm_with_matmul), then matches `nodes_to_quantize` against the new names, so a list of the fp32
    graph's Gemm names quantized no Linear layer. Should the names change, `onnx_int8_layers` catches it."""
    import onnx

    gemms = {n.name for n in onnx.load(str(src), load_external_data=False).graph.node if n.op_type == "Gemm"}
    return [*targets, *(f"{n}_MatMul" for n in targets if n in gemms)]


def _check_quantized(path: Path, weighted: list[str], kept_fp32: tuple[str, ...], fp32_path: Path) -> str:
    """A note on how many layers the quantized graph at `path` computes in int8, and the recurrent layers of the fp32
    graph it leaves fp32; raises when none is int8, so a candidate whose quantization changed nothing is never
    labelled int8. `weighted`: the fp32 graph's weighted layers (`onnx_weighted_nodes`)."""
    n_weighted = len(weighted)
    n_int8 = _engine.onnx_int8_layers(path)
    if n_int8 == 0:
        if kept_fp32:
            raise PassNotApplicable(f"every weighted layer is kept fp32 ({', '.join(kept_fp32)}): no layer is left "
                                    "int8, so this is the fp32 candidate")
        raise PassError(f"ONNX Runtime's quantizer left all {n_weighted} weighted layers fp32 (the graph has no "
                        "integer or dequantized-weight op): not labelled int8")
    note = f"int8: {n_int8} of {n_weighted} weighted layers"
    ops, recurrent, weights = _engine.onnx_recurrent_weights(fp32_path, weighted)
    if ops:  # a GRU tagger read "int8: 1 of 1 weighted layers", its head, with 98% of the weights in the fp32 GRU
        layers = ", ".join(f"{k} {op}" for op, k in ops.items())
        note += (f" (MatMul/Gemm/Conv); {layers} left fp32, with {recurrent / max(1, recurrent + weights):.0%} of "
                 "the layers' weights")
    return note


def _transformer_optimize(src: Path, dst: Path) -> Path:
    from onnxruntime.transformers import optimizer

    with _engine._quiet():
        opt = optimizer.optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0, opt_level=0)
        opt.save_model_to_file(str(dst))
    return dst


@register(OrtConfig)
class OrtPass:
    def applicable(self, config: OrtConfig, state: ModelState, ctx: PassContext) -> str | None:
        try:
            ort: Any = require("onnxruntime", "onnx")
            require("onnx", "onnx")
        except MissingDependency:
            return "install dlperf[onnx] (onnxruntime and onnx are not installed)"
        reason = _engine.require_torch_model(state)
        if reason:
            return reason
        if PROVIDERS[config.provider] not in ort.get_available_providers():
            return (f"ONNX Runtime here has no {PROVIDERS[config.provider]} "
                    f"(available: {', '.join(ort.get_available_providers())})")
        if config.provider in ("cuda", "tensorrt") and not ctx.device.startswith("cuda"):
            return f"the {config.provider} provider needs a CUDA device (target device is {ctx.device})"
        if config.precision != "fp32" and config.provider != "cpu":
            return "int8 through ONNX Runtime quantization is offered on the CPU provider only"
        if config.transformer_optimizer and state.workload.kind != "transformer":
            return "the transformer optimizer only applies to transformer workloads"
        return None

    def apply(self, config: OrtConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import time

        t0 = time.perf_counter()
        assert state.model is not None
        model = _engine.on_cpu(state.model)
        wl = state.workload
        tmp = None
        if ctx.workdir is not None:
            workdir = Path(ctx.workdir) / f"ort-{abs(hash(config)) % 10**8}"
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="dlperf-ort-")
            workdir = Path(tmp.name)
        example = wl.example_inputs(ctx.batch_size)
        # dynamic quantization computes its scales at run time: only static quantization and the sensitivity
        # ranking of keep_fp32="auto" need calibration data (a workload's calibration_inputs that raised failed it)
        samples = (_engine.calibration_samples(state, ctx, config.calibration_samples)
                   if config.precision == "int8-static" or config.keep_fp32 == "auto" else [])
        # every sample's sizes, so a dimension the calibration data varies is dynamic in the graph; the export traces
        # the example inputs, as the other engine passes do (calibration_samples checked the samples against them)
        spec = _engine.io_spec(wl, model, [example, *samples])
        path = _engine.export_onnx(model, example, spec, workdir / "model.onnx", workload=wl)
        if config.transformer_optimizer:
            path = _transformer_optimize(path, workdir / "model.fused.onnx")
        threads = _engine.threads_for(ctx)
        notes = [f"onnxruntime {config.provider} provider, opt level {config.opt_level}, "
                 f"{threads} thread{'' if threads == 1 else 's'}"]
        if config.precision == "int8-static":  # keep_fp32="auto" ranks layers on them too: not a calibration
            few = _engine.calibration_note(state, ctx, samples, config.calibration_samples)
            notes += [few] if few else []
        if config.precision != "fp32":
            fp32_path = path
            weighted = _engine.onnx_weighted_nodes(fp32_path)
            if not weighted:
                raise PassNotApplicable("the ONNX graph has no MatMul, Gemm or Conv with a weight to quantize")

            def build(kept: tuple[str, ...]) -> tuple[Any, Path]:
                nodes = _engine.onnx_layer_nodes(fp32_path, kept)
                excl = [n for ns in nodes.values() for n in ns]
                dst = workdir / f"model.int8.{len(kept)}.onnx"
                _quantize(config, fp32_path, dst, spec, samples, excl)
                return _predict_fn(_session(dst, config.provider, config.opt_level, threads, ctx.device, spec.inputs,
                                            ctx.batch_size), spec), dst

            if config.keep_fp32 == "auto":
                from dlperf.passes import sensitivity

                report = sensitivity.rank_layers(model, samples)
                notes.append(report.describe())
                metric = sensitivity.workload_metric(state, ctx)
                result = sensitivity.fallback_search(
                    report.top(len(report.ranking)), build, metric, config.max_metric_drop, config.max_fallback_trials
                )
                notes.append(result.describe(metric.name, metric.data))
                path = result.artifact
                kept_fp32: tuple[str, ...] = result.kept_fp32
            else:
                kept_fp32 = tuple(config.keep_fp32) if isinstance(config.keep_fp32, tuple) else ()
                _, path = build(kept_fp32)
            if kept_fp32:
                notes.append("kept fp32: " + ", ".join(kept_fp32))
            notes.append(_check_quantized(path, weighted, kept_fp32, fp32_path))
            final = workdir / "model.final.onnx"
            shutil.copyfile(path, final)
            path = final
        sess = _session(path, config.provider, config.opt_level, threads, ctx.device, spec.inputs, ctx.batch_size)
        predict = _predict_fn(sess, spec)
        predict._dlperf_tmp = tmp  # type: ignore[attr-defined]  # keep the temp folder alive with the callable
        manifest = {
            "engine": "onnxruntime",
            "precision": config.precision,
            "provider": config.provider,
            "opt_level": config.opt_level,
            "threads": threads,
            "device": ctx.device,  # the GPU a cuda or tensorrt provider runs on when the artifact is loaded
            **spec.manifest(),
        }
        final_path = path

        def exporter(out_dir: Path) -> dict[str, Any]:
            out_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(final_path, out_dir / "model.onnx")
            return {**manifest, "files": ["model.onnx"]}

        return ModelState(
            workload=wl, model=None, predict=predict, engine="onnxruntime",
            precision="int8" if config.precision != "fp32" else "fp32",
            applied=list(state.applied), notes=[*state.notes, *notes], exporter=exporter,
            build_s=state.build_s + time.perf_counter() - t0,
        )


def _trt_cache_dir() -> Path | None:
    """Where the TensorRT provider keeps its engines (the user cache; None where it cannot be made)."""
    from dlperf._cache import cache_dir

    try:
        folder = cache_dir() / "onnxruntime-tensorrt"
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def load_artifact(dir: Path, manifest: dict[str, Any]) -> Callable[..., Any]:
    """A callable over an exported ONNX Runtime artifact: torch tensors in, torch tensors out."""
    require("onnxruntime", "onnx")
    import torch

    spec = _engine.IOSpec.from_manifest(manifest)
    threads = int(manifest.get("threads") or torch.get_num_threads())
    provider = str(manifest.get("provider", "cpu"))
    sess = _session(Path(dir) / "model.onnx", provider, str(manifest.get("opt_level", "all")), threads,
                    str(manifest.get("device", "cpu")), spec.inputs, int(manifest.get("batch_size") or 1))
    predict = _predict_fn(sess, spec)
    predict.threads = threads  # type: ignore[attr-defined]  # what it runs with, for a caller to report
    return predict
