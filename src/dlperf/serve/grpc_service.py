"""The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`, Triton's port 8001) beside the HTTP
server: same event loop, same `ServerState`; a request is decoded here, then runs through `ServerState.execute`
as an HTTP one does. The messages are those tritonclient ships (docs/serve.md, *gRPC*)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np

from dlperf.errors import ServingError
from dlperf.serve.protocol import (
    NOT_OFFERED,
    NUMPY_DTYPES,
    STREAM_ERROR_STATUS_PARAMETER,
    InferRequest,
    ProtocolError,
    Tensor,
    array_from_bytes,
    array_from_shm,
    check_rank,
    requested_output,
    set_parameter,
    shaped,
    shm_span,
    tensor_bytes,
)
from dlperf.serve.service import ROUTING_HEADER, Answered, Failed, ServerState, internal_error

CONTENTS_FIELDS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}
"""Where a datatype's elements go in `InferTensorContents` (FP16 and BF16 have no field: raw bytes only)."""

log = logging.getLogger("dlperf.serve")

STATUS_CODES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 413: "RESOURCE_EXHAUSTED",
                415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                503: "UNAVAILABLE"}


REQUEST_ID_PREFIX = "[request id: "
"""How a stream's error for a request with an id begins ("[request id: ID] why"), Triton's form for its request
errors: tritonclient hands a stream's errors to the callback with nothing but the message."""


def available() -> str | None:
    """None when grpcio and tritonclient's gRPC messages import; else what to install."""
    try:
        import grpc  # noqa: F401
        from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: F401
    except ImportError as exc:
        return f"the gRPC endpoint needs grpcio and tritonclient[grpc] ({exc}): pip install 'tritonclient[grpc]'"
    return None


def parameter_value(p: Any) -> Any:
    """The Python value of an `InferParameter` (its oneof), None when unset."""
    which = p.WhichOneof("parameter_choice")
    return None if which is None else getattr(p, which)


INT64_ONLY = {"timeout": ("int64_param", "double_param")}
"""The parameters Triton's gRPC endpoint takes as an int64_param only: a uint64_param 'timeout' was accepted here
and refused there. (A double_param goes on to `service._timeout`, which refuses it saying it is read in µs.)"""


