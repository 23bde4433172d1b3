"""Shared plumbing of the engine passes: ONNX export, input/output specs, numpy <-> torch, calibration data.

Engine predict callables take the model's positional torch tensors and return torch tensors shaped like
the original outputs (one tensor, a tuple of them, or a dict of them by name). The structure is recorded once from a
torch run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import PassError, PassNotApplicable, WorkloadError
from dlperf.workload.names import tensor_name

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from dlperf.passes.base import ModelState, PassContext
    from dlperf.workload.base import Inputs, Workload


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name, e.g. "float32", "int64"
    shape: tuple[int, ...]  # -1 marks a dynamic dimension

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TensorSpec:
        return TensorSpec(str(d["name"]), str(d["dtype"]), tuple(int(s) for s in d["shape"]))


@dataclass(frozen=True)
class IOSpec:
    """Names, dtypes and shapes of a model's inputs and outputs, and whether it returns a tuple or a dict."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tuple_output: bool
    output_keys: tuple[str, ...] = ()
    """The keys of a model that returns a dict of tensors, in its order (the outputs are its values); empty for a
    tensor or a tuple. A Hugging Face-style model returns one: engine passes refused it ('the model returns dict')."""

    def manifest(self) -> dict[str, Any]:
        structure = "dict" if self.output_keys else "tuple" if self.tuple_output else "tensor"
        return {
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "output_structure": structure,
            **({"output_keys": list(self.output_keys)} if self.output_keys else {}),
        }

    @staticmethod
    def from_manifest(manifest: dict[str, Any]) -> IOSpec:
        structure = manifest.get("output_structure", "tensor")
        return IOSpec(
            tuple(TensorSpec.from_dict(d) for d in manifest["inputs"]),
            tuple(TensorSpec.from_dict(d) for d in manifest["outputs"]),
            structure == "tuple",
            tuple(str(k) for k in manifest.get("output_keys", [])) if structure == "dict" else (),
        )


def installed(*modules: str) -> bool:
    """Whether every module can be imported, without importing it: search spaces are built in the search's
    parent process, where importing nncf, openvino or torchao would cost seconds and hundreds of MiB."""
    import importlib.util

    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def quantize_cost(calibrated: bool, keep_fp32: Any) -> int:
    """PassConfig.relative_cost of an engine config: a calibration costs tens of seconds; the fp32 fallback
    search (`keep_fp32="auto"`) repeats it up to `max_fallback_trials` times."""
    if keep_fp32 == "auto":
        return 2
    return 1 if calibrated else 0


def threads_for(ctx: PassContext) -> int:
    """The engine's intra-op thread count: the context's, else torch's (so comparisons are fair)."""
    if ctx.threads:
        return int(ctx.threads)
    import torch

    return int(torch.get_num_threads())


def require_torch_model(state: ModelState) -> str | None:
    """The reason an engine pass cannot start from this state, or None."""
    if state.engine != "torch":
        return f"the model is already converted to {state.engine}; an engine pass must come last"
    if state.model is None:
        return "no torch model to convert"
    if state.precision != "fp32":
        return f"the model is already {state.precision} in torch; engine passes convert an fp32 model"
    return None


def flat_outputs(out: Any) -> tuple[Any, bool, tuple[str, ...]]:
    """(tuple of tensors, whether the model returned a tuple/list, the keys of a dict it returned, in order). The
    exporters flatten a dict of tensors to its values in that order, and the engines' outputs are rebuilt into one."""
    import torch

    if isinstance(out, torch.Tensor):
        return (out,), False, ()
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return tuple(out), True, ()
    if (isinstance(out, dict) and out and all(isinstance(k, str) for k in out)
            and all(isinstance(v, torch.Tensor) for v in out.values())):
        return tuple(out.values()), False, tuple(out)
    raise PassNotApplicable(
        f"the model returns {type(out).__name__}; engine passes need a tensor, a tuple of tensors or a dict of "
        "tensors by name"
    )


