"""The gRPC load generator's messages: what it encodes is what the server decodes, and replies read back."""

from __future__ import annotations

import numpy as np
import pytest

from dlperf.serve.protocol import ProtocolError, Tensor

pytestmark = pytest.mark.unit

service_pb2 = pytest.importorskip("tritonclient.grpc.service_pb2")
from dlperf.loadgen.grpc_client import (  # noqa: E402
    HTTP_STATUS_OF,
    decode_reply,
    encode_infer_request,
    stream_error_status,
)
from dlperf.serve.grpc_service import STATUS_CODES, decode_infer_request  # noqa: E402


def test_a_request_encoded_by_the_generator_decodes_on_the_server_as_sent() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([b"ab", b""], dtype=object)
    raw = encode_infer_request("m", [Tensor("x", "FP32", x), Tensor("s", "BYTES", s)], {"priority": 1, "k": "v"})
    decoded = decode_infer_request(service_pb2.ModelInferRequest.FromString(raw), None)
    assert decoded.parameters == {"priority": 1, "k": "v"}
    np.testing.assert_array_equal(decoded.inputs[0].data, x)
    assert list(decoded.inputs[1].data) == [b"ab", b""] and decoded.outputs is None


def test_replies_read_back_and_a_reply_without_its_data_is_an_error() -> None:
    reply = service_pb2.ModelInferResponse(model_name="m")
    reply.outputs.add(name="y", datatype="INT64", shape=[2, 2])
    reply.raw_output_contents.append(np.array([1, 2, 3, 4], np.int64).tobytes())
    (y,) = decode_reply(reply.SerializeToString())
    assert y.name == "y" and y.data.tolist() == [[1, 2], [3, 4]]
    reply.outputs.add(name="z", datatype="FP32", shape=[1])
    with pytest.raises(ProtocolError, match="output 'z' has no raw_output_contents entry"):
        decode_reply(reply.SerializeToString())


def test_each_status_the_server_sends_counts_under_the_http_status_it_stands_for() -> None:
    for status, code in STATUS_CODES.items():
        if status in (413, 415):  # sent as RESOURCE_EXHAUSTED / INVALID_ARGUMENT, read back as 429 / 400
            continue
        assert HTTP_STATUS_OF[code] == status


@pytest.mark.parametrize(("message", "status"), [
    ("Exceeds maximum queue size: 1 requests are queued (--max-queue-size 1); retry later or add capacity", 503),
    ("Request timeout expired: waited 1000.3 ms in the queue", 503),
    ("server is shutting down: send the request to another replica", 503),
    ("unknown model 'x': this server serves mlp", 404),
    ("Request for unknown model: 'x' is not found", 404),  # Triton's words
    ("[request id: r7] Exceeds maximum queue size: 1 requests are queued", 503),  # a request with an id
    ("[request id: <id_unknown>] unknown version '3' of model 'mlp'", 404),
    ("input 0 'x' has shape [1, 63]: model 'mlp' expects [-1, 64]", 500),  # no code to tell: the rest are 500
])
def test_a_stream_error_counts_under_the_status_its_message_names(message: str, status: int) -> None:
    assert stream_error_status(message) == status


def test_a_failed_call_counts_under_the_http_status_of_its_code() -> None:
    """The levels table counts a failed gRPC call under the HTTP status its code maps to, as a failed HTTP request
    under its own: a full queue (UNAVAILABLE) as 503, a bad request as 400, a wrong token as 401. Counted all as
    500, every failure would read as a server fault."""
    import grpc

    from dlperf.loadgen.client import Endpoint
    from dlperf.loadgen.grpc_client import GrpcConnection

    sender = GrpcConnection(Endpoint("127.0.0.1", 1))
    empty = grpc.aio.Metadata()
    for code, status in ((grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.INVALID_ARGUMENT, 400),
                         (grpc.StatusCode.UNAUTHENTICATED, 401), (grpc.StatusCode.NOT_FOUND, 404),
                         (grpc.StatusCode.RESOURCE_EXHAUSTED, 429), (grpc.StatusCode.UNIMPLEMENTED, 501),
                         (grpc.StatusCode.DATA_LOSS, 500)):
        reply = sender._failed(grpc.aio.AioRpcError(code, empty, empty, "Exceeds maximum queue size"))
        assert reply.status == status == HTTP_STATUS_OF.get(code.name, 500), code
        assert b"Exceeds maximum queue size" in reply.body


