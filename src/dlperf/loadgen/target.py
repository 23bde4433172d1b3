"""What `dlperf load` sends: a `Target` (prebuilt raw requests and where to read the server's statistics),
built from the server's model metadata by `oip_target`, with random tensors, a workload's example inputs or
real input data (`loadgen.inputs`), and checked with one test request before any load."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlperf.errors import ConfigError, LoadGenError
from dlperf.loadgen.client import Connection, Endpoint, Sender, build_request, fetch, parse_url
from dlperf.loadgen.inputs import (
    ATOL,
    RTOL,
    InputData,
    TensorInfo,
    is_batched,
    mismatch,
    mismatch_of,
    prepare,
    read_input_data,
)
from dlperf.loadgen.shm import DEFAULT_OUTPUT_SIZE, ClientShm
from dlperf.serve.protocol import HEADER_LENGTH, NUMPY_DTYPES, ProtocolError, Tensor, encode_request, random_array


@dataclass(frozen=True)
class Target:
    """What is sent: a prebuilt raw HTTP request (or several, sent in turn, with the outputs their replies
    must hold), and where to read the server's statistics."""

    endpoint: Endpoint
    model: str
    raw_request: bytes
    items_per_request: int = 1
    stats_path: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    requests: tuple[bytes, ...] = ()
    """Several distinct requests (`--input-data`), sent in turn: request k of a level sends requests[k % n];
    raw_request is requests[0]. Empty: every request is raw_request."""
    expected: tuple[dict[str, np.ndarray], ...] = ()
    """Aligned with `requests`: the outputs each reply must hold (flat; an empty dict checks nothing)."""
    tolerance: tuple[float, float] = (RTOL, ATOL)
    """(rtol, atol) within which floating-point outputs match `expected`."""
    shm: ClientShm | None = None
    """The shared memory the requests' tensors are in (--shared-memory system); `close()` releases it."""
    protocol: str = "http"
    """http: the requests are raw HTTP requests; grpc: serialized ModelInferRequests (`loadgen.grpc_client`)."""
    streaming: bool = False
    """grpc: send on ModelStreamInfer streams (one per connection) instead of unary calls."""

    def connect(self, timeout_s: float = 60.0) -> Sender:
        """A new connection to send this target's requests on (not connected until its first send)."""
        if self.protocol == "grpc":
            from dlperf.loadgen.grpc_client import GrpcConnection, GrpcStreamConnection

            if self.streaming:
                return GrpcStreamConnection(self.endpoint, timeout_s, self.headers)
            return GrpcConnection(self.endpoint, timeout_s, self.headers)
        return Connection(self.endpoint, timeout_s)

    def close(self) -> None:
        """Release what the target holds on the server and the host (its shared memory); idempotent."""
        if self.shm is not None:
            self.shm.close()

    def mismatch(self, headers: Mapping[str, str], body: bytes, expected: Mapping[str, np.ndarray]) -> str | None:
        """Why a 200 reply does not hold `expected`, or None (`loadgen.inputs.mismatch` at this tolerance)."""
        if self.protocol == "grpc":
            from dlperf.loadgen.grpc_client import decode_reply

            try:
                outputs = decode_reply(body)
            except (ProtocolError, ValueError) as exc:
                return f"the reply could not be read: {exc}"
            return mismatch_of(outputs, expected, rtol=self.tolerance[0], atol=self.tolerance[1])
        return mismatch(headers, body, expected, rtol=self.tolerance[0], atol=self.tolerance[1])

    def request(self, k: int) -> tuple[bytes, dict[str, np.ndarray] | None]:
        """The k-th request to send and what its reply must hold (None: nothing to check)."""
        if not self.requests:
            return self.raw_request, None
        i = k % len(self.requests)
        return self.requests[i], (self.expected[i] or None) if self.expected else None


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


NOT_KSERVE = "is this a KServe v2 / Triton HTTP port? give its host:port"