def io_spec(workload: Workload, model: nn.Module, samples: Sequence[Inputs]) -> IOSpec:
    """Spec from a torch run on the first sample; dims that differ across samples (and dim 0) are dynamic."""
    import torch

    first = samples[0]
    with torch.inference_mode():
        outs, is_tuple, keys = flat_outputs(model(*first))
    names = list(workload.input_names)
    in_specs = []
    for i, x in enumerate(first):
        if not isinstance(x, torch.Tensor):
            raise PassNotApplicable(f"input {i} is a {type(x).__name__}; engine passes need tensor inputs")
        shape = list(x.shape)
        for s in samples[1:]:
            other = s[i].shape
            shape = [d if j < len(other) and other[j] == d else -1 for j, d in enumerate(shape)]
        if shape:
            shape[0] = -1
        name = names[i] if i < len(names) else tensor_name("input", i)
        in_specs.append(TensorSpec(name, str(x.dtype).replace("torch.", ""), tuple(shape)))
    # a dict's keys name its outputs where the workload names none (or not as many)
    out_names = list(workload.output_names) if len(workload.output_names) == len(outs) else list(keys)
    # an output dimension that follows a dynamic input one (a transformer's hidden states, [batch, seq, dim]) is
    # dynamic too: the manifest said [-1, 32, 128] for an artifact that answers [1, 16, 128], and so did
    # `dlperf serve`'s metadata. One run per other set of input sizes past the batch finds them.
    out_shapes = [list(o.shape) for o in outs]
    seen = {tuple(tuple(x.shape[1:]) for x in first if isinstance(x, torch.Tensor))}
    for sample in samples[1:]:
        sizes = tuple(tuple(x.shape[1:]) for x in sample if isinstance(x, torch.Tensor))
        if sizes in seen:
            continue
        seen.add(sizes)
        with torch.inference_mode():
            others = flat_outputs(model(*sample))[0]
        out_shapes = [[d if j < len(o.shape) and o.shape[j] == d else -1 for j, d in enumerate(shape)]
                      for shape, o in zip(out_shapes, others, strict=False)]
    out_specs = []
    for i, o in enumerate(outs):
        shape = out_shapes[i]
        if shape:
            shape[0] = -1
        name = out_names[i] if i < len(out_names) and len(out_names) == len(outs) else tensor_name("output", i)
        out_specs.append(TensorSpec(name, str(o.dtype).replace("torch.", ""), tuple(shape)))
    return IOSpec(tuple(in_specs), tuple(out_specs), is_tuple, keys)


def on_cpu(model: nn.Module) -> nn.Module:
    """The model itself if it is on the CPU, else a CPU copy (the caller's model stays where it is): engines
    export and calibrate on the CPU with the workload's CPU inputs, then run where their provider runs."""
    import copy

    import torch

    if all(t.device.type == "cpu" for t in (*model.parameters(), *model.buffers())):
        return model
    return copy.deepcopy(model).to(torch.device("cpu"))


def to_numpy(inputs: Inputs, spec: IOSpec | None = None) -> list[np.ndarray]:
    """The inputs as numpy arrays; with `spec`, as many as the model takes or a TypeError, as the original model's
    forward raises (an engine would drop an extra input, or fail on a missing one with its own message)."""
    if spec is not None and len(inputs) != len(spec.inputs):
        names = ", ".join(s.name for s in spec.inputs)
        raise TypeError(f"the model takes {len(spec.inputs)} positional input{'s' if len(spec.inputs) != 1 else ''} "
                        f"({names}), got {len(inputs)}")
    if spec is not None:
        for x, want in zip(inputs, spec.inputs, strict=True):
            check_input(x, want)
    return [x.detach().cpu().contiguous().numpy() for x in inputs]


def positional(inputs: tuple[Any, ...], named: dict[str, Any], spec: IOSpec) -> tuple[Any, ...]:
    """The inputs in the model's order, those given by keyword placed by the names the manifest lists (the
    original model takes `f(x=...)`; the engine's call refused it as an unexpected keyword argument)."""
    if not named:
        return inputs
    names = [s.name for s in spec.inputs]
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise TypeError(f"the model has no input {', '.join(map(repr, unknown))}: its inputs are {', '.join(names)}")
    given = dict(zip(names, inputs, strict=False))
    twice = sorted(set(given) & set(named))
    if twice:
        raise TypeError(f"input {', '.join(map(repr, twice))} given by position and by name")
    given.update(named)
    missing = [n for n in names if n not in given]
    if missing:
        raise TypeError(f"the model takes {len(names)} inputs ({', '.join(names)}), missing {', '.join(missing)}")
    return tuple(given[n] for n in names)


