"""The OIP codec against tritonclient's own request encoder and response decoder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlperf.serve.protocol import (
    BF16,
    NUMPY_DTYPES,
    InferResponse,
    ProtocolError,
    Tensor,
    array_from_bytes,
    array_from_json,
    datatype_of,
    datatype_of_name,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    header_length_of,
    random_array,
    shm_span,
    tensor_bytes,
)

pytestmark = pytest.mark.unit

httpclient = pytest.importorskip("tritonclient.http")

ARRAYS: dict[str, np.ndarray] = {
    "FP32": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
    "FP16": (np.arange(6, dtype=np.float16).reshape(2, 3) / 3).astype(np.float16),
    "FP64": np.linspace(-1, 1, 6).reshape(3, 2),
    "INT64": np.array([[1, -2, 3], [2**40, 5, -6]], dtype=np.int64),
    "INT32": np.array([[7, 8, -9]], dtype=np.int32),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "UINT8": np.array([0, 200, 255], dtype=np.uint8),
    "BOOL": np.array([[True, False], [False, True]]),
    "BYTES": np.array([b"hello", b"", "wörld".encode()], dtype=object),
}


def _client_body(arrays: dict[str, np.ndarray], binary: bool, **kwargs: object) -> tuple[bytes, int | None]:
    inputs = []
    for name, a in arrays.items():
        inp = httpclient.InferInput(name, list(a.shape), name)
        inp.set_data_from_numpy(a, binary_data=binary)
        inputs.append(inp)
    return httpclient.InferenceServerClient.generate_request_body(inputs, **kwargs)


@pytest.mark.parametrize("binary", [True, False])
def test_decodes_every_datatype_as_tritonclient_sends_it(binary: bool) -> None:
    body, header_length = _client_body(ARRAYS, binary, request_id="r1")
    assert (header_length is None) == (not binary)
    request = decode_request(body, header_length)
    assert request.id == "r1"
    assert request.binary_output_default is True
    assert [t.name for t in request.inputs] == list(ARRAYS)
    for tensor in request.inputs:
        expected = ARRAYS[tensor.name]
        assert tensor.datatype == tensor.name
        assert tensor.shape == list(expected.shape)
        if tensor.datatype == "BYTES":
            assert list(tensor.data.reshape(-1)) == list(expected.reshape(-1))
        else:
            np.testing.assert_array_equal(tensor.data, expected)
            assert tensor.data.dtype == expected.dtype


@pytest.mark.parametrize("binary", [True, False])
def test_tritonclient_decodes_our_response(binary: bool) -> None:
    tensors = [Tensor(name, name, a) for name, a in ARRAYS.items()]
    body, header_length = encode_response(InferResponse("m", tensors, "1", "id-7"), [binary] * len(tensors))
    result = httpclient.InferenceServerClient.parse_response_body(body, header_length=header_length)
    assert result.get_response()["id"] == "id-7"
    for name, expected in ARRAYS.items():
        got = result.as_numpy(name)
        if name == "BYTES":  # tritonclient gives JSON BYTES back as str, binary ones as bytes
            assert [g if isinstance(g, bytes) else g.encode() for g in got.reshape(-1)] == list(expected)
        elif name in ("FP16",) and not binary:
            np.testing.assert_allclose(got, expected, rtol=1e-3)
        else:
            np.testing.assert_array_equal(got, expected)


def test_requested_outputs_and_parameters_are_read() -> None:
    x = np.ones((1, 2), np.float32)
    inp = httpclient.InferInput("x", [1, 2], "FP32")
    inp.set_data_from_numpy(x)
    outputs = [httpclient.InferRequestedOutput("b", binary_data=False), httpclient.InferRequestedOutput("a")]
    body, n = httpclient.InferenceServerClient.generate_request_body(
        [inp], outputs=outputs, timeout=1500, parameters={"routing_key": "user-3"})
    request = decode_request(body, n)
    assert [(o.name, o.binary) for o in request.outputs or []] == [("b", False), ("a", True)]
    assert request.parameters["timeout"] == 1500
    assert request.parameters["routing_key"] == "user-3"
    assert request.binary_output_default is False


def test_own_request_encoder_round_trips() -> None:
    tensors = [Tensor("a", "FP32", ARRAYS["FP32"]), Tensor("s", "BYTES", ARRAYS["BYTES"])]
    body, n = encode_request(tensors, binary=True, request_id="q")
    back = decode_request(body, n)
    np.testing.assert_array_equal(back.inputs[0].data, ARRAYS["FP32"])
    assert list(back.inputs[1].data) == list(ARRAYS["BYTES"])
    body, n = encode_response(InferResponse("m", tensors, id="q"), [True, False])
    resp = decode_response(body, n)
    assert resp.id == "q" and resp.model_name == "m"
    np.testing.assert_array_equal(resp.outputs[0].data, ARRAYS["FP32"])


def test_nested_and_flat_json_data_agree() -> None:
    for data in ([[1, 2, 3], [4, 5, 6]], [1, 2, 3, 4, 5, 6]):
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "INT32", "data": data}]})
        t = decode_request(body.encode()).inputs[0]
        np.testing.assert_array_equal(t.data, np.arange(1, 7, dtype=np.int32).reshape(2, 3))


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([{"name": "x", "shape": [2], "datatype": "FP33", "data": [1, 2]}], "datatype 'FP33'"),
        ([{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}], "2 data elements"),
        ([{"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}], "non-negative"),
        ([{"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}], "true/false"),
        ([{"name": "x", "shape": [1], "datatype": "INT64", "data": ["a"]}], "INT64 data must be integers"),
        ([{"name": "x", "shape": [1], "datatype": "FP32", "data": ["a"]}], "FP32 data must be numbers"),
        ([{"name": "x", "shape": [2, 2], "datatype": "INT64", "data": [1.7, 2, -3.9, 4]}], "must be integers"),
        ([{"name": "x", "shape": [1], "datatype": "UINT8", "data": [1.0]}], "must be integers"),
        ([{"name": "x", "shape": [2], "datatype": "BYTES", "data": ["a", [300]]}], "BYTES data must be strings"),
        ([{"name": "x", "shape": [2], "datatype": "BYTES", "data": ["a", None]}], "BYTES data must be strings"),
        ([{"name": "x", "shape": [1] * 65, "datatype": "FP32", "data": [1]}], "65 dimensions"),
        ([{"name": "x", "shape": [2**62, 0], "datatype": "FP32", "data": []}], "too big"),
        ([{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": "p"}], "must be an object"),
        ([{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": {"binary_data_size": 4}}],
         "both 'data' and a binary_data_size"),
        ([{"shape": [1], "datatype": "INT64", "data": [1]}], "no 'name'"),
        ([], "the request's 'inputs' is empty: send 'inputs' as a list of at least one input tensor"),
        ([{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": {"p": [1]}}],
         r"input 0 'x': parameter 'p' is a list \(\[1\]\): a parameter's value must be a string, a number or a"),
    ],
)
def test_bad_requests_say_what_is_wrong(inputs: list[object], message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as info:
        decode_request(json.dumps({"inputs": inputs}).encode())
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"id": 5}, "'id' must be a string"),
        ({"parameters": {"binary_data_output": "false"}}, "'binary_data_output' must be true or false"),
        ({"parameters": ["binary_data_output"]}, "'parameters' must be an object"),
        ({"outputs": [{"name": "y", "parameters": {"binary_data": "no"}}]}, "'binary_data' must be true or false"),
        ({"outputs": [{"name": "y", "parameters": "binary"}]}, "output 'y': 'parameters' must be an object"),
        # the protocol's $parameter is a string, number or boolean; they were taken whatever they were
        ({"parameters": {"foo": {"a": 1}}}, r"the request: parameter 'foo' is an object \(\{\"a\": 1\}\)"),
        ({"parameters": {"foo": None}}, r"parameter 'foo' is null \(null\)"),
        ({"outputs": [{"name": "y", "parameters": {"tag": [1, 2]}}]}, "output 'y': parameter 'tag' is a list"),
        ({"outputs": {"name": "y"}}, r"the request's 'outputs' is an object \(\{\"name\": \"y\"\}\): send a list"),
    ],
)
def test_request_fields_of_the_wrong_type_are_400(extra: dict[str, object], message: str) -> None:
    """Triton reads these typed: the string "false" as binary_data_output would otherwise mean true."""
    request = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], **extra}
    with pytest.raises(ProtocolError, match=message) as info:
        decode_request(json.dumps(request).encode())
    assert info.value.status == 400


def test_spelled_out_nan_and_infinity_are_taken_but_a_number_too_large_for_a_double_is_refused() -> None:
    """As Triton (since server PR 3870) reads JSON tensor data: NaN, Infinity and -Infinity are taken (tritonclient
    writes them so with binary_data=False), a literal such as 1e999 is refused where Python's json read it as
    infinity without a word."""
    def body(data: str, datatype: str = "FP32") -> bytes:
        return f'{{"inputs": [{{"name": "x", "shape": [3], "datatype": "{datatype}", "data": {data}}}]}}'.encode()

    for datatype in ("FP16", "FP32", "FP64", "BF16"):
        x = decode_request(body("[NaN, Infinity, -Infinity]", datatype)).inputs[0].data
        assert np.isnan(x[0]) and x[1] == np.inf and x[2] == -np.inf and x.dtype == NUMPY_DTYPES[datatype]
    for literal in ("1e999", "-1e400", "1.8e308"):
        with pytest.raises(ProtocolError, match=r"input 0 'x': element 1 of 'data' is a number too large for a "
                                                r"double, which would be read as infinity: send Infinity or "):
            decode_request(body(f"[1, {literal}, 2]"))
    with pytest.raises(ProtocolError, match="INT64 data must be integers"):
        decode_request(body("[1, NaN, 2]", "INT64"))
    assert decode_request(body("[1, 1.7e308, 2]", "FP64")).inputs[0].data[1] == 1.7e308
    # finite, but beyond the datatype: it became infinity (with a RuntimeWarning in the server's log)
    for datatype, literal, largest in (("FP32", "-1e39", "3.40282e+38"), ("FP16", "70000", "65504"),
                                       ("BF16", "1e39", "3.38953e+38")):
        with pytest.raises(ProtocolError) as info:
            decode_request(body(f"[1, Infinity, {literal}]", datatype))
        assert str(info.value) == (f"input 0 'x': element 2 of 'data', {float(literal):g}, is beyond {datatype}'s "
                                   f"range (at most {largest} either way) and would become infinity: send Infinity "
                                   "or -Infinity for an infinite value, or use a wider datatype")


def test_inputs_that_are_not_a_list_are_named_with_what_was_expected() -> None:
    for given, said in (('5', "the request's 'inputs' is a number (5)"),
                        ('{"name": "x"}', "the request's 'inputs' is an object ({\"name\": \"x\"})"),
                        ('null', "the request has no 'inputs'")):
        with pytest.raises(ProtocolError) as info:
            decode_request(f'{{"inputs": {given}}}'.encode())
        assert str(info.value) == (f"{said}: send 'inputs' as a list of at least one input tensor, each an object "
                                   '{"name", "shape", "datatype", "data"}')
        assert info.value.status == 400


def test_json_that_is_not_an_object_is_named_without_the_binary_data_hint() -> None:
    # '[1,2]' was told "the body has 0 bytes after a JSON part of 5 bytes: send binary tensor data with the header
    # Inference-Header-Content-Length: 5", advice that cannot help a body with no binary data
    for body, header_length, said in ((b"[1,2]", None, "a list ([1, 2])"), (b' "x" \n', None, 'a string ("x")'),
                                      (b"7", 1, "a number (7)")):
        with pytest.raises(ProtocolError) as info:
            decode_request(body, header_length)
        assert str(info.value) == f"the request must be a JSON object, not {said}"
    # JSON followed by bytes that are not JSON still gets the hint
    with pytest.raises(ProtocolError, match=r"Inference-Header-Content-Length: 5$"):
        decode_request(b"[1,2]\x00\x01")


def test_integers_are_taken_for_float_inputs() -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2.5]}]})
    np.testing.assert_array_equal(decode_request(body.encode()).inputs[0].data, np.array([1, 2.5], np.float32))


def test_binary_size_mismatches_are_400() -> None:
    header = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 8}}]}).encode()
    with pytest.raises(ProtocolError, match="only 4 bytes"):
        decode_request(header + b"\0" * 4, len(header))
    with pytest.raises(ProtocolError, match="add up to 8"):
        decode_request(header + b"\0" * 12, len(header))
    with pytest.raises(ProtocolError, match="Header-Content-Length"):
        decode_request(header, len(header) + 5)
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode_request(b"{nope")
    with pytest.raises(ProtocolError, match="nests its JSON too deeply") as info:  # a 400, not a RecursionError
        decode_request(b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert info.value.status == 400


@pytest.mark.parametrize("size", ["8", 8.0, -4, True])
def test_a_binary_data_size_that_is_not_a_byte_count_is_named_so(size: object) -> None:
    """A quoted or negative size was answered 'says binary_data_size='8' but only 8 bytes of binary data remain',
    which contradicts itself, and `true` was read as 1 byte."""
    header = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": size}}]}).encode()
    with pytest.raises(ProtocolError, match=r"binary_data_size=.*: it must be the tensor's byte count") as info:
        decode_request(header + b"\0" * 8, len(header))
    assert "remain" not in str(info.value) and info.value.status == 400
    bool_header = json.dumps({"inputs": [{"name": "b", "shape": [1], "datatype": "BOOL",
                                          "parameters": {"binary_data_size": True}}]}).encode()
    with pytest.raises(ProtocolError, match="byte count"):
        decode_request(bool_header + b"\1", len(bool_header))


BF16_VALUES = np.array([[1.5, -2.25, 3.0], [0.0, 0.375, 65280.0]], np.float32)  # exact in bfloat16


def test_bf16_in_tritonclients_binary_form_and_as_json_and_back() -> None:
    x = BF16_VALUES.astype(BF16)
    inp = httpclient.InferInput("x", [2, 3], "BF16")
    inp.set_data_from_numpy(x)  # tritonclient sends BF16 only as binary data (ml_dtypes' bfloat16)
    body, n = httpclient.InferenceServerClient.generate_request_body([inp])
    for request in (decode_request(body, n), decode_request(*encode_request([Tensor("x", "BF16", x)], binary=False))):
        tensor = request.inputs[0]
        assert tensor.datatype == "BF16" and tensor.data.dtype == BF16
        np.testing.assert_array_equal(tensor.data.astype(np.float32), BF16_VALUES)
    for binary in (True, False):
        out, n = encode_response(InferResponse("m", [Tensor("y", "BF16", x)], "1", "i"), [binary])
        got = httpclient.InferenceServerClient.parse_response_body(out, header_length=n).as_numpy("y")
        np.testing.assert_array_equal(got.astype(np.float32), BF16_VALUES)
    assert datatype_of(x) == "BF16" and datatype_of_name("torch.bfloat16") == "BF16"
    assert datatype_of_name("bfloat16") == "BF16"
    assert random_array("BF16", (2, 3), np.random.default_rng(0)).dtype == BF16


def test_datatype_names() -> None:
    assert datatype_of(np.zeros(1, np.float32)) == "FP32"
    assert datatype_of(np.array([b"x"], dtype=object)) == "BYTES"
    assert datatype_of_name("torch.int64") == "INT64"
    assert datatype_of_name("float16") == "FP16"
    assert datatype_of_name("bool") == "BOOL"
    with pytest.raises(ProtocolError):
        datatype_of_name("complex64")


def test_random_array_has_the_asked_type_and_shape() -> None:
    rng = np.random.default_rng(0)
    for dt in ("FP32", "INT64", "BOOL", "BYTES", "FP16"):
        a = random_array(dt, (2, 3), rng)
        assert a.shape == (2, 3)
        assert datatype_of(a) == dt


def test_random_strings_have_the_asked_length_or_content() -> None:
    rng = np.random.default_rng(0)
    a = random_array("BYTES", (3, 4), rng, string_length=17)
    assert {len(v) for v in a.flat} == {17} and all(bytes(v).isalnum() for v in a.flat)
    assert len({bytes(v) for v in a.flat}) == 12  # drawn, not one string repeated
    assert {len(v) for v in random_array("BYTES", (2,), rng, string_length=0).flat} == {0}
    fixed = random_array("BYTES", (2, 2), rng, string_data="héllo".encode())
    assert {bytes(v) for v in fixed.flat} == {"héllo".encode()}


def test_header_length_is_a_byte_count_or_absent() -> None:
    assert header_length_of({}) is None
    assert header_length_of({"inference-header-content-length": "123"}) == 123
    assert header_length_of({"inference-header-content-length": " 7 "}) == 7
    for bad in ("12x", "-5", "", "\u00b2", "1e3"):  # '\u00b2' (latin-1 byte 0xb2) is a digit to str.isdigit
        with pytest.raises(ProtocolError, match="Inference-Header-Content-Length is not a byte count") as info:
            header_length_of({"inference-header-content-length": bad})
        assert info.value.status == 400


def test_arrays_of_unstated_length_take_what_the_data_holds() -> None:
    np.testing.assert_array_equal(array_from_bytes(np.arange(3, dtype="<f4").tobytes(), "FP32", None, "w"),
                                  np.arange(3, dtype=np.float32))
    words = b"".join(len(w).to_bytes(4, "little") + w for w in (b"ab", b"", b"xyz"))
    assert list(array_from_bytes(words, "BYTES", None, "w")) == [b"ab", b"", b"xyz"]
    with pytest.raises(ProtocolError, match="w: 6 bytes are not a whole number of FP32 elements"):
        array_from_bytes(b"\0" * 6, "FP32", None, "w")
    np.testing.assert_array_equal(array_from_json([[1, 2], [3]], "INT64", None, "w"), [1, 2, 3])
    with pytest.raises(ProtocolError, match="w: 3 data elements for a shape of 4 elements"):
        array_from_json([1, 2, 3], "INT64", 4, "w")


def test_a_requested_output_s_own_parameters_replace_its_binary_flag() -> None:
    x = Tensor("x", "FP32", np.zeros((1, 4), np.float32))
    spans = {"y": {"shared_memory_region": "out", "shared_memory_byte_size": 16}}
    body, n = encode_request([x], outputs=["y", "z"], output_parameters=spans)
    request = decode_request(body, n, shm=lambda region, offset, size, where: bytearray(size))
    assert [(o.name, o.binary, o.shm) for o in request.outputs or []] == [("y", None, ("out", 0, 16)),
                                                                           ("z", True, None)]
    assert "binary_data_output" not in request.parameters


def test_null_json_data_is_named_as_null() -> None:
    """'data': null was flattened to one element: "1 data elements for a shape of 64 elements"."""
    with pytest.raises(ProtocolError, match="w: 'data' is null: give the tensor's elements"):
        array_from_json(None, "FP32", 64, "w")


def test_scalar_json_data_and_integer_overflow_say_what_was_sent_and_the_range() -> None:
    # "data": "abc" for an FP32 tensor was only "1 data elements for a shape of 64 elements"
    with pytest.raises(ProtocolError) as info:
        array_from_json("abc", "FP32", 64, "w")
    assert str(info.value) == "w: 1 data elements for a shape of 64 elements ('data' is a string (\"abc\"), not a list)"
    # numpy's "Python int too large to convert to C long" alone did not say what fits
    with pytest.raises(ProtocolError) as info:
        array_from_json([2**70], "INT64", 1, "w")
    assert str(info.value).startswith("w: data does not fit INT64: ")
    assert str(info.value).endswith("(its range is -9223372036854775808 to 9223372036854775807; use a wider "
                                    "datatype for larger values)")


def test_bytes_elements_given_as_text_are_sent_as_their_utf8_bytes() -> None:
    """A BYTES element that is a str (an object array of str, or numpy's fixed-width text) goes out as its UTF-8
    bytes: a length prefix counting characters instead of bytes would shift every later element of a non-ASCII
    text."""
    for array in (np.array(["wörld", "", "ab"], dtype=object), np.array(["wörld", "", "ab"])):
        back = array_from_bytes(tensor_bytes(array, "BYTES"), "BYTES", 3, "w")
        assert list(back) == ["wörld".encode(), b"", b"ab"]


def test_json_booleans_are_not_integers() -> None:
    """JSON true/false for an integer tensor is refused, as Triton refuses it, not read as 1 and 0."""
    for datatype in ("INT64", "INT32", "UINT8"):
        with pytest.raises(ProtocolError, match=f"{datatype} data must be integers") as info:
            array_from_json([1, True, 0], datatype, 3, "w")
        assert info.value.status == 400


def test_own_request_encoder_asks_for_outputs_in_the_form_it_is_told() -> None:
    """The load generator's requests ask binary outputs unless told otherwise (JSON outputs cost the server an
    encoding a Triton client does not ask for), and JSON ones when told so, for every output or the named ones."""
    x = Tensor("x", "FP32", np.zeros((1, 2), np.float32))
    assert decode_request(*encode_request([x])).binary_output_default is True
    request = decode_request(*encode_request([x], binary_outputs=False))
    assert request.binary_output_default is False and request.outputs is None
    request = decode_request(*encode_request([x], outputs=["y", "z"], binary_outputs=False))
    assert [(o.name, o.binary) for o in request.outputs or []] == [("y", False), ("z", False)]
    request = decode_request(*encode_request([x], outputs=["y"]))
    assert [(o.name, o.binary) for o in request.outputs or []] == [("y", True)]


def test_shared_memory_offsets_and_sizes_must_be_integers_not_booleans() -> None:
    """`true` as shared_memory_offset would read the tensor from byte 1 of the region."""
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        params = {"shared_memory_region": "r", "shared_memory_byte_size": 8, key: True}
        with pytest.raises(ProtocolError, match=f"{key} must be a non-negative integer, got True"):
            shm_span(params, "w")
    assert shm_span({"shared_memory_region": "r", "shared_memory_byte_size": 8, "shared_memory_offset": 4},
                    "w") == ("r", 4, 8)


def test_an_input_in_shared_memory_with_data_in_the_request_too_is_refused() -> None:
    """Which of the two the model would get is not the client's to guess: the request is a 400."""
    region = np.arange(2, dtype=np.float32).tobytes()
    raw = {"name": "x", "shape": [2], "datatype": "FP32",
           "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8}}

    def shm(name: str, offset: int, size: int, where: str) -> memoryview:
        return memoryview(region)[offset:offset + size]

    taken = decode_request(json.dumps({"inputs": [raw]}).encode(), shm=shm).inputs[0]
    np.testing.assert_array_equal(taken.data, [0.0, 1.0])
    with pytest.raises(ProtocolError, match="input 0 'x' is in shared memory and also has data") as info:
        decode_request(json.dumps({"inputs": [{**raw, "data": [5, 6]}]}).encode(), shm=shm)
    assert info.value.status == 400


def test_random_integers_are_small_and_non_negative() -> None:
    """The load generator's random integer inputs are token ids and indices: a negative one fails an embedding."""
    rng = np.random.default_rng(0)
    for datatype in ("INT64", "INT32", "INT8", "UINT8"):
        a = random_array(datatype, (64, 8), rng)
        assert a.min() >= 0 and a.max() < 100 and a.dtype == NUMPY_DTYPES[datatype]
