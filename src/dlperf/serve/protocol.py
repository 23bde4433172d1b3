"""The Open Inference Protocol (KServe v2) codec, with Triton's binary tensor data extension.

Pure functions from bytes to dataclasses and back; no HTTP, no torch. Tensors are numpy arrays (BYTES
tensors are object arrays of `bytes`). Both the server (decode requests, encode responses) and the load
generator (encode requests, decode responses) use this module.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from dlperf.errors import ServingError

HEADER_LENGTH = "inference-header-content-length"
"""Triton's header giving the JSON part's length in a binary-extension body."""

NUMPY_DTYPES: dict[str, Any] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": np.dtype(object),
}
"""OIP datatype -> numpy dtype (little-endian, as the binary extension requires). BF16 (Triton's and
tritonclient's, not in the KServe list) is ml_dtypes' bfloat16: 2 bytes, the upper half of a float32."""

BF16 = NUMPY_DTYPES["BF16"]
_INTEGER_TYPES = frozenset(k for k, v in NUMPY_DTYPES.items() if v.kind in "iu")

FLOAT_DATATYPES = ("FP16", "FP32", "FP64", "BF16")
"""The floating-point datatypes: JSON numbers as floats, random tensors drawn from a normal distribution."""

_DATATYPE_OF_KIND: dict[tuple[str, int], str] = {
    ("b", 1): "BOOL", ("u", 1): "UINT8", ("u", 2): "UINT16", ("u", 4): "UINT32", ("u", 8): "UINT64",
    ("i", 1): "INT8", ("i", 2): "INT16", ("i", 4): "INT32", ("i", 8): "INT64",
    ("f", 2): "FP16", ("f", 4): "FP32", ("f", 8): "FP64",
}

TORCH_DATATYPES: dict[str, str] = {
    "torch.bool": "BOOL", "torch.uint8": "UINT8", "torch.int8": "INT8", "torch.int16": "INT16",
    "torch.int32": "INT32", "torch.int64": "INT64", "torch.float16": "FP16", "torch.float32": "FP32",
    "torch.float64": "FP64", "torch.bfloat16": "BF16",
}
"""str(torch dtype) -> OIP datatype, for model metadata."""


class ProtocolError(ServingError):
    """A request that does not follow the protocol or the model's signature; `status` is the HTTP code."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def host_port(host: str, port: int) -> str:
    """host:port as a URL, a Host header and gRPC write it: an IPv6 address in brackets ([::1]:8000)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def header_length_of(headers: Mapping[str, str]) -> int | None:
    """The JSON part's length from a request's Inference-Header-Content-Length (lower-case header names), None
    without one (a JSON-only body); ProtocolError when it is not a whole number of bytes."""
    text = headers.get(HEADER_LENGTH)
    if text is None:
        return None
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):  # latin-1 header bytes: '²' is a digit to isdigit()
        raise ProtocolError(f"Inference-Header-Content-Length is not a byte count: {text!r}")
    return int(digits)


def datatype_of(array: np.ndarray) -> str:
    """The OIP datatype of a numpy array; object and bytes/str arrays are BYTES."""
    kind = array.dtype.kind
    if kind in "OSU":
        return "BYTES"
    if array.dtype == BF16:
        return "BF16"
    name = _DATATYPE_OF_KIND.get((kind, array.dtype.itemsize))
    if name is None:
        raise ProtocolError(f"numpy dtype {array.dtype} has no Open Inference Protocol datatype", 500)
    return name


def datatype_of_name(text: str) -> str:
    """'float32', 'torch.float32', 'FP32', 'int64' -> the OIP datatype."""
    if text.upper() in NUMPY_DTYPES:
        return text.upper()
    if text in TORCH_DATATYPES:
        return TORCH_DATATYPES[text]
    if f"torch.{text}" in TORCH_DATATYPES:
        return TORCH_DATATYPES[f"torch.{text}"]
    try:
        return datatype_of(np.empty(0, dtype=np.dtype(text)))
    except TypeError as exc:
        raise ProtocolError(f"unknown datatype '{text}'", 500) from exc


# --- dataclasses ------------------------------------------------------------------------------------


@dataclass
class Tensor:
    """A named tensor: `data` is a numpy array of `shape` (object dtype of bytes for BYTES)."""

    name: str
    datatype: str
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> list[int]:
        return [int(d) for d in self.data.shape]


@dataclass
class RequestedOutput:
    name: str
    binary: bool | None = None
    """True/False when the request says so; None means the request's default."""
    shm: tuple[str, int, int] | None = None
    """(region, offset, byte_size) to write the output to (the shared-memory extension); None: in the reply."""


ShmView = Callable[[str, int, int, str], Any]
"""(region, offset, byte_size, where) -> a writable buffer of that span of a registered region."""


@dataclass
class InferRequest:
    inputs: list[Tensor]
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: list[RequestedOutput] | None = None
    """The outputs asked for; None = all."""

    @property
    def binary_output_default(self) -> bool:
        return bool(self.parameters.get("binary_data_output", False))


@dataclass
class InferResponse:
    model_name: str
    outputs: list[Tensor]
    model_version: str | None = None
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


# --- decoding ---------------------------------------------------------------------------------------


def decode_request(body: bytes | memoryview, header_length: int | None = None,
                   shm: ShmView | None = None) -> InferRequest:
    """Parse an infer request body: JSON, or JSON plus binary tensors when `header_length` is given; inputs
    in shared memory are read through `shm` (None: the server takes none)."""
    header, binary = _split_body(body, header_length)
    try:
        obj = _parse_json(header, "request")
    except ProtocolError as exc:
        hint = _binary_header_hint(header, header_length)
        if hint is None:
            raise
        raise ProtocolError(f"{exc}; {hint}") from None
    raw_inputs = obj.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        # "no 'inputs' list" was all a client that sent {"inputs": 5} or {"input": [...]} was told
        given = ("the request has no 'inputs'" if raw_inputs is None else "the request's 'inputs' is empty"
                 if raw_inputs == [] else f"the request's 'inputs' is {_described(raw_inputs)}")
        raise ProtocolError(f"{given}: send 'inputs' as a list of at least one input tensor, each an object "
                            '{"name", "shape", "datatype", "data"}')
    offset = 0
    inputs = []
    for i, raw in enumerate(raw_inputs):
        tensor, offset = _decode_tensor(raw, binary, offset, f"input {i}", shm)
        inputs.append(tensor)
    if offset != len(binary):
        raise ProtocolError(
            f"the request carries {len(binary)} bytes of binary data but its inputs' binary_data_size "
            f"add up to {offset}"
        )
    outputs: list[RequestedOutput] | None = None
    if obj.get("outputs") is not None:
        raw_outputs = obj["outputs"]
        if not isinstance(raw_outputs, list):
            raise ProtocolError(f"the request's 'outputs' is {_described(raw_outputs)}: send a list of "
                                '{"name": ...} objects, or leave it out for every output')
        outputs = []
        for raw in raw_outputs:
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                raise ProtocolError("each requested output needs a 'name'")
            where = f"output '{raw['name']}'"
            params = _parameters(raw, where)
            outputs.append(requested_output(raw["name"], params, _flag(params, "binary_data", where), shm))
        # an empty list asks for all outputs, as in Triton (whose core returns every output when none is requested)
        # and as over gRPC, where an empty repeated field cannot be told from an absent one
        outputs = outputs or None
    parameters = _parameters(obj, "the request")
    _flag(parameters, "binary_data_output", "the request")
    request_id = obj.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"the request's 'id' must be a string, got {request_id!r}")
    return InferRequest(inputs=inputs, id=request_id, parameters=parameters, outputs=outputs)


