"""An engine artifact exported with more threads than the loading machine has CPUs runs with those CPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.measure.env import usable_cores
from dlperf.optimize.artifact import write_manifest
from dlperf.passes.base import PassConfig, PassContext, apply_pass, initial_state
from dlperf.passes.onnxruntime import OrtConfig
from dlperf.passes.openvino import OpenVinoConfig
from dlperf.workload.zoo import get

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]


def _session_threads(predict: object) -> int:
    """The intra-op threads of the ONNX Runtime session inside a loaded artifact's callable."""
    cells = [c.cell_contents for c in getattr(predict, "__closure__", None) or ()]
    sess = next(c for c in cells if hasattr(c, "get_session_options"))
    return int(sess.get_session_options().intra_op_num_threads)


@pytest.mark.parametrize("config", [OrtConfig(), OpenVinoConfig()], ids=lambda c: c.name)
def test_threads_from_a_larger_machine_are_capped_at_this_one_s_cpus(config: PassConfig, tmp_path: Path) -> None:
    """An artifact exported with --threads 16 on a build machine and loaded on a 2-CPU one ran 16 engine threads
    there: zoo:digits-cnn through ONNX Runtime at batch 32 took 1.19 ms a call instead of 0.11 ms."""
    wl = get("mlp")
    state = apply_pass(config, initial_state(wl), PassContext(threads=1))
    folder = tmp_path / "art"
    manifest = state.exporter(folder)  # type: ignore[misc]
    write_manifest(folder, {**manifest, "threads": usable_cores() + 14})
    loaded = dlperf.load(folder)
    assert loaded.threads == usable_cores()
    if config.name == "onnxruntime":
        assert _session_threads(loaded) == usable_cores()
    (x,) = wl.example_inputs(3)
    torch.testing.assert_close(loaded(x), state.predict(x))
    # threads asked for are kept; so are an artifact's own where this machine has them
    assert dlperf.load(folder, threads=usable_cores() + 1).threads == usable_cores() + 1
    write_manifest(folder, {**json.loads((folder / "manifest.json").read_text()), "threads": 1})
    assert dlperf.load(folder).threads == 1


def test_threads_past_the_cpus_are_kept_where_torch_is_set_to_as_many(tmp_path: Path) -> None:
    """The search's A/Bs of a --threads oversubscription experiment (torch set to that many in the process) load
    the candidate as it was measured."""
    wl = get("mlp")
    state = apply_pass(OrtConfig(), initial_state(wl), PassContext(threads=1))
    folder = tmp_path / "art"
    many = usable_cores() + 2
    write_manifest(folder, {**state.exporter(folder), "threads": many})  # type: ignore[misc]
    before = torch.get_num_threads()
    torch.set_num_threads(many)
    try:
        assert dlperf.load(folder).threads == many
    finally:
        torch.set_num_threads(before)
    assert dlperf.load(folder).threads == usable_cores()
