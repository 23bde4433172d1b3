"""Real input data for `dlperf load --input-data`: perf_analyzer's formats, read once, sent in turn.

perf_analyzer sends random tensors unless told otherwise, and so does `dlperf load`; but a model's
speed can depend on its data (a text encoder on the length of its sentences, a sparse model on its
zeros), so both take real inputs:

- `zero`: zeros for every input;
- a directory: one file per input, named as the input, holding the raw little-endian row-major data of
  one item (BYTES: each element a 4-byte length and its bytes); a file named as an output, where
  present, is that item's expected output;
- a JSON file `{"data": [ENTRY, ...], "validation_data": [ENTRY, ...]}` where an ENTRY maps each input
  name to one item's values: a (nested) list, `{"b64": "..."}` (raw bytes as above), or
  `{"content": LIST_OR_B64, "shape": [...]}` for an item of its own shape (variable dimensions). The
  optional `validation_data` entries, aligned with `data`, give outputs to check each reply against.
  Several files may be given; their entries are concatenated.

As in perf_analyzer, entries are used round-robin and a request of batch size B takes B consecutive
entries (request k: entries kB .. kB+B-1, modulo their number), which must then have one shape. The
requests are encoded here once, before any load, so sending costs no more than with random data.
Validation decodes each reply, which costs client CPU: floating-point outputs are compared within
`RTOL`/`ATOL` by default (a batch of 32 does not give bit-identical results to 32 batches of 1;
perf_analyzer's byte comparison would fail on that; `--rtol`/`--atol` widen it, e.g. for an fp16 or int8
model checked against fp32 outputs), other datatypes exactly.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.errors import ConfigError
from dlperf.serve.protocol import (
    FLOAT_DATATYPES,
    HEADER_LENGTH,
    NUMPY_DTYPES,
    ProtocolError,
    Tensor,
    array_from_bytes,
    array_from_json,
    decode_response,
)

RTOL = 1e-3
ATOL = 1e-5
"""Tolerance of a floating-point output against its validation data (numpy.allclose)."""

KEYWORDS = ("random", "zero")


@dataclass(frozen=True)
class TensorInfo:
    """An input or output as the server's model metadata gives it; -1 marks a variable dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class InputData:
    """Items to send: `steps[i]` maps every input to one item (no batch dimension when the model batches);
    `expected[i]` maps outputs to that item's expected values, flat (empty: none to check)."""

    steps: tuple[dict[str, np.ndarray], ...]
    expected: tuple[dict[str, np.ndarray], ...]
    source: str

    @property
    def validates(self) -> bool:
        return any(self.expected)


@dataclass(frozen=True)
class Prepared:
    """One distinct request: its input tensors and the outputs its reply must hold (flat; may be empty)."""

    tensors: list[Tensor]
    expected: dict[str, np.ndarray]


def is_batched(inputs: Sequence[TensorInfo]) -> bool:
    """The model takes a batch dimension, as far as its metadata shows: every input's shape starts with -1 (as
    in Triton's metadata when max_batch_size > 0; with max_batch_size 0 a shape may also start with a variable
    dimension, which only the model's config tells apart: `target.model_batches`)."""
    return bool(inputs) and all(spec.shape and spec.shape[0] == -1 for spec in inputs)


def read_input_data(values: Sequence[str], inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], *,
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    batched: bool | None = None) -> InputData | None:
    """What `--input-data` names (given once or more): None for `random` (the caller draws tensors),
    otherwise the items; ConfigError naming the file, entry and tensor for anything that does not fit.
    `batched`: the model takes a batch dimension first (its config's max_batch_size > 0); None: read from
    the metadata shapes (`is_batched`)."""
    values = list(values)
    keywords = [v for v in values if v in KEYWORDS]
    if keywords and len(values) > 1:
        raise ConfigError(f"--input-data {keywords[0]} cannot be combined with other --input-data values")
    if not values or values == ["random"]:
        return None
    batched = is_batched(inputs) if batched is None else batched
    known = _StepShapes(batched, shapes or {})
    if values == ["zero"]:
        step = {spec.name: _zeros(spec.datatype, known.of(spec, "--input-data zero")) for spec in inputs}
        return InputData((step,), ({},), "zero")
    steps: list[dict[str, np.ndarray]] = []
    expected: list[dict[str, np.ndarray]] = []
    for value in values:
        path = Path(value)
        if path.is_dir():
            s, e = _read_directory(path, inputs, outputs, known)
        elif path.is_file():
            s, e = _read_json(path, inputs, outputs, known)
        else:
            raise ConfigError(f"--input-data {value}: no such file or directory (give random, zero, a directory "
                              "with one raw file per input, or a JSON file with a 'data' list)")
        steps += s
        expected += e
    return InputData(tuple(steps), tuple(expected), ", ".join(values))


