"""A served model that sleeps a given time per batch, for the live-comparison tests."""

from __future__ import annotations

import time
from collections.abc import Callable

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