def _described(value: Any) -> str:
    """A JSON value as an error message names what was given: its JSON type and (the start of) its text."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", _NonFinite: "a number", str: "a string",
             list: "a list", dict: "an object"}
    text = json.dumps(value)
    return f"{kinds.get(type(value), 'null')} ({text if len(text) <= 60 else text[:57] + '...'})"


def _parameters(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The `parameters` object of a request, input or output ({} when absent); ProtocolError when it is not an
    object or a value is not a string, a number or a boolean (the protocol's $parameter; Triton refuses the
    others: "parameter '...' has invalid type")."""
    params = raw.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ProtocolError(f"{where}: 'parameters' must be an object, got {params!r}")
    for name, value in params.items():
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise ProtocolError(f"{where}: parameter '{name}' is {_described(value)}: a parameter's value must be "
                                "a string, a number or a boolean")
    return params


def _flag(params: dict[str, Any], name: str, where: str) -> bool | None:
    """A boolean parameter (`binary_data`, `binary_data_output`), None when absent; ProtocolError when it is
    not true/false (the string "false" would otherwise read as true)."""
    value = params.get(name)
    if value is not None and not isinstance(value, bool):
        raise ProtocolError(f"{where}: parameter '{name}' must be true or false, got {value!r}")
    return value


def decode_response(body: bytes, header_length: int | None = None) -> InferResponse:
    """Parse an infer response (used by the load generator and tests)."""
    header, binary = _split_body(body, header_length)
    obj = _parse_json(header, "response")
    if "error" in obj:
        raise ProtocolError(str(obj["error"]), 500)
    offset = 0
    outputs = []
    for i, raw in enumerate(obj.get("outputs") or []):
        tensor, offset = _decode_tensor(raw, binary, offset, f"output {i}")
        outputs.append(tensor)
    return InferResponse(model_name=str(obj.get("model_name", "")), outputs=outputs,
                         model_version=obj.get("model_version"), id=obj.get("id"),
                         parameters=obj.get("parameters") or {})