def prepare(data: InputData, inputs: Sequence[TensorInfo], batch_size: int,
            batched: bool | None = None) -> list[Prepared]:
    """The distinct requests of batch size `batch_size` that cycling through `data` gives, in sending order:
    request k joins items kB .. kB+B-1 (modulo their number), so there are n / gcd(n, B) of them. `batched`
    as for `read_input_data`."""
    batched = is_batched(inputs) if batched is None else batched
    if not batched and batch_size != 1:
        raise ConfigError(f"the model has no batch dimension (its max_batch_size is 0, or its input shapes do "
                          f"not all start with -1), so "
                          f"--batch-size must be 1 with --input-data, got {batch_size}")
    n = len(data.steps)
    out = []
    for k in range(n // math.gcd(n, batch_size)):
        idx = [(k * batch_size + i) % n for i in range(batch_size)]
        tensors = []
        for spec in inputs:
            items = [data.steps[i][spec.name] for i in idx]
            for i, item in zip(idx[1:], items[1:], strict=True):
                if item.shape != items[0].shape:
                    raise ConfigError(
                        f"--input-data: entries {idx[0]} and {i} cannot share a request of --batch-size "
                        f"{batch_size}: input '{spec.name}' has shape {list(items[0].shape)} in one and "
                        f"{list(item.shape)} in the other; use --batch-size 1 or entries of one shape")
            tensors.append(Tensor(spec.name, spec.datatype, np.stack(items) if batched else items[0]))
        want = {}
        for name in dict.fromkeys(name for i in idx for name in data.expected[i]):  # in the file's order
            if all(name in data.expected[i] for i in idx):
                want[name] = np.concatenate([data.expected[i][name] for i in idx])
        out.append(Prepared(tensors, want))
    return out


def mismatch(headers: Mapping[str, str], body: bytes, expected: Mapping[str, np.ndarray], *, rtol: float = RTOL,
             atol: float = ATOL) -> str | None:
    """Why a 200 reply does not hold `expected` (flat outputs; floats within `rtol`/`atol`), or None when it does."""
    length = headers.get(HEADER_LENGTH)
    try:
        response = decode_response(body, int(length) if length is not None else None)
    except (ProtocolError, ValueError) as exc:
        return f"the reply could not be read: {exc}"
    return mismatch_of(response.outputs, expected, rtol=rtol, atol=atol)


def mismatch_of(outputs: Sequence[Tensor], expected: Mapping[str, np.ndarray], *, rtol: float = RTOL,
                atol: float = ATOL) -> str | None:
    """Why decoded output tensors do not hold `expected` (as `mismatch`), or None when they do."""
    got = {t.name: t for t in outputs}
    for name, want in expected.items():
        tensor = got.get(name)
        if tensor is None:
            return f"output '{name}' is not in the reply (it has {', '.join(got) or 'no outputs'})"
        have = tensor.data.reshape(-1)
        if have.size != want.size:
            return f"output '{name}' has {have.size} elements, its validation data {want.size}"
        if tensor.datatype in FLOAT_DATATYPES:  # numpy.isclose's test, written out: a quarter of its time
            b = want.astype(np.float64, copy=False)
            close = np.abs(have.astype(np.float64) - b) <= atol + rtol * np.abs(b)
        else:
            close = have == want
        if not close.all():
            i = int(np.argmin(close))
            if tensor.datatype in FLOAT_DATATYPES:
                return (f"output '{name}' differs from its validation data: element {i} is {float(have[i]):.7g}, "
                        f"expected {float(want[i]):.7g} (rtol {rtol:g}, atol {atol:g})")
            return (f"output '{name}' differs from its validation data: element {i} is {_scalar(have[i])!r}, "
                    f"expected {_scalar(want[i])!r}")
    return None


def _scalar(value: Any) -> Any:
    """A numpy scalar as a Python value (BYTES elements already are one)."""
    return value.item() if isinstance(value, np.generic) else value


# --- reading ------------------------------------------------------------------------------------------


class _StepShapes:
    """One item's shape of each input: its metadata shape without the batch dimension, variable dimensions
    filled from --shape (a full shape, batch dimension included, as for random data)."""

    def __init__(self, batched: bool, shapes: Mapping[str, Sequence[int]]) -> None:
        self.batched = batched
        self.given = shapes

    def default(self, spec: TensorInfo) -> tuple[int, ...]:
        """The item shape, -1 where still variable."""
        given = self.given.get(spec.name)
        dims = tuple(int(d) for d in given) if given is not None else spec.shape
        return dims[1:] if self.batched else dims

    def of(self, spec: TensorInfo, where: str) -> tuple[int, ...]:
        dims = self.default(spec)
        if any(d < 0 for d in dims):
            raise ConfigError(
                f"{where}: input '{spec.name}' has variable dimensions {list(spec.shape)}: give its shape with "
                f"--shape {spec.name}=D1,D2,... (batch dimension included), or in a JSON file as "
                '{"content": [...], "shape": [...]} per entry')
        return dims


def _zeros(datatype: str, dims: tuple[int, ...]) -> np.ndarray:
    if datatype == "BYTES":
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, dtype=NUMPY_DTYPES[datatype])


