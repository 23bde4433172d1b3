"""The Ray executor's options: its recorded name, and the GPUs a trial on --device cuda asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.ray.trials import executor_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("address", "name"), [
    ("10.0.0.5:6379", "ray:10.0.0.5:6379"),
    ("ray://head:10001", "ray://head:10001"),
    ("RAY://head:10001", "RAY://head:10001"),
])
def test_executor_name(address: str, name: str) -> None:
    assert executor_name(address) == name


def test_a_search_on_cuda_counts_gpu_slots_and_leaves_out_nodes_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray task that asks for no GPU sees none (CUDA_VISIBLE_DEVICES=''): trials on --device cuda ask for one, so
    a node holds as many at once as it has GPUs, and a node without a GPU is left out saying why."""
    from types import SimpleNamespace

    from dlperf.ray import trials
    from dlperf.ray.trials import TIMING_RESOURCE, RayExecutor

    nodes = [{"Alive": True, "NodeID": "gpu2" * 4, "NodeManagerHostname": "a",
              "Resources": {TIMING_RESOURCE: 4.0, "CPU": 8.0, "GPU": 2.0}},
             {"Alive": True, "NodeID": "cpu0" * 4, "NodeManagerHostname": "b",
              "Resources": {TIMING_RESOURCE: 1.0, "CPU": 8.0}}]
    monkeypatch.setattr(trials, "_ray", lambda: SimpleNamespace(nodes=lambda: nodes))
    executor = RayExecutor.__new__(RayExecutor)
    executor.trial_cpus, executor.trial_gpus, executor.excluded, executor._notes = 1.0, 1.0, {}, []
    assert executor._alive() == {"gpu2" * 4: 2}
    assert "it offers 0 GPUs and a trial on --device cuda needs 1" in executor.excluded["cpu0" * 4]
    executor.trial_gpus, executor.excluded = 0.0, {}
    assert executor._alive() == {"gpu2" * 4: 4, "cpu0" * 4: 1}


def test_a_named_gpu_is_refused_for_ray_trials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ray gives each trial one GPU, seen as cuda:0: --device cuda:1 failed every candidate on the nodes."""
    from dlperf.cli.main import main

    assert main(["optimize", "zoo:mlp", "--executor", "ray", "--device", "cuda:1",
                 "--store", str(tmp_path / "runs.db")]) == 2
    assert "--device cuda:1 does not go with --executor ray: Ray gives each trial a GPU of its own" in \
        " ".join(capsys.readouterr().err.split())


def test_the_gpu_ray_shows_each_trial_or_replica_is_taken_by_its_name() -> None:
    """What a trial or replica sees of its GPU is cuda:0, so 'cuda:0' is as good as 'cuda' for both optimize and
    serve (optimize refused it, serve took it: two checks that differed)."""
    from dlperf._device import check_ray_device
    from dlperf.errors import ConfigError

    for each in ("trial", "replica"):
        for device in ("cpu", "cuda", "cuda:0"):
            check_ray_device(device, "--ray", each)
        with pytest.raises(ConfigError, match=f"--device cuda:2 does not go with --ray: Ray gives each {each} a GPU"):
            check_ray_device("cuda:2", "--ray", each)