def refused(engine: str, spec: IOSpec, arrays: Sequence[Any], reason: str) -> ValueError:
    """The one-line error for inputs an engine refused: what was given, what the model takes, the engine's reason."""
    given = ", ".join(f"{s.name} {list(a.shape)}" for s, a in zip(spec.inputs, arrays, strict=False))
    takes = ", ".join(f"{s.name} {list(s.shape)}" for s in spec.inputs)
    return ValueError(f"{engine} refused the inputs ({given}; the model takes {takes}, -1: any size): {reason}")


def check_input(x: Any, want: TensorSpec) -> None:
    """A TypeError or ValueError naming the input when `x` is not a tensor of the dtype and shape the engine model
    was exported with: the engines said "'numpy.ndarray' object has no attribute 'detach'", "unsupported ScalarType
    BFloat16" or a page of C++ source lines, and OpenVINO cast an int64 or float64 input silently where
    onnxruntime and the original model refuse it, and ran a wrong size to an empty output."""
    import torch

    if not isinstance(x, torch.Tensor):
        fix = ", e.g. torch.from_numpy(x)" if type(x).__module__ == "numpy" else ""
        kind = type(x).__name__ if type(x).__module__ == "builtins" else f"{type(x).__module__}.{type(x).__name__}"
        raise TypeError(f"input '{want.name}' is a {kind}: pass a torch tensor{fix}")
    dtype = str(x.dtype).replace("torch.", "")
    if dtype != want.dtype:
        raise TypeError(f"input '{want.name}' is {dtype}, the model takes {want.dtype}: convert it, e.g. "
                        f"x.to(torch.{want.dtype})")
    if x.dim() != len(want.shape) or any(d not in (-1, n) for d, n in zip(want.shape, x.shape, strict=False)):
        # OpenVINO ran a [3, 65] input through a [-1, 64] model and answered an empty [0, 10] output
        raise ValueError(f"input '{want.name}' has shape {list(x.shape)}, the model takes {list(want.shape)} "
                         "(-1: any size; the first dimension is the batch)")


def to_torch(arrays: Sequence[Any], spec: IOSpec) -> Any:
    import numpy as np
    import torch

    # np.asarray(order="C"), not np.ascontiguousarray, which makes a 0-d output (a model's scalar) 1-d: shape [1]
    outs = tuple(torch.from_numpy(np.asarray(a, order="C")) for a in arrays)
    if spec.output_keys:
        return dict(zip(spec.output_keys, outs, strict=True))
    return outs if spec.tuple_output else outs[0]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporter's deprecation chatter and prints (it runs inside library calls)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _fd1_captured() -> Iterator[list[str]]:
    """File descriptor 1 into a temporary file for the block; what was written there is appended to the yielded
    list. The TorchScript exporter prints 'Torch IR graph at exception: graph(...)' from C++ after a failed export
    (torch's `setup_onnx_logging` turns its ONNX log on for good: it tests the function `_jit_is_onnx_log_enabled`,
    always true, not its result), past `contextlib.redirect_stdout`: dozens of graph lines amid dlperf's output."""
    captured: list[str] = []
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (a daemon): nothing to capture
        yield captured
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield captured
        finally:
            _flush_c_stdout()  # C stdio buffers it when 1 is not a terminal: flushed later, it reached the real stdout
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            captured.append(tmp.read().decode(errors="replace"))


def _flush_c_stdout() -> None:
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


_OP = re.compile(r"operator '([\w:.]+)'")


def _op_source(error: str, log: str) -> str:
    """Where in the model's code the operator an export error names is called, from the exporter's graph dump
    (its lines end '# FILE:LINE:COL'): ' (called at model.py:10)', or '' when the log does not say."""
    op = _OP.search(error)
    if op is None:
        return ""
    for line in log.splitlines():
        if f"= {op.group(1)}(" in line and " # " in line:
            where = line.rpartition(" # ")[2].strip()
            return f" (called at {where.rsplit(':', 1)[0] if where.count(':') >= 2 else where})"
    return ""


