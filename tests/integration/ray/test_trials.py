"""Optimization trials on a two-node local Ray cluster: distributed, fault tolerant, same winner as local."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dlperf.optimize.executor import LocalExecutor
from dlperf.optimize.search import OptimizeConfig, OptimizeResult, optimize
from dlperf.optimize.space import Candidate
from dlperf.store.db import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# objective "size" makes the winner deterministic: dynamic int8 is the only pass that shrinks zoo:mlp
FAST: dict[str, Any] = {"warmup_iters": 2, "min_duration_s": 0.1, "min_iters": 5, "max_duration_s": 2.0,
                        "ab_blocks": 4, "ab_iters_per_block": 3}


def _config(workdir: Path) -> OptimizeConfig:
    return OptimizeConfig(objective="size", passes=("hygiene", "dynamic_int8"), max_depth=1, time_budget_s=400,
                          candidate_timeout_s=120, workdir=str(workdir), **FAST)


def test_trials_spread_over_both_nodes_and_pick_the_local_winner(ray_cluster: Any, tmp_path: Path) -> None:
    from dlperf.ray.trials import RayExecutor

    local = optimize("zoo:mlp", _config(tmp_path / "local"), executor=LocalExecutor())
    executor = RayExecutor()
    remote = optimize("zoo:mlp", _config(tmp_path / "ray"), store=Store(tmp_path / "runs.db"), executor=executor)

    assert local.winner_row is not None and remote.winner_row is not None
    assert remote.winner_row["label"] == local.winner_row["label"] == "dynamic_int8"
    assert remote.winner_row["size_bytes"] == local.winner_row["size_bytes"]
    assert remote.winner_row["confirmation"]["status"] == "ok"
    assert [r["label"] for r in remote.rows] == [r["label"] for r in local.rows]
    assert all(r["status"] == "ok" and r["executor"] == "ray" and r["attempts"] == 1 for r in remote.rows)
    nodes = {r["node"]["node_id"] for r in remote.rows}
    assert nodes == set(executor.nodes) and len(nodes) == 2
    # every result carries the environment of the node that measured it, all on one hardware class
    assert {r["node"]["hardware_key"] for r in remote.rows} == {executor.hardware_key}
    assert all(r["environment"]["logical_cores"] == os.cpu_count() for r in remote.rows)
    assert executor.excluded == {} and remote.notes == local.notes
    executor.close()
    assert not list((tmp_path / "ray").rglob(".dlperf-ray-*"))  # the shared-folder marker is removed


def test_a_killed_worker_costs_only_its_trial_which_is_retried(ray_cluster: Any, tmp_path: Path) -> None:
    from dlperf.ray.trials import RayExecutor

    store = Store(tmp_path / "runs.db")
    baseline_key = Candidate().key
    killed: list[dict[str, Any]] = []
    done = threading.Event()

    def kill_first_candidate_trial() -> None:
        while not done.is_set():
            for info in sorted((tmp_path / "work").glob("*/*/ray-trial-1.json")):
                if info.parent.name != baseline_key:
                    trial = json.loads(info.read_text())
                    time.sleep(0.5)  # let it get into its work
                    os.kill(trial["worker_pid"], signal.SIGKILL)
                    killed.append({**trial, "key": info.parent.name})
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_first_candidate_trial, daemon=True)
    killer.start()
    result: OptimizeResult | None = None
    with RayExecutor(max_retries=2) as executor:
        try:
            result = optimize("zoo:mlp", _config(tmp_path / "work"), store=store, executor=executor)
        finally:
            done.set()
            killer.join(10)
    assert result is not None and len(killed) == 1
    row = result.row(killed[0]["key"])
    assert row["status"] == "ok" and row["attempts"] == 2
    assert "WorkerCrashedError" in row["retried_after"][0]
    # retried on the other node when it was free
    assert row["node"]["worker_pid"] != killed[0]["worker_pid"]
    # the search completed and every candidate, measured before or after the kill, is in the store
    assert result.winner_row is not None and result.winner_row["label"] == "dynamic_int8"
    children = store.list(kind="candidate", parent_id=result.run_id, limit=None)
    assert {c.result["label"] for c in children} == {"baseline", "hygiene", "dynamic_int8"}
    assert {c.status for c in children} == {"ok"}
