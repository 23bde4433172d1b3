"""A Ray worker runs one trial after another, forking each trial's child from one process server (torch imported
once): the server is kept while the caller's OMP_NUM_THREADS stays the same, and started again when it changes,
since a child inherits the server's environment, not the worker's."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from dlperf.optimize.evaluate import mp_context, stop_process_server

pytestmark = pytest.mark.unit


def _report(conn: Any) -> None:
    import torch

    conn.send((os.environ.get("OMP_NUM_THREADS"), os.getppid(), torch.get_num_threads(),
               os.environ.get("CUDA_VISIBLE_DEVICES")))
    conn.close()


def _child_sees() -> tuple[str | None, int, int, str | None]:
    ctx = mp_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_report, args=(writer,))
    proc.start()
    writer.close()
    try:
        seen: tuple[str | None, int, int, str | None] = reader.recv()
    finally:
        proc.join(30)
    return seen


def test_one_server_per_thread_count_and_the_child_gets_the_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver here: each child is spawned with this process's environment")
    from dlperf.ray import trials

    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # Ray's cap, say, in the worker; restored after the test
    monkeypatch.setattr(trials, "_server_omp", [])
    seen = []
    try:
        for omp in ("1", "1", "2", None):
            with trials.child_environment(omp):
                seen.append(_child_sees())
    finally:  # later tests in this process start a server from their own environment
        stop_process_server()
    assert [s[0] for s in seen] == ["1", "1", "2", None]
    assert [s[2] for s in seen[:3]] == [1, 1, 2]  # what torch, imported in the server, runs with
    servers = [s[1] for s in seen]
    assert servers[0] == servers[1] and len(set(servers)) == 3, servers  # kept for the same value, not for another


def test_a_trial_given_another_gpu_gets_a_server_that_sees_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray sets CUDA_VISIBLE_DEVICES per task to the GPU it gives the trial; the server of an earlier trial kept the
    earlier one, and its child ran on that GPU beside another trial."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver here: each child is spawned with this process's environment")
    from dlperf.ray import trials

    monkeypatch.setattr(trials, "_server_omp", [])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # child_environment sets it; restored after the test
    seen = []
    try:
        # a server this worker started before its first trial (other code in it) is not the trial's either
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
        stop_process_server()
        earlier = _child_sees()
        for gpu in ("0", "0", "1"):
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpu)  # as Ray sets it for each task
            with trials.child_environment("1"):
                seen.append(_child_sees())
    finally:
        stop_process_server()
    assert earlier[3] == "7" and [s[3] for s in seen] == ["0", "0", "1"]
    assert earlier[1] != seen[0][1] == seen[1][1] != seen[2][1]  # kept for the same GPU, started again for another


def _report_cwd(conn: Any) -> None:
    conn.send((os.getcwd(), os.getppid()))
    conn.close()


def _child_cwd() -> tuple[str, int]:
    ctx = mp_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_report_cwd, args=(writer,))
    proc.start()
    writer.close()
    try:
        seen: tuple[str, int] = reader.recv()
    finally:
        proc.join(30)
    return seen


def test_the_child_runs_in_the_callers_folder_where_the_node_has_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray worker runs in its raylet's folder (where `ray start` ran), not the folder `dlperf optimize` ran in: a
    workload that opens 'settings.json' there loaded in the driver and failed every trial with FileNotFoundError."""
    from dlperf.ray import trials

    raylet, driver = tmp_path / "raylet", tmp_path / "project"
    raylet.mkdir()
    driver.mkdir()
    monkeypatch.chdir(raylet)  # the worker's folder; restored after the test
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # child_environment sets it; restored after the test
    monkeypatch.setattr(trials, "_server_omp", [])
    seen = []
    try:
        stop_process_server()
        for cwd in (None, str(driver), str(driver), str(tmp_path / "not-on-this-node")):
            with trials.child_environment("1", cwd):
                seen.append(_child_cwd())
    finally:
        stop_process_server()
    assert [s[0] for s in seen] == [str(raylet), str(driver), str(driver), str(driver)]
    assert seen[0][1] != seen[1][1] == seen[2][1] == seen[3][1]  # a server started elsewhere is not the child's
