"""`runs history` marks the runs measured with other settings or on another machine than the run before them: a
bf16 run after fp32 ones read as a 40% speed-up of the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.measure.stats import Measurement
from dlperf.store import Store

pytestmark = pytest.mark.integration

ENV = {"torch_version": "2.13.0+cpu", "cpu_model": "Test CPU", "logical_cores": 2, "torch_threads": 2}


def _bench(store: Store, median_s: float, precision: str, threads: int | None, torch_threads: int = 2) -> str:
    m = Measurement([int(median_s * 1e9 * (1 + k / 1000)) for k in range(50)])
    run = store.create_run("bench", "zoo:mlp", {"precision": precision, "threads": threads, "workload_key": "zoo:mlp"},
                           {**ENV, "torch_threads": torch_threads})
    store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": m.summary()}]})
    return run.id


def test_runs_history_names_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "runs.db")
    _bench(store, 1e-3, "fp32", None)
    pinned = _bench(store, 1e-3, "fp32", 2)  # threads 2 given = torch's 2: no change
    bf16 = _bench(store, 0.6e-3, "bf16", 2)
    assert main(["runs", "history", "zoo:mlp", "--store", str(tmp_path / "runs.db")]) == 0
    out = capsys.readouterr().out
    assert f"{bf16}: precision fp32 -> bf16" in " ".join(out.split())
    rows = {line.split()[1]: line for line in out.splitlines() if line.strip()[:1] in "▁▂▃▄▅▆▇█"}
    assert "changed" in rows[bf16] and "changed" not in rows[pinned]


def test_a_thread_change_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--threads 1` after a run on torch's 2 said 'threads 2 -> 1' and then 'torch_threads: 2 vs 1'."""
    store = Store(tmp_path / "runs.db")
    _bench(store, 1e-3, "fp32", None)
    one = _bench(store, 1.5e-3, "fp32", 1, torch_threads=1)
    assert main(["runs", "history", "zoo:mlp", "--store", str(tmp_path / "runs.db")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{one}: threads 2 -> 1" in out
    assert "torch_threads" not in out