def parameters_of(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The values of a request's, input's or output's `parameters`; ProtocolError (INVALID_ARGUMENT) naming one
    whose value is unset, as Triton refuses it ("invalid value type for 'priority' parameter, expected
    int64_param or uint64_param") and the HTTP endpoint a null: read as None, it counted as absent."""
    values = {k: parameter_value(v) for k, v in params.items()}
    unset = next((k for k, v in values.items() if v is None), None)
    if unset is not None:
        raise ProtocolError(f"{where}: parameter '{unset}' has no value: set one of its bool_param, int64_param, "
                            "string_param, double_param or uint64_param")
    for name, kinds in INT64_ONLY.items():
        kind = params[name].WhichOneof("parameter_choice") if name in params else None
        if kind is not None and kind not in kinds:
            raise ProtocolError(f"{where}: invalid value type for '{name}' parameter, expected int64_param (as "
                                f"Triton takes it), got {kind} {values[name]!r}")
    return values


def decode_infer_request(msg: Any, shm: Callable[[str, int, int, str], Any] | None) -> InferRequest:
    """An `InferRequest` from a `ModelInferRequest`: each input from its `raw_input_contents` entry (in input
    order, as tritonclient sends them), its typed `contents`, or its shared-memory span. ProtocolError (400)
    naming the input when its data does not fit its datatype and shape."""
    raw = list(msg.raw_input_contents)
    if raw and len(raw) != len(msg.inputs):
        raise ProtocolError(f"the request has {len(msg.inputs)} inputs but {len(raw)} raw_input_contents: give "
                            "one per input, or none and the data in each input's contents")
    if not msg.inputs:
        raise ProtocolError("the request has no inputs: send at least one input tensor")
    inputs = []
    for i, t in enumerate(msg.inputs):
        where = f"input {i} '{t.name}'"
        if t.datatype not in NUMPY_DTYPES:
            raise ProtocolError(f"{where} has datatype {t.datatype!r}: use one of {', '.join(NUMPY_DTYPES)}")
        shape = [int(d) for d in t.shape]
        if any(d < 0 for d in shape):
            raise ProtocolError(f"{where} has shape {shape}: give non-negative sizes")
        check_rank(shape, where)
        count = math.prod(shape)  # exact: np.prod wraps around int64 (2**32 x 2**32 gave 0)
        params = parameters_of(t.parameters, where)
        span = shm_span(params, where)
        if span is not None:
            array = array_from_shm(span, shm, bool(raw) or t.HasField("contents"), t.datatype, count, where)
        elif raw:
            array = array_from_bytes(raw[i], t.datatype, count, where)
        else:
            array = _from_contents(t, count, where)
        inputs.append(Tensor(t.name, t.datatype, shaped(array, shape, where)))
    outputs = None
    if msg.outputs:
        outputs = [requested_output(o.name, parameters_of(o.parameters, f"output '{o.name}'"), True, shm)
                   for o in msg.outputs]
    return InferRequest(inputs=inputs, id=msg.id or None, parameters=parameters_of(msg.parameters, "the request"),
                        outputs=outputs)


def _from_contents(t: Any, count: int, where: str) -> np.ndarray:
    field = CONTENTS_FIELDS.get(t.datatype)
    if field is None:
        raise ProtocolError(f"{where}: {t.datatype} data goes in raw_input_contents (InferTensorContents has no "
                            "field for it)")
    values = list(getattr(t.contents, field))
    if len(values) != count:
        raise ProtocolError(f"{where}: {len(values)} elements in contents.{field} for a shape of {count} elements")
    if t.datatype == "BYTES":
        out = np.empty(count, dtype=object)
        out[:] = values
        return out
    try:
        return np.asarray(values, dtype=NUMPY_DTYPES[t.datatype])
    except (OverflowError, ValueError) as exc:  # 300 in int_contents of an INT8 input
        raise ProtocolError(f"{where}: contents.{field} do not fit {t.datatype}: {exc}") from exc


def create_servicer(state: ServerState) -> Any:
    """The `GRPCInferenceServiceServicer` (grpc.aio: every method a coroutine) for `state`."""
    import grpc
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

    async def fail(context: Any, status: int, message: str) -> Any:
        await context.abort(getattr(grpc.StatusCode, STATUS_CODES.get(status, "UNKNOWN")), message)

    def checked(method: Callable[..., Awaitable[Any]], public: bool = False,
                inference: bool = False) -> Callable[..., Awaitable[Any]]:
        async def handler(self: Any, request: Any, context: Any) -> Any:
            if not public and not state.authorized(_metadata(context)):
                state.note_unauthenticated()
                if inference:
                    state.count_unauthorized(request.model_name, request.model_version, _metadata(context))
                await fail(context, 401, "missing or wrong bearer token: send the metadata "
                                         "'authorization: Bearer TOKEN' (the server's --token)")
            try:
                return await method(request, context)
            except ProtocolError as exc:
                await fail(context, exc.status, str(exc))
            except Exception as exc:  # a bug: INTERNAL with the reason, and logged, as HTTP's 500 (grpc: UNKNOWN)
                log.exception("gRPC %s failed", method.__name__)
                await fail(context, 500, internal_error(exc))
        return handler

    async def server_live(request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=not state.draining)

    async def server_ready(request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=state.ready)

    async def model_ready(request: Any, context: Any) -> Any:
        try:
            state.entry(request.name, request.version)
        except ProtocolError:  # as Triton: an unknown model or version is not ready, not an error
            return service_pb2.ModelReadyResponse(ready=False)
        return service_pb2.ModelReadyResponse(ready=state.ready)

    async def server_metadata(request: Any, context: Any) -> Any:
        return json_format.ParseDict(state.server_metadata(), service_pb2.ServerMetadataResponse())

    async def model_metadata(request: Any, context: Any) -> Any:
        meta = state.model_metadata(state.entry(request.name, request.version))
        meta.pop("parameters", None)  # the A/B split: HTTP's metadata only (the message has no parameters)
        return json_format.ParseDict(meta, service_pb2.ModelMetadataResponse())

    async def model_config(request: Any, context: Any) -> Any:
        config = state.model_config(state.entry(request.name, request.version))
        return service_pb2.ModelConfigResponse(config=json_format.ParseDict(config, model_config_pb2.ModelConfig()))

    async def model_statistics(request: Any, context: Any) -> Any:
        stats = state.stats(request.name or None, request.version or None)
        return json_format.ParseDict(stats, service_pb2.ModelStatisticsResponse(), ignore_unknown_fields=True)

    async def answer(request: Any, metadata: Mapping[str, str]) -> tuple[Any, Answered, int]:
        """Run one ModelInferRequest: its reply, its outcome (`record` it once the reply is delivered) and the
        request's time in the server; or ProtocolError with the HTTP status of why not (counted already)."""
        start_ns = time.monotonic_ns()
        entry, variant = state.pick_variant(request.model_name, request.model_version, metadata)
        if state.draining:
            variant.recorder.failure("UNAVAILABLE", time.monotonic_ns() - start_ns)
            raise ProtocolError("server is shutting down: send the request to another replica", 503)
        state.in_flight += 1
        state.received += 1
        try:
            try:
                decoded = decode_infer_request(request, None if state.shm is None else state.shm.view)
            except ProtocolError:
                variant.recorder.failure("INVALID", time.monotonic_ns() - start_ns)
                raise
            outcome = await state.execute(entry, variant, decoded, start_ns, metadata.get(ROUTING_HEADER) is not None)
        except ProtocolError:
            raise
        except Exception:  # a fault in the server: INTERNAL from the caller, counted here as HTTP counts its 500
            variant.recorder.failure("OTHER", time.monotonic_ns() - start_ns)
            raise
        finally:
            state.in_flight -= 1
        if isinstance(outcome, Failed):
            raise ProtocolError(outcome.message, outcome.status)
        reply = service_pb2.ModelInferResponse(model_name=entry.name, model_version=outcome.variant.model.version,
                                               id=request.id)
        for tensor in outcome.tensors:
            out = reply.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
            for key, value in tensor.parameters.items():
                set_parameter(out.parameters[key], value)
            # in shared memory: an empty entry keeps each output's raw contents at its own index
            reply.raw_output_contents.append(b"" if tensor.parameters else tensor_bytes(tensor.data, tensor.datatype))
        return reply, outcome, time.monotonic_ns() - start_ns

    def _ended_unanswered(ctx: Any) -> bool:
        """The call ended without its reply reaching the client: cancelled, or its deadline passed. A deadline
        that passes while the batch runs cancels the handler (CANCELED is counted where it waits); one that
        passes as the handler returns does not, and grpc.aio's `cancelled()` is only true for a status set to
        CANCELLED by the server itself, so the deadline is read here (a reply counted a success although its
        client had DEADLINE_EXCEEDED: 3 in 17 runs of the test that holds a call past its deadline)."""
        remaining = ctx.time_remaining()
        return bool(ctx.cancelled()) or (remaining is not None and remaining <= 0)

    async def model_infer(request: Any, context: Any) -> Any:
        reply, outcome, request_ns = await answer(request, _metadata(context))

        def finished(ctx: Any) -> None:
            # counted once the call is over, as HTTP counts once the reply is written: a call the client cancels
            # or lets time out before the reply goes out is CANCELED, not a success
            if _ended_unanswered(ctx):
                outcome.variant.recorder.failure("CANCELED", request_ns)
            else:
                outcome.record(request_ns)

        context.add_done_callback(finished)
        return reply

    async def model_stream_infer(requests: Any, context: Any) -> None:
        """Triton's ModelStreamInfer for models with one response per request: every request of the stream runs
        as it arrives (so a stream's requests batch together, with each other and with unary ones), and its
        response is written as soon as it is ready, in the order they finish, with the request's id; a
        request that fails answers `error_message` and the stream goes on. At most `grpc_stream_window`
        requests of the stream are in the server, running or answered and not yet written: past that the stream
        is not read until an answer has been written."""
        metadata = _metadata(context)
        ready: asyncio.Queue[tuple[Any, tuple[Answered, int] | None] | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        window = asyncio.Semaphore(state.config.grpc_stream_window)  # taken per request read, back once written

        def failed(request: Any, message: str, status: int) -> Any:
            # the request's id (and model) with the error, as Triton, so a client with several in flight knows
            # which one failed; tritonclient's stream callback gets only the message (its InferenceServerException
            # has no id), so the id also leads the message, as Triton's own request errors begin
            said = service_pb2.ModelInferResponse(model_name=request.model_name, model_version=request.model_version,
                                                  id=request.id)
            # the HTTP status a unary call's code stands for: an error message carries no code, and `dlperf load
            # --streaming` counted a bad request (400 unary) as a server fault (500)
            said.parameters[STREAM_ERROR_STATUS_PARAMETER].int64_param = status
            if request.id:
                message = f"{REQUEST_ID_PREFIX}{request.id}] {message}"
            return service_pb2.ModelStreamInferResponse(error_message=message, infer_response=said)

        async def one(request: Any) -> None:
            try:
                reply, outcome, request_ns = await answer(request, metadata)
            except ProtocolError as exc:
                ready.put_nowait((failed(request, str(exc), exc.status), None))
                return
            except Exception as exc:  # a bug: said in the stream, which goes on, and logged, as a unary call's is
                log.exception("a ModelStreamInfer request to model '%s' failed", request.model_name)
                ready.put_nowait((failed(request, internal_error(exc), 500), None))
                return
            ready.put_nowait((service_pb2.ModelStreamInferResponse(infer_response=reply), (outcome, request_ns)))

        async def read() -> None:
            try:
                incoming = requests.__aiter__()
                while True:
                    await window.acquire()  # the next request is read only when the stream has room for it
                    try:
                        request = await incoming.__anext__()
                    except StopAsyncIteration:
                        break
                    task = asyncio.ensure_future(one(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                while running:  # the client has sent all: answer what is in flight, then end the stream
                    await asyncio.wait(set(running))
            finally:
                ready.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await ready.get()) is not None:
                message, done = item
                try:
                    await context.write(message)
                except BaseException:
                    if done is not None:
                        done[0].variant.recorder.failure("CANCELED", done[1])
                    raise
                window.release()
                if done is not None:
                    done[0].record(done[1])
            await reader  # its error, if reading the stream failed
        finally:
            # the stream ended early (the client cancelled or went away): requests still queued leave the queue
            # (CANCELED in `execute`), answers not yet written are CANCELED too
            reader.cancel()
            for task in list(running):
                task.cancel()
            while not ready.empty():
                left = ready.get_nowait()
                if left is not None and left[1] is not None:
                    left[1][0].variant.recorder.failure("CANCELED", left[1][1])

    async def shm_status(request: Any, context: Any) -> Any:
        reply = service_pb2.SystemSharedMemoryStatusResponse()
        for region in state.shm_registry().status(request.name or None):
            reply.regions[region["name"]].CopyFrom(
                service_pb2.SystemSharedMemoryStatusResponse.RegionStatus(**region))
        return reply

    async def shm_register(request: Any, context: Any) -> Any:
        state.shm_registry().register(request.name, {"key": request.key, "offset": request.offset,
                                                     "byte_size": request.byte_size})
        return service_pb2.SystemSharedMemoryRegisterResponse()

    async def shm_unregister(request: Any, context: Any) -> Any:
        state.shm_registry().unregister(request.name or None)
        return service_pb2.SystemSharedMemoryUnregisterResponse()

    def missing(what: str) -> Callable[..., Awaitable[Any]]:
        """A call this server does not offer: UNIMPLEMENTED saying why and what to do instead, as a Triton built
        without the feature answers UNIMPLEMENTED (grpcio's default said only "Unexpected <class
        'NotImplementedError'>: Method not implemented!")."""
        async def unimplemented(request: Any, context: Any) -> Any:
            raise ProtocolError(what, 501)
        return checked(unimplemented)

    class Service(service_pb2_grpc.GRPCInferenceServiceServicer):
        """What is not here (the repository, CUDA shared memory, trace and log settings) answers UNIMPLEMENTED
        with what to do instead, as a Triton built without it answers UNIMPLEMENTED."""

        ServerLive = checked(server_live, public=True)
        ServerReady = checked(server_ready, public=True)
        ModelReady = checked(model_ready, public=True)
        ServerMetadata = checked(server_metadata)
        ModelMetadata = checked(model_metadata)
        ModelConfig = checked(model_config)
        ModelStatistics = checked(model_statistics)
        ModelInfer = checked(model_infer, inference=True)
        ModelStreamInfer = checked(model_stream_infer)
        SystemSharedMemoryStatus = checked(shm_status)
        SystemSharedMemoryRegister = checked(shm_register)
        SystemSharedMemoryUnregister = checked(shm_unregister)
        RepositoryIndex = RepositoryModelLoad = RepositoryModelUnload = missing(NOT_OFFERED["repository"])
        CudaSharedMemoryStatus = CudaSharedMemoryRegister = CudaSharedMemoryUnregister = missing(
            NOT_OFFERED["cudasharedmemory"])
        TraceSetting = missing(NOT_OFFERED["trace"])
        LogSettings = missing(NOT_OFFERED["logging"])

    return Service()


def _metadata(context: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


MAX_MESSAGE_BYTES_FLOOR = 4 * 1024 * 1024


def create_server(state: ServerState, host: str, port: int) -> tuple[Any, int]:
    """A grpc.aio server for `state` bound to host:port (0: a free port), not started; and its port. Call on
    the event loop it will run on. Messages up to the server's --max-request-mb are taken (grpc's own
    default is 4 MiB); a larger one is refused by grpc before it is read whole (RESOURCE_EXHAUSTED)."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    limit = max(MAX_MESSAGE_BYTES_FLOOR, state.config.max_request_bytes)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", -1),
                                      ("grpc.so_reuseport", 0)])  # a port in use is an error, not shared
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(create_servicer(state), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if port:
        _check_bindable(host, port, address)
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ServingError(f"cannot listen for gRPC on {address}: {exc}; pick another --grpc-port") from exc
    if not bound:
        raise ServingError(f"cannot listen for gRPC on {address}: pick another --grpc-port or stop what uses it")
    return server, bound


def _check_bindable(host: str, port: int, address: str) -> None:
    """ServingError when host:port cannot be bound (in use, not an address of this machine), said before grpc
    tries: its own failure logs a C-core error line and asks for GRPC_VERBOSITY=debug to say why."""
    import errno
    import socket

    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds: TIME_WAIT is no conflict
        probe.bind((host, port))
    except OSError as exc:
        fix = ("pick another --grpc-port or stop what uses it" if exc.errno == errno.EADDRINUSE else
               "give --host an address of this machine")
        raise ServingError(f"cannot listen for gRPC on {address}: {exc.strerror}; {fix}") from exc
    finally:
        probe.close()
