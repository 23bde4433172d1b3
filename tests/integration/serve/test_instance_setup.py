"""A recipe capturing CUDA graphs (the cuda_graphs pass) has its instances build and warm up their runners one at a
time: its capture, in CUDA's global mode, fails while another instance thread allocates or launches. Others start
at once. The runners here only record overlap, so the rule is checked without a GPU; which artifacts set it is
checked from their manifests."""

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


def _most_at_once(serial: bool) -> int:
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
    state = build_state(config, {"m": ServedModel("m", SIG, make_runner, serial_setup=serial)})
    state.close()
    return most[0]


def test_serial_instances_set_up_one_at_a_time_and_others_at_once() -> None:
    assert _most_at_once(True) == 1
    assert _most_at_once(False) > 1


def test_only_a_cuda_recipe_with_cuda_graphs_sets_up_serially(tmp_path: Any, monkeypatch: Any) -> None:
    """The lock held every CUDA model's setup, a torch.compile recipe's 4 instances taking 4x the start-up."""
    import json

    from dlperf.serve import instances

    monkeypatch.setattr(instances, "_check_device", lambda device: None)  # no GPU here: the manifest is what counts
    manifest = {"format_version": 1, "engine": "torch", "format": "dlperf-torch-recipe-v1", "files": ["weights.pt"],
                "workload": "zoo:mlp", "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 64]}],
                "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 10]}]}
    for recipe, device, serial in (([{"pass": "cuda_graphs"}], "cuda", True), ([{"pass": "compile"}], "cuda", False),
                                   ([{"pass": "cuda_graphs"}], "cpu", False)):
        (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "recipe": recipe, "device": device}))
        (tmp_path / "weights.pt").write_bytes(b"")
        model = instances.load_served_model(str(tmp_path), device=device)
        assert model.serial_setup is serial, (recipe, device)


def test_each_cuda_runner_enters_a_stream_of_its_own(monkeypatch: Any) -> None:
    """Instances shared torch's legacy default stream, so one's copies and kernels queued behind another's. Each
    runner now makes its stream (after the weights' upload on the default one) and runs inside it; checked with
    torch.cuda's stream calls recorded, no GPU here. A CPU runner is left as it is."""
    import contextlib

    import torch

    from dlperf.serve.instances import on_own_stream

    made: list[object] = []
    entered: list[object] = []

    class FakeStream:
        def __init__(self, device: Any = None) -> None:
            self.device = device
            self.waited: list[object] = []
            made.append(self)

        def wait_stream(self, other: object) -> None:
            self.waited.append(other)

    @contextlib.contextmanager
    def use(stream: object) -> Any:
        entered.append(stream)
        yield

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "default")
    monkeypatch.setattr(torch.cuda, "stream", use)

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return arrays

    first, second = on_own_stream(run, "cuda:0"), on_own_stream(run, "cuda:0")
    first([np.zeros(1)])
    second([np.zeros(1)])
    first([np.zeros(1)])
    assert len(made) == 2 and entered == [made[0], made[1], made[0]]
    assert all(s.waited == ["default"] and s.device == "cuda:0" for s in made)  # type: ignore[attr-defined]
    assert on_own_stream(run, "cpu") is run