def test_a_grpc_reply_is_checked_at_the_target_s_tolerance() -> None:
    """--rtol/--atol apply to gRPC replies as to HTTP ones: checked at the default tolerance instead, a reply
    within the wider one the user gave counts as a mismatch (an error) in every level."""
    from dlperf.loadgen.client import Endpoint
    from dlperf.loadgen.target import Target

    reply = service_pb2.ModelInferResponse(model_name="m")
    reply.outputs.add(name="y", datatype="FP32", shape=[2])
    reply.raw_output_contents.append(np.array([1.0, 2.0], np.float32).tobytes())
    body = reply.SerializeToString()
    expected = {"y": np.array([1.05, 2.0], np.float32)}
    wide = Target(Endpoint("127.0.0.1", 1), "m", b"", tolerance=(0.1, 0.0), protocol="grpc")
    assert wide.mismatch({}, body, expected) is None
    narrow = Target(Endpoint("127.0.0.1", 1), "m", b"", protocol="grpc")
    assert "output 'y' differs from its validation data: element 0" in (narrow.mismatch({}, body, expected) or "")


def test_a_stream_error_counts_under_the_status_the_server_gives_else_by_its_message() -> None:
    """A bad request on a stream counted as 500 (its message has no code), where the same request unary counted as
    400: a dlperf server gives the status in the error's `dlperf_error_status` parameter."""
    from dlperf.loadgen.grpc_client import stream_reply_status

    message = "input 0 'x' has shape [1, 63]: model 'mlp' expects [-1, 64]"
    given = service_pb2.ModelStreamInferResponse(error_message=message)
    given.infer_response.parameters["dlperf_error_status"].int64_param = 400
    assert stream_reply_status(given) == 400
    assert stream_reply_status(service_pb2.ModelStreamInferResponse(error_message=message)) == 500  # Triton's: none
    queue_full = service_pb2.ModelStreamInferResponse(error_message="Exceeds maximum queue size: 1 requests queued")
    assert stream_reply_status(queue_full) == 503


def test_a_message_over_the_server_s_limit_counts_as_413_and_says_which_option_sets_the_limit() -> None:
    """grpc refuses such a message itself (RESOURCE_EXHAUSTED, "Received message larger than max (N vs. M)") before
    the server's code runs: `dlperf load -i grpc` counted it as 429, a server shedding load, with no word of
    --max-request-mb."""
    import grpc

    from dlperf.loadgen.client import Endpoint
    from dlperf.loadgen.grpc_client import GrpcConnection

    sender = GrpcConnection(Endpoint("127.0.0.1", 1))
    empty = grpc.aio.Metadata()
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    grpcs = "SERVER: Received message larger than max (5242893 vs. 4194304)"  # grpcio 1.85's words
    reply = sender._failed(grpc.aio.AioRpcError(code, empty, empty, grpcs))
    assert reply.status == 413
    assert (grpcs.encode() + b": the request is larger than the server's gRPC message limit (a dlperf server's is its "
            b"--max-request-mb") in reply.body
    own = "the request decompresses to more than 1024 bytes, the server's limit (--max-request-mb)"
    reply = sender._failed(grpc.aio.AioRpcError(code, empty, empty, own))
    assert reply.status == 413 and reply.body.count(b"--max-request-mb") == 1
    assert sender._failed(grpc.aio.AioRpcError(code, empty, empty, "Exceeds maximum queue size")).status == 429
