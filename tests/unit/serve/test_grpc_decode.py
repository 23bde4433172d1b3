"""Decoding a gRPC ModelInferRequest (the messages tritonclient ships) into the server's InferRequest."""

from __future__ import annotations

import numpy as np
import pytest

from dlperf.serve.protocol import ProtocolError

pytestmark = pytest.mark.unit

service_pb2 = pytest.importorskip("tritonclient.grpc.service_pb2")
from dlperf.serve.grpc_service import decode_infer_request  # noqa: E402


def test_raw_contents_typed_contents_and_parameters() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m", id="r7")
    msg.parameters["priority"].int64_param = 2
    msg.parameters["routing_key"].string_param = "user-1"
    msg.inputs.add(name="a", datatype="FP16", shape=[2, 2])
    msg.inputs.add(name="b", datatype="BYTES", shape=[2])
    msg.raw_input_contents.append(np.arange(4, dtype=np.float16).tobytes())
    msg.raw_input_contents.append(b"\x02\x00\x00\x00hi\x00\x00\x00\x00")
    msg.outputs.add(name="y")
    request = decode_infer_request(msg, None)
    assert request.id == "r7" and request.parameters == {"priority": 2, "routing_key": "user-1"}
    assert request.inputs[0].data.dtype == np.float16 and request.inputs[0].shape == [2, 2]
    assert list(request.inputs[1].data) == [b"hi", b""]
    assert [(o.name, o.shm) for o in request.outputs or []] == [("y", None)]

    typed = service_pb2.ModelInferRequest(model_name="m")
    for name, datatype, field, values in (("i", "INT64", "int64_contents", [1, -2]),
                                          ("f", "BOOL", "bool_contents", [True, False]),
                                          ("s", "BYTES", "bytes_contents", [b"x", b"yz"])):
        t = typed.inputs.add(name=name, datatype=datatype, shape=[2])
        getattr(t.contents, field).extend(values)
    got = {t.name: t.data for t in decode_infer_request(typed, None).inputs}
    assert got["i"].dtype == np.int64 and list(got["i"]) == [1, -2]
    assert got["f"].dtype == np.bool_ and list(got["f"]) == [True, False]
    assert list(got["s"]) == [b"x", b"yz"]


@pytest.mark.parametrize(("build", "message"), [
    (lambda m: m.inputs.add(name="x", datatype="FP16", shape=[1]), "FP16 data goes in raw_input_contents"),
    (lambda m: m.inputs.add(name="x", datatype="FP99", shape=[1]), "datatype 'FP99'"),
    (lambda m: (m.inputs.add(name="x", datatype="FP32", shape=[2]), m.raw_input_contents.append(b"\0" * 4)),
     "4 bytes of binary data for 2 FP32 elements"),
    (lambda m: (m.inputs.add(name="x", datatype="FP32", shape=[1]), m.inputs.add(name="z", datatype="FP32", shape=[1]),
                m.raw_input_contents.append(b"\0" * 4)), "2 inputs but 1 raw_input_contents"),
    (lambda m: m.inputs.add(name="x", datatype="FP32", shape=[1]).parameters["shared_memory_region"].CopyFrom(
        service_pb2.InferParameter(string_param="r")), "give both shared_memory_region and shared_memory_byte_size"),
    (lambda m: None, "no inputs"),
    (lambda m: (m.inputs.add(name="x", datatype="FP32", shape=[1] * 65), m.raw_input_contents.append(b"\0" * 4)),
     "65 dimensions: at most 64"),
    (lambda m: m.inputs.add(name="x", datatype="INT8", shape=[2]).contents.int_contents.extend([1, 300]),
     "contents.int_contents do not fit INT8"),
    (lambda m: (m.inputs.add(name="x", datatype="FP32", shape=[2**62, 0]), m.raw_input_contents.append(b"")),
     "has shape \\[4611686018427387904, 0\\]"),
    (lambda m: m.inputs.add(name="x", datatype="FP32", shape=[1], parameters={
        "shared_memory_region": service_pb2.InferParameter(string_param="r"),
        "shared_memory_byte_size": service_pb2.InferParameter(int64_param=4)}),
     "this server takes no tensors in shared memory: start it with --allow-client-shm"),
])
def test_what_does_not_fit_is_refused_naming_the_input(build: object, message: str) -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    build(msg)  # type: ignore[operator]
    with pytest.raises(ProtocolError, match=message) as info:
        decode_infer_request(msg, None)
    assert info.value.status == 400


def test_a_timeout_parameter_is_taken_as_an_int64_param_only_as_triton_takes_it() -> None:
    """A uint64_param 'timeout' was accepted, where Triton answers INVALID_ARGUMENT "invalid value type for
    'timeout' parameter, expected int64_param": a client tested here then failed against Triton."""
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="x", datatype="FP32", shape=[1])
    msg.raw_input_contents.append(b"\0" * 4)
    msg.parameters["timeout"].int64_param = 2_500_000
    msg.parameters["priority"].uint64_param = 1  # Triton takes either for the priority
    assert decode_infer_request(msg, None).parameters == {"timeout": 2_500_000, "priority": 1}
    msg.parameters["timeout"].uint64_param = 2_500_000
    with pytest.raises(ProtocolError, match=r"^the request: invalid value type for 'timeout' parameter, expected "
                                            r"int64_param \(as Triton takes it\), got uint64_param 2500000$") as info:
        decode_infer_request(msg, None)
    assert info.value.status == 400  # INVALID_ARGUMENT over gRPC