def _split_body(body: bytes | memoryview, header_length: int | None) -> tuple[bytes, Any]:
    if header_length is None:
        return (body if isinstance(body, bytes) else bytes(body)), b""
    if header_length < 0 or header_length > len(body):
        raise ProtocolError(
            f"Inference-Header-Content-Length is {header_length} but the body has {len(body)} bytes"
        )
    view = memoryview(body)
    return bytes(view[:header_length]), view[header_length:]


def declared_datatypes(body: bytes | memoryview, header_length: int | None) -> dict[str, str]:
    """Each input's datatype as the request names it (name -> datatype), best effort: {} for a body whose JSON
    part cannot be read. For an error reply only (see `service.ServerState.infer`), never on the served path."""
    try:
        obj = _parse_json(_split_body(body, header_length)[0], "request")
    except ProtocolError:
        return {}
    inputs = obj.get("inputs")
    if not isinstance(inputs, list):
        return {}
    return {i["name"]: i["datatype"] for i in inputs
            if isinstance(i, dict) and isinstance(i.get("name"), str) and isinstance(i.get("datatype"), str)}


def _binary_header_hint(header: bytes, header_length: int | None) -> str | None:
    """Why a request body that is not JSON may be JSON followed by binary tensor data, and how to send it (None
    when it is not that): a client that forgot Inference-Header-Content-Length, or gave a wrong one, read only
    a JSON decoder's complaint about the bytes after the JSON."""
    text = header.decode("utf-8", "replace")
    try:
        _, end = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except RecursionError:  # nested too deeply: _parse_json said so
        return None
    except ValueError:
        if header_length is None:
            return None
        return (f"Inference-Header-Content-Length ({header_length}) must be the length in bytes of the JSON part "
                "that starts the body")
    if not text[end:].strip():  # the JSON part is all there is: the error was about it (a list, not an object)
        return None
    json_bytes = len(text[:end].encode())
    if header_length is None:
        return (f"the body has {len(header) - json_bytes} bytes after a JSON part of {json_bytes} bytes: send binary "
                f"tensor data with the header Inference-Header-Content-Length: {json_bytes}")
    return (f"its JSON part is {json_bytes} bytes but Inference-Header-Content-Length says {header_length}: set it "
            "to the JSON part's length")


class _NonFinite(float):
    """A NaN, Infinity or -Infinity the JSON text spelled out: taken as Triton takes them (it parses and writes
    them, tritonclient sends them in JSON tensor data), unlike a finite number too large for a double, such as
    1e999, which Python would read as infinity too and Triton refuses ("Number too big to be stored in
    double")."""


_DECODER = json.JSONDecoder(parse_constant=_NonFinite)


def _parse_json(header: bytes, what: str) -> dict[str, Any]:
    try:
        obj = _DECODER.decode(header.decode(json.detect_encoding(header), "surrogatepass"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"the {what} is not valid JSON: {exc}") from exc
    except RecursionError:  # arrays or objects nested deeper than Python's recursion limit
        raise ProtocolError(f"the {what} nests its JSON too deeply to be read: send tensor data as one flat list "
                            "(or nested as deep as its shape)") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"the {what} must be a JSON object, not {_described(obj)}")
    return obj