def export_onnx(model: nn.Module, sample: Inputs, spec: IOSpec, path: Path, opset: int = 17,
                workload: Workload | None = None) -> Path:
    """torch -> ONNX with the TorchScript exporter (fast, keeps module paths in node names, which
    `onnx_layer_nodes` maps back to torch modules); falls back to the torch.export-based exporter.

    With `workload`, each exported graph must also run at another batch size (`_batch_check`), else the next
    exporter is tried; and the torch.export-based one traces a batch of 2 where `sample` is one of 1: torch.export
    fixes a dimension of size 1, so a graph traced at batch 1 ran at that batch only (nn.TransformerEncoder, whose
    fast path the TorchScript exporter cannot trace, ran at 1 and failed at 256 in the workload's metric, 'cannot
    reshape {24,256,64} to {24,64}')."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    in_names = [s.name for s in spec.inputs]
    out_names = [s.name for s in spec.outputs]
    dynamic_axes: dict[str, dict[int, str]] = {}
    for s in (*spec.inputs, *spec.outputs):
        dims = {j: ("batch" if j == 0 else f"{s.name}_d{j}") for j, d in enumerate(s.shape) if d == -1}
        if dims:
            dynamic_axes[s.name] = dims
    from dlperf.workload.base import _batch_of

    batch = _batch_of(sample)
    traced_two = workload is not None and batch == 1 and all(s.shape[:1] == (-1,) for s in spec.inputs)
    errors = []
    for dynamo in (False, True):
        exporter = "dynamo" if dynamo else "torchscript"
        traced = tuple(workload.example_inputs(2)) if dynamo and traced_two and workload is not None else sample
        log: list[str] = []
        try:
            with _quiet(), _fd1_captured() as log, torch.inference_mode(False), torch.no_grad():
                program = torch.onnx.export(
                    model, tuple(traced), None if dynamo else str(path), input_names=in_names,
                    output_names=out_names, dynamic_axes=dynamic_axes,
                    opset_version=opset if not dynamo else max(opset, 18), dynamo=dynamo, external_data=False,
                )
                if program is not None:
                    _rename_clashing_values(program.model.graph)
                    program.save(str(path), external_data=False)
        except Exception as exc:  # try the other exporter, report both if neither works
            reason = first_line(str(exc))
            errors.append(f"{exporter} exporter: {type(exc).__name__}: {reason}{_op_source(reason, ''.join(log))}")
            continue
        missing = untraced_inputs(path, in_names)
        if missing:
            # a forward that leaves torch (numpy, .item(), .tolist()) is traced as constants: the graph ignores it
            errors.append(f"{exporter} exporter: the export traced no use of input(s) {', '.join(missing)} (the "
                          "graph has no such input: does the forward go through numpy or Python values?)")
            continue
        wrong = _batch_check(path, sample, spec, workload) if workload is not None else None
        if wrong is None:
            return path
        errors.append(f"{exporter} exporter: {wrong}")
    raise PassError("ONNX export failed: " + " | ".join(errors))


def _rename_clashing_values(graph: Any) -> None:
    """Give a fresh name to every value inside an `onnx_ir` graph that bears the name of one of its outputs.

    torch.onnx's dynamo exporter renames the graph's outputs to `output_names` without looking at the names
    already inside: an output named `embedding` beside the value its `aten.embedding` node made (also `embedding`)
    gave a graph ONNX Runtime refuses, "Duplicate definition of name (embedding)"."""
    from onnx_ir import traversal

    outputs = {id(v) for v in graph.outputs}
    wanted = {v.name for v in graph.outputs}
    nodes = list(traversal.RecursiveGraphIterator(graph))
    taken = {v.name for v in graph.inputs} | set(graph.initializers) | {v.name for n in nodes for v in n.outputs}
    for node in nodes:
        for value in node.outputs:
            if value.name in wanted and id(value) not in outputs:
                i = 1
                while f"{value.name}_{i}" in taken:
                    i += 1
                value.name = f"{value.name}_{i}"
                taken.add(value.name)


def _batch_check(path: Path, sample: Inputs, spec: IOSpec, workload: Workload) -> str | None:
    """Why the exported graph does not run at a batch size other than `sample`'s (the next one), or None where it
    does, or where this cannot be checked: onnxruntime missing, the workload's inputs at that batch differing from
    `sample` past the batch dimension (a graph with those sizes fixed would refuse them rightly), or an export with
    a fixed batch. The outputs' values are judged later (the candidate's fidelity); here, that the graph runs and
    answers as many rows."""
    from dlperf.workload.base import _batch_of

    batch = _batch_of(sample)
    if batch is None or not installed("onnxruntime") or spec.inputs[0].shape[:1] != (-1,):
        return None
    other = tuple(workload.example_inputs(batch + 1))
    if len(other) != len(sample) or any(
            tuple(a.shape[1:]) != tuple(b.shape[1:]) for a, b in zip(other, sample, strict=True)):
        return None
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # its own error line on stderr besides the exception
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # an invalid graph is not a batch problem: say what it is
        return f"ONNX Runtime refuses the exported graph: {first_line(str(exc), 200)}"
    try:
        feeds = {s.name: a for s, a in zip(spec.inputs, to_numpy(other), strict=True)}
        outputs = session.run(None, feeds)
    except Exception as exc:
        return (f"the graph traced at batch {batch} does not run at batch {batch + 1} (the trace fixed a size that "
                f"follows the batch): {first_line(str(exc), 200)}")
    rows = [int(o.shape[0]) for o, s in zip(outputs, spec.outputs, strict=False)
            if s.shape[:1] == (-1,) and getattr(o, "ndim", 0) > 0]
    if any(r != batch + 1 for r in rows):
        return (f"the graph traced at batch {batch} answers {rows[0] if rows else '?'} rows at batch {batch + 1} "
                "(the trace fixed a size that follows the batch)")
    return None


def untraced_inputs(onnx_path: Path, names: Sequence[str]) -> list[str]:
    """The model inputs among `names` that the exported graph does not take (left out because nothing used them)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    taken = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    return [n for n in names if n not in taken]


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def first_line(message: str, limit: int = 300) -> str:
    """The first meaningful line of a library's error, without ANSI colour codes and at most `limit` characters:
    the exporters' errors run to hundreds of coloured lines (a report, a traceback) that would drown the table."""
    text = _ANSI.sub("", message)
    # torch.onnx's dynamo exporter opens with advice ('... This is step 3/3 ... Next steps:'); the cause follows its
    # '## Exception summary' as "<class 'torch.onnx..._errors.DispatchError'>: No ONNX function found for ..."
    summary = text.partition("## Exception summary")[2]
    if summary.strip():
        text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>:", r"\1:", summary)
    lines = [line.strip() for line in text.splitlines()]
    line = next((ln for ln in lines if ln.strip("#=-*_ ") and not ln.startswith("Traceback")), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def onnx_scope_to_module(node_name: str) -> str:
    """'/layer1/layer1.0/conv1/Conv' -> 'layer1.0.conv1' (TorchScript exporter scope -> module path)."""
    parts = [p for p in node_name.split("/") if p][:-1]
    out: list[str] = []
    for p in parts:
        if out and p.startswith(out[-1] + "."):
            out[-1] = p
        else:
            out.append(p)
    return ".".join(out)


def onnx_layer_nodes(onnx_path: Path, modules: Sequence[str]) -> dict[str, list[str]]:
    """ONNX node names that belong to each torch module in `modules` (matched on the exporter's scopes)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    wanted = set(modules)
    found: dict[str, list[str]] = {m: [] for m in modules}
    for node in graph.node:
        mod = onnx_scope_to_module(node.name)
        if mod in wanted:
            found[mod].append(node.name)
    return found


def onnx_weighted_nodes(onnx_path: Path) -> list[str]:
    """MatMul / Gemm / Conv nodes whose second input is a weight (an initializer): the layers int8 targets."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    weights |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    return [n.name for n in graph.node
            if n.op_type in ("MatMul", "Gemm", "Conv", "Attention") and len(n.input) > 1 and n.input[1] in weights]


