"""On CUDA a server's instances build and warm up their runners one at a time: a CUDA graph captured (the
cuda_graphs pass, torch.compile's reduce-overhead) in one instance thread while another allocates or launches
fails in CUDA's global capture mode. On the CPU they still do it at once. The runners here only record overlap,
so the rule is checked without a GPU (the model's device is a label to the pool)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from dlperf.serve.instances import ServedModel
from dlperf.serve.service import ServeConfig, build_state

from .helpers import SIG

pytestmark = pytest.mark.integration


def _most_at_once(device: str) -> int:
    inside, most, lock = [0], [0], threading.Lock()

    def enter() -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    def make_runner(index: int) -> Any:
        enter()  # building it (a capture, in a cuda_graphs recipe)

        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            if threading.current_thread().name.startswith("dlperf-instance-") and not getattr(run, "warm", False):
                enter()  # its warm-up (compile's reduce-overhead captures on its first calls)
            return [arrays[0] * 2]

        return run

    config = ServeConfig(model="m", port=0, max_batch_size=2, instances=3)
    state = build_state(config, {"m": ServedModel("m", SIG, make_runner, device=device)})
    state.close()
    return most[0]


def test_cuda_instances_set_up_one_at_a_time_and_cpu_ones_at_once() -> None:
    assert _most_at_once("cuda") == 1
    assert _most_at_once("cpu") > 1
