"""Gathering a report from the store: which runs, and what --history is told when it finds none."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.report.build import build_report, history_runs
from dlperf.store.db import Store
from tests.unit.store.spaced import space_runs

pytestmark = pytest.mark.unit


def test_history_of_an_unknown_workload_names_only_workloads_it_would_find(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    for kind, workload, status in (("bench", "broken.py", "failed"), ("bench", "zoo:mlp", "ok"),
                                   ("check", "zoo:cnn", "ok")):
        run = store.create_run(kind, workload)
        store.finish_run(run.id, {"points": []}, status=status)
    with pytest.raises(ConfigError) as info:
        build_report(store, [], history_workload="zoo:nope")
    # broken.py has no finished run, so --history broken.py fails too; zoo:cnn's check run is found
    assert str(info.value).endswith("workloads with finished ones: zoo:cnn, zoo:mlp")


def test_a_history_is_of_the_newest_finished_bench_and_check_runs_oldest_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space_runs(monkeypatch)
    store = Store(tmp_path / "runs.db")
    ids = {}
    for name, kind, status in (("old", "bench", "ok"), ("check", "check", "ok"), ("failed", "bench", "failed"),
                               ("new", "bench", "ok")):
        run = store.create_run(kind, "zoo:mlp", {"workload_key": "zoo:mlp"})
        store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": {"p50_s": 0.001}}]}, status=status)
        ids[name] = run.id
    assert [r.id for r in history_runs(store, "zoo:mlp")] == [ids["old"], ids["check"], ids["new"]]
    assert [r.id for r in history_runs(store, "zoo:mlp", limit=2)] == [ids["check"], ids["new"]]