RECURRENT_OPS = ("GRU", "LSTM", "RNN")
"""ONNX's recurrent layers: weighted, and no int8 target of the passes (`onnx_weighted_nodes`)."""


def onnx_recurrent_weights(onnx_path: Path, targets: Sequence[str]) -> tuple[dict[str, int], int, int]:
    """({op type: nodes} of the recurrent layers, their weight elements, the weight elements of `targets`, the int8
    targets `onnx_weighted_nodes` found) of an fp32 graph: how much of the model's layer weights `int8: N of N
    weighted layers` leaves out."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    sizes = {i.name: math.prod(i.dims) for i in graph.initializer if len(i.dims) >= 2}
    sizes |= {n.output[0]: math.prod(a.t.dims) for n in graph.node if n.op_type == "Constant"
              for a in n.attribute if a.name == "value" and len(a.t.dims) >= 2}
    named = set(targets)
    ops: dict[str, int] = {}
    recurrent = weighted = 0
    for n in graph.node:
        if n.op_type in RECURRENT_OPS:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            recurrent += sum(sizes.get(i, 0) for i in n.input[1:3])  # W and R; B is the bias
        elif n.name in named:
            weighted += sizes.get(n.input[1], 0)
    return ops, recurrent, weighted


INTEGER_OPS = frozenset({
    "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul",
    "QLinearConv", "QGemm", "QAttention",
})
"""ONNX ops that compute a layer in int8 (dynamic quantization's and the QOperator format's)."""


def onnx_int8_layers(onnx_path: Path) -> int:
    """How many layers of a quantized graph compute in int8: integer ops, and (QDQ format) MatMul / Gemm / Conv
    nodes whose weight comes out of a DequantizeLinear. 0 means the quantization changed nothing."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    dequantized = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return sum(1 for n in graph.node
               if n.op_type in INTEGER_OPS
               or (n.op_type in ("MatMul", "Gemm", "Conv") and len(n.input) > 1 and n.input[1] in dequantized))


