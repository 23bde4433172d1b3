"""The Workload type: what dlperf measures (a model factory, example inputs, optional eval and training)."""

from __future__ import annotations

import copy
import linecache
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import DlperfError, MissingDependency, WorkloadError

if TYPE_CHECKING:
    import torch
    from torch import nn

Inputs = tuple[Any, ...]
"""Positional arguments of one model call (tensors, batched on dim 0)."""

Predict = Callable[..., Any]
"""Anything called like the model: predict(*inputs) -> outputs (an nn.Module, an ORT session wrapper...)."""

KINDS = ("cnn", "transformer", "mlp", "generic")
"""What `Workload.kind` may be: passes judge applicability by it (channels_last for cnn, ORT's transformer fusions)."""


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """`value` with `fn` applied to every tensor in it, inside tuples (namedtuples too), lists and dicts; a dict
    is changed in place, so a dict subclass (transformers' ModelOutput) keeps its type."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple takes its fields
        return type(value)(*(map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        for k in list(value):
            value[k] = map_tensors(value[k], fn)
        return value
    return value


def map_tensors_copied(value: Any, fn: Callable[[Any], Any]) -> Any:
    """As `map_tensors`, into new containers: the caller's tuples, lists and dicts are left as they were (a dict
    subclass, such as transformers' BatchEncoding, is copied and keeps its type)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors_copied(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors_copied(v, fn) for v in value)
    if isinstance(value, dict):
        out = copy.copy(value)
        for k in list(out):
            out[k] = map_tensors_copied(out[k], fn)
        return out
    return value


def _host_side(predict: Predict, device: str) -> Predict:
    """`predict` called with host tensors: they are moved to `device`, and the tensors of its outputs (in
    tuples, lists and dicts too) come back to the host."""

    def moved(value: Any) -> Any:
        # into new containers: a model taking a dict or list of tensors got them on the host (only the top-level
        # tensors were moved), and map_tensors would change the evaluate function's own dict of eval data in place
        return map_tensors_copied(value, lambda t: t.to(device))

    def called(*args: Any, **kwargs: Any) -> Any:
        return map_tensors(predict(*moved(args), **moved(kwargs)), lambda t: t.cpu())

    return called


@dataclass(frozen=True)
class EvalSpec:
    """How to score a model: `evaluate(predict)` runs the eval data through `predict` and returns the metric.
    The data stays on the host: on a GPU, dlperf's `predict` moves its tensor arguments there and its outputs
    back."""

    evaluate: Callable[[Predict], float]
    metric_name: str
    higher_is_better: bool = True
    # Eval data as batches of inputs, for passes that calibrate (static int8) or fine-tune.
    calibration_inputs: Callable[[], Iterable[Inputs]] | None = None
    # The same metric on a selection split, data `evaluate` does not score (a validation set, or the calibration
    # rows): what a pass that chooses by the metric (`keep_fp32="auto"`: which layers stay fp32) scores its trials
    # on, so the metric the search then reports and judges the candidate by was not fitted to. Without it, such a
    # pass chooses on `evaluate`'s data, and its note says so.
    selection_evaluate: Callable[[Predict], float] | None = None
    # For a fidelity metric (a cosine to a reference's outputs): the worst single input's, on `evaluate`'s data,
    # which `dlperf optimize --min-fidelity-worst` constrains (the mean hides one input gone wrong).
    evaluate_worst: Callable[[Predict], float] | None = None

    def __post_init__(self) -> None:
        _check_callable("EvalSpec", "evaluate", self.evaluate, "a function evaluate(predict) -> float")
        if self.evaluate_worst is not None:
            _check_callable("EvalSpec", "evaluate_worst", self.evaluate_worst,
                            "a function evaluate_worst(predict) -> float (the worst input's fidelity), or None")
        if not isinstance(self.metric_name, str) or not self.metric_name:
            raise WorkloadError(f"EvalSpec: metric_name must be a non-empty string, got {self.metric_name!r}")
        if not isinstance(self.higher_is_better, bool):  # "False" would be true: a loss ranked as an accuracy
            raise WorkloadError(f"EvalSpec: higher_is_better must be True or False, got {self.higher_is_better!r}")
        if self.calibration_inputs is not None:
            _check_callable("EvalSpec", "calibration_inputs", self.calibration_inputs,
                            "a function returning an iterable of input tuples, or None")
        if self.selection_evaluate is not None:
            _check_callable("EvalSpec", "selection_evaluate", self.selection_evaluate,
                            "a function selection_evaluate(predict) -> float on data evaluate does not use, or None")


