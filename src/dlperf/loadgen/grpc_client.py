"""The load generator over gRPC (`dlperf load --protocol grpc`, perf_analyzer's `-i grpc`): a connection with
the HTTP one's `send(raw) -> Reply` interface that sends a prebuilt, serialized `ModelInferRequest`, and the
metadata, statistics and reply decoding a gRPC target needs. Messages are tritonclient's generated ones."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.errors import LoadGenError
from dlperf.loadgen.client import Endpoint, Reply
from dlperf.serve.protocol import (
    STREAM_ERROR_STATUS_PARAMETER,
    ProtocolError,
    Tensor,
    array_from_bytes,
    error_body,
    set_parameter,
    tensor_bytes,
)

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"

HTTP_STATUS_OF = {"INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
                  "RESOURCE_EXHAUSTED": 429, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503, "INTERNAL": 500}
"""A failed call's gRPC code as the HTTP status the levels table counts it under (the server's own mapping,
reversed); a RESOURCE_EXHAUSTED that is a message over the server's limit counts as 413 (`over_message_limit`);
other codes count as 500."""


MESSAGE_LIMIT_HINT = ("the request is larger than the server's gRPC message limit (a dlperf server's is its "
                      "--max-request-mb, at least gRPC's default 4 MiB): raise it, or send smaller batches")


def over_message_limit(details: str) -> bool:
    """Whether a RESOURCE_EXHAUSTED call was a request over the server's message limit, not a full queue: grpc's own
    refusal ("SERVER: Received message larger than max (N vs. M)", before any server code runs, so it cannot name the
    server's option) or a dlperf server's (a body that decompresses past --max-request-mb). Counted as 429, it read
    as the server shedding load."""
    return "Received message larger than max" in details or "(--max-request-mb)" in details


def _modules() -> tuple[Any, Any]:
    try:
        import grpc
        from tritonclient.grpc import service_pb2
    except ImportError as exc:
        raise LoadGenError(f"--protocol grpc needs grpcio and tritonclient's gRPC messages ({exc}): "
                           "pip install 'tritonclient[grpc]'") from exc
    return grpc, service_pb2


def metadata_of(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """HTTP-style headers (the bearer token) as gRPC call metadata (lower-case keys)."""
    return tuple((k.lower(), v) for k, v in headers.items())


def _channel(endpoint: Endpoint) -> Any:
    grpc, _ = _modules()
    return grpc.aio.insecure_channel(endpoint.authority, options=[("grpc.max_receive_message_length", -1),
                                                                  ("grpc.max_send_message_length", -1)])


class _GrpcSender:
    """What both gRPC senders share: the channel, the call metadata, and a failed call as a Reply."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 60.0, headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.metadata = metadata_of(headers or {})
        self.send_ns = 0
        self.recv_ns = 0
        """Client send and receive times are not separable in grpcio: both stay 0."""
        self.written_ns = 0
        """When the last `send` began (perf_counter_ns): grpcio does not say when the channel wrote it."""
        self._channel: Any = None

    def _open(self) -> Any:
        if self._channel is None:
            self._channel = _channel(self.endpoint)
        return self._channel

    def _failed(self, exc: Any) -> Reply:
        """A failed call's Reply (the HTTP status of its code, its details as the error); ConnectionError when
        the channel could not connect, asyncio.TimeoutError past the deadline, as the HTTP connection raises."""
        grpc, _ = _modules()
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise asyncio.TimeoutError(f"no reply within {self.timeout_s:g} s") from exc
        if code == grpc.StatusCode.UNAVAILABLE and "connect" in details.lower():
            raise ConnectionError(details) from exc
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and over_message_limit(details):
            return Reply(413, {}, error_body(details if "--max-request-mb" in details else
                                             f"{details}: {MESSAGE_LIMIT_HINT}"))
        return Reply(HTTP_STATUS_OF.get(code.name, 500), {}, error_body(details))

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()


class GrpcConnection(_GrpcSender):
    """One gRPC channel; `send(raw)` sends a serialized ModelInferRequest and returns a Reply: status 200 and
    the serialized ModelInferResponse, or the HTTP status of the call's gRPC code and an `{"error"}` body."""

    _call: Any = None

    async def send(self, raw: bytes) -> Reply:
        grpc, _ = _modules()
        self.written_ns = time.perf_counter_ns()
        if self._channel is None:
            self._call = self._open().unary_unary(INFER_METHOD)  # no (de)serializers: bytes both ways
        try:
            body = await self._call(raw, timeout=self.timeout_s, metadata=self.metadata or None)
        except grpc.aio.AioRpcError as exc:
            return self._failed(exc)
        return Reply(200, {}, body)


STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


STREAM_ERROR_STATUS = (("Exceeds maximum queue size", 503), ("Request timeout expired", 503),
                       ("server is shutting down", 503), ("unknown model", 404), ("Request for unknown model", 404),
                       ("unknown version", 404))
"""A stream's `error_message` carries no code: these beginnings (Triton's and dlperf's words for a full queue, a
queue timeout, a draining server, an unknown model or version) are counted under the status a unary call gets."""


REQUEST_ID = re.compile(r"\[request id: .*?\] ")
"""What leads an error for a request with an id (dlperf's stream errors, Triton's own request errors)."""


def stream_error_status(message: str) -> int:
    """The HTTP status a ModelStreamInfer error counts under: by its message (`STREAM_ERROR_STATUS`) after any
    leading "[request id: ID] ", else 500."""
    if (lead := REQUEST_ID.match(message)) is not None:
        message = message[lead.end():]
    return next((status for start, status in STREAM_ERROR_STATUS if message.startswith(start)), 500)


def stream_reply_status(response: Any) -> int:
    """The HTTP status a ModelStreamInferResponse with an `error_message` counts under: the one a dlperf server gives
    in its `dlperf_error_status` parameter (a bad request 400, as a unary call's INVALID_ARGUMENT), else
    `stream_error_status` of the message (Triton's)."""
    given = response.infer_response.parameters.get(STREAM_ERROR_STATUS_PARAMETER)
    if given is not None and given.WhichOneof("parameter_choice") == "int64_param" and 400 <= given.int64_param < 600:
        return int(given.int64_param)
    return stream_error_status(response.error_message)


class GrpcStreamConnection(_GrpcSender):
    """One gRPC channel with one ModelStreamInfer stream (perf_analyzer's --streaming); `send(raw)` writes a
    serialized ModelInferRequest on it and reads the next response: status 200 and the serialized
    ModelInferResponse, or an error status (`stream_error_status`) and the `error_message`. One request is
    in flight per stream; after a timeout the stream is closed, so a late response is never read as the next
    request's."""

    _stream: Any = None

    async def send(self, raw: bytes) -> Reply:
        grpc, service_pb2 = _modules()
        self.written_ns = time.perf_counter_ns()
        if self._stream is None:
            self._stream = self._open().stream_stream(STREAM_METHOD)(metadata=self.metadata or None)
        try:
            await self._stream.write(raw)
            body = await asyncio.wait_for(self._stream.read(), self.timeout_s)
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(f"no reply within {self.timeout_s:g} s") from None
        except grpc.aio.AioRpcError as exc:
            await self.close()  # the stream is over: the next send opens another
            return self._failed(exc)
        if body is grpc.aio.EOF:
            await self.close()
            raise ConnectionError("the server ended the stream")
        response = service_pb2.ModelStreamInferResponse.FromString(body)
        if response.error_message:
            return Reply(stream_reply_status(response), {}, error_body(response.error_message))
        return Reply(200, {}, response.infer_response.SerializeToString())

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        await super().close()


def decode_reply(body: bytes) -> list[Tensor]:
    """The output tensors of a serialized ModelInferResponse, from its raw_output_contents (as dlperf and
    Triton send them); ProtocolError for an output without its entry there."""
    _, service_pb2 = _modules()
    response = service_pb2.ModelInferResponse.FromString(body)
    raw = list(response.raw_output_contents)
    tensors = []
    for i, out in enumerate(response.outputs):
        shape = [int(d) for d in out.shape]
        count = math.prod(shape)  # exact: np.prod wraps around int64 (2**32 x 2**32 gave 0)
        if i >= len(raw):
            raise ProtocolError(f"output '{out.name}' has no raw_output_contents entry")
        data = array_from_bytes(raw[i], out.datatype, count, f"output '{out.name}'")
        tensors.append(Tensor(out.name, out.datatype, data.reshape(shape)))
    return tensors


def encode_infer_request(model: str, tensors: Sequence[Tensor], parameters: dict[str, Any] | None,
                         outputs: Sequence[str] = (),
                         output_parameters: Mapping[str, Mapping[str, Any]] | None = None) -> bytes:
    """A serialized ModelInferRequest with every input in raw_input_contents (as tritonclient sends them), or,
    where the tensors carry parameters (shared-memory descriptions, `ClientShm.describe_inputs`), with those
    parameters and no data; `outputs` are requested with their `output_parameters`."""
    _, service_pb2 = _modules()
    request = service_pb2.ModelInferRequest(model_name=model)
    for key, value in (parameters or {}).items():
        set_parameter(request.parameters[key], value)
    described = [bool(t.parameters) for t in tensors]
    if any(described) and not all(described):
        raise ValueError("every input in shared memory, or none: raw_input_contents has one entry per input")
    for t in tensors:
        spec = request.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        for key, value in t.parameters.items():
            set_parameter(spec.parameters[key], value)
        if not t.parameters:
            request.raw_input_contents.append(tensor_bytes(t.data, t.datatype))
    for name in outputs:
        out = request.outputs.add(name=name)
        for key, value in (output_parameters or {}).get(name, {}).items():
            set_parameter(out.parameters[key], value)
    return bytes(request.SerializeToString())


def register_shm(endpoint: Endpoint, headers: dict[str, str], region: str, key: str, byte_size: int) -> None:
    """SystemSharedMemoryRegister: LoadGenError with the server's code and reason if it refuses."""
    _, service_pb2 = _modules()
    request = service_pb2.SystemSharedMemoryRegisterRequest(name=region, key=key, offset=0, byte_size=byte_size)
    asyncio.run(_unary(endpoint, "SystemSharedMemoryRegister", request,
                       service_pb2.SystemSharedMemoryRegisterResponse, headers))


def unregister_shm(endpoint: Endpoint, headers: dict[str, str], region: str) -> None:
    """SystemSharedMemoryUnregister (LoadGenError if it fails)."""
    _, service_pb2 = _modules()
    asyncio.run(_unary(endpoint, "SystemSharedMemoryUnregister",
                       service_pb2.SystemSharedMemoryUnregisterRequest(name=region),
                       service_pb2.SystemSharedMemoryUnregisterResponse, headers, timeout_s=5.0))


class GrpcCallError(LoadGenError):
    """A gRPC call the server answered with an error; `code` is its status code's name (UNAUTHENTICATED...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


async def _unary(endpoint: Endpoint, method: str, request: Any, response_type: Any, headers: dict[str, str],
                 timeout_s: float = 30.0) -> Any:
    grpc, _ = _modules()
    channel = _channel(endpoint)
    try:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                   request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return await call(request, timeout=timeout_s, metadata=metadata_of(headers) or None)
    except grpc.aio.AioRpcError as exc:
        raise GrpcCallError(f"gRPC {method} on {endpoint.authority} failed with {exc.code().name}: "
                            f"{exc.details()}", exc.code().name) from exc
    finally:
        await channel.close()


def server_and_model(endpoint: Endpoint, model: str, headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The server's and the model's metadata, in the HTTP endpoints' JSON shapes (shapes as ints)."""
    _, service_pb2 = _modules()

    async def both() -> tuple[Any, Any]:
        server = await _unary(endpoint, "ServerMetadata", service_pb2.ServerMetadataRequest(),
                              service_pb2.ServerMetadataResponse, headers)
        meta = await _unary(endpoint, "ModelMetadata", service_pb2.ModelMetadataRequest(name=model),
                            service_pb2.ModelMetadataResponse, headers)
        return server, meta

    server, meta = asyncio.run(both())

    def tensors(items: Any) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": [int(d) for d in t.shape]} for t in items]

    return ({"name": server.name, "version": server.version, "extensions": list(server.extensions)},
            {"name": meta.name, "platform": meta.platform, "inputs": tensors(meta.inputs),
             "outputs": tensors(meta.outputs)})


def model_max_batch_size(endpoint: Endpoint, model: str, headers: dict[str, str]) -> int:
    """The model config's max_batch_size (gRPC ModelConfig); LoadGenError when the server has no such call."""
    _, service_pb2 = _modules()
    reply = asyncio.run(_unary(endpoint, "ModelConfig", service_pb2.ModelConfigRequest(name=model),
                               service_pb2.ModelConfigResponse, headers))
    return int(reply.config.max_batch_size)


async def model_stats(endpoint: Endpoint, model: str, headers: dict[str, str]) -> dict[str, Any] | None:
    """The model's statistics in the HTTP endpoint's shape (the parts the level report reads), None if the
    server has none for it; LoadGenError (GrpcCallError) when the call fails."""
    _, service_pb2 = _modules()
    reply = await _unary(endpoint, "ModelStatistics", service_pb2.ModelStatisticsRequest(name=model),
                         service_pb2.ModelStatisticsResponse, headers)
    if not reply.model_stats:
        return None
    s = reply.model_stats[0]
    keys = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
    return {"inference_count": int(s.inference_count), "execution_count": int(s.execution_count),
            "inference_stats": {k: {"count": int(getattr(s.inference_stats, k).count),
                                    "ns": int(getattr(s.inference_stats, k).ns)} for k in keys}}