def calibration_samples(state: ModelState, ctx: PassContext, limit: int) -> list[Inputs]:
    """Up to `limit` single-sample inputs for calibration: the context's data, else the workload's eval data,
    else the workload's own example inputs (random for zoo models) split into rows. What the workload's own
    calibration data raises (called or iterated) names the workload and the user's line; batches that do not
    fit the model's example inputs are refused by `check_calibration`, naming the batch and its shapes."""
    wl = state.workload
    source: Callable[[], Any] | None = ctx.calibration_inputs
    if source is None and wl.eval is not None:
        source = wl.eval.calibration_inputs
    if source is None:
        out = example_rows(wl, limit, first=heldout_rows(ctx.batch_size).stop)
        if not out:
            raise PassNotApplicable("no calibration inputs: give the workload an EvalSpec with calibration_inputs")
        return out
    from dlperf.workload.base import call_user_factory

    user = source
    batches = call_user_factory(wl.name, "its calibration_inputs", lambda: _batches(user(), limit), error=PassError)
    if not batches:
        # the workload has calibration_inputs: "give it calibration_inputs" sent the user looking for a typo
        raise PassNotApplicable(f"workload '{wl.name}': its calibration_inputs() yielded no batches: return an "
                                "iterable of input tuples (a generator made once is empty on its second use: make "
                                "a new one in each call)")
    check_calibration(wl, state.model, wl.example_inputs(ctx.batch_size), batches)
    out = _rows(batches, limit)
    if not out:
        raise PassNotApplicable(f"workload '{wl.name}': its calibration_inputs() yielded {len(batches)} "
                                f"batch{'es' if len(batches) != 1 else ''} with no rows")
    return out


HELDOUT_FIRST_BATCH = 32
"""The search's held-out fidelity inputs (without an eval metric) are rows this far or further into one
`example_inputs(n)` (past the example batch too): `keep_fp32="auto"` scores its trials on the rows before them
(`selection_rows`) and the default calibration rows come after the held-out ones; the zoo seeds inputs by batch
size, but a workload whose `make_inputs` seeds one generator (or slices one dataset) gives the same first rows at
every batch size."""