@dataclass(frozen=True)
class TrainSpec:
    """How the user's training loop runs: a loader of (inputs, target) batches, a loss and an optimizer."""

    make_loader: Callable[..., Iterable[tuple[Any, Any]]]
    """make_loader(batch_size, **dataloader_kwargs) -> iterable of (inputs, target); inputs a tensor, or a tuple or
    list of the model's positional arguments (the default collate makes a dataset's tuple a list)."""
    loss_fn: Callable[[Any, Any], torch.Tensor]
    make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    batch_size: int = 32
    count_tokens: Callable[[Any], int] | None = None
    """count_tokens(inputs) -> the tokens in one batch's inputs (as the loader gives them, before the copy to the
    device), for tokens/s beside samples/s: e.g. `lambda inputs: int(inputs[1].sum())` with an attention mask, so
    that padding is not counted. None: a batch whose first input is an integer tensor [batch, seq] is taken for
    token ids, every position counted (padding included), and the report says it guessed."""

    def __post_init__(self) -> None:
        _check_callable("TrainSpec", "make_loader", self.make_loader,
                        "a function make_loader(batch_size, **dataloader_kwargs) returning (inputs, target) batches")
        _check_callable("TrainSpec", "loss_fn", self.loss_fn, "a function loss_fn(output, target) -> tensor")
        _check_loss_signature(self.loss_fn)
        _check_callable("TrainSpec", "make_optimizer", self.make_optimizer,
                        "a function make_optimizer(params) -> torch.optim.Optimizer")
        _check_positive("TrainSpec", "batch_size", self.batch_size)
        if self.count_tokens is not None:
            _check_callable("TrainSpec", "count_tokens", self.count_tokens,
                            "a function count_tokens(inputs) -> int, or None")