_NO_SHM = ("this server takes no tensors in shared memory: start it with --allow-client-shm (Triton's "
           "--allow-client-shm=true), or send the data in the request")


def requested_output(name: str, params: dict[str, Any], binary: bool | None, shm: ShmView | None) -> RequestedOutput:
    """A requested output (HTTP's or gRPC's), its shared-memory span, if any, checked through `shm`: the
    region is registered and holds the span."""
    where = f"output '{name}'"
    count = params.get("classification")
    if count not in (None, 0):  # tritonclient's class_count=0 (its default) sends none
        # answering the full tensor instead handed the client an FP32 output where it expected BYTES "value:index"
        raise ProtocolError(
            f"{where} asks for classification={count!r} (Triton's classification extension), which this server "
            f"does not offer: request the output without class_count and take its top classes on the client"
        )
    span = shm_span(params, where)
    if span is not None:
        if shm is None:
            raise ProtocolError(_NO_SHM)
        shm(*span, where)
    return RequestedOutput(name, binary, span)


def array_from_shm(span: tuple[str, int, int], shm: ShmView | None, has_data: bool, datatype: str, count: int,
                   where: str) -> np.ndarray:
    """An input's elements read from its shared-memory span (HTTP's or gRPC's request); ProtocolError when
    the server takes no shared memory or the request also carries the input's data."""
    if shm is None:
        raise ProtocolError(_NO_SHM)
    if has_data:
        raise ProtocolError(f"{where} is in shared memory and also has data in the request: give one")
    # copied at once, right after the check that the object has not shrunk: a view read only when the batch runs
    # (after the queue wait) let a client that shrank the object in between kill the server with SIGBUS
    return array_from_bytes(bytes(shm(*span, where)), datatype, count, where)


def set_parameter(p: Any, value: Any) -> None:
    """Set a gRPC `InferParameter` message to `value` in the field of its type (bool, int64, double, else
    string); the server's replies and the load generator's requests both write them."""
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = str(value)


def shm_span(params: dict[str, Any], where: str) -> tuple[str, int, int] | None:
    """(region, offset, byte_size) from a tensor's shared-memory parameters, None without them;
    ProtocolError when only one of region and byte size is given or a value has the wrong type."""
    region, size = params.get("shared_memory_region"), params.get("shared_memory_byte_size")
    if region is None and size is None:
        return None
    if region is None or size is None:
        raise ProtocolError(f"{where}: give both shared_memory_region and shared_memory_byte_size "
                            "(and optionally shared_memory_offset)")
    offset = params.get("shared_memory_offset", 0)
    if not isinstance(region, str):
        raise ProtocolError(f"{where}: shared_memory_region must be a string, got {region!r}")
    for key, value in (("shared_memory_byte_size", size), ("shared_memory_offset", offset)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProtocolError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return region, offset, size


SHM_PARAMETERS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


def _decode_tensor(raw: Any, binary: Any, offset: int, where: str,
                   shm: ShmView | None = None) -> tuple[Tensor, int]:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where} must be an object with name, shape, datatype and data")
    name = raw.get("name")
    if not isinstance(name, str):
        raise ProtocolError(f"{where} has no 'name'")
    where = f"{where} '{name}'"
    datatype = raw.get("datatype")
    if datatype not in NUMPY_DTYPES:
        raise ProtocolError(
            f"{where} has datatype {datatype!r}: use one of {', '.join(NUMPY_DTYPES)}"
        )
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in shape):
        raise ProtocolError(f"{where} has shape {shape!r}: give a list of non-negative integers")
    check_rank(shape, where)
    count = 1
    for d in shape:
        count *= d
    params = _parameters(raw, where)
    size = params.get("binary_data_size")
    if size is not None and "data" in raw:
        raise ProtocolError(f"{where} has both 'data' and a binary_data_size parameter: give one")
    span = shm_span(params, where) if params else None
    if span is not None:
        array = array_from_shm(span, shm, size is not None or "data" in raw, datatype, count, where)
        params = {k: v for k, v in params.items() if k not in SHM_PARAMETERS}
    elif size is not None:
        if type(size) is not int or size < 0 or offset + size > len(binary):
            raise ProtocolError(_binary_size_error(size, len(binary) - offset, where))
        chunk = binary[offset:offset + size]
        array = array_from_bytes(chunk, datatype, count, where)
        offset += size
    else:
        if "data" not in raw:
            raise ProtocolError(f"{where} has neither 'data' nor a binary_data_size parameter")
        array = array_from_json(raw["data"], datatype, count, where)
    if size is not None:
        params = {k: v for k, v in params.items() if k != "binary_data_size"}
    return Tensor(name, datatype, shaped(array, shape, where), params), offset


