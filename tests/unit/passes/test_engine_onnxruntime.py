"""ONNX Runtime engine pass: fp32 matches torch, int8 stays close, export -> load round trip, applicability."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from dlperf.errors import ConfigError, OptimizeError, PassError, PassNotApplicable
from dlperf.passes import _engine
from dlperf.passes.base import ModelState, PassContext, apply_pass, initial_state, why_not
from dlperf.passes.onnxruntime import PROVIDERS, OrtConfig, load_artifact, search_space
from dlperf.passes.sensitivity import cosine_rows
from dlperf.workload.zoo import get

from .engine_models import gru_tagger, tiny_cnn, tiny_transformer, two_heads

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]

CTX = PassContext(threads=1)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(cosine_rows(a, b).min())


def test_fp32_matches_torch_at_other_batch_sizes_and_round_trips(tmp_path: Path) -> None:
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(OrtConfig(), state, CTX)
    assert new.engine == "onnxruntime" and new.precision == "fp32" and new.model is None
    assert new.notes == ["onnxruntime cpu provider, opt level all, 1 thread"]  # it read "1 threads"
    for b in (1, 7):
        x = wl.example_inputs(b)
        torch.testing.assert_close(new.predict(*x), state.predict(*x).detach(), atol=1e-5, rtol=1e-4)
    assert new.exporter is not None
    manifest = new.exporter(tmp_path)
    assert manifest["engine"] == "onnxruntime" and manifest["files"] == ["model.onnx"]
    assert manifest["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 64]}]
    assert manifest["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]
    loaded = load_artifact(tmp_path, manifest)
    x = wl.example_inputs(3)
    torch.testing.assert_close(loaded(*x), new.predict(*x), atol=0, rtol=0)


def test_gpu_providers_run_on_the_target_device_s_index() -> None:
    """Without a device_id the CUDA and TensorRT providers run on GPU 0: a candidate for cuda:1 ran on GPU 0."""
    from dlperf.passes.onnxruntime import provider_list

    assert provider_list("cuda", "cuda:1") == [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"]
    assert provider_list("tensorrt", "cuda:2") == [("TensorrtExecutionProvider", {"device_id": 2}),
                                                   ("CUDAExecutionProvider", {"device_id": 2}), "CPUExecutionProvider"]
    assert provider_list("cuda", "cuda") == [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    assert provider_list("cpu") == ["CPUExecutionProvider"]


def test_the_tensorrt_provider_gets_a_batch_profile_and_an_engine_cache(tmp_path: Path) -> None:
    """Without an optimization profile the TensorRT provider built its engine again for each batch outside the shapes
    it had seen (a server's warm-up over batch 1..32 built dozens), and without a cache again on every start."""
    from dlperf.passes._engine import TensorSpec
    from dlperf.passes.onnxruntime import provider_list, tensorrt_options

    inputs = (TensorSpec("input_ids", "int64", (-1, 128)), TensorSpec("attention_mask", "int64", (-1, 128)))
    options = tensorrt_options(inputs, 8, tmp_path)
    assert options == {"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(tmp_path),
                       "trt_profile_min_shapes": "input_ids:1x128,attention_mask:1x128",
                       "trt_profile_opt_shapes": "input_ids:8x128,attention_mask:8x128",
                       "trt_profile_max_shapes": "input_ids:32x128,attention_mask:32x128"}
    assert tensorrt_options(inputs, 64, None)["trt_profile_max_shapes"] == "input_ids:64x128,attention_mask:64x128"
    # a dimension past the batch whose range is unknown: no profile, the provider's own shapes
    assert tensorrt_options((TensorSpec("x", "float32", (-1, -1)),), 8, None) == {}
    assert provider_list("tensorrt", "cuda:1", options)[0] == ("TensorrtExecutionProvider", {"device_id": 1, **options})
    assert provider_list("tensorrt", "cuda:1", options)[1] == ("CUDAExecutionProvider", {"device_id": 1})


def test_the_artifact_records_the_device_its_session_runs_on(tmp_path: Path) -> None:
    new = apply_pass(OrtConfig(), initial_state(get("mlp")), CTX)
    assert new.exporter is not None and new.exporter(tmp_path)["device"] == "cpu"


def test_an_artifact_whose_provider_does_not_start_is_refused_not_run_on_the_cpu(tmp_path: Path) -> None:
    """ONNX Runtime runs a session on the next provider, with only a logged warning, when the asked one cannot
    start (here: the CUDA provider in a CPU-only onnxruntime): dlperf says so instead of measuring the CPU."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    wl = get("mlp")
    new = apply_pass(OrtConfig(), initial_state(wl), CTX)
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    with pytest.raises(OptimizeError, match=r"did not start its CUDAExecutionProvider.*runs on CPUExecutionProvider"):
        load_artifact(tmp_path, {**manifest, "provider": "cuda"})
    x = wl.example_inputs(2)
    assert load_artifact(tmp_path, manifest)(*x).shape == (2, 10)  # the CPU provider as exported
    for provider in ("tensorrt", "openvino"):  # every provider name gets its fallback list and the check
        if PROVIDERS[provider] not in ort.get_available_providers():
            with pytest.raises(OptimizeError, match=f"did not start its {PROVIDERS[provider]}"):
                load_artifact(tmp_path, {**manifest, "provider": provider})


def test_tuple_outputs_keep_their_structure() -> None:
    wl = two_heads()
    state = initial_state(wl)
    new = apply_pass(OrtConfig(), state, CTX)
    x = wl.example_inputs(2)
    out, ref = new.predict(*x), state.predict(*x)
    assert isinstance(out, tuple) and len(out) == 2
    for o, r in zip(out, ref, strict=False):
        torch.testing.assert_close(o, r.detach(), atol=1e-5, rtol=1e-4)


def test_static_int8_conv_is_close_and_quantized(tmp_path: Path) -> None:
    wl = tiny_cnn()
    state = initial_state(wl)
    new = apply_pass(OrtConfig(precision="int8-static", calibration_samples=16), state, CTX)
    assert new.precision == "int8"
    x = wl.example_inputs(4)
    assert _cos(new.predict(*x), state.predict(*x)) > 0.98
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    ops = {n.op_type for n in onnx.load(str(tmp_path / "model.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    torch.testing.assert_close(load_artifact(tmp_path, manifest)(*x), new.predict(*x), atol=0, rtol=0)


def test_dynamic_int8_is_close() -> None:
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(OrtConfig(precision="int8-dynamic"), state, CTX)
    x = wl.example_inputs(8)
    assert 0.95 < _cos(new.predict(*x), state.predict(*x)) < 1.0


def test_dynamic_int8_quantizes_every_linear_of_the_mlp(tmp_path: Path) -> None:
    """quantize_dynamic renames each Gemm '<name>_MatMul' before it matches nodes_to_quantize: with the fp32
    graph's names it quantized nothing and the candidate was still labelled int8."""
    new = apply_pass(OrtConfig(precision="int8-dynamic"), initial_state(get("mlp")), CTX)
    new.exporter(tmp_path)  # type: ignore[misc]
    ops = [n.op_type for n in onnx.load(str(tmp_path / "model.onnx")).graph.node]
    assert ops.count("MatMulInteger") == 3 and "Gemm" not in ops and "MatMul" not in ops
    assert _engine.onnx_int8_layers(tmp_path / "model.onnx") == 3
    assert "int8: 3 of 3 weighted layers" in new.notes


@pytest.mark.parametrize("precision", ["int8-dynamic", "int8-static"])
def test_the_int8_note_says_which_recurrent_layers_stay_fp32(precision: str) -> None:
    """A GRU tagger read "int8: 1 of 1 weighted layers" (its head), with nearly all its weights in the fp32 GRU."""
    new = apply_pass(OrtConfig(precision=precision, calibration_samples=4), initial_state(gru_tagger()), CTX)
    gru = 2 * 3 * 24 * (16 + 24)  # W and R of both directions, 3 gates each
    head = 48 * 3
    assert f"int8: 1 of 1 weighted layers (MatMul/Gemm/Conv); 1 GRU left fp32, with {gru / (gru + head):.0%} of the " \
        "layers' weights" in new.notes
    plain = apply_pass(OrtConfig(precision=precision, calibration_samples=4), initial_state(get("mlp")), CTX)
    assert "int8: 3 of 3 weighted layers" in plain.notes  # no recurrent layer: the note as before


@pytest.mark.parametrize("precision", ["int8-dynamic", "int8-static"])
def test_a_quantization_that_changes_nothing_is_not_labelled_int8(precision: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime import quantization

    def copy_only(src: Path, dst: Path, *args: object, **kwargs: object) -> None:
        shutil.copyfile(src, dst)  # what a quantizer matching no node name writes

    monkeypatch.setattr(quantization, "quantize_dynamic", copy_only)
    monkeypatch.setattr(quantization, "quantize_static", copy_only)
    with pytest.raises(PassError, match="left all 3 weighted layers fp32") as info:
        apply_pass(OrtConfig(precision=precision, calibration_samples=4), initial_state(get("mlp")), CTX)
    assert not isinstance(info.value, PassNotApplicable)
    keep_all = OrtConfig(precision=precision, calibration_samples=4, keep_fp32=("0", "2", "4"))
    with pytest.raises(PassNotApplicable, match="this is the fp32 candidate"):
        apply_pass(keep_all, initial_state(get("mlp")), CTX)


def _fp32_nodes(path: Path) -> set[str]:
    """Weighted nodes whose weight (input 1) is a plain fp32 initializer, not dequantized int8."""
    graph = onnx.load(str(path)).graph
    dq_outputs = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return {n.name for n in graph.node if n.op_type in ("MatMul", "Gemm", "Conv") and n.input[1] not in dq_outputs}


def test_keep_fp32_names_leave_those_layers_unquantized(tmp_path: Path) -> None:
    wl = tiny_cnn()
    state = initial_state(wl)
    new = apply_pass(OrtConfig(precision="int8-static", calibration_samples=8, keep_fp32=("conv2",)), state, CTX)
    new.exporter(tmp_path)  # type: ignore[misc]
    fp32 = _fp32_nodes(tmp_path / "model.onnx")
    assert {_engine.onnx_scope_to_module(n) for n in fp32} == {"conv2"}
    assert any("kept fp32: conv2" in n for n in new.notes)


def _drop(config: OrtConfig) -> float:
    """The fidelity drop of the tiny transformer through ORT with `config`, measured here: int8's depends on the
    machine (over 0.002 on the AVX2-only VM of earlier sessions, about 1e-5 on an AVX-512 VNNI one), so budgets
    are set from it."""
    wl = tiny_transformer()
    assert wl.eval is not None
    return 1.0 - wl.eval.evaluate(apply_pass(config, initial_state(wl), CTX).predict)


def test_keep_fp32_auto_meets_a_tight_budget() -> None:
    """A budget just under all-int8's drop: the most sensitive layer goes back to fp32, the others stay int8."""
    budget = 0.9 * _drop(OrtConfig(precision="int8-static", keep_fp32=()))
    assert budget > 0
    wl = tiny_transformer()
    new = apply_pass(OrtConfig(precision="int8-static", keep_fp32="auto", max_metric_drop=budget), initial_state(wl),
                     CTX)
    assert wl.eval is not None
    assert wl.eval.evaluate(new.predict) >= 1.0 - budget * 1.001
    assert any("budget met" in n for n in new.notes)
    assert any(n.startswith("int8 sensitivity") for n in new.notes)
    assert new.precision == "int8"
    assert {"int8: 1 of 4 weighted layers", "int8: 2 of 4 weighted layers", "int8: 3 of 4 weighted layers"} & set(
        new.notes), new.notes


def _with_selection_split(wl: Any, seen: dict[str, list[torch.Tensor]]) -> Any:
    """`wl` with a selection split (the fidelity on example_inputs(24): rows neither its eval data nor its
    calibration rows) and both metrics recording the input ids they run through `predict`."""
    import dataclasses

    from dlperf.workload.base import EvalSpec

    assert wl.eval is not None
    selection_inputs = wl.example_inputs(24)
    with torch.inference_mode():
        reference = wl.build_model().eval()(*selection_inputs)

    def recorded(name: str, evaluate: Any) -> Any:
        def scored(predict: Any) -> float:
            def spy(*args: Any) -> Any:
                seen[name].append(args[0].clone())
                return predict(*args)

            return float(evaluate(spy))

        return scored

    def selection(predict: Any) -> float:
        with torch.inference_mode():
            return float(torch.nn.functional.cosine_similarity(predict(*selection_inputs), reference, dim=1).mean())

    spec = EvalSpec(recorded("eval", wl.eval.evaluate), "fidelity", calibration_inputs=wl.eval.calibration_inputs,
                    selection_evaluate=recorded("selection", selection))
    return dataclasses.replace(wl, eval=spec)


def test_keep_fp32_auto_chooses_its_layers_on_data_the_metric_is_not_judged_on() -> None:
    """keep_fp32="auto" chose the fp32 layers with the workload's evaluate, on the eval data the search then judged the
    candidate by (the reported metric fitted to it). With a selection split the choice never sees the eval data: the
    rows the trials ran and the rows the final metric runs are disjoint, and the note names the data that chose."""
    budget = 0.9 * _drop(OrtConfig(precision="int8-static", keep_fp32=()))
    assert budget > 0
    seen: dict[str, list[torch.Tensor]] = {"eval": [], "selection": []}
    wl = _with_selection_split(tiny_transformer(), seen)
    new = apply_pass(OrtConfig(precision="int8-static", keep_fp32="auto", max_metric_drop=budget), initial_state(wl),
                     CTX)
    assert seen["eval"] == [] and len(seen["selection"]) >= 2  # the fp32 model's score, then each trial's
    chose = {tuple(row.tolist()) for ids in seen["selection"] for row in ids}
    wl.score(new.predict)  # what the search judges the candidate by
    judged = {tuple(row.tolist()) for ids in seen["eval"] for row in ids}
    assert judged and not chose & judged
    mixed = next(n for n in new.notes if n.startswith("mixed precision"))
    assert "chosen on the workload's selection split (EvalSpec.selection_evaluate), not the eval data" in mixed


def test_keep_fp32_auto_without_a_selection_split_says_it_chose_on_the_eval_data() -> None:
    new = apply_pass(OrtConfig(precision="int8-static", keep_fp32="auto", max_metric_drop=1.0),
                     initial_state(tiny_transformer()), CTX)
    mixed = next(n for n in new.notes if n.startswith("mixed precision"))
    assert "chosen on the eval data, which then judges the candidate too" in mixed and "optimistic" in mixed


def test_keep_fp32_auto_that_keeps_every_layer_is_not_an_int8_candidate() -> None:
    """A budget only met with all four layers fp32 (fp32 ORT's own drop, and no more) gave the fp32 model,
    labelled int8."""
    budget = max(0.0, _drop(OrtConfig())) + 1e-7
    with pytest.raises(PassNotApplicable, match=r"every weighted layer is kept fp32 .*this is the fp32 candidate"):
        apply_pass(OrtConfig(precision="int8-static", keep_fp32="auto", max_metric_drop=budget),
                   initial_state(tiny_transformer()), CTX)


def test_transformer_optimizer_applies_only_to_transformers_and_matches() -> None:
    state = initial_state(get("mlp"))
    assert "transformer" in (why_not(OrtConfig(transformer_optimizer=True), state, CTX) or "")
    wl = tiny_transformer()
    state = initial_state(wl)
    new = apply_pass(OrtConfig(transformer_optimizer=True), state, CTX)
    x = wl.example_inputs(2)
    torch.testing.assert_close(new.predict(*x), state.predict(*x), atol=1e-4, rtol=1e-3)


def test_not_applicable_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    state = initial_state(get("mlp"))
    converted = ModelState(workload=state.workload, model=None, predict=state.predict, engine="openvino")
    assert "already converted to openvino" in (why_not(OrtConfig(), converted, CTX) or "")
    assert "TensorrtExecutionProvider" in (why_not(OrtConfig(provider="tensorrt"), state, CTX) or "")
    with pytest.raises(PassNotApplicable, match=r"not applicable: .*already converted"):
        apply_pass(OrtConfig(), converted, CTX)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    assert why_not(OrtConfig(), state, CTX) == "install dlperf[onnx] (onnxruntime and onnx are not installed)"
    assert search_space(state.workload, CTX) == []


def test_an_engine_refuses_a_model_already_quantized_in_torch() -> None:
    from dlperf.passes.openvino import OpenVinoConfig
    from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config

    int8 = apply_pass(DynamicInt8Config(), initial_state(get("mlp")), CTX)
    for config in (OrtConfig(), OpenVinoConfig()):
        assert "already int8 in torch" in (why_not(config, int8, CTX) or ""), config.label()
    assert DynamicInt8Config().before_engine()  # so the search never builds that pipeline


def test_config_validation_and_label() -> None:
    with pytest.raises(ConfigError):
        OrtConfig(precision="int4")
    with pytest.raises(ConfigError):
        OrtConfig(keep_fp32="auto")  # fp32 has nothing to keep
    with pytest.raises(ConfigError):
        OrtConfig(precision="int8-static", keep_fp32="some")
    assert OrtConfig().label() == "onnxruntime"
    label = OrtConfig(precision="int8-static", keep_fp32="auto").label()
    assert label == "onnxruntime(precision=int8-static,keep_fp32=auto)"


def test_search_space_on_cpu() -> None:
    labels = [c.label() for c in search_space(tiny_transformer(), CTX)]
    assert labels == ["onnxruntime", "onnxruntime(transformer_optimizer=True)", "onnxruntime(precision=int8-dynamic)",
                      "onnxruntime(precision=int8-static,keep_fp32=auto)"]


@pytest.mark.parametrize(("node", "module"), [
    ("/0/Gemm", "0"),
    ("/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"),
    ("/layer2/layer2.0/downsample/downsample.0/Conv", "layer2.0.downsample.0"),
    ("/encoder/encoder/layer.0/output/dense/MatMul", "encoder.encoder.layer.0.output.dense"),
])
def test_onnx_scope_to_module(node: str, module: str) -> None:
    assert _engine.onnx_scope_to_module(node) == module


def test_tensorrt_pass_says_why_not_here() -> None:
    from dlperf.passes.tensorrt import TensorRtConfig
    from dlperf.passes.tensorrt import search_space as trt_space

    state = initial_state(get("mlp"))
    assert why_not(TensorRtConfig(), state, CTX) == "TensorRT needs a CUDA device (target device is cpu)"
    assert trt_space(state.workload, CTX) == []
    with pytest.raises(ConfigError):
        TensorRtConfig(precision="int4")


class _ThroughNumpy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.from_numpy(np.tanh(x.detach().numpy())))  # the TorchScript tracer sees a constant


def test_an_export_that_traces_no_input_fails_with_a_short_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph came out with no inputs and ORT failed later with 'Invalid input name'; the dynamo exporter's
    errors run to hundreds of coloured lines."""
    from dlperf.workload.base import Workload

    wl = Workload(name="numpy", make_model=_ThroughNumpy, make_inputs=lambda b: (torch.randn(b, 8),),
                  input_names=("x",))
    real_export = torch.onnx.export

    def export(*args: Any, dynamo: bool = False, **kwargs: Any) -> Any:
        if dynamo:
            raise RuntimeError("\x1b[31m\n====\nFailed to export the model with torch.export.\x1b[0m\n"
                               + "## Report\n" * 500)
        return real_export(*args, dynamo=False, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", export)
    with pytest.raises(PassError) as info:
        apply_pass(OrtConfig(), initial_state(wl), CTX)
    message = str(info.value)
    assert "torchscript exporter: the export traced no use of input(s) x (the graph has no such input" in message
    assert message.endswith("dynamo exporter: RuntimeError: Failed to export the model with torch.export.")
    assert "\x1b" not in message and "Report" not in message


def test_first_line_strips_colour_and_cuts_long_lines() -> None:
    assert _engine.first_line("\x1b[1m\x1b[31m\n  \n=====\nboom: \x1b[0mbad\nmore") == "boom: bad"
    assert len(_engine.first_line("x" * 1000)) == 300
    # the dynamo exporter's advice first, its cause after '## Exception summary' (torch 2.13, an op it cannot convert)
    dynamo = ("Failed to convert the exported program to an ONNX model. \x1b[96mThis is step 3/3\x1b[0m of exporting "
              "the model to ONNX. Next steps:\n- If there is a missing ONNX function, implement it.\n\n"
              "## Exception summary\n\n<class 'torch.onnx._internal.exporter._errors.DispatchError'>: No ONNX "
              "function found for <OpOverload(op='prims.bessel_j0', overload='default')>.\n\u2b06\ufe0f\n")
    assert _engine.first_line(dynamo) == ("DispatchError: No ONNX function found for <OpOverload(op='prims.bessel_j0', "
                                          "overload='default')>.")


def _broken_calibration() -> Any:
    import dataclasses

    from dlperf.workload.base import EvalSpec

    def calibration() -> Any:
        yield get("mlp").example_inputs(2)
        raise RuntimeError("calibration data missing")

    wl = get("mlp")
    spec = EvalSpec(lambda predict: 1.0, "score", calibration_inputs=calibration)
    return dataclasses.replace(wl, eval=spec)


def test_dynamic_int8_needs_no_calibration_data_and_static_names_the_workloads_line() -> None:
    """int8-dynamic called the workload's calibration_inputs, so one that raised failed a candidate that needs no
    calibration; and the error did not say the workload's own code raised, nor where."""
    wl = _broken_calibration()
    new = apply_pass(OrtConfig(precision="int8-dynamic"), initial_state(wl), CTX)
    assert new.precision == "int8"
    with pytest.raises(PassError, match=r"workload 'mlp': its calibration_inputs raised RuntimeError: calibration "
                                        r"data missing\n  File .*test_engine_onnxruntime.py\", line \d+"):
        apply_pass(OrtConfig(precision="int8-static", calibration_samples=8), initial_state(wl), CTX)


def _with_calibration(wl: Any, calibration: Any) -> Any:
    import dataclasses

    from dlperf.workload.base import EvalSpec

    return dataclasses.replace(wl, eval=EvalSpec(lambda predict: 1.0, "score", calibration_inputs=calibration))


def test_calibration_data_the_model_cannot_take_is_named_not_reported_as_an_export_failure() -> None:
    """A [3, 5] calibration batch for a [B, 64] model failed int8-static as "ONNX export failed: torchscript
    exporter: RuntimeError: mat1 and mat2 shapes cannot be multiplied": the graph was exported with it."""
    wl = _with_calibration(get("mlp"), lambda: [(torch.zeros(3, 5),)])
    with pytest.raises(PassError, match=r"^workload 'mlp': its calibration_inputs yielded batch 0 as input 0 \(x\): "
                                        r"float32\[3, 5\], which does not fit the model's example inputs \(input 0 "
                                        r"\(x\): float32\[1, 64\]\): the model refuses its sizes past the batch "
                                        r"dimension \(RuntimeError: mat1 and mat2 shapes cannot be multiplied"):
        apply_pass(OrtConfig(precision="int8-static", calibration_samples=8), initial_state(wl), CTX)


@pytest.mark.parametrize(("batches", "problem"), [
    ([(torch.zeros(4, 64),), (torch.zeros(4, 64), torch.zeros(4, 64))], r"batch 1 as .*: 2 inputs, the model takes 1"),
    ([(torch.zeros(4, 64, dtype=torch.float64),)], r"batch 0 as .*: input 0 \(x\) is float64, not float32"),
    ([(torch.zeros(64),)], r"batch 0 as .*: input 0 \(x\) has 1 dimensions, not 2 \(the first is the batch\)"),
    ([(np.zeros((4, 64), dtype=np.float32),)], r"batch 0 as .*: input 0 \(x\) is a ndarray, not a torch tensor"),
])
def test_calibration_batches_are_checked_against_the_example_inputs(batches: list[Any], problem: str) -> None:
    state = initial_state(_with_calibration(get("mlp"), lambda: batches))
    with pytest.raises(PassError, match=f"^workload 'mlp': its calibration_inputs yielded {problem}"):
        _engine.calibration_samples(state, CTX, 16)


def test_calibration_inputs_that_yield_nothing_are_told_so_not_to_add_calibration_inputs() -> None:
    """`calibration_inputs=lambda: []` was told "no calibration inputs: give the workload an EvalSpec with
    calibration_inputs", though it had one."""
    state = initial_state(_with_calibration(get("mlp"), lambda: []))
    with pytest.raises(PassNotApplicable, match=r"^workload 'mlp': its calibration_inputs\(\) yielded no batches"):
        _engine.calibration_samples(state, CTX, 16)
    state = initial_state(_with_calibration(get("mlp"), lambda: [(torch.zeros(0, 64),)]))
    with pytest.raises(PassNotApplicable, match=r"yielded 1 batch with no rows$"):
        _engine.calibration_samples(state, CTX, 16)
    no_eval = initial_state(tiny_transformer(with_eval=False))  # without calibration_inputs: the example inputs
    assert len(_engine.calibration_samples(no_eval, CTX, 5)) == 5


def _stream(name: str = "stream", most: int | None = None) -> Any:
    """A 4-feature linear model whose make_inputs seeds one generator: row i is the same at every batch size (row i
    is filled with i), as a deterministic user workload's; with `most`, larger batches are refused."""
    from dlperf.workload.base import Workload

    def make_inputs(b: int) -> tuple[torch.Tensor, ...]:
        if most is not None and b > most:
            raise IndexError(f"only {most} rows")
        return (torch.arange(b, dtype=torch.float32)[:, None].repeat(1, 4),)

    return Workload(name, make_model=lambda: torch.nn.Linear(4, 2), make_inputs=make_inputs, kind="mlp")


def test_calibration_without_calibration_inputs_takes_distinct_rows_past_the_held_out_ones() -> None:
    """Without calibration_inputs the rows came from batch sizes 1, 2 ... 24: for a make_inputs that seeds its own
    generator those batches all begin with the same rows, so the 300 samples asked were 24 distinct rows, and the
    config said 300. They are now rows of one larger batch, past the search's held-out fidelity rows."""
    state = initial_state(_stream())
    rows = [float(s[0][0, 0]) for s in _engine.calibration_samples(state, CTX, 300)]
    held = _engine.heldout_rows(CTX.batch_size)
    assert rows == [float(r) for r in range(held.stop, held.stop + 300)]
    at_16 = [float(s[0][0, 0]) for s in _engine.calibration_samples(state, PassContext(batch_size=16), 8)]
    assert min(at_16) >= _engine.heldout_rows(16).stop
    assert _engine.calibration_note(state, CTX, _engine.calibration_samples(state, CTX, 300), 300) is None


def test_a_calibration_set_with_fewer_distinct_rows_than_asked_says_so() -> None:
    """A make_inputs that refuses large batches gets the growing batches 1, 2 ...: 24 distinct rows of the 300
    asked, which the candidate's notes now say; so do calibration_inputs that give fewer rows than asked."""
    state = initial_state(_stream(most=24))
    samples = _engine.calibration_samples(state, CTX, 300)
    assert len(samples) == 300 and _engine.distinct_rows(samples) == 24
    assert _engine.calibration_note(state, CTX, samples, 300) == (
        "calibrated on 24 distinct input rows of the 300 asked (calibration_samples): its example inputs gave 300 "
        "rows (the workload has no calibration_inputs: give its EvalSpec some for a calibration set of its own)")
    user = initial_state(_with_calibration(get("mlp"), lambda: [(torch.randn(5, 64),)]))
    assert _engine.calibration_note(user, CTX, _engine.calibration_samples(user, CTX, 8), 8) == (
        "calibrated on 5 distinct input rows of the 8 asked (calibration_samples): its calibration_inputs gave 5 rows")
    new = apply_pass(OrtConfig(precision="int8-static", calibration_samples=30), state, CTX)
    # batch sizes 1 .. 7 and two rows of 8: rows 0 .. 6
    assert any(n.startswith("calibrated on 7 distinct input rows of the 30 asked") for n in new.notes)


def test_calibration_data_of_another_sequence_length_quantizes_with_that_dimension_dynamic(tmp_path: Path) -> None:
    """Sizes past the batch that the model takes (another sequence length) are accepted, and the graph, exported
    with the example inputs, leaves that dimension dynamic so the calibration runs."""
    g = torch.Generator().manual_seed(7)

    def calibration() -> Any:
        return [(torch.randint(0, 100, (4, n), generator=g), torch.ones(4, n, dtype=torch.int64)) for n in (10, 12, 7)]

    wl = _with_calibration(tiny_transformer(), calibration)
    state = initial_state(wl)
    new = apply_pass(OrtConfig(precision="int8-static", calibration_samples=12), state, CTX)
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    assert [i["shape"] for i in manifest["inputs"]] == [[-1, -1], [-1, -1]]
    x = wl.example_inputs(3)
    assert _cos(new.predict(*x), state.predict(*x)) > 0.95


class _Hidden(torch.nn.Module):
    """Token ids -> hidden states [batch, seq, 32] and their mean [batch, 32]."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(100, 32)
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.lin(self.emb(ids)).relu()
        return hidden, hidden.mean(1)


def test_an_output_that_follows_a_dynamic_sequence_length_is_dynamic_in_the_manifest(tmp_path: Path) -> None:
    """With the sequence length dynamic (calibration data of other lengths), the manifest still gave the hidden
    states the example's length, [-1, 12, 32], and `dlperf serve`'s metadata with it, while the artifact answered
    [3, 10, 32] for 10 tokens."""
    from dlperf.workload.base import EvalSpec, Workload

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return _Hidden()

    def calibration() -> Any:
        return [(torch.randint(0, 100, (4, n)),) for n in (10, 12, 7)]

    wl = Workload("hidden", make, lambda b: (torch.randint(0, 100, (b, 12)),), input_names=("ids",),
                  eval=EvalSpec(evaluate=lambda predict: 1.0, metric_name="m", calibration_inputs=calibration))
    new = apply_pass(OrtConfig(precision="int8-static", calibration_samples=12), initial_state(wl), CTX)
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    assert [i["shape"] for i in manifest["inputs"]] == [[-1, -1]]
    assert [o["shape"] for o in manifest["outputs"]] == [[-1, -1, 32], [-1, 32]]
    hidden, pooled = new.predict(torch.randint(0, 100, (3, 10)))
    assert tuple(hidden.shape) == (3, 10, 32) and tuple(pooled.shape) == (3, 32)


def test_a_loaded_artifact_refuses_extra_or_missing_inputs_as_the_model_does(tmp_path: Path) -> None:
    """An extra positional input was dropped without a word (zip of names and arrays); the model raises."""
    wl = get("mlp")
    new = apply_pass(OrtConfig(), initial_state(wl), CTX)
    manifest = new.exporter(tmp_path)  # type: ignore[misc]
    x = wl.example_inputs(2)
    with pytest.raises(TypeError, match=r"the model takes 1 positional input \(.+\), got 2"):
        load_artifact(tmp_path, manifest)(*x, *x)
    with pytest.raises(TypeError, match="got 0"):
        new.predict()


@pytest.mark.parametrize(("engine"), ["onnxruntime", "openvino"])
def test_a_loaded_artifact_names_the_input_a_user_got_wrong(engine: str, tmp_path: Path) -> None:
    """Misuse of an engine artifact gave "'numpy.ndarray' object has no attribute 'detach'", "unsupported ScalarType
    BFloat16", a page of OpenVINO C++ lines, or nothing at all (OpenVINO cast int64 and float64 silently, and ran
    a [3, 65] input to an empty [0, 10] output); a call by the input's name was refused. Each is now one line
    naming the input, and a keyword call works."""
    if engine == "openvino":
        pytest.importorskip("openvino")
        from dlperf.passes.openvino import OpenVinoConfig
        from dlperf.passes.openvino import load_artifact as load

        config: Any = OpenVinoConfig()
    else:
        config, load = OrtConfig(), load_artifact
    wl = get("mlp")
    state = apply_pass(config, initial_state(wl), CTX)  # kept: its working folder goes with it
    manifest = state.exporter(tmp_path)  # type: ignore[misc]
    f = load(tmp_path, manifest)
    name = manifest["inputs"][0]["name"]
    (x,) = wl.example_inputs(3)
    torch.testing.assert_close(f(**{name: x}), f(x))
    cases: list[tuple[Any, type[Exception], str]] = [
        (x.numpy(), TypeError, rf"^input '{name}' is a numpy\.ndarray: pass a torch tensor, e\.g\. torch\.from_numpy"),
        (x.tolist(), TypeError, rf"^input '{name}' is a list: pass a torch tensor$"),
        (x.double(), TypeError, rf"^input '{name}' is float64, the model takes float32: convert it"),
        (x.long(), TypeError, rf"^input '{name}' is int64, the model takes float32"),
        (x.bfloat16(), TypeError, rf"^input '{name}' is bfloat16, the model takes float32"),
        (x[0], ValueError, rf"^input '{name}' has shape \[64\], the model takes \[-1, 64\] \(-1: any size"),
        (torch.randn(3, 65), ValueError, rf"^input '{name}' has shape \[3, 65\], the model takes \[-1, 64\]"),
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message) as info:
            f(value)
        assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match=r"^the model has no input 'nope': its inputs are "):
        f(nope=x)


def test_dlperf_load_takes_an_engine_artifact_s_threads(tmp_path: Path) -> None:
    """dlperf.load ran an engine artifact with the threads it was exported with; load_artifact and serve --threads
    could set them."""
    import dlperf
    from dlperf.errors import OptimizeError
    from dlperf.optimize.artifact import write_manifest

    wl = get("mlp")
    state = apply_pass(OrtConfig(), initial_state(wl), CTX)
    write_manifest(tmp_path / "art", state.exporter(tmp_path / "art"))  # type: ignore[misc]
    (x,) = wl.example_inputs(2)
    torch.testing.assert_close(dlperf.load(tmp_path / "art", threads=1)(x), dlperf.load(tmp_path / "art")(x))
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(OptimizeError, match=r"^threads must be an integer >= 1 \(or None: the artifact's own\)"):
            dlperf.load(tmp_path / "art", threads=bad)  # type: ignore[arg-type]


class _Eigh(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.linalg.eigh(y @ y.T)[0]  # no ONNX symbolic (opset 17) nor decomposition (dynamo)


def test_a_failed_export_prints_no_graph_and_says_where_the_op_is_called(capfd: pytest.CaptureFixture[str]) -> None:
    """The TorchScript exporter printed 'Torch IR graph at exception: graph(...)' (from C++, on descriptor 1) after
    it failed: a dozen graph lines amid dlperf's output. It is captured; the op's call site goes into the error."""
    from dlperf.workload.base import Workload

    wl = Workload(name="eigh", make_model=_Eigh, make_inputs=lambda b: (torch.randn(b, 8),), input_names=("x",))
    with pytest.raises(PassError) as info:
        apply_pass(OrtConfig(), initial_state(wl), CTX)
    out, err = capfd.readouterr()
    assert "graph(" not in out + err and "Torch IR" not in out + err
    message = str(info.value)
    assert "Exporting the operator 'aten::linalg_eigh' to ONNX opset version 17 is not supported (called at " in message
    assert f"{Path(__file__).name}:" in message.partition("(called at ")[2]


class _BatchInPython(torch.nn.Module):
    """Reads the batch size into Python: a trace keeps the traced batch as a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = int(x.shape[0])
        return self.lin(x).reshape(rows, 2, 3).sum(-1)


