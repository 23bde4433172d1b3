"""What a test suite sees when `dlperf_check` (the pytest plugin's fixture) finds a regression: which runs, how to
look at them, how to accept the change; and the missing-store message in the API's own words."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import dlperf
from dlperf.cli.main import main
from dlperf.errors import StoreError
from dlperf.store import Store
from dlperf.testing import assert_no_regression

pytestmark = pytest.mark.integration

WORKLOAD = str(Path(__file__).with_name("sleepy_workload.py")) + ":workload"

TEST_FILE = f'''
def test_speed(dlperf_check):
    dlperf_check({WORKLOAD!r}, baseline="main", min_duration_s=0.3)
'''


def test_a_failing_check_names_the_runs_and_the_next_steps(tmp_path: Path) -> None:
    store_path = tmp_path / "runs.db"
    dlperf.bench(WORKLOAD, batch_sizes=(1,), min_duration_s=0.3, min_iters=30, store=str(store_path))
    baseline_run = Store(store_path).list(kind="bench")[0].id
    assert main(["baseline", "set", "main", baseline_run, "--store", str(store_path)]) == 0
    (tmp_path / "test_perf.py").write_text(TEST_FILE)
    env = {**os.environ, "DLPERF_TEST_SLOWDOWN": "1.4", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("DLPERF_STORE", None)
    # the plugin comes from the pytest11 entry point; naming it with -p as well stops pytest ("Plugin already
    # registered under a different name"), so only where dlperf is not installed
    installed = any(ep.value == "dlperf.testing.plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "dlperf.testing.plugin"]
    done = subprocess.run([sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider",
                           "--dlperf-store", str(store_path), "test_perf.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    check_run = Store(store_path).list(kind="check")[0].id
    # it said only "performance regression:" and the verdict lines: no run ids, no way to accept the change; now in
    # `dlperf check`'s words (report.compare_text.check_lines)
    # each run with the commit it was taken at where the workload's file is in a checkout (this one's, here)
    at = r"( at [0-9a-f]{12}\+?)?"
    assert re.search(rf"PerformanceRegression: check of {re.escape(WORKLOAD)} against baseline 'main' "
                     rf"\(run {baseline_run}{at}\); this run: {check_run}{at}\n", out)
    assert "REGRESSION, significantly above the 5.0% threshold" in out
    assert "FAIL: p50 regressed significantly by more than 5.0%" in out
    shown = Store(store_path).shown_url
    assert f"details: `dlperf compare {baseline_run} {check_run} --store {shown}`" in out
    accept = re.search(r"make this run the baseline: `(dlperf baseline set main \S+ --store \S+)`", out)
    assert accept is not None, out
    assert accept.group(1) == f"dlperf baseline set main {check_run} --store {shown}"
    assert main(accept.group(1).split()[1:]) == 0  # the command given works
    assert Store(store_path).get_baseline("main").id == check_run
    assert "compare/check.py" not in out  # the failing test's line, not dlperf's frames


def test_a_missing_store_is_named_in_the_apis_words(tmp_path: Path) -> None:
    # it said "Give the store your runs are in with --store PATH", an option no test function has
    with pytest.raises(StoreError, match=r"with store=PATH \(the dlperf_check fixture: pytest --dlperf-store PATH\) "
                                         r"or \$DLPERF_STORE"):
        assert_no_regression(WORKLOAD, "main", store=str(tmp_path / "none.db"))
