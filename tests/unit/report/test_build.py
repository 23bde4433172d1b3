"""Gathering a report from the store: which runs, and what --history is told when it finds none."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.report.build import build_report
from dlperf.store.db import Store

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
