"""Every datatype the issue names (FP32, FP16, INT64, INT32, BOOL, BYTES) through a real server and tritonclient,
binary and JSON, in concurrent requests that the server joins into batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")

MAX_BATCH = 8
INPUTS = (("f32", "FP32", 3), ("f16", "FP16", 2), ("i64", "INT64", 2), ("i32", "INT32", 1), ("b", "BOOL", 2),
          ("s", "BYTES", 1))
SIG = Signature(
    tuple(TensorSpec(n, t, (-1, d)) for n, t, d in INPUTS),
    tuple(TensorSpec(f"{n}_out", t, (-1, d)) for n, t, d in INPUTS),
)


def expected(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """What the model computes, one rule per datatype, so a wrong routing or a wrong cast shows."""
    f32, f16, i64, i32, b, s = arrays
    upper = np.vectorize(lambda v: bytes(v).upper(), otypes=[object])
    return [f32 * 2, (f16 * 3).astype(np.float16), i64 + 7, i32 * -2, ~b, upper(s)]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Running, list[int]]]:
    batches: list[int] = []

    def make_runner(index: int) -> Any:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            batches.append(int(arrays[0].shape[0]))
            return expected(arrays)

        return run

    config = ServeConfig(model="types", port=0, max_batch_size=MAX_BATCH, max_queue_delay_s=0.05,
                         adaptive_wait=False)
    state = build_state(config, {"types": ServedModel("types", SIG, make_runner)})
    batches.clear()  # forget the warm-up batches
    running = start_in_thread(config, state)
    yield running, batches
    running.stop()


def _arrays(rng: np.random.Generator, rows: int) -> list[np.ndarray]:
    words = np.array([f"item-{rng.integers(1_000_000)}-ü".encode() for _ in range(rows)], dtype=object)
    return [
        rng.standard_normal((rows, 3)).astype(np.float32),
        rng.standard_normal((rows, 2)).astype(np.float16),
        rng.integers(-(2**40), 2**40, (rows, 2), dtype=np.int64),
        rng.integers(-1000, 1000, (rows, 1), dtype=np.int32),
        rng.random((rows, 2)) > 0.5,
        words.reshape(rows, 1),
    ]


def _inputs(arrays: list[np.ndarray], binary: bool) -> list[Any]:
    out = []
    for (name, datatype, _), array in zip(INPUTS, arrays, strict=True):
        inp = httpclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array, binary_data=binary)
        out.append(inp)
    return out


def _check(result: Any, arrays: list[np.ndarray]) -> None:
    for (name, datatype, _), want in zip(INPUTS, expected(arrays), strict=True):
        got = result.as_numpy(f"{name}_out")
        assert got.shape == want.shape, name
        if datatype == "BYTES":  # tritonclient gives JSON BYTES back as str, binary ones as bytes
            assert [v.encode() if isinstance(v, str) else bytes(v) for v in got.ravel()] == list(want.ravel())
        else:
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("binary_in", "binary_out"), [(True, True), (False, False), (True, False), (False, True)])
def test_each_datatype_round_trips(server: tuple[Running, list[int]], binary_in: bool, binary_out: bool) -> None:
    running, _ = server
    c = httpclient.InferenceServerClient(running.url)
    arrays = _arrays(np.random.default_rng(int(binary_in) * 2 + int(binary_out)), 2)
    outputs = [httpclient.InferRequestedOutput(f"{n}_out", binary_data=binary_out) for n, _, _ in INPUTS]
    _check(c.infer("types", _inputs(arrays, binary_in), outputs=outputs), arrays)


def test_concurrent_requests_of_every_datatype_share_batches(server: tuple[Running, list[int]]) -> None:
    running, batches = server
    first = len(batches)
    n = 12
    c = httpclient.InferenceServerClient(running.url, concurrency=n)
    rng = np.random.default_rng(7)
    sent = [_arrays(rng, 1 + i % 2) for i in range(n)]
    pending = [c.async_infer("types", _inputs(a, binary=i % 2 == 0)) for i, a in enumerate(sent)]
    for p, arrays in zip(pending, sent, strict=True):
        _check(p.get_result(), arrays)
    ran = batches[first:]
    assert sum(ran) == sum(a[0].shape[0] for a in sent)
    assert len(ran) < n and max(ran) <= MAX_BATCH
    c.close()