class HttpStatusError(LoadGenError):
    """A GET the server answered with another status than 200 (`status`)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _token_hint(token: str | None) -> str:
    """What to change after a 401 / UNAUTHENTICATED, by whether --token was given."""
    return ("; the --token given is not the server's" if token else
            "; the server requires a token: give it with --token-file FILE (or --token)")


def _get_json(endpoint: Endpoint, path: str, headers: dict[str, str]) -> Any:
    reply = asyncio.run(fetch(endpoint, path, headers))
    if reply.status != 200:
        message = error_of(reply.body)
        # the URL's own path goes before every endpoint's: '127.0.0.1:8000/v2' asked for /v2/v2 and was told
        # only "GET /v2 ... answered 404: no endpoint at GET /v2/v2"
        hint = (f" (the URL's path {endpoint.base_path} goes before every endpoint's path: is it the server's root? "
                f"the usual target is HOST:PORT alone, e.g. {endpoint.authority})"
                if reply.status == 404 and endpoint.base_path and path == "/v2" else "")
        raise HttpStatusError(f"GET {endpoint.base_path}{path} on {endpoint.authority} answered {reply.status}: "
                              f"{message}{hint}", reply.status)
    try:
        data = json.loads(reply.body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):  # a proxy's HTML page with 200: a traceback and exit 1, read as a missed SLO
        raise LoadGenError(f"GET {path} on {endpoint.authority} answered 200, but not with a KServe v2 JSON object "
                           f"({_first_words(reply.body)}): {NOT_KSERVE}")
    return data


def _first_words(body: bytes, limit: int = 80) -> str:
    """The start of a body on one line, tags and runs of spaces dropped (an HTML error page ran to ten lines)."""
    import re

    text = re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", body[:2000].decode("utf-8", "replace"))).strip()
    return (text[:limit] + "...") if len(text) > limit else (text or "an empty body")


def error_of(body: bytes) -> str:
    """The message of an error reply: a KServe `{"error": ...}` body's, else the start of the body, marked as not
    KServe's."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError, UnicodeDecodeError):
        error = None
    if isinstance(error, str):
        return error
    return f"{_first_words(body)} ({NOT_KSERVE})"


