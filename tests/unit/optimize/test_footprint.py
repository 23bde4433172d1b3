"""What the fresh process that measures a deployed artifact's memory is given (`optimize.footprint`), checked here
without starting it: the saved inputs and whether the artifact runs on a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.optimize.footprint import _arrays, _on_gpu, save_inputs

pytestmark = pytest.mark.unit


def test_the_example_inputs_are_saved_in_order_only_when_all_are_tensors(tmp_path: Path) -> None:
    """A workload whose inputs hold something other than tensors (a flag, a dict) gets no deployed figure, with a
    reason, instead of a candidate failed in its 'memory' phase."""
    path = tmp_path / "inputs.npz"
    first, second = torch.arange(6.0).reshape(2, 3), torch.tensor([[1, 2]])
    assert save_inputs((first, second), path)
    saved = _arrays(str(path))
    assert [a.dtype for a in saved] == [np.float32, np.int64]
    assert np.array_equal(saved[0], first.numpy()) and np.array_equal(saved[1], second.numpy())
    other = tmp_path / "other.npz"
    assert not save_inputs((first, 3), other) and not save_inputs({"x": first}, other)
    assert not other.exists()


@pytest.mark.parametrize(("manifest", "on_gpu"), [
    ({"device": "cuda:1"}, True), ({"provider": "cuda"}, True), ({"provider": "tensorrt"}, True),
    ({"device": "cpu", "provider": "cuda"}, False), ({"provider": "cpu"}, False), ({}, False),
])
def test_an_artifact_is_read_for_gpu_memory_where_its_device_or_provider_is_a_gpu(manifest: dict[str, str],
                                                                                  on_gpu: bool) -> None:
    assert _on_gpu(manifest) is on_gpu


class _Made(Exception):
    """Raised by the stand-in for ONNX Runtime's session once it has been asked for one."""


def test_the_deployed_process_makes_the_onnxruntime_session_dlperf_load_makes(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Its session was given the provider, optimization level and threads only (the pass's session took no more
    when the fresh process was written): an artifact for cuda:1 ran on GPU 0, and a TensorRT provider's got neither
    its optimization profile nor the engine cache, so the fresh process built its engine again and the build's
    memory counted as the deployment's."""
    pytest.importorskip("onnxruntime")
    from dlperf.optimize.footprint import _onnxruntime_run
    from dlperf.passes import onnxruntime
    from dlperf.passes._engine import IOSpec

    asked: list[tuple[object, ...]] = []

    def session(*args: object) -> None:
        asked.append(args)
        raise _Made

    monkeypatch.setattr(onnxruntime, "_session", session)
    manifest = {"engine": "onnxruntime", "provider": "tensorrt", "opt_level": "basic", "threads": 3,
                "device": "cuda:1", "batch_size": 8, "output_structure": "tensor",
                "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 64]}],
                "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 10]}]}
    assert save_inputs((torch.zeros(8, 64),), tmp_path / "inputs.npz")
    with pytest.raises(_Made):
        _onnxruntime_run(tmp_path, manifest, str(tmp_path / "inputs.npz"), 1)
    with pytest.raises(_Made):
        onnxruntime.load_artifact(tmp_path, manifest)
    assert asked[0] == asked[1] == (tmp_path / "model.onnx", "tensorrt", "basic", 3, "cuda:1",
                                    IOSpec.from_manifest(manifest).inputs, 8)
