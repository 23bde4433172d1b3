"""`dlperf load --shared-memory system`'s layout: where each input goes in the input object and which region
each output goes to (no server: `ClientShm.open` is what registers them)."""

from __future__ import annotations

import numpy as np
import pytest

from dlperf.loadgen.client import Endpoint
from dlperf.loadgen.shm import ClientShm
from dlperf.serve.protocol import Tensor

pytestmark = pytest.mark.unit


def test_each_input_gets_its_own_64_byte_aligned_span_and_the_offset_says_where() -> None:
    """Inputs whose sizes are not multiples of 64 are padded to the next boundary: the offset each description
    carries must be where its data really starts (after the padding), or the server reads the padding and the
    previous input's tail. The models the integration tests load have sizes that need no padding."""
    shm = ClientShm(Endpoint("127.0.0.1", 1), {})
    a = np.arange(3, dtype=np.float32)  # 12 bytes
    b = np.arange(5, dtype=np.int64)  # 40 bytes
    c = np.arange(16, dtype=np.float32)  # 64 bytes
    described = shm.describe_inputs([Tensor("a", "FP32", a), Tensor("b", "INT64", b), Tensor("c", "FP32", c)])
    spans = [(t.parameters["shared_memory_offset"], t.parameters["shared_memory_byte_size"]) for t in described]
    assert spans == [(0, 12), (64, 40), (128, 64)]
    assert {t.parameters["shared_memory_region"] for t in described} == {shm.input_region}
    data = b"".join(shm._chunks)
    arrays: tuple[np.ndarray, ...] = (a, b, c)
    for array, (offset, size) in zip(arrays, spans, strict=True):
        assert data[offset:offset + size] == array.tobytes()
    # a second request's inputs go after the first's
    (again,) = shm.describe_inputs([Tensor("a", "FP32", a)])
    assert again.parameters["shared_memory_offset"] == 192


def test_each_output_has_its_own_region() -> None:
    """Two outputs sent to one region would overwrite each other (every request writes its outputs there);
    the same output named again keeps its region."""
    shm = ClientShm(Endpoint("127.0.0.1", 1), {}, output_size=4096)
    first, second = shm.output_parameters("logits"), shm.output_parameters("probs")
    assert first["shared_memory_region"] != second["shared_memory_region"]
    assert shm.output_parameters("logits") == first
    assert first["shared_memory_byte_size"] == second["shared_memory_byte_size"] == 4096
