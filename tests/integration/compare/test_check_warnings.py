"""A check that passes with warnings (here: a baseline measured on another machine) surfaces them from Python
and under pytest, instead of returning a bare PASS."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

import dlperf
from dlperf.cli.main import main
from dlperf.store import Store
from dlperf.store.db import runs_table
from dlperf.testing import PerformanceCheckWarning, assert_no_regression

pytestmark = pytest.mark.integration

WORKLOAD = str(Path(__file__).with_name("sleepy_workload.py")) + ":workload"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose baseline 'main' says it was measured on another CPU."""
    path = tmp_path_factory.mktemp("check_warnings") / "runs.db"
    dlperf.bench(WORKLOAD, batch_sizes=(1,), min_duration_s=0.3, min_iters=20, store=str(path))
    store = Store(path)
    run = store.list(kind="bench")[0]
    environment = {**run.environment, "cpu_model": "Another CPU 9000"}
    with store.engine.begin() as conn:
        conn.execute(sa.update(runs_table).where(runs_table.c.id == run.id)
                     .values(environment_json=json.dumps(environment)))
    assert main(["baseline", "set", "main", run.id, "--store", str(path)]) == 0
    return path


def test_a_passing_check_issues_its_warnings(store_path: Path) -> None:
    with pytest.warns(PerformanceCheckWarning) as caught:
        result = assert_no_regression(WORKLOAD, "main", store=str(store_path), min_duration_s=0.3,
                                      max_regression="300%")
    assert not result.failed
    messages = [str(w.message) for w in caught if w.category is PerformanceCheckWarning]
    assert any("passed, but: environment differs from the baseline's: cpu_model: Another CPU 9000 vs" in m
               for m in messages), messages
    assert caught[0].filename == __file__  # the test's line, not dlperf's


def test_the_fixture_puts_them_in_pytests_warnings_summary(store_path: Path, tmp_path: Path) -> None:
    test_file = tmp_path / "test_speed.py"
    test_file.write_text(
        "def test_speed(dlperf_check):\n"
        f"    dlperf_check({WORKLOAD!r}, baseline='main', min_duration_s=0.3, max_regression='300%')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dlperf-store", str(store_path),
         str(test_file)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"1 passed, \d+ warnings? in", proc.stdout), proc.stdout  # a busy machine's too
    assert "test_speed.py:2: PerformanceCheckWarning" in proc.stdout, proc.stdout
    assert "cpu_model: Another CPU 9000 vs" in proc.stdout


def test_an_inconclusive_pass_is_a_performance_check_warning(tmp_path: Path) -> None:
    """A baseline whose calls alternated between 5 and 20 ms: its median's interval is wide, so an unchanged 10 ms
    workload passes with an interval reaching far above 5%. `dlperf check` printed "inconclusive"; pytest heard
    nothing of it."""
    path = tmp_path / "runs.db"
    dlperf.bench(WORKLOAD, batch_sizes=(1,), min_duration_s=0.3, min_iters=30, store=str(path))
    store = Store(path)
    run = store.list(kind="bench")[0]
    result = run.result
    point = result["points"][0]
    n = len(point["measurement"]["samples_ns"])
    point["measurement"]["samples_ns"] = [5_000_000 if i % 2 else 20_000_000 for i in range(n)]
    with store.engine.begin() as conn:
        conn.execute(sa.update(runs_table).where(runs_table.c.id == run.id).values(result_json=json.dumps(result)))
    assert main(["baseline", "set", "main", run.id, "--store", str(path)]) == 0
    with pytest.warns(PerformanceCheckWarning) as caught:
        verdict = assert_no_regression(WORKLOAD, "main", store=str(path), min_duration_s=0.3)
    assert not verdict.failed and verdict.points[0].inconclusive
    messages = [str(w.message) for w in caught if w.category is PerformanceCheckWarning]
    assert any("passed, but: batch 1: p50 " in m and "inconclusive, pass" in m for m in messages), messages