def _binary_size_error(size: Any, remaining: int, where: str) -> str:
    """Why an input's binary_data_size cannot be taken: not a byte count (a string, a float, true, a negative
    number: it said "binary_data_size='256' but only 256 bytes ... remain" of a quoted 256), or more bytes
    than the body has left."""
    if type(size) is not int or size < 0:
        return (f"{where} has binary_data_size={size!r}: it must be the tensor's byte count in the binary part "
                "of the body, a non-negative integer")
    return f"{where} says binary_data_size={size} but only {remaining} bytes of binary data remain in the body"


def shaped(array: np.ndarray, shape: list[int], where: str) -> np.ndarray:
    """`array` (flat, its element count already checked) in `shape`; ProtocolError where numpy cannot make the
    shape (a zero dimension beside one of 2**62: no elements, but too big a shape)."""
    try:
        return array.reshape(shape)
    except ValueError as exc:
        raise ProtocolError(f"{where} has shape {shape}: {exc}") from exc


MAX_PRIORITY = 2**64 - 1
"""The highest request priority: Triton's `priority` is an unsigned 64-bit integer (the server's check and
`dlperf load --priority` both use this bound)."""

STREAM_ERROR_STATUS_PARAMETER = "dlperf_error_status"
"""The parameter of a ModelStreamInfer error's `infer_response` that gives the HTTP status of the failure (400 for a
bad request, 503 for a full queue, ...): the stream's `error_message` has no code (Triton sends none either), and a
Triton client ignores a parameter it does not know."""

NOT_OFFERED = {
    "repository": "dlperf serve has no model repository to index, load or unload: it serves the models given "
                  "when it started (dlperf serve WORKLOAD_OR_ARTIFACT); restart it to change them",
    "cudasharedmemory": "dlperf serve takes system shared memory only (systemsharedmemory, with "
                        "--allow-client-shm), not CUDA shared memory",
    "trace": "dlperf serve has no request tracing: per-request queue and compute times are in the model's "
             "statistics and /metrics; dlperf profile traces the model itself",
    "logging": "dlperf serve's log settings are fixed when it starts: give --log-level there",
}
"""Triton's extensions this server does not offer, by their HTTP path under /v2, and what to do instead: the
reason an HTTP request (404) or gRPC call (UNIMPLEMENTED) for one of them gets."""

MAX_RANK = 64
"""The most dimensions a tensor may have: numpy's limit (a model may take fewer; its own error says so)."""


def check_rank(shape: list[int], where: str) -> None:
    """ProtocolError when `shape` has more than MAX_RANK dimensions."""
    if len(shape) > MAX_RANK:
        raise ProtocolError(f"{where} has {len(shape)} dimensions: at most {MAX_RANK} are taken")


def array_from_bytes(chunk: Any, datatype: str, count: int | None, where: str) -> np.ndarray:
    """`count` elements of `datatype` from the binary extension's encoding (BYTES: 4-byte length + bytes each),
    flat; ProtocolError naming `where` when the bytes do not hold exactly that. `count` None: as many
    elements as the bytes hold."""
    if datatype == "BYTES":
        items: list[bytes] = []
        pos = 0
        view = memoryview(chunk)
        while pos < len(view):
            if pos + 4 > len(view):
                raise ProtocolError(f"{where}: truncated BYTES element length at byte {pos}")
            (n,) = struct.unpack_from("<I", view, pos)
            pos += 4
            if pos + n > len(view):
                raise ProtocolError(f"{where}: BYTES element of {n} bytes runs past the tensor's data")
            items.append(bytes(view[pos:pos + n]))
            pos += n
        if count is not None and len(items) != count:
            raise ProtocolError(f"{where}: {len(items)} BYTES elements for a shape of {count} elements")
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out
    dtype = NUMPY_DTYPES[datatype]
    if count is None:
        if len(chunk) % dtype.itemsize:
            raise ProtocolError(f"{where}: {len(chunk)} bytes are not a whole number of {datatype} elements "
                                f"({dtype.itemsize} bytes each)")
        count = len(chunk) // dtype.itemsize
    expected = count * dtype.itemsize
    if len(chunk) != expected:
        raise ProtocolError(
            f"{where}: {len(chunk)} bytes of binary data for {count} {datatype} elements "
            f"(expected {expected})"
        )
    return np.frombuffer(chunk, dtype=dtype, count=count)