def _read_directory(path: Path, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo],
                    known: _StepShapes) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    step = {}
    for spec in inputs:
        where = f"--input-data {path}"
        file = path / spec.name
        if not file.is_file():
            raise ConfigError(
                f"{where}: no file '{spec.name}' for input '{spec.name}' (the directory holds one file per input, "
                "named as the input, with one item's raw little-endian row-major data)")
        dims = known.of(spec, where)
        step[spec.name] = _flat_bytes(file.read_bytes(), spec.datatype, math.prod(dims), f"{where}/{spec.name}"
                                      ).reshape(dims)
    expected = {}
    for spec in outputs:
        file = path / spec.name
        if file.is_file():
            expected[spec.name] = _flat_bytes(file.read_bytes(), spec.datatype, None, f"--input-data {file}")
    return [step], [expected]


def _read_json(path: Path, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo],
               known: _StepShapes) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    where = f"--input-data {path}"
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from exc
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{where}: expected an object with a non-empty 'data' list, each entry mapping the "
                          'inputs to one item\'s values, e.g. {"data": [{"INPUT0": [1, 2, 3]}]}')
    if any(isinstance(entry, list) for entry in data):
        raise ConfigError(f"{where}: 'data' holds lists of entries (perf_analyzer's streams of a sequence "
                          "model); dlperf load sends no sequences: give one flat list of entries")
    by_name = {spec.name: spec for spec in inputs}
    steps = []
    for i, entry in enumerate(data):
        at = f"{where}: data[{i}]"
        _check_names(entry, by_name, "input", at)
        missing = [name for name in by_name if name not in entry]
        if missing:
            raise ConfigError(f"{at} has no value for input '{missing[0]}'; every entry gives every input")
        steps.append({name: _item(entry[name], spec, known, f"{at} input '{name}'") for name, spec in by_name.items()})
    validation = obj.get("validation_data")
    if validation is None:
        return steps, [{} for _ in steps]
    if not isinstance(validation, list) or len(validation) != len(data):
        raise ConfigError(f"{where}: 'validation_data' must be a list aligned with 'data' ({len(data)} entries), "
                          f"got {len(validation) if isinstance(validation, list) else type(validation).__name__}")
    out_by_name = {spec.name: spec for spec in outputs}
    expected = []
    for i, entry in enumerate(validation):
        at = f"{where}: validation_data[{i}]"
        _check_names(entry, out_by_name, "output", at)
        expected.append({name: _expected(value, out_by_name[name].datatype, f"{at} output '{name}'")
                         for name, value in entry.items()})
    return steps, expected