@dataclass(frozen=True)
class Workload:
    """A model plus what it takes to run, score and train it.

    `make_model()` builds a fresh model (fp32, on CPU); `make_inputs(batch_size)` returns the positional
    arguments of one call. `kind` ('cnn', 'transformer', 'mlp', 'generic') lets passes judge applicability.
    """

    name: str
    make_model: Callable[[], nn.Module]
    make_inputs: Callable[[int], Inputs]
    eval: EvalSpec | None = None
    train: TrainSpec | None = None
    description: str = ""
    source: str = ""
    kind: str = "generic"
    default_batch_size: int = 1
    input_names: Sequence[str] = field(default_factory=tuple)
    output_names: Sequence[str] = field(default_factory=tuple)
    # set by `from_module`: the batch is dim 0 of the caller's example inputs, taken, not stated, so `check` makes sure
    # the model's outputs have it too (a single sample x of shape [8] was measured as a batch of 8)
    _batch_from_inputs: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        what = f"Workload {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise WorkloadError(f"Workload: name must be a non-empty string, got {self.name!r}")
        _check_callable(what, "make_model", self.make_model, "a function returning a fresh nn.Module", factory=True)
        _check_callable(what, "make_inputs", self.make_inputs,
                        "a function make_inputs(batch_size) returning the positional inputs of one call", factory=True)
        if self.eval is not None and not isinstance(self.eval, EvalSpec):
            raise WorkloadError(f"{what}: eval must be a dlperf.EvalSpec or None, got {type(self.eval).__name__}")
        if self.train is not None and not isinstance(self.train, TrainSpec):
            raise WorkloadError(f"{what}: train must be a dlperf.TrainSpec or None, got {type(self.train).__name__}")
        if self.kind not in KINDS:
            raise WorkloadError(f"{what}: kind {self.kind!r} is unknown: choose one of {', '.join(KINDS)}")
        _check_positive(what, "default_batch_size", self.default_batch_size)
        for key in ("input_names", "output_names"):
            names = getattr(self, key)
            if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
                raise WorkloadError(f"{what}: {key} must be a tuple of strings, e.g. ('x',), got {names!r}")
            twice = sorted({n for n in names if list(names).count(n) > 1})
            if twice:  # a served model's tensors are found by name: one of the two could never be sent
                raise WorkloadError(f"{what}: {key} names {', '.join(map(repr, twice))} more than once: give each "
                                    "input or output its own name")

    def build_model(self) -> nn.Module:
        """Call the factory; a factory that raises becomes a WorkloadError showing the user's own frame."""
        try:
            model = self.make_model()
        except (WorkloadError, MissingDependency):  # says what is wrong already (a module that cannot be copied,
            raise  # `from_module`; a zoo workload's missing extra, which `dlperf zoo` lists as unavailable)
        except Exception as exc:
            raise WorkloadError(
                f"workload '{self.name}': its model factory raised {type(exc).__name__}: {exc}\n"
                f"{_user_frame(exc, self.make_model)}"
            ) from exc
        from torch import nn

        if not isinstance(model, nn.Module):
            # "returned tuple, not a torch.nn.Module" said neither which function nor what to do
            if isinstance(model, (tuple, list)) and any(isinstance(m, nn.Module) for m in model):
                fix = ("return the model alone (a tokenizer or preprocessing goes into the inputs factory or the "
                       "model's forward)")
            elif model is None:
                fix = "it builds the model but does not return it? end it with `return model`"
            elif callable(model):
                fix = "wrap the function in an nn.Module whose forward calls it"
            else:
                fix = "return the model, an nn.Module"
            what = (f"a {type(model).__name__} of {len(model)} ({', '.join(type(m).__name__ for m in model)})"
                    if isinstance(model, (tuple, list)) and len(model) <= 4
                    else "None" if model is None else type(model).__name__)
            code = getattr(self.make_model, "__code__", None)
            where = "" if code is None or _is_library_frame(code.co_filename) else (
                "\n" + _user_frame(WorkloadError(), self.make_model))
            raise WorkloadError(
                f"workload '{self.name}': the model factory returned {what}, not a torch.nn.Module: "
                f"{fix}{where}"
            )
        return model

    def example_inputs(self, batch_size: int) -> Inputs:
        """The positional inputs for `batch_size`, always as a tuple."""
        if batch_size < 1:
            raise WorkloadError(f"workload '{self.name}': batch size must be >= 1, got {batch_size}")
        try:
            inputs = self.make_inputs(batch_size)
        except MissingDependency:  # its install hint is the message: "its inputs factory raised ..." hid it from
            raise  # `dlperf zoo`, which lists such a workload as unavailable
        except Exception as exc:
            raise WorkloadError(
                f"workload '{self.name}': its inputs factory raised {type(exc).__name__}: {exc}\n"
                f"{_user_frame(exc, self.make_inputs)}"
            ) from exc
        if inputs is None:
            raise WorkloadError(f"workload '{self.name}': its inputs factory returned None: return the positional "
                                "inputs of one call, e.g. (torch.randn(batch_size, 4),)")
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        meta = [i for i, v in enumerate(inputs) if getattr(v, "is_meta", False) is True]
        if meta:  # moving one to the measured device fails deep in dlperf with 'Cannot copy out of meta tensor'
            raise WorkloadError(
                f"workload '{self.name}': its input {meta[0]} is on the 'meta' device, which holds no data "
                f"({describe_inputs(inputs, self.input_names)}): create the inputs on the CPU"
            )
        if self.input_names and len(self.input_names) != len(inputs):
            # `dlperf serve` built its signature from the names: with ('x',) for two inputs it took one input, and
            # every request failed in the model
            raise WorkloadError(
                f"workload '{self.name}': input_names names {len(self.input_names)} input"
                f"{'' if len(self.input_names) == 1 else 's'} ({', '.join(self.input_names)}) but its inputs factory "
                f"returns {len(inputs)} ({describe_inputs(inputs)}): give one name per positional input, in order"
            )
        firsts = _batch_candidates(inputs)
        if batch_size not in firsts and self._batch_from_inputs:  # dlperf.bench(model, inputs): no factory was written
            raise WorkloadError(
                f"workload '{self.name}': its example inputs hold no tensor batched on dim 0 "
                f"({describe_inputs(inputs, self.input_names)}), so dlperf cannot make them any batch size: give "
                "tensors whose first dimension is the batch, or a dlperf.Workload whose make_inputs(batch_size) "
                "builds them"
            )
        if batch_size not in firsts:
            # every figure per item (throughput, items/s) counts batch_size items per call: a factory that ignored
            # it made a batch-64 throughput 64 times too high
            raise WorkloadError(
                f"workload '{self.name}': its inputs for batch size {batch_size} have no batch dimension of "
                f"{batch_size} ({describe_inputs(inputs, self.input_names)}): the inputs factory must return "
                "tensors whose first dimension is the batch size it is given"
            )
        return inputs

    def check(self, model: Predict, inputs: Inputs, batch_size: int | None = None,
              ran_batch: int | None = None) -> Any:
        """Run one call and return its outputs; a model that rejects its inputs raises WorkloadError naming each
        input's shape, and so do inputs whose batch was taken from their first dimension (`from_module`) when no
        output has that many rows: a single sample without a batch dimension.

        `ran_batch`: a batch size of the same inputs that already ran in this model (bench's earlier batch sizes); a
        failure at `batch_size` then names it and blames it, not the inputs, which ran."""
        import torch

        try:
            with torch.inference_mode():
                outputs = model(*inputs)
        except Exception as exc:
            if ran_batch is not None:
                # "the model rejected its example inputs" read as if the inputs were wrong, after batch 1 of them ran
                at = f" at batch {batch_size}" if batch_size is not None else ""
                raise WorkloadError(
                    f"workload '{self.name}'{at}: the model raised on its first call at this batch size "
                    f"({describe_inputs(inputs, self.input_names)}), where batch {ran_batch} ran: "
                    f"{type(exc).__name__}: {exc}; leave this batch size out if the model does not support it\n"
                    f"{_user_frame(exc, getattr(type(model), 'forward', None))}"
                ) from exc
            hint = _container_hint(inputs, self._batch_from_inputs)
            if any(type(x).__module__ == "numpy" for x in inputs):
                hint += "; its inputs include numpy arrays: return torch tensors (torch.from_numpy(x))"
            elif isinstance(exc, TypeError) and (keywords := _keyword_only(model)):
                # "forward() takes 1 positional argument but 2 were given" does not say why
                hint += (f"; forward takes {', '.join(keywords)} as keyword-only, and dlperf passes the inputs "
                         "positionally (model(*inputs)): make them positional parameters, or wrap the model in a "
                         f"module whose forward({', '.join(keywords)}) calls it by keyword")
            elif _DTYPE_ERROR.search(str(exc)) and (dtype_hint := _dtype_hint(model, inputs)) is not None:
                hint += dtype_hint
            elif any(isinstance(x, torch.Tensor) and x.dim() == 1 for x in inputs):
                # dlperf.bench(Linear(4, 2), (torch.randn(4),)) was cut to float32[1] "rows", a puzzling shape
                hint += ("; dim 0 of each input is the batch, so a 1-D input is a batch of scalars: give one sample "
                         "a batch dimension, e.g. x.unsqueeze(0)")
            raise WorkloadError(
                f"workload '{self.name}': the model rejected its example inputs "
                f"({describe_inputs(inputs, self.input_names)}): {type(exc).__name__}: {exc}{hint}\n"
                f"{_user_frame(exc, getattr(type(model), 'forward', None))}"
            ) from exc
        batch = _batch_of(inputs) if self._batch_from_inputs else None
        rows = _batch_candidates(outputs if isinstance(outputs, tuple) else (outputs,))
        if batch is not None and rows and batch not in rows:  # outputs with no rows (a scalar, None) tell nothing
            # dlperf.bench(Linear(8, 2), (torch.randn(8),)) ran one sample a call, output [2], and counted 8 items
            raise WorkloadError(
                f"workload '{self.name}': its example inputs look unbatched "
                f"({describe_inputs(inputs, self.input_names)}): their first dimension was taken as the batch "
                f"({batch}), but no output of the model has {batch} rows (output: {_describe_input(outputs)}), so "
                f"each call would count {batch} items for what looks like one sample: give one sample a batch "
                "dimension, e.g. x.unsqueeze(0) for batch 1 (if dim 0 is the batch after all, give a dlperf.Workload "
                "whose make_inputs(batch_size) builds the inputs)"
            )
        return outputs

    def score(self, predict: Predict, device: str = "cpu") -> float:
        """`eval.evaluate(predict)` as a float; an evaluate that raises, or returns what is not a number, becomes a
        WorkloadError showing the user's own frame. NaN is returned as such: a candidate may well score NaN.

        `device`: where `predict` takes its inputs. An evaluate function holds its data on the host, as the zoo's
        do, so on a GPU the predict it is given moves the tensors it is called with there and its outputs back
        (an evaluate comparing logits with host labels would fail otherwise)."""
        if self.eval is None:
            raise WorkloadError(f"workload '{self.name}' has no eval metric: give it eval=dlperf.EvalSpec(...)")
        return self._scored(self.eval.evaluate, "evaluate", predict, device)

    def score_selection(self, predict: Predict, device: str = "cpu") -> float:
        """`eval.selection_evaluate(predict)` (the metric on the selection split), checked as `score` checks
        `evaluate`."""
        if self.eval is None or self.eval.selection_evaluate is None:
            raise WorkloadError(f"workload '{self.name}' has no selection split: give its EvalSpec a "
                                "selection_evaluate")
        return self._scored(self.eval.selection_evaluate, "selection_evaluate", predict, device)

    def score_worst(self, predict: Predict, device: str = "cpu") -> float | None:
        """`eval.evaluate_worst(predict)` (the worst single input's fidelity), checked as `score` checks `evaluate`;
        None where the workload has none."""
        if self.eval is None or self.eval.evaluate_worst is None:
            return None
        return self._scored(self.eval.evaluate_worst, "evaluate_worst", predict, device)

    def _scored(self, evaluate: Callable[[Predict], float], what: str, predict: Predict, device: str) -> float:
        assert self.eval is not None
        if device != "cpu":
            predict = _host_side(predict, device)
        try:
            value = evaluate(predict)
        except MissingDependency:
            raise
        except Exception as exc:
            raise WorkloadError(
                f"workload '{self.name}': its {what} function raised {type(exc).__name__}: {exc}\n"
                f"{_user_frame(exc, evaluate)}"
            ) from exc
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError("a string is not a metric")
            return float(value)
        except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: a tensor of more than one element
            raise WorkloadError(
                f"workload '{self.name}': its {what} function returned {_describe_value(value)}, not a number: "
                f"return the metric '{self.eval.metric_name}' as a float"
            ) from exc

    @property
    def has_metric(self) -> bool:
        return self.eval is not None