def array_from_json(data: Any, datatype: str, count: int | None, where: str) -> np.ndarray:
    """`count` elements of `datatype` from JSON data (nested lists flattened in row-major order), flat;
    ProtocolError naming `where` when the count or the element types do not fit. `count` None: as many
    elements as the data holds."""
    if data is None:  # read as one element: "1 data elements for a shape of 64 elements"
        raise ProtocolError(f"{where}: 'data' is null: give the tensor's elements as a (nested) list")
    flat = _flatten(data)
    if count is not None and len(flat) != count:
        # a string for a number tensor was "1 data elements for a shape of 64 elements"
        given = "" if isinstance(data, list) else f" ('data' is {_described(data)}, not a list)"
        raise ProtocolError(f"{where}: {len(flat)} data elements for a shape of {count} elements{given}")
    if datatype == "BYTES":
        if not all(type(v) is str for v in flat):
            raise ProtocolError(f"{where}: BYTES data must be strings (or send the tensor as binary data)")
        out = np.empty(len(flat), dtype=object)
        out[:] = [v.encode() for v in flat]
        return out
    if datatype == "BOOL":
        if not all(isinstance(v, bool) for v in flat):
            raise ProtocolError(f"{where}: BOOL data must be true/false")
    elif datatype in _INTEGER_TYPES:
        if not all(type(v) is int for v in flat):  # a float would be truncated, 1.7 -> 1
            raise ProtocolError(f"{where}: {datatype} data must be integers")
    elif not all(type(v) in (int, float, _NonFinite) for v in flat):
        raise ProtocolError(f"{where}: {datatype} data must be numbers")
    try:
        with np.errstate(over="ignore"):  # a finite number cast to infinity is refused below, not logged
            array = np.asarray(flat, dtype=NUMPY_DTYPES[datatype])
    except (TypeError, ValueError, OverflowError) as exc:
        bounds = ""
        if datatype in _INTEGER_TYPES:
            info = np.iinfo(NUMPY_DTYPES[datatype])
            bounds = f" (its range is {info.min} to {info.max}; use a wider datatype for larger values)"
        raise ProtocolError(f"{where}: data does not fit {datatype}: {exc}{bounds}") from exc
    if datatype in FLOAT_DATATYPES and not np.isfinite(array).all():
        _refuse_overflow(flat, array, datatype, where)
    return array


def _refuse_overflow(flat: list[Any], array: np.ndarray, datatype: str, where: str) -> None:
    """ProtocolError for the first JSON number that became infinity without being spelled Infinity: one too large
    for a double (json reads 1e999 as infinity without a word; Triton refuses it) or for `datatype` (1e39 as FP32,
    70000 as FP16); the spelled-out NaN, Infinity and -Infinity are `_NonFinite` and stay."""
    for index in np.flatnonzero(~np.isfinite(array)):
        value = flat[index]
        if type(value) is _NonFinite:
            continue
        fix = "send Infinity or -Infinity for an infinite value"
        if math.isinf(value):
            raise ProtocolError(f"{where}: element {index} of 'data' is a number too large for a double, which "
                                f"would be read as infinity: {fix}")
        largest = float(ml_dtypes.finfo(NUMPY_DTYPES[datatype]).max)
        raise ProtocolError(f"{where}: element {index} of 'data', {value:g}, is beyond {datatype}'s range (at most "
                            f"{largest:g} either way) and would become infinity: {fix}, or use a wider datatype")


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    if not data or not isinstance(data[0], list):
        return data
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


# --- encoding ---------------------------------------------------------------------------------------