class _Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).reshape(x.shape[0], 2, 3).sum(-1)


def _rows_workload(cls: type[torch.nn.Module]) -> Any:
    from dlperf.workload.base import Workload

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return cls()

    return Workload("rows", make, lambda b: (torch.randn(b, 4, generator=torch.Generator().manual_seed(b)),))


def test_an_export_that_fixed_the_traced_batch_is_not_taken_for_a_dynamic_one() -> None:
    """The TorchScript exporter keeps a batch read into Python as the traced constant: its graph, exported 'with a
    dynamic batch', answered 1 row for any batch, and the candidate went on with it. Each exported graph now runs
    at a second batch size first; the torch.export-based exporter traces batch 2 (it fixes a dimension of 1), and
    where neither graph runs at another batch the pass says so."""
    wl = _rows_workload(_BatchInPython)
    state = initial_state(wl)
    try:
        new = apply_pass(OrtConfig(), state, PassContext(threads=1, batch_size=1))
    except PassError as exc:
        assert "torchscript exporter: the graph traced at batch 1 answers 1 rows at batch 2" in str(exc), str(exc)
    else:  # the torch.export-based graph, traced at batch 2, runs at any batch
        x = wl.example_inputs(5)
        with torch.no_grad():
            torch.testing.assert_close(new.predict(*x), state.predict(*x), atol=1e-5, rtol=1e-4)
    plain = _rows_workload(_Plain)  # the batch kept as a tensor size: the TorchScript graph passes the check
    new = apply_pass(OrtConfig(), initial_state(plain), PassContext(threads=1, batch_size=1))
    assert tuple(new.predict(*plain.example_inputs(7)).shape) == (7, 2)