def oip_target(url: str, model: str, *, batch_size: int | None = None, token: str | None = None,
               inputs: Sequence[Any] | None = None, shapes: dict[str, Sequence[int]] | None = None,
               seed: int = 0, check: bool = True, parameters: dict[str, Any] | None = None,
               input_data: Sequence[str] = (), string_length: int | None = None,
               string_data: str | None = None, rtol: float | None = None, atol: float | None = None,
               shared_memory: str = "none", output_shm_size: int = DEFAULT_OUTPUT_SIZE,
               protocol: str = "http", streaming: bool = False) -> Target:
    """A target from the server's model metadata: random tensors of the right datatype and shape, or
    `inputs` (arrays or tensors in metadata order, e.g. a workload's example inputs), or `input_data`
    (perf_analyzer's --input-data values: zero, a directory, JSON files; `loadgen.inputs`). `shapes` are full
    shapes of inputs with variable dimensions, for a model that batches with the batch dimension first: it is
    the batch size, which `batch_size` (default 1) must then agree with (`request_batch`). `parameters` go
    into every request's `parameters` (e.g. Triton's `priority`). Random BYTES elements are `string_data`
    (UTF-8) if given, else `string_length` random letters and digits (default 128, perf_analyzer's).
    `rtol`/`atol` replace the tolerance of the check against `input_data`'s validation data.
    `shared_memory` "system" puts the inputs (and, without validation data, the outputs) in shared memory
    registered with the server (`loadgen.shm`); call the target's `close()` when done with it. `protocol`
    "grpc" sends the same requests over the server's gRPC endpoint (`url` its host:port), with `streaming` on
    ModelStreamInfer streams (the test request goes as a unary call)."""
    if protocol not in ("http", "grpc"):
        raise ConfigError(f"--protocol must be http or grpc, got '{protocol}'")
    if streaming and protocol != "grpc":
        raise ConfigError("--streaming sends gRPC streams (ModelStreamInfer): add --protocol grpc (-i grpc)")
    endpoint = parse_url(url)
    headers = _auth(token)
    grpc_meta = None
    if protocol == "grpc":
        from dlperf.loadgen.grpc_client import GrpcCallError, server_and_model

        try:
            server, grpc_meta = server_and_model(endpoint, model, headers)
        except GrpcCallError as exc:
            # the server said what is wrong with the token or the model: the port is the right one
            hint = {"UNAUTHENTICATED": _token_hint(token), "NOT_FOUND": ""}.get(
                exc.code, f" (is {endpoint.authority} the server's gRPC port, and '{model}' the served model's name?)")
            raise LoadGenError(f"{exc}{hint}") from exc
    else:
        try:
            server = _get_json(endpoint, "/v2", headers)
        except HttpStatusError as exc:
            if exc.status != 401:
                raise
            raise LoadGenError(f"{exc}{_token_hint(token)}") from exc
    if shared_memory not in ("none", "system"):
        raise ConfigError(f"--shared-memory must be none or system, got '{shared_memory}' (CUDA shared memory is "
                          "not supported)")
    shm = None
    if shared_memory == "system":
        if "system_shared_memory" not in (server.get("extensions") or []):
            raise LoadGenError(f"the server at {endpoint.authority} does not take system shared memory (its "
                               "extensions do not list system_shared_memory): start dlperf serve with "
                               "--allow-client-shm, or drop --shared-memory")
        shm = ClientShm(endpoint, headers, output_shm_size, protocol)
    if grpc_meta is not None:
        meta = grpc_meta
    else:
        try:
            meta = _get_json(endpoint, f"/v2/models/{model}", headers)
        except LoadGenError as exc:
            raise LoadGenError(f"{exc} (is '{model}' the served model's name? see GET /v2/models/NAME)") from exc
    ins, outs = _infos(meta, "inputs"), _infos(meta, "outputs")
    batched = model_batches(endpoint, model, headers, ins, protocol)
    if inputs is not None and shapes:
        raise ConfigError(f"--shape {' '.join(shapes)}: --workload sends the workload's own example inputs, of "
                          "their own shapes: drop --shape (or --workload, for random inputs of these shapes)")
    if inputs is None:
        batch_size = request_batch(model, ins, shapes or {}, batch_size, batched)
        shapes = per_item_shapes(ins, shapes or {}, batched)
    data = read_input_data(input_data, ins, outs, shapes=shapes, batched=batched) if input_data else None
    if data is not None and inputs is not None:
        raise ConfigError("give either --workload (its example inputs) or --input-data, not both")
    source = ("--input-data " + " ".join(input_data) if data is not None
              else "--workload" if inputs is not None else None)
    strings = _string_options(model, ins, string_length, string_data, given=source)
    tolerance = _tolerance(rtol, atol, validates=data is not None and data.validates)
    if data is not None:  # None: random tensors, as without --input-data
        target = _data_target(endpoint, model, server, headers, ins, data, batch_size=batch_size or 1,
                              parameters=parameters, check=check, tolerance=tolerance, shm=shm,
                              outputs=[o.name for o in outs], protocol=protocol, batched=batched)
        return dataclasses.replace(target, streaming=streaming)
    if inputs is not None and len(inputs) != len(ins):
        raise LoadGenError(f"model '{model}' takes {len(ins)} inputs, the workload gives {len(inputs)}")
    rng = np.random.default_rng(seed)
    tensors = []
    items = batch_size or 1
    for i, spec in enumerate(ins):
        name, datatype, shape = spec.name, spec.datatype, list(spec.shape)
        if inputs is not None:
            value = inputs[i]
            if hasattr(value, "detach"):  # a torch tensor; numpy has no bfloat16, so via float32 (cast below)
                value = value.detach().cpu()
                array = (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy()
            else:
                array = np.asarray(value)
            if NUMPY_DTYPES.get(datatype) is not None and datatype != "BYTES":
                array = array.astype(NUMPY_DTYPES[datatype], copy=False)
            items = int(array.shape[0]) if batched and array.ndim else 1
        else:
            given = (shapes or {}).get(name)
            if given is not None:
                dims = [int(d) for d in given]
            else:
                dims = [items if (j == 0 and batched) else d for j, d in enumerate(shape)]
                if any(d == -1 for d in dims):
                    raise LoadGenError(
                        f"input '{name}' of model '{model}' has a variable dimension ({shape}): give its shape "
                        f"with --shape {name}=D1,D2,... or use --workload SPEC for the workload's own inputs"
                    )
            array = random_array(datatype, dims, rng, **strings)
        tensors.append(Tensor(name, datatype, array))
    raw = _infer_request(endpoint, model, tensors, headers, parameters, shm, [o.name for o in outs],
                         protocol=protocol)
    target = Target(endpoint, model, raw, items, _stats_path(server, model), headers, shm=shm, protocol=protocol)
    _ready(target, check)
    return dataclasses.replace(target, streaming=streaming)


def model_batches(endpoint: Endpoint, model: str, headers: dict[str, str], inputs: Sequence[TensorInfo],
                  protocol: str = "http") -> bool:
    """Whether the model takes a batch dimension first, as perf_analyzer decides it: its config's
    max_batch_size > 0 (GET /v2/models/NAME/config, gRPC ModelConfig). The metadata alone cannot tell: with
    max_batch_size 0 a shape may start with a variable dimension too ([-1, 64]), and reading that as the batch
    counted 4 items for a [4, 64] request the server ran as one inference. A server without the config
    endpoint (plain KServe v2) is read from the shapes (`is_batched`)."""
    shaped = is_batched(inputs)
    if not shaped:
        return False  # Triton's metadata of a batching model starts every input with -1
    limit: Any
    try:
        if protocol == "grpc":
            from dlperf.loadgen.grpc_client import model_max_batch_size

            limit = model_max_batch_size(endpoint, model, headers)
        else:
            config = _get_json(endpoint, f"/v2/models/{model}/config", headers)
            limit = config.get("max_batch_size") if isinstance(config, dict) else None
    except (LoadGenError, ValueError):
        return shaped
    if isinstance(limit, bool) or not isinstance(limit, int):
        return shaped
    return limit > 0


def per_item_shapes(inputs: Sequence[TensorInfo], shapes: Mapping[str, Sequence[int]],
                    batched: bool) -> dict[str, Sequence[int]]:
    """`shapes` with a per-item input's one-number --shape (scale=3) read as its full shape ([3, 1]). Such an input
    (one value per item, a model input of shape [batch]) has the metadata shape [-1, 1], as Triton gives it (dims
    [1] reshaped to []); --shape NAME=B is what a user writes for it, and perf_analyzer, whose --shape leaves the
    batch dimension out, needs no --shape for it at all."""
    per_item = {spec.name for spec in inputs if batched and tuple(spec.shape) == (-1, 1)}
    return {name: [*dims, 1] if name in per_item and len(dims) == 1 else dims for name, dims in shapes.items()}


def request_batch(model: str, inputs: Sequence[TensorInfo], shapes: Mapping[str, Sequence[int]],
                  batch_size: int | None, batched: bool | None = None) -> int:
    """The items each request holds, after checking --shape against the model's inputs: each a known input,
    every dimension given and >= 1. For a model that batches (`batched`, from `model_batches`; None: every
    input shape starts with -1), --shape is the full shape with the batch dimension first, so the batch size
    is that dimension: the same in every --shape, and the same as `batch_size` (--batch-size) if given, else
    `batch_size` or 1. A model without a batch dimension takes one item per request; a per-item input's
    --shape may be its batch size alone (`per_item_shapes`)."""
    names = [spec.name for spec in inputs]
    known = ", ".join(f"{spec.name} {list(spec.shape)}" for spec in inputs)
    batched = is_batched(inputs) if batched is None else batched
    batches: dict[str, int] = {}
    full = per_item_shapes(inputs, shapes, batched)
    for name, given in shapes.items():
        dims = [int(d) for d in full[name]]
        text = f"--shape {name}={','.join(map(str, given))}"  # as written
        if name not in names:
            raise ConfigError(f"{text}: model '{model}' has no input '{name}'; its inputs: {known}")
        spec = inputs[names.index(name)]
        example = ",".join(str(batch_size or 8) if j == 0 and batched else "16" if d == -1 else str(d)
                           for j, d in enumerate(spec.shape))
        first = (", the batch dimension first (unlike perf_analyzer's --shape, which leaves it out)" if batched
                 else "")
        bad = [d for d in dims if d < 1]
        if bad:
            raise ConfigError(f"{text}: {bad[0]} is not a size: give every dimension as a number >= 1 (in place of "
                              f"each -1 of the model's shape {list(spec.shape)}{first}), e.g. --shape {name}={example}")
        if len(dims) != len(spec.shape):
            raise ConfigError(f"{text}: input '{name}' has {len(spec.shape)} dimensions {list(spec.shape)}, the "
                              f"shape gives {len(dims)}: give the full shape{first}, e.g. --shape {name}={example}")
        fixed = [(j, d, m) for j, (d, m) in enumerate(zip(dims, spec.shape, strict=True))
                 if m != -1 and d != m and not (batched and j == 0)]
        if fixed:  # refused here, not by the server's 400 or as a fault of the --input-data file
            j, d, m = fixed[0]
            raise ConfigError(f"{text}: dimension {j} of input '{name}' is fixed at {m} (its shape "
                              f"{list(spec.shape)}), the shape gives {d}: --shape sets only its -1 dimensions"
                              f"{first}, e.g. --shape {name}={example}")
        if batched:
            batches[name] = dims[0]
    if not batched:
        if batch_size not in (None, 1):
            raise ConfigError(f"model '{model}' has no batch dimension (its config's max_batch_size is 0, or its "
                              f"inputs' shapes do not all start with -1: {known}), so each request holds one "
                              f"item: drop --batch-size {batch_size}")
        return 1
    if len(set(batches.values())) > 1:
        each = ", ".join(f"{name} {b}" for name, b in batches.items())
        raise ConfigError(f"--shape gives the inputs different batch dimensions ({each}): the first dimension "
                          "of each --shape is the request's batch size, one for all its inputs")
    if batches and batch_size is not None and batch_size not in batches.values():
        name, batch = next(iter(batches.items()))
        rest = "".join(f",{d}" for d in list(shapes[name])[1:])  # as written: scale=3 -> scale=2
        raise ConfigError(f"--shape {name}={batch}{rest} sends batches of {batch} (its first dimension is the batch "
                          f"dimension), --batch-size {batch_size} asks for {batch_size}: write --shape "
                          f"{name}={batch_size}{rest}, or drop --batch-size")
    return next(iter(batches.values())) if batches else batch_size or 1


def _ready(target: Target, check: bool) -> None:
    """Register the target's shared memory, then send one request if `check`; on failure release it."""
    try:
        if target.shm is not None:
            target.shm.open()
        if check:
            _check(target)
    except BaseException:
        target.close()
        raise


def _tolerance(rtol: float | None, atol: float | None, *, validates: bool) -> tuple[float, float]:
    """(rtol, atol) of the validation check from --rtol / --atol (the defaults where not given), refused
    without validation data, where they would change nothing."""
    given = [f"--{name} {value:g}" for name, value in (("rtol", rtol), ("atol", atol)) if value is not None]
    if given:
        if any(v < 0 for v in (rtol, atol) if v is not None):
            raise ConfigError(f"{' and '.join(given)}: tolerances must be >= 0")
        if not validates:
            raise ConfigError(f"{' and '.join(given)} apply to replies checked against validation data: "
                              "give --input-data with validation_data (or output files), or drop them")
    return (RTOL if rtol is None else rtol, ATOL if atol is None else atol)


DEFAULT_STRING_LENGTH = 128
"""Characters in each random BYTES element (perf_analyzer's --string-length default)."""


def _string_options(model: str, inputs: Sequence[TensorInfo], length: int | None, data: str | None, *,
                    given: str | None) -> dict[str, Any]:
    """random_array's keywords for BYTES inputs from --string-length / --string-data, refused where they
    would change nothing: with other inputs than random ones, or a model without BYTES inputs."""
    if length is None and data is None:
        return {"string_length": DEFAULT_STRING_LENGTH}
    option = "--string-data" if data is not None else "--string-length"
    if length is not None and data is not None:
        raise ConfigError("give either --string-length (random strings of that length) or --string-data (this "
                          "string in every BYTES element), not both")
    if length is not None and length < 0:
        raise ConfigError(f"--string-length must be >= 0, got {length}")
    if given is not None:
        raise ConfigError(f"{option} shapes random BYTES inputs; with {given} the inputs are given: drop one")
    if not any(info.datatype == "BYTES" for info in inputs):
        kinds = ", ".join(f"{info.name} {info.datatype}" for info in inputs)
        raise ConfigError(f"{option} applies to BYTES inputs; model '{model}' has none ({kinds})")
    if data is not None:
        return {"string_data": data.encode()}
    return {"string_length": length}


def _infer_request(endpoint: Endpoint, model: str, tensors: Sequence[Tensor], headers: dict[str, str],
                   parameters: dict[str, Any] | None, shm: ClientShm | None = None, outputs: Sequence[str] = (),
                   outputs_in_reply: bool = False, protocol: str = "http") -> bytes:
    """The raw request: binary tensors in the body, or with `shm` their descriptions only (and the outputs
    sent to its regions unless `outputs_in_reply`); over gRPC the serialized ModelInferRequest."""
    if protocol == "grpc":
        from dlperf.loadgen.grpc_client import encode_infer_request

        if shm is None:
            return encode_infer_request(model, tensors, parameters)
        if outputs_in_reply:
            return encode_infer_request(model, shm.describe_inputs(tensors), parameters)
        return encode_infer_request(model, shm.describe_inputs(tensors), parameters, outputs,
                                    {n: shm.output_parameters(n) for n in outputs})
    if shm is not None and not outputs_in_reply:
        body, header_length = encode_request(shm.describe_inputs(tensors), parameters=parameters, outputs=outputs,
                                             output_parameters={n: shm.output_parameters(n) for n in outputs})
    else:
        body, header_length = encode_request(tensors if shm is None else shm.describe_inputs(tensors), binary=True,
                                             binary_outputs=True, parameters=parameters)
    req_headers = dict(headers)
    req_headers["Content-Type"] = "application/octet-stream" if header_length is not None else "application/json"
    if header_length is not None:
        req_headers[HEADER_LENGTH.title()] = str(header_length)
    return build_request(endpoint, "POST", f"/v2/models/{model}/infer", body, req_headers)


def _stats_path(server: dict[str, Any], model: str) -> str | None:
    return f"/v2/models/{model}/stats" if "statistics" in (server.get("extensions") or []) else None


def _check(target: Target) -> None:
    """Send the target's first request once: LoadGenError unless it succeeds (and matches its validation data)."""
    reply = asyncio.run(_send_once(target))
    if reply.status != 200:
        raise LoadGenError(f"a test request to model '{target.model}' failed with {reply.status}: "
                           f"{error_of(reply.body)}")
    _, expected = target.request(0)
    if expected:
        why = target.mismatch(reply.headers, reply.body, expected)
        if why is not None:
            raise LoadGenError(f"a test request to model '{target.model}' did not match its validation data "
                               f"(the first request, from the first entries): {why}")


def _infos(meta: dict[str, Any], key: str) -> list[TensorInfo]:
    """The model metadata's inputs or outputs; metadata that is not KServe v2's is a LoadGenError naming the field."""
    specs = meta.get(key) or []
    try:
        if not isinstance(specs, list):
            raise TypeError(f"'{key}' is {type(specs).__name__}")
        return [TensorInfo(str(s["name"]), str(s["datatype"]), tuple(int(d) for d in s["shape"])) for s in specs]
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadGenError(f"the model metadata's '{key}' are not KServe v2 tensor metadata ({type(exc).__name__}: "
                           f"{exc}; each needs name, datatype and shape): {NOT_KSERVE}") from exc


def _data_target(endpoint: Endpoint, model: str, server: dict[str, Any], headers: dict[str, str],
                 ins: Sequence[TensorInfo], data: InputData, *, batch_size: int,
                 parameters: dict[str, Any] | None, check: bool, tolerance: tuple[float, float],
                 shm: ClientShm | None = None, outputs: Sequence[str] = (), protocol: str = "http",
                 batched: bool = True) -> Target:
    prepared = prepare(data, ins, batch_size, batched)
    requests = tuple(_infer_request(endpoint, model, p.tensors, headers, parameters, shm, outputs,
                                    outputs_in_reply=data.validates, protocol=protocol) for p in prepared)
    items = batch_size if batched else 1
    target = Target(endpoint, model, requests[0], items, _stats_path(server, model), headers, requests,
                    tuple(p.expected for p in prepared) if data.validates else (), tolerance, shm, protocol)
    _ready(target, check)
    return target


async def _send_once(target: Target) -> Any:
    conn = target.connect()
    try:
        return await conn.send(target.raw_request)
    except OSError as exc:
        raise LoadGenError(f"cannot reach {target.endpoint.authority}: {exc}") from exc
    finally:
        await conn.close()