def tensor_bytes(array: np.ndarray, datatype: str) -> bytes:
    """The binary extension's encoding of a tensor: little-endian raw data; BYTES as length + bytes."""
    if datatype == "BYTES":
        parts = []
        for item in array.reshape(-1):
            b = item if isinstance(item, bytes) else str(item).encode()
            parts.append(struct.pack("<I", len(b)))
            parts.append(b)
        return b"".join(parts)
    dtype = NUMPY_DTYPES[datatype]
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def _json_data(array: np.ndarray, datatype: str) -> list[Any]:
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [(v if isinstance(v, bytes) else str(v).encode()).decode("utf-8", "replace") for v in flat]
    if datatype in FLOAT_DATATYPES:
        return [float(v) for v in flat.astype(np.float64)]
    values: list[Any] = flat.tolist()
    return values


def encode_tensors(tensors: Sequence[Tensor], binary: Sequence[bool]) -> tuple[list[dict[str, Any]], list[bytes]]:
    """JSON descriptions of `tensors` plus the binary chunks for those with binary=True, in order."""
    described = []
    chunks = []
    for tensor, as_binary in zip(tensors, binary, strict=False):
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        params = dict(tensor.parameters)
        if "shared_memory_region" in params:
            pass  # written to the client's shared memory: the reply only describes it
        elif as_binary:
            chunk = tensor_bytes(tensor.data, tensor.datatype)
            params["binary_data_size"] = len(chunk)
            chunks.append(chunk)
        else:
            entry["data"] = _json_data(tensor.data, tensor.datatype)
        if params:
            entry["parameters"] = params
        described.append(entry)
    return described, chunks


def _assemble(obj: dict[str, Any], chunks: list[bytes]) -> tuple[bytes, int | None]:
    header = json.dumps(obj, separators=(",", ":")).encode()
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def encode_response(response: InferResponse, binary: Sequence[bool]) -> tuple[bytes, int | None]:
    """(body, header length or None when all JSON); `binary[i]` says how output i is sent."""
    described, chunks = encode_tensors(response.outputs, binary)
    obj: dict[str, Any] = {"model_name": response.model_name}
    if response.model_version is not None:
        obj["model_version"] = response.model_version
    if response.id is not None:
        obj["id"] = response.id
    if response.parameters:
        obj["parameters"] = response.parameters
    obj["outputs"] = described
    return _assemble(obj, chunks)


def encode_request(inputs: Sequence[Tensor], *, binary: bool = True, request_id: str | None = None,
                   parameters: dict[str, Any] | None = None, outputs: Sequence[str] | None = None,
                   binary_outputs: bool = True,
                   output_parameters: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[bytes, int | None]:
    """An infer request body as tritonclient would send it: (body, header length or None). A requested
    output's `output_parameters` (e.g. shared memory) replace its `binary_data` flag."""
    described, chunks = encode_tensors(inputs, [binary] * len(inputs))
    obj: dict[str, Any] = {}
    if request_id is not None:
        obj["id"] = request_id
    params = dict(parameters or {})
    if outputs is None:
        if binary_outputs:
            params["binary_data_output"] = True
    else:
        given = output_parameters or {}
        obj["outputs"] = [{"name": n, "parameters": dict(given.get(n, {"binary_data": binary_outputs}))}
                          for n in outputs]
    if params:
        obj["parameters"] = params
    obj["inputs"] = described
    return _assemble(obj, chunks)


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


_STRING_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", dtype=np.uint8)


def random_array(datatype: str, shape: Sequence[int], rng: np.random.Generator, *, string_length: int = 8,
                 string_data: bytes | None = None) -> np.ndarray:
    """A random tensor of an OIP datatype: normal floats, small non-negative integers, random bools; BYTES
    elements are `string_data` if given, else random letters and digits, `string_length` of them."""
    shape = tuple(int(d) for d in shape)
    if datatype in FLOAT_DATATYPES:
        return rng.standard_normal(shape).astype(NUMPY_DTYPES[datatype])
    if datatype == "BOOL":
        return rng.random(shape) < 0.5
    if datatype == "BYTES":
        out = np.empty(shape, dtype=object)
        flat = out.reshape(-1)
        for i in range(flat.size):
            flat[i] = string_data if string_data is not None else (
                _STRING_ALPHABET[rng.integers(0, _STRING_ALPHABET.size, size=string_length)].tobytes())
        return out
    return rng.integers(0, 100, size=shape).astype(NUMPY_DTYPES[datatype])
