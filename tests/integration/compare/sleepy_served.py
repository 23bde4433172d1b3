"""A served model that sleeps a given time per batch, for the live-comparison tests."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from dlperf.serve.instances import ServedModel, Signature, TensorSpec

SIG = Signature((TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1, 4)),))


def sleepy(sleep_s: float) -> ServedModel:
    """y = 2x after sleeping `sleep_s` each batch."""
    def factory(index: int) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            time.sleep(sleep_s)
            return [arrays[0] * 2]

        return run

    return ServedModel("sleepy", SIG, factory)


@contextlib.contextmanager
def two_variants_under_traffic(fast_s: float, slow_s: float) -> Iterator[tuple[str, list[int]]]:
    """A real server of two sleepy variants, 'fast' and 'slow' (50:50, batching off), with a thread sending
    requests until the block ends: (its base URL, the status of every reply so far)."""
    import httpx

    from dlperf.serve.server import start_in_thread
    from dlperf.serve.service import ServeConfig, build_state

    config = ServeConfig(variants=(("fast", "A"), ("slow", "B")), split=(50, 50), port=0, max_batch_size=0)
    state = build_state(config, {"A": sleepy(fast_s), "B": sleepy(slow_s)})
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
    stop, statuses = threading.Event(), []
    with start_in_thread(config, state) as running:
        base = f"http://{running.url}"

        def traffic() -> None:
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    statuses.append(client.post(f"{base}/v2/models/sleepy/infer", json=body).status_code)

        sender = threading.Thread(target=traffic)
        sender.start()
        try:
            yield base, statuses
        finally:
            stop.set()
            sender.join()