HELDOUT_SAMPLES = 32
"""How many held-out inputs the search scores fidelity on by default (`EvalSettings.heldout_samples`)."""


def heldout_rows(batch_size: int, samples: int = HELDOUT_SAMPLES) -> range:
    """The rows of `example_inputs(n)` the search's held-out fidelity uses at `batch_size`: past the first
    max(batch_size, HELDOUT_FIRST_BATCH), `samples` rounded up to whole batches (no new shapes for the candidate)."""
    skip = max(batch_size, HELDOUT_FIRST_BATCH)
    return range(skip, skip + batch_size * math.ceil(samples / batch_size))


def selection_rows(samples: int = HELDOUT_SAMPLES) -> range:
    """The rows of `example_inputs(n)` that `keep_fp32="auto"` scores its trials on without an eval metric: the
    first ones, before the search's held-out rows (`heldout_rows`) and the default calibration rows after them."""
    return range(0, min(samples, HELDOUT_FIRST_BATCH))


def example_rows(wl: Workload, limit: int, first: int, first_batch_size: int = 1) -> list[Inputs]:
    """`limit` single-sample inputs: rows `first` on of one `example_inputs(first + limit)`, so that they differ
    where the workload can make them differ. Batch sizes 1, 2 ... 24, used before, all began with the same rows for
    a `make_inputs` that seeds its own generator: 24 distinct rows of the 300 asked. A factory that refuses so
    large a batch gets those growing batches, from `first_batch_size` (`calibration_note` says when their rows
    repeat)."""
    try:
        big = wl.example_inputs(first + limit)
    except WorkloadError:
        return _rows(synthetic_batches(wl, limit, first_batch_size), limit)
    return _rows([tuple(x[first:] for x in big)], limit)


def distinct_rows(samples: Sequence[Inputs]) -> int:
    """How many of `samples` (single-sample inputs) differ in their values."""
    import torch

    def key(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
            return str(t.dtype), tuple(t.shape), hashlib.sha1(data).hexdigest()
        return repr(x)

    return len({tuple(key(x) for x in row) for row in samples})


def calibration_note(state: ModelState, ctx: PassContext, samples: Sequence[Inputs], limit: int) -> str | None:
    """What a calibrated candidate says when its `samples` (from `calibration_samples(state, ctx, limit)`) hold
    fewer distinct rows than the `limit` its config asks for; None when they hold that many."""
    distinct = distinct_rows(samples)
    if distinct >= limit:
        return None
    wl = state.workload
    if ctx.calibration_inputs is not None or (wl.eval is not None and wl.eval.calibration_inputs is not None):
        source = f"its calibration_inputs gave {len(samples)} rows"
    else:
        source = (f"its example inputs gave {len(samples)} rows (the workload has no calibration_inputs: give its "
                  "EvalSpec some for a calibration set of its own)")
    return (f"calibrated on {distinct} distinct input row{'s' if distinct != 1 else ''} of the {limit} asked "
            f"(calibration_samples): {source}")


CALIBRATION_SEED = 0


@contextlib.contextmanager
def reproducible_rng(seed: int = CALIBRATION_SEED) -> Iterator[None]:
    """torch's, numpy's and Python's random generators seeded for the block and put back after it: calibration data
    drawn at random (a workload's unseeded example inputs, a shuffled DataLoader) is then the same when a torch recipe
    is replayed as when its candidate was measured. A recipe recalibrates on load: a torchao static int8 artifact of
    a workload with torch.randn inputs gave other outputs at each load (0.02 apart), none of them the measured one's."""
    import random

    import numpy as np
    import torch

    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):  # the CPU generator only: a CUDA one is neither used here nor touched
        torch.random.default_generator.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def check_calibration(workload: Workload, model: nn.Module | None, example: Inputs, batches: Sequence[Inputs]) -> None:
    """A PassError naming the workload's calibration_inputs, the batch and the shapes when a batch does not fit the
    model's example inputs: as many inputs, each a tensor of the example's dtype and rank. A size past the batch
    dimension that differs from the example's (another sequence length or image size) is tried on the model, once
    per shape, and refused with the model's reason when it fails. Unchecked, a [3, 5] batch for a [B, 64] model
    failed as "ONNX export failed: ... mat1 and mat2 shapes cannot be multiplied"."""
    import torch

    from dlperf.workload.base import describe_inputs

    names = workload.input_names
    tried: set[tuple[tuple[int, ...], ...]] = set()
    cpu_model: nn.Module | None = None  # a CPU copy of a model on a GPU, made once when first needed
    example_sizes = tuple(tuple(x.shape[1:]) if isinstance(x, torch.Tensor) else () for x in example)
    for index, batch in enumerate(batches):
        problem = _misfit(batch, example, names)
        sizes = tuple(tuple(x.shape[1:]) if isinstance(x, torch.Tensor) else () for x in batch)
        if problem is None and sizes != example_sizes and sizes not in tried:
            tried.add(sizes)
            if model is not None and cpu_model is None:
                cpu_model = on_cpu(model)
            problem = _refused_by(cpu_model, batch)
        if problem is not None:
            raise PassError(
                f"workload '{workload.name}': its calibration_inputs yielded batch {index} as "
                f"{describe_inputs(batch, names)}, which does not fit the model's example inputs "
                f"({describe_inputs(example, names)}): {problem}; yield batches shaped like the example inputs "
                "(any batch size)"
            )


