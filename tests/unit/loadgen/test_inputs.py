"""`--input-data`: perf_analyzer's formats read into items, joined into requests, and replies checked."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.errors import ConfigError
from dlperf.loadgen.inputs import ATOL, RTOL, InputData, TensorInfo, mismatch, prepare, read_input_data
from dlperf.serve.protocol import HEADER_LENGTH, InferResponse, Tensor, encode_response

INPUTS = [TensorInfo("x", "FP32", (-1, 4)), TensorInfo("ids", "INT64", (-1, -1))]
OUTPUTS = [TensorInfo("y", "FP32", (-1, 2)), TensorInfo("label", "INT64", (-1,))]


def write(tmp_path: Path, obj: Any, name: str = "data.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


def entry(x: Any, ids: Any) -> dict[str, Any]:
    return {"x": x, "ids": ids}


def test_json_values_as_lists_b64_and_content_with_shape(tmp_path: Path) -> None:
    x2 = np.array([5, 6, 7, 8], dtype="<f4")
    path = write(tmp_path, {"data": [
        entry([1, 2, 3, 4], {"content": [1, 2, 3], "shape": [3]}),
        {"x": {"b64": base64.b64encode(x2.tobytes()).decode()},
         "ids": {"content": {"b64": base64.b64encode(np.arange(6, dtype="<i8").tobytes()).decode()}, "shape": [6]}},
        entry([[0.5, 0.5], [0.5, 0.5]], {"content": [[9]], "shape": [1]}),
    ]})
    data = read_input_data([path], INPUTS, OUTPUTS)
    assert data is not None and len(data.steps) == 3 and not data.validates
    assert data.steps[0]["x"].dtype == np.float32 and data.steps[0]["x"].tolist() == [1, 2, 3, 4]
    assert data.steps[0]["ids"].dtype == np.int64 and data.steps[0]["ids"].shape == (3,)
    assert data.steps[1]["x"].tolist() == [5, 6, 7, 8]
    assert data.steps[1]["ids"].tolist() == [0, 1, 2, 3, 4, 5]
    assert data.steps[2]["x"].shape == (4,) and data.steps[2]["ids"].tolist() == [9]


def test_shape_flag_fills_variable_dimensions_and_files_concatenate(tmp_path: Path) -> None:
    a = write(tmp_path, {"data": [entry([1, 2, 3, 4], [1, 2])]}, "a.json")
    b = write(tmp_path, {"data": [entry([0, 0, 0, 0], [3, 4]), entry([1, 1, 1, 1], [[5, 6]])]}, "b.json")
    data = read_input_data([a, b], INPUTS, OUTPUTS, shapes={"ids": (1, 2)})  # --shape is the full shape
    assert data is not None
    assert [s["ids"].tolist() for s in data.steps] == [[1, 2], [3, 4], [5, 6]]
    assert data.source == f"{a}, {b}"


def test_validation_data_is_flat_per_entry_and_bytes_count_themselves(tmp_path: Path) -> None:
    labels = struct.pack("<q", 7)
    path = write(tmp_path, {
        "data": [entry([1, 2, 3, 4], {"content": [1], "shape": [1]})] * 2,
        "validation_data": [{"y": [[0.25, 0.75]], "label": {"b64": base64.b64encode(labels).decode()}}, {}],
    })
    data = read_input_data([path], INPUTS, OUTPUTS)
    assert data is not None and data.validates
    assert data.expected[0]["y"].tolist() == [0.25, 0.75] and data.expected[0]["label"].tolist() == [7]
    assert data.expected[1] == {}


def test_zero_gives_one_item_of_zeros_and_random_gives_none() -> None:
    inputs = [TensorInfo("x", "FP32", (-1, 4)), TensorInfo("s", "BYTES", (-1, 2))]
    data = read_input_data(["zero"], inputs, [])
    assert data is not None and len(data.steps) == 1
    assert data.steps[0]["x"].tolist() == [0, 0, 0, 0] and data.steps[0]["s"].tolist() == [b"", b""]
    assert read_input_data(["random"], inputs, []) is None
    assert read_input_data([], inputs, []) is None


def test_a_bytes_value_that_is_not_a_string_is_pointed_to_b64(tmp_path: Path) -> None:
    """The server's advice came through, "BYTES data must be strings (or send the tensor as binary data)", which an
    --input-data file cannot do; its {"b64": ...} form carries any bytes."""
    inputs = [TensorInfo("s", "BYTES", (-1, 2))]
    outputs = [TensorInfo("o", "BYTES", (-1, 2))]
    path = write(tmp_path, {"data": [{"s": ["ab", "cd"]}], "validation_data": [{"o": [{"b64": "qcM="}, "q"]}]})
    with pytest.raises(ConfigError, match=r"validation_data\[0\] output 'o': BYTES values are strings .* give the "
                                          r"whole tensor as \{\"b64\": \.\.\.\}") as info:
        read_input_data([path], inputs, outputs)
    assert "send the tensor as binary data" not in str(info.value)
    raw = b"".join(struct.pack("<I", len(v)) + v for v in (b"\xa9\xc3", b"q"))
    path = write(tmp_path, {"data": [{"s": ["ab", "cd"]}],
                            "validation_data": [{"o": {"b64": base64.b64encode(raw).decode()}}]})
    data = read_input_data([path], inputs, outputs)
    assert data is not None and data.expected[0]["o"].tolist() == [b"\xa9\xc3", b"q"]


def test_directory_holds_one_raw_file_per_input_and_optional_outputs(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(np.array([1, 2, 3, 4], dtype="<f4").tobytes())
    (tmp_path / "ids").write_bytes(np.array([4, 5], dtype="<i8").tobytes())
    (tmp_path / "y").write_bytes(np.array([0.5, 1.5], dtype="<f4").tobytes())
    data = read_input_data([str(tmp_path)], INPUTS, OUTPUTS, shapes={"ids": (1, 2)})
    assert data is not None and len(data.steps) == 1
    assert data.steps[0]["x"].tolist() == [1, 2, 3, 4] and data.steps[0]["ids"].tolist() == [4, 5]
    assert data.expected[0]["y"].tolist() == [0.5, 1.5] and "label" not in data.expected[0]


@pytest.mark.parametrize("obj, message", [
    ({"data": []}, "non-empty 'data' list"),
    ([1, 2], "non-empty 'data' list"),
    ({"data": [[entry([1, 2, 3, 4], [1])]]}, "streams of a sequence model"),
    ({"data": [{"x": [1, 2, 3, 4]}]}, "data[0] has no value for input 'ids'"),
    ({"data": [{"x": [1, 2, 3, 4], "ids": {"content": [1], "shape": [1]}, "z": [1]}]},
     "data[0] names 'z', which is not an input of the model (its inputs: x, ids)"),
    ({"data": [entry([1, 2, 3], {"content": [1], "shape": [1]})]},
     "data[0] input 'x': 3 data elements for a shape of 4 elements"),
    ({"data": [entry([1, 2, 3, 4], [1, 2])]}, "input 'ids' has variable dimensions [-1, -1]: give its shape"),
    ({"data": [entry({"b64": "%%%"}, {"content": [1], "shape": [1]})]}, "'b64' is not valid base64"),
    ({"data": [entry({"b64": "AAAA"}, {"content": [1], "shape": [1]})]},
     "data[0] input 'x': 3 bytes of binary data for 4 FP32 elements"),
    ({"data": [entry({"shape": [4]}, [1])]}, "holds 'content' (and optionally 'shape') or 'b64'"),
    ({"data": [entry({"content": [1, 2, 3, 4], "shape": [1, 4]}, {"content": [1], "shape": [1]})]},
     "data[0] input 'x': shape [1, 4] does not fit the model's [-1, 4] (an entry is one item: leave the batch"),
    ({"data": [entry({"content": [1, 2, 3, 4, 5], "shape": [5]}, {"content": [1], "shape": [1]})]},
     "data[0] input 'x': shape [5] does not fit the model's [-1, 4]"),
    ({"data": [entry([1, 2, 3, 4], {"content": [1], "shape": [-1]})]}, "'shape' must be a list of non-negative"),
    ({"data": [entry(["a", 2, 3, 4], {"content": [1], "shape": [1]})]}, "FP32 data must be numbers"),
    ({"data": [entry([1, 2, 3, 4], {"content": [1], "shape": [1]})], "validation_data": []},
     "'validation_data' must be a list aligned with 'data' (1 entries), got 0"),
    ({"data": [entry([1, 2, 3, 4], {"content": [1], "shape": [1]})], "validation_data": [{"q": [1]}]},
     "validation_data[0] names 'q', which is not an output of the model (its outputs: y, label)"),
])
def test_bad_json_is_refused_naming_file_entry_and_tensor(tmp_path: Path, obj: Any, message: str) -> None:
    path = write(tmp_path, obj)
    with pytest.raises(ConfigError) as info:
        read_input_data([path], INPUTS, OUTPUTS)
    assert message in str(info.value) and path in str(info.value)


def test_unreadable_arguments_are_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_input_data([str(tmp_path / "bad.json")], INPUTS, OUTPUTS)
    with pytest.raises(ConfigError, match="no such file or directory"):
        read_input_data([str(tmp_path / "missing.json")], INPUTS, OUTPUTS)
    with pytest.raises(ConfigError, match="zero cannot be combined"):
        read_input_data(["zero", str(tmp_path / "bad.json")], INPUTS, OUTPUTS)
    with pytest.raises(ConfigError, match="no file 'x' for input 'x'"):
        read_input_data([str(tmp_path)], INPUTS, OUTPUTS)


def items(n: int) -> InputData:
    steps: tuple[dict[str, np.ndarray], ...] = tuple(
        {"x": np.full(4, i, dtype=np.float32), "ids": np.array([i, i], dtype=np.int64)} for i in range(n))
    return InputData(steps, tuple({"y": np.array([i, -i], dtype=np.float32)} for i in range(n)), "test")


def test_requests_take_consecutive_items_round_robin() -> None:
    prepared = prepare(items(5), INPUTS, batch_size=2)
    assert len(prepared) == 5  # 5 / gcd(5, 2): request k holds items 2k, 2k+1 (mod 5)
    firsts = [p.tensors[0].data[:, 0].tolist() for p in prepared]
    assert firsts == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    assert prepared[2].tensors[1].data.tolist() == [[4, 4], [0, 0]]
    assert prepared[2].expected["y"].tolist() == [4, -4, 0, 0]
    assert len(prepare(items(6), INPUTS, batch_size=4)) == 3  # 6 / gcd(6, 4)
    assert [p.tensors[0].data.shape for p in prepare(items(3), INPUTS, batch_size=1)] == [(1, 4)] * 3


def test_items_of_different_shapes_cannot_share_a_request() -> None:
    data = items(2)
    data.steps[1]["ids"] = np.array([1, 2, 3], dtype=np.int64)
    assert len(prepare(data, INPUTS, batch_size=1)) == 2
    with pytest.raises(ConfigError, match=r"entries 0 and 1 cannot share a request of --batch-size 2: input 'ids'"):
        prepare(data, INPUTS, batch_size=2)
    unbatched = [TensorInfo("x", "FP32", (4,)), TensorInfo("ids", "INT64", (2,))]
    assert prepare(data, unbatched, batch_size=1)[0].tensors[0].data.shape == (4,)
    with pytest.raises(ConfigError, match="no batch dimension"):
        prepare(data, unbatched, batch_size=2)


def reply(*tensors: Tensor) -> tuple[dict[str, str], bytes]:
    body, length = encode_response(InferResponse("m", list(tensors)), [True] * len(tensors))
    assert length is not None
    return {HEADER_LENGTH: str(length)}, body


def test_replies_are_checked_within_tolerance_for_floats_and_exactly_otherwise() -> None:
    want: dict[str, np.ndarray] = {"y": np.array([1.0, 2.0], dtype=np.float32),
                                   "label": np.array([3], dtype=np.int64)}
    label = Tensor("label", "INT64", np.array([[3]], dtype=np.int64))
    assert mismatch(*reply(Tensor("y", "FP32", np.array([[1.0, 2.0]], np.float32)), label), want) is None
    close = 2.0 * (1 + RTOL / 2)
    assert mismatch(*reply(Tensor("y", "FP32", np.array([[1.0, close]], np.float32)), label), want) is None
    far = 2.0 * (1 + 2 * RTOL) + ATOL
    why = mismatch(*reply(Tensor("y", "FP32", np.array([[1.0, far]], np.float32)), label), want)
    assert why is not None and "output 'y' differs from its validation data: element 1 is 2.00" in why
    why = mismatch(*reply(Tensor("y", "FP32", np.array([[1.0, 2.0]], np.float32)),
                          Tensor("label", "INT64", np.array([[4]], dtype=np.int64))), want)
    assert why == "output 'label' differs from its validation data: element 0 is 4, expected 3"
    why = mismatch(*reply(label), want)
    assert why == "output 'y' is not in the reply (it has label)"
    why = mismatch(*reply(Tensor("y", "FP32", np.zeros((1, 3), np.float32)), label), want)
    assert why == "output 'y' has 3 elements, its validation data 2"
    assert mismatch({}, b"not json", want) is not None
    # a wider tolerance (--rtol/--atol) lets the far value pass, and is named when one still fails
    far_reply = reply(Tensor("y", "FP32", np.array([[1.0, far]], np.float32)), label)
    assert mismatch(*far_reply, want, rtol=10 * RTOL) is None
    assert mismatch(*far_reply, want, rtol=0.0, atol=0.1) is None
    why = mismatch(*far_reply, want, rtol=0.0, atol=1e-4)
    assert why is not None and why.endswith("(rtol 0, atol 0.0001)")


def test_the_relative_tolerance_is_relative_to_the_expected_value() -> None:
    """rtol scales with the expected value (numpy.isclose's test): 1000.5 for 1000 is within 1e-3 of it, 0.0015 for
    0.0005 is not. A tolerance that did not scale refused every large output that was off in its last digits."""
    from dlperf.loadgen.inputs import mismatch_of

    y = Tensor("y", "FP32", np.array([1000.5, 0.0015], np.float32))
    assert mismatch_of([y], {"y": np.array([1000.0, 0.0015], np.float32)}) is None
    assert mismatch_of([y], {"y": np.array([1002.0, 0.0015], np.float32)}) is not None
    assert mismatch_of([y], {"y": np.array([1000.0, 0.0005], np.float32)}) is not None
    assert RTOL == 1e-3 and ATOL == 1e-5


def test_a_model_batches_only_when_every_input_starts_with_a_variable_dimension() -> None:
    """A fixed-shape input beside a batched one (or no input at all) is no batch dimension: read as one, `--batch-size
    4` on a plain KServe server without /config sent 4 items to a model that takes one."""
    from dlperf.loadgen.inputs import is_batched

    assert is_batched(INPUTS)
    assert not is_batched([TensorInfo("x", "FP32", (-1, 4)), TensorInfo("scale", "FP32", (3,))])
    assert not is_batched([TensorInfo("scale", "FP32", (3,)), TensorInfo("x", "FP32", (-1, 4))])
    assert not is_batched([])


def test_an_unbatched_model_s_item_keeps_its_whole_shape(tmp_path: Path) -> None:
    """Without a batch dimension an item is the whole tensor: cutting its first dimension, as for a batched model, sent
    a [4] tensor to an input of shape [3, 4] (zero) and refused a directory file of 12 floats."""
    unbatched = [TensorInfo("image", "FP32", (3, 4))]
    zero = read_input_data(["zero"], unbatched, [], batched=False)
    assert zero is not None and zero.steps[0]["image"].shape == (3, 4)
    (tmp_path / "image").write_bytes(np.arange(12, dtype="<f4").tobytes())
    data = read_input_data([str(tmp_path)], unbatched, [], batched=False)
    assert data is not None and data.steps[0]["image"].tolist() == np.arange(12).reshape(3, 4).tolist()


def test_a_directory_file_of_the_wrong_size_is_refused_naming_it(tmp_path: Path) -> None:
    """Read as many elements as its bytes hold, a 3-float file for an input of 4 ended in numpy's reshape error."""
    (tmp_path / "x").write_bytes(np.array([1, 2, 3], dtype="<f4").tobytes())
    (tmp_path / "ids").write_bytes(np.array([4, 5], dtype="<i8").tobytes())
    with pytest.raises(ConfigError, match=rf"--input-data {tmp_path}/x: 12 bytes of binary data for 4 FP32 elements"):
        read_input_data([str(tmp_path)], INPUTS, OUTPUTS, shapes={"ids": (1, 2)})


def test_an_entry_may_have_an_empty_dimension_but_not_a_boolean_one(tmp_path: Path) -> None:
    """{"content": [], "shape": [0]} is an empty sequence, as the protocol allows; 'true' is no dimension."""
    path = write(tmp_path, {"data": [entry([1, 2, 3, 4], {"content": [], "shape": [0]})]})
    data = read_input_data([path], INPUTS, OUTPUTS)
    assert data is not None and data.steps[0]["ids"].shape == (0,)
    path = write(tmp_path, {"data": [entry([1, 2, 3, 4], {"content": [7], "shape": [True]})]})
    with pytest.raises(ConfigError, match=r"'shape' must be a list of non-negative integers, got \[True\]"):
        read_input_data([path], INPUTS, OUTPUTS)


def test_validation_data_of_its_own_shape_must_hold_that_many_elements(tmp_path: Path) -> None:
    """An expected output whose content does not fill its shape is refused when the file is read, not found out
    from the replies."""
    path = write(tmp_path, {"data": [entry([1, 2, 3, 4], {"content": [1], "shape": [1]})],
                            "validation_data": [{"y": {"content": [0.5, 0.5, 0.5], "shape": [2]}}]})
    with pytest.raises(ConfigError, match=r"validation_data\[0\] output 'y': 3 data elements for a shape of 2"):
        read_input_data([path], INPUTS, OUTPUTS)


def test_an_output_is_checked_only_in_requests_whose_every_entry_gives_it() -> None:
    """Validation data for some entries only: a request of batch 2 is checked on an output only where both of its
    entries give it (their expectations joined in order); one that lacks it in any entry is not checked on it."""
    data = items(4)
    partial = InputData(data.steps, (data.expected[0], {}, data.expected[2], data.expected[3]), "test")
    prepared = prepare(partial, INPUTS, batch_size=2)
    assert [p.expected.get("y", np.array([])).tolist() for p in prepared] == [[], [2, -2, 3, -3]]


def test_a_reply_with_fewer_elements_than_its_validation_data_is_a_mismatch() -> None:
    """One element broadcast against two expected equal values read as a match."""
    from dlperf.loadgen.inputs import mismatch_of

    y = Tensor("y", "FP32", np.array([[1.0]], np.float32))
    assert mismatch_of([y], {"y": np.array([1.0, 1.0], np.float32)}) == (
        "output 'y' has 1 elements, its validation data 2")


def test_zero_tolerances_accept_exactly_equal_floats() -> None:
    """--rtol 0 --atol 0 asks for bit-equal outputs, which must pass (a strict comparison refused every value)."""
    from dlperf.loadgen.inputs import mismatch_of

    y = Tensor("y", "FP32", np.array([0.0, 1.5, -2.25], np.float32))
    assert mismatch_of([y], {"y": np.array([0.0, 1.5, -2.25], np.float32)}, rtol=0.0, atol=0.0) is None
    assert mismatch_of([y], {"y": np.array([0.0, 1.5, -2.5], np.float32)}, rtol=0.0, atol=0.0) is not None


def test_integer_and_bytes_outputs_are_compared_exactly() -> None:
    """Not through floats: int64 ids past 2**53 differ in their last digit, and BYTES elements are no numbers."""
    from dlperf.loadgen.inputs import mismatch_of

    ids = Tensor("ids", "INT64", np.array([2**53 + 1], np.int64))
    assert mismatch_of([ids], {"ids": np.array([2**53], np.int64)}) == (
        "output 'ids' differs from its validation data: element 0 is 9007199254740993, expected 9007199254740992")
    words = Tensor("s", "BYTES", np.array([b"a", b"b"], dtype=object))
    assert mismatch_of([words], {"s": np.array([b"a", b"b"], dtype=object)}) is None
    assert mismatch_of([words], {"s": np.array([b"a", b"c"], dtype=object)}) == (
        "output 's' differs from its validation data: element 1 is b'b', expected b'c'")


def test_the_relative_tolerance_scales_with_the_expected_value_not_the_reply_s() -> None:
    """numpy.isclose's test is not symmetric: 1000 for an expected 999 is off by more than 1e-3 of 999 (0.999), though
    not of 1000; the check is against what was expected."""
    from dlperf.loadgen.inputs import mismatch_of

    y = Tensor("y", "FP32", np.array([1000.0], np.float32))
    assert mismatch_of([y], {"y": np.array([999.0], np.float32)}) == (
        "output 'y' differs from its validation data: element 0 is 1000, expected 999 (rtol 0.001, atol 1e-05)")
    assert mismatch_of([Tensor("y", "FP32", np.array([999.0], np.float32))], {"y": np.array([1000.0], np.float32)}) \
        is None


def test_an_entry_shape_with_the_batch_dimension_is_refused_naming_the_entry(tmp_path: Path) -> None:
    """An entry is one item: a 'shape' of more dimensions than the item's ended in zip's ValueError."""
    path = write(tmp_path, {"data": [entry([1, 2, 3, 4], {"content": [1, 2], "shape": [1, 2]})]})
    with pytest.raises(ConfigError, match=r"data\[0\] input 'ids': shape \[1, 2\] does not fit the model's \[-1, -1\] "
                                          r"\(an entry is one item: leave the batch dimension out\)"):
        read_input_data([path], INPUTS, OUTPUTS)


def test_an_object_value_may_leave_its_shape_to_the_model(tmp_path: Path) -> None:
    """{"content": [...]} without 'shape' has the item's shape from the model (it is no empty shape)."""
    path = write(tmp_path, {"data": [{"x": {"content": [1, 2, 3, 4]}, "ids": {"content": [7], "shape": [1]}}]})
    data = read_input_data([path], INPUTS, OUTPUTS)
    assert data is not None and data.steps[0]["x"].tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize(("obj", "message"), [
    ({"data": [5]}, r"data\[0\] is not an object mapping input names to values"),
    ({"data": [entry({"b64": 5}, [1])]}, r"data\[0\] input 'x': 'b64' must be a base64 string"),
])
def test_entries_of_the_wrong_kind_are_refused_naming_them(tmp_path: Path, obj: Any, message: str) -> None:
    """Read as they came, a number as an entry or as a b64 text ended in a TypeError."""
    with pytest.raises(ConfigError, match=message):
        read_input_data([write(tmp_path, obj)], INPUTS, OUTPUTS)