def _keyword_only(model: Any) -> list[str]:
    """The keyword-only parameters without a default of `model`'s forward (or of `model` itself, a function)."""
    import inspect

    forward = getattr(model, "forward", model)
    try:
        parameters = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty]


def _container_hint(inputs: Inputs, from_module: bool) -> str:
    """Why a model may have rejected one list or dict input: dlperf calls model(*inputs), so it is ONE positional
    argument. Said of what the user wrote: the inputs factory's return, or `dlperf.bench(model, [x, y])`'s inputs,
    which have no factory (the message named one the user never wrote)."""
    from collections.abc import Mapping

    # a Mapping: transformers' BatchEncoding (a tokenizer's output) is a UserDict, which the usual model(**batch) takes
    if len(inputs) != 1 or not isinstance(inputs[0], (list, Mapping)):
        return ""
    kind = "dict" if isinstance(inputs[0], Mapping) else "list"
    if from_module:
        example = "(x, y)" if kind == "list" else \
            "(batch['input_ids'], batch['attention_mask']) in forward's order for model(**batch)"
        return (f"; the example inputs are a {kind}, which is passed as ONE argument: give a tuple to pass several "
                f"positional arguments (dlperf calls model(*inputs)), e.g. {example}")
    fix = "a tuple" if kind == "list" else "a tuple of the values, in forward's order,"
    return (f"; its inputs factory returned a {kind}, which is passed as ONE argument: return {fix} to pass several "
            "positional arguments (dlperf calls model(*inputs))")