def _misfit(batch: Inputs, example: Inputs, names: Sequence[str]) -> str | None:
    """Why `batch` cannot be inputs like `example` (count, type, dtype, rank), or None."""
    import torch

    if len(batch) != len(example):
        return f"{len(batch)} input{'s' if len(batch) != 1 else ''}, the model takes {len(example)}"
    for i, (x, want) in enumerate(zip(batch, example, strict=True)):
        if not isinstance(want, torch.Tensor):
            continue
        label = f"input {i}" + (f" ({names[i]})" if i < len(names) else "")
        if not isinstance(x, torch.Tensor):
            return f"{label} is a {type(x).__name__}, not a torch tensor"
        if x.dtype != want.dtype:
            return f"{label} is {str(x.dtype).replace('torch.', '')}, not {str(want.dtype).replace('torch.', '')}"
        if x.dim() != want.dim():
            return f"{label} has {x.dim()} dimensions, not {want.dim()} (the first is the batch)"
    return None


def _refused_by(model: nn.Module | None, batch: Inputs) -> str | None:
    """The model's reason for refusing the first row of `batch` (a CPU model), or None when it runs."""
    import torch

    if model is None:
        return "its sizes past the batch dimension differ"
    row = tuple(x[:1] if isinstance(x, torch.Tensor) else x for x in batch)
    try:
        with torch.inference_mode():
            model(*row)
    except Exception as exc:  # the model's own error is the reason
        return f"the model refuses its sizes past the batch dimension ({type(exc).__name__}: {first_line(str(exc))})"
    return None


def _batches(batches: Any, limit: int) -> list[Inputs]:
    """The first batches of `batches`, each as a tuple, until they hold `limit` rows (a first input without a
    shape counts as one row; `check_calibration` says what is wrong with it)."""
    out: list[Inputs] = []
    rows = 0
    for batch in batches:
        batch = batch if isinstance(batch, tuple) else (batch,)
        out.append(batch)
        shape = getattr(batch[0], "shape", None) if batch else None
        rows += int(shape[0]) if shape is not None and len(shape) else 1
        if rows >= limit:
            break
    return out


def _rows(batches: Any, limit: int) -> list[Inputs]:
    out: list[Inputs] = []
    for batch in batches:
        batch = batch if isinstance(batch, tuple) else (batch,)
        n = int(batch[0].shape[0])
        for r in range(n):
            out.append(tuple(x[r : r + 1] for x in batch))
            if len(out) >= limit:
                return out
    return out


def synthetic_batches(wl: Workload, limit: int, first_batch_size: int = 1) -> Iterator[Inputs]:
    """The workload's example inputs at growing batch sizes (each seeded differently in the zoo)."""
    total, b = 0, first_batch_size
    while total < limit:
        yield wl.example_inputs(b)
        total += b
        b += 1