def _check_names(entry: Any, known: Mapping[str, TensorInfo], what: str, at: str) -> None:
    """An entry is an object whose keys are all the model's inputs (or outputs)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{at} is not an object mapping {what} names to values")
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ConfigError(f"{at} names '{unknown[0]}', which is not an {what} of the model "
                          f"(its {what}s: {', '.join(known)})")


def _split_value(value: Any, where: str) -> tuple[Any, tuple[int, ...] | None]:
    """(content, shape or None) of an entry's value: a list, {"b64": ...} or {"content": ..., "shape": ...}."""
    if not isinstance(value, dict) or "b64" in value:
        return value, None
    if "content" not in value:
        raise ConfigError(f"{where}: an object value holds 'content' (and optionally 'shape') or 'b64', "
                          f"got keys {sorted(value)}")
    shape = value.get("shape")
    if shape is None:
        return value["content"], None
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ConfigError(f"{where}: 'shape' must be a list of non-negative integers, got {shape!r}")
    return value["content"], tuple(shape)


def _item(value: Any, spec: TensorInfo, known: _StepShapes, where: str) -> np.ndarray:
    content, shape = _split_value(value, where)
    if shape is not None:
        model = known.default(spec)
        if len(shape) != len(model) or any(m >= 0 and m != d for m, d in zip(model, shape, strict=True)):
            raise ConfigError(
                f"{where}: shape {list(shape)} does not fit the model's {list(spec.shape)}"
                + (" (an entry is one item: leave the batch dimension out)" if known.batched else ""))
    dims = shape if shape is not None else known.of(spec, where)
    count = math.prod(dims)
    if isinstance(content, dict):
        return _flat_bytes(_b64(content, where), spec.datatype, count, where).reshape(dims)
    return _json_values(content, spec.datatype, count, where).reshape(dims)


def _expected(value: Any, datatype: str, where: str) -> np.ndarray:
    content, shape = _split_value(value, where)
    count = math.prod(shape) if shape is not None else None
    if isinstance(content, dict):
        return _flat_bytes(_b64(content, where), datatype, count, where)
    return _json_values(content, datatype, count, where)


def _json_values(content: Any, datatype: str, count: int | None, where: str) -> np.ndarray:
    """A (nested) list of values as a flat array. The server's advice for a BYTES value that is not a string, "send
    the tensor as binary data", is no option in an --input-data file: its 'b64' form is."""
    if datatype == "BYTES":
        try:
            return array_from_json(content, datatype, count, where)
        except ProtocolError as exc:
            if "must be strings" not in str(exc):
                raise ConfigError(str(exc)) from exc
            raise ConfigError(f"{where}: BYTES values are strings (their UTF-8 bytes are sent); for bytes that are "
                              "not UTF-8 text give the whole tensor as {\"b64\": ...} of its binary form, each "
                              "element a 4-byte little-endian length and its bytes") from exc
    return _parsed(lambda: array_from_json(content, datatype, count, where))


def _b64(content: dict[str, Any], where: str) -> bytes:
    text = content.get("b64")
    if not isinstance(text, str):
        raise ConfigError(f"{where}: 'b64' must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{where}: 'b64' is not valid base64 ({exc})") from exc


def _flat_bytes(raw: bytes, datatype: str, count: int | None, where: str) -> np.ndarray:
    """Raw tensor bytes -> a flat array; `count` None: as many elements as the bytes hold."""
    return _parsed(lambda: array_from_bytes(raw, datatype, count, where))


def _parsed(read: Any) -> np.ndarray:
    """`read()`, its ProtocolError (which names the file, entry and tensor) as a ConfigError."""
    try:
        array: np.ndarray = read()
    except ProtocolError as exc:
        raise ConfigError(str(exc)) from exc
    return array