# torch's words for mixed dtypes: "mat1 and mat2 must have the same dtype", "expected scalar type Float but found
# Double", "Input type (double) and bias type (float) should be the same"
_DTYPE_ERROR = re.compile(r"dtype|scalar type|Input type \([\w ]+\) and (weight|bias) type")


def _dtype_hint(model: Any, inputs: Inputs) -> str | None:
    """A float input of another floating dtype than the model's weights (float64 from numpy or torch.tensor of
    Python floats is the usual one): torch only says 'mat1 and mat2 must have the same dtype'."""
    import torch

    parameters = getattr(model, "parameters", None)
    try:
        weight = next(iter(parameters()), None) if callable(parameters) else None
    except Exception:
        return None
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        return None
    want = str(weight.dtype).replace("torch.", "")
    tensors = [(i, x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    floats = [(i, x.dtype) for i, x in tensors if x.is_floating_point() and x.dtype != weight.dtype]
    if floats:
        i, dtype = floats[0]
        return (f"; input {i} is {str(dtype).replace('torch.', '')} but the model's weights are {want} "
                "(torch.from_numpy and torch.tensor of Python floats give float64): make the inputs "
                f"{want}, e.g. x.to(torch.{want})")
    # an integer tensor where the first layer computes in floats (torch.randint for features, labels as inputs)
    ints = [(i, x.dtype) for i, x in tensors
            if not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool]
    if len(ints) == len(tensors) == 1:
        i, dtype = ints[0]
        fix = (f"make it {want} and scale it as in training, e.g. x.to(torch.{want}) / 255" if dtype == torch.uint8
               else f"make it {want}, e.g. x.to(torch.{want})" + (" (torch.randint gives int64)"
                                                                   if dtype == torch.int64 else ""))
        return f"; input {i} is {str(dtype).replace('torch.', '')} but the model computes in {want}: {fix}"
    return None


def _batch_of(value: Any) -> int | None:
    """The first dimension of the first tensor in `value`, looking inside tuples, lists and dicts."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 0 else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for item in items:
        batch = _batch_of(item)
        if batch is not None:
            return batch
    return None


def _batch_candidates(inputs: Inputs) -> set[int]:
    """What may be the batch of `inputs`: each tensor's first dimension, also inside lists, tuples and dicts, and
    the length of each list or tuple among them (a model taking a list of per-item tensors)."""
    found: set[int] = set()

    def visit(value: Any, top: bool = False) -> None:
        shape = getattr(value, "shape", None)
        if shape is not None:
            if len(shape):
                found.add(int(shape[0]))
            return
        if isinstance(value, (list, tuple)):
            if not top and value:
                found.add(len(value))
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(inputs, top=True)
    return found


def _check_callable(what: str, key: str, value: Any, expected: str, factory: bool = False) -> None:
    """WorkloadError unless `value` can be called; a `factory` is not an nn.Module either (callable, but the model
    itself: make_model=model instead of make_model=lambda: model)."""
    if factory and not isinstance(value, type):
        from torch import nn

        if isinstance(value, nn.Module):
            raise WorkloadError(f"{what}: {key} must be {expected}, got the module {type(value).__name__} itself: "
                                "give a function that builds and returns it")
    if not callable(value):
        raise WorkloadError(f"{what}: {key} must be {expected}, got {_describe_value(value)}")


def _check_positive(what: str, key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WorkloadError(f"{what}: {key} must be a positive integer, got {value!r}")


def describe_inputs(inputs: Inputs, names: Sequence[str] = ()) -> str:
    """'input 0 (x): float32[8, 1, 8, 8]' for each input, for error messages and reports; a list or dict input shows
    what it holds ('input 0: list of 2 (float32[8, 4], float32[8, 4])')."""
    parts = []
    for i, value in enumerate(inputs):
        label = f"input {i}" + (f" ({names[i]})" if i < len(names) else "")
        parts.append(f"{label}: {_describe_input(value)}")
    return ", ".join(parts) if parts else "no inputs"


def _describe_input(value: Any, depth: int = 0) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{str(getattr(value, 'dtype', type(value).__name__)).replace('torch.', '')}{list(shape)}"
    if isinstance(value, (list, tuple, dict)) and value and depth < 2:
        items = [f"{k}: {_describe_input(v, depth + 1)}" for k, v in value.items()] if isinstance(value, dict) \
            else [_describe_input(v, depth + 1) for v in value]
        shown = ", ".join(items[:4]) + (", ..." if len(items) > 4 else "")
        return f"{type(value).__name__} of {len(value)} ({shown})"
    return str(getattr(value, "dtype", type(value).__name__)).replace("torch.", "")


def _describe_value(value: Any) -> str:
    """'str 'good'', 'Tensor float32[2]', 'NoneType': what a user function returned, for an error message."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} {str(getattr(value, 'dtype', '')).replace('torch.', '')}{list(shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}" if value is not None else "None"


def loader_problem(loader: Any) -> str | None:
    """Why what a TrainSpec's loader factory returned cannot be a loader (None: it is iterable). `train` and
    `profile --train` say the same."""
    if hasattr(loader, "__iter__"):  # else the first step failed: "'int' object is not iterable"
        return None
    return (f"its loader factory returned {_describe_value(loader)}, not an iterable of (inputs, target) batches: "
            "return a torch.utils.data.DataLoader")


def ignored_loader_kwargs(loader: Any, asked: dict[str, Any],
                          acts: str = "--num-workers and the loader knobs act through them") -> str | None:
    """What is wrong when make_loader returned a loader that does not use the keyword arguments it was given (a
    DataLoader built without them, or no DataLoader at all), or None. `acts` ends the message: what acts through them.

    --num-workers and the tuner's loader knobs act only through them: a factory that dropped them trained with no
    workers while the header said '2 workers', and the tuner timed num_workers=2 against itself, which a noisy A/B
    could accept and advise.
    """
    from torch.utils.data import DataLoader

    if not asked:
        return None
    if not isinstance(loader, DataLoader):
        # a loader of its own that holds settings of these names (a third-party loader) is taken at its word;
        # one that wraps a DataLoader is checked on it; any other (a list of batches, a tensor-slicing loader) has
        # no workers to run them in: it printed '2 workers' over none, and the tuner timed num_workers=2 against
        # itself, as for a DataLoader that drops them
        if all(hasattr(loader, k) and getattr(loader, k) == v for k, v in asked.items()):
            return None
        inner = [v for v in getattr(loader, "__dict__", {}).values() if isinstance(v, DataLoader)]
        if len(inner) != 1:
            given = ", ".join(f"{k}={v!r}" for k, v in asked.items())
            return (f"its make_loader was given {given}, but returned a {type(loader).__name__}, which is not a "
                    "torch DataLoader and holds none, so they cannot act on it: return a DataLoader built with "
                    f"make_loader's keyword arguments (DataLoader(..., **dataloader_kwargs)); {acts}")
        loader = inner[0]
    ignored = {k: getattr(loader, k, v) for k, v in asked.items() if getattr(loader, k, v) != v}
    if not ignored:
        return None
    given = ", ".join(f"{k}={asked[k]!r}" for k in ignored)
    got = ", ".join(f"{k}={v!r}" for k, v in ignored.items())
    return (f"its make_loader was given {given}, but its DataLoader has {got}: pass make_loader's keyword "
            f"arguments on (DataLoader(..., **dataloader_kwargs)); {acts}")


def optimizer_problem(optimizer: Any, model: Any = None) -> str | None:
    """Why what a TrainSpec's optimizer factory returned cannot step, or cannot train `model` (None: it has step()
    and zero_grad(), and its parameter groups hold at least one of the model's trainable parameters).

    An optimizer built on other parameters than those it was given (a module-level model's, a copy's) stepped
    nothing of the model dlperf trains: the run measured an optimizer step that trains nothing, with no word of it.
    One holding only some of them (fine-tuning a head) is the user's choice."""
    if not (callable(getattr(optimizer, "step", None)) and callable(getattr(optimizer, "zero_grad", None))):
        return (f"its optimizer factory returned {_describe_value(optimizer)}, not a torch.optim.Optimizer: return "
                "one built on the parameters it is given, e.g. torch.optim.SGD(params, lr=0.1)")
    groups = getattr(optimizer, "param_groups", None)
    if model is None or not isinstance(groups, list):
        return None
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    held = [p for g in groups if isinstance(g, dict) for p in g.get("params", ())]
    if not trainable or any(id(p) in trainable for p in held):
        return None
    return (f"its optimizer factory's {type(optimizer).__name__} holds none of the model's "
            f"{len(trainable)} trainable parameter tensors (it holds {len(held)} others), so its step() would "
            "train nothing: build it on the parameters make_optimizer is given, e.g. "
            "`def make_optimizer(params): return torch.optim.SGD(params, lr=0.1)`")


def with_optimizer_impl(optimizer: Any, impl: str) -> Any:
    """The same optimizer (type, parameter groups, hyperparameters) rebuilt with its `impl` implementation
    ('foreach' or 'fused') switched on; the torch error (TypeError, RuntimeError, ValueError) where it has none.

    Only the flag asked for is passed: RMSprop, NAdam and others have foreach but no fused argument to pass False
    to. Each param group holds its own foreach and fused (None when the user set neither), which step() reads
    instead of the defaults: passed on as they were, the rebuilt optimizer ran the default implementation.
    Defaults its constructor takes no argument for are left to the param groups, which keep them: AdamW records
    `decoupled_weight_decay=True` in its defaults but takes no such argument, and its rebuild raised TypeError."""
    import inspect

    accepted = inspect.signature(type(optimizer).__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    defaults = {k: v for k, v in optimizer.defaults.items()
                if k not in ("foreach", "fused") and (takes_any or k in accepted)}
    groups = [{k: v for k, v in g.items() if k not in ("foreach", "fused")} for g in optimizer.param_groups]
    return type(optimizer)(groups, **defaults, **{impl: True})


def split_batch(batch: Any) -> tuple[Any, Any] | str:
    """A loader's batch as (inputs, target), or why it is not such a pair."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    what = (f"a dict with keys {sorted(map(str, batch))}" if isinstance(batch, dict)
            else f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list))
            else f"a {type(batch).__name__}")
    return (f"its loader must yield (inputs, target) pairs, got {what}: make make_loader (or its collate_fn) return "
            "(inputs, target)")


LOSS_CONVENTION = ("dlperf calls loss_fn(output, target): the model's output and the batch's target, returning a "
                   "scalar loss tensor")


def _check_loss_signature(loss_fn: Any) -> None:
    """WorkloadError where `loss_fn` cannot be called as loss_fn(output, target): a one-parameter loss failed in the
    first training step with Python's or torch's TypeError ('loss() takes 1 positional argument but 2 were given'),
    and a loss class instead of an instance with torch's 'Boolean value of Tensor ... is ambiguous'. A callable
    without a signature to read (a builtin) is checked by `call_loss` when it is called."""
    import inspect

    from torch import nn

    if isinstance(loss_fn, type) and issubclass(loss_fn, nn.Module):
        raise WorkloadError(f"TrainSpec: loss_fn is the class {loss_fn.__name__}, not a loss: give an instance, "
                            f"loss_fn={loss_fn.__name__}() ({LOSS_CONVENTION})")
    target = loss_fn.forward if isinstance(loss_fn, nn.Module) else loss_fn
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None)
    except TypeError:
        name = getattr(loss_fn, "__qualname__", None) or type(loss_fn).__name__
        raise WorkloadError(f"TrainSpec: loss_fn {name}{signature} cannot be called with two arguments: "
                            f"{LOSS_CONVENTION}; e.g. loss_fn=torch.nn.functional.cross_entropy, or "
                            "lambda output, target: my_loss(output)") from None


def call_loss(workload: str, loss_fn: Callable[[Any, Any], Any], output: Any, target: Any) -> Any:
    """`loss_fn(output, target)`; a TypeError of the call itself (not raised inside the loss: a builtin that takes
    other arguments, whose signature could not be checked) says how dlperf calls it."""
    try:
        return loss_fn(output, target)
    except TypeError as exc:
        if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
            said = str(exc).splitlines()[0].rstrip(": ")  # torch's list of the overloads it expected follows
            raise WorkloadError(f"workload '{workload}': its loss_fn cannot be called as loss_fn(output, target) "
                                f"({type(exc).__name__}: {said}): {LOSS_CONVENTION}") from exc
        raise


def loss_problem(loss: Any) -> str | None:
    """Why what a TrainSpec's loss_fn returned cannot start backward() (None: a scalar tensor)."""
    import torch

    if isinstance(loss, torch.Tensor) and loss.dim() == 0 and not loss.requires_grad:
        # backward() said "element 0 of tensors does not require grad and does not have a grad_fn", from torch
        return ("its loss_fn returned a tensor that does not require grad (no grad_fn): compute the loss from the "
                "model's output with differentiable operations (argmax, comparisons, .detach(), .item() or a no_grad "
                "block cut the graph), and give the model trainable parameters")
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return None
    if isinstance(loss, torch.Tensor):
        return (f"its loss_fn returned a tensor of shape {list(loss.shape)}, not a scalar tensor: reduce it (e.g. "
                "`.mean()`) so backward() has one value to start from")
    # `.mean()` is no advice for a float: the graph was already dropped by .item() or float()
    return (f"its loss_fn returned a {type(loss).__name__}, not a scalar tensor: return the loss tensor itself (no "
            ".item() or float()), which backward() starts from")


def call_user_factory(workload: str, what: str, fn: Any, *args: Any, error: type[DlperfError] = WorkloadError,
                      **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` for a workload's factory (its loader or optimizer factory); what it raises becomes
    `error` naming the workload and the user's own frame. A TypeError raised by the call itself, with keyword
    arguments given, says the factory's signature has no room for them (dlperf passes DataLoader options so)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        tb = exc.__traceback__
        called_wrong = isinstance(exc, TypeError) and tb is not None and tb.tb_next is None  # the call itself failed
        if called_wrong and kwargs:
            raise error(
                f"workload '{workload}': {what} does not take {', '.join(sorted(kwargs))} ({exc}): give it **kwargs "
                "and pass them on to torch.utils.data.DataLoader; that is how --num-workers and the tuner's loader "
                "knobs reach it"
            ) from exc
        if called_wrong:  # e.g. `def loader():` where dlperf passes the batch size: the def line, not dlperf's call
            raise error(f"workload '{workload}': {what} cannot be called with {len(args)} positional argument"
                        f"{'' if len(args) == 1 else 's'} as dlperf calls it ({exc})\n{_user_frame(exc, fn)}") from exc
        raise error(f"workload '{workload}': {what} raised {type(exc).__name__}: {exc}\n{_user_frame(exc)}") from exc


_WORKER_TRACEBACK = "Original Traceback (most recent call last):"
_TEXT_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)\n(?:    (?P<code>.*))?$',
                         re.MULTILINE)


def error_text(exc: BaseException) -> str:
    """'OSError: corrupt record 200': the exception's type and the first line of its message; for an error torch
    re-raised from a DataLoader worker, whose message is 'Caught OSError in DataLoader worker process 0.' and the
    worker's traceback as text, the worker's own last line, and where it was caught."""
    text = str(exc).strip()
    if _WORKER_TRACEBACK in text:
        head, _, trace = text.partition(_WORKER_TRACEBACK)
        last = next((line.strip() for line in reversed(trace.strip().splitlines()) if line.strip()), "")
        where = head.strip().removeprefix("Caught ").partition(" in ")[2].rstrip(".")
        if last:
            return f"{last} (in {where})" if where else last
    return f"{type(exc).__name__}: {(text.splitlines() or [''])[0]}"


def _worker_frame(exc: BaseException) -> str:
    """The user's frame in a DataLoader worker's traceback, which torch passes on as text in the message."""
    trace = str(exc).partition(_WORKER_TRACEBACK)[2]
    for m in reversed(list(_TEXT_FRAME.finditer(trace))):
        if not _is_library_frame(m["file"]):
            return f'  File "{m["file"]}", line {m["line"]}, in {m["name"]}\n    {(m["code"] or "").strip()}'
    return ""


def _user_frame(exc: BaseException, function: Any = None) -> str:
    """The innermost traceback frame outside dlperf, torch and installed packages: where the user's code went wrong.

    dlperf's own frames are recognised by the package folder (not by a '/dlperf/' path part), so a user's
    project that lives in a folder named dlperf still gets its frames shown. With no such frame (the call itself
    failed: `inputs()` takes no batch size), the user's `function` that dlperf called is shown where it is defined;
    failing that, the innermost frame outside dlperf (torch's, for a torch module), never dlperf's own.
    """
    if isinstance(exc, SyntaxError) and exc.filename:  # the traceback holds only importlib's frames
        return f'  File "{exc.filename}", line {exc.lineno}\n    {(exc.text or "").strip()}'
    if _WORKER_TRACEBACK in str(exc) and (worker := _worker_frame(exc)):  # raised in a DataLoader worker
        return worker
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if _is_library_frame(frame.filename):
            continue
        return f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n    {frame.line or ""}'
    code = getattr(function, "__code__", None)
    if code is not None and not _is_library_frame(code.co_filename):
        line = linecache.getline(code.co_filename, code.co_firstlineno).strip()
        return f'  File "{code.co_filename}", line {code.co_firstlineno}, in {code.co_name}\n    {line}'
    outside = [frame for frame in frames if not _is_dlperf_file(frame.filename)]
    if outside:
        last = outside[-1]
        return f'  File "{last.filename}", line {last.lineno}, in {last.name}\n    {last.line or ""}'
    return ""


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent).replace("\\", "/") + "/"
# Python's standard library: pathlib raising the FileNotFoundError of the user's missing checkpoint, argparse
# exiting, json failing to parse: the user's line that called it is the one to show.
_STDLIB_DIR = str(Path(sysconfig.get_paths()["stdlib"]).resolve()).replace("\\", "/") + "/"


def _is_library_frame(filename: str) -> bool:
    path = filename.replace("\\", "/")
    if path.startswith("<"):  # <frozen importlib._bootstrap> and the like
        return True
    if _is_dlperf_file(filename):
        return True
    if "/site-packages/" in path or "/dist-packages/" in path or path.startswith(_STDLIB_DIR):
        return True
    # torch from a source checkout: its package folder, not any '/torch/' part (a user's project may be in one)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    return torch_file is not None and path.startswith(str(Path(torch_file).parent).replace("\\", "/") + "/")


def _is_dlperf_file(filename: str) -> bool:
    try:
        resolved = str(Path(filename).resolve()).replace("\\", "/")
    except OSError:
        resolved = filename.replace("\\", "/")
    return resolved.startswith(_PACKAGE_DIR)
