"""`dlperf check` end to end: a workload made 20% slower by a test-only knob fails against its baseline;
the unchanged one passes. Also the baseline commands, `dlperf compare`, and the pytest helpers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dlperf
from dlperf.cli.main import main
from dlperf.errors import ConfigError
from dlperf.store import Store
from dlperf.testing import PerformanceRegression, assert_no_regression

pytestmark = pytest.mark.integration

WORKLOAD = str(Path(__file__).with_name("sleepy_workload.py")) + ":workload"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("check") / "runs.db"
    dlperf.bench(WORKLOAD, batch_sizes=(1,), min_duration_s=0.4, min_iters=40, store=str(path))
    run_id = Store(path).list(kind="bench")[0].id
    assert main(["baseline", "set", "main", run_id, "--store", str(path)]) == 0
    return path


def test_unchanged_workload_passes(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", WORKLOAD, "--baseline", "main", "--max-regression", "5%", "--duration", "0.4",
               "--store", str(store_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASS" in out


def test_twenty_percent_slower_fails_and_says_why(store_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DLPERF_TEST_SLOWDOWN", "1.2")
    rc = main(["check", WORKLOAD, "--baseline", "main", "--max-regression", "5%", "--duration", "0.4",
               "--store", str(store_path), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1
    point = data["points"][0]
    assert point["failed"] and point["significant"] and point["exceeds"]
    # 1.2x slower is a regression of about 0.2; the baseline was timed earlier, so a busy machine moves it (0.56 under
    # a load of 8 on 2 cores): the upper bound only tells a regression from the ratio (1.2) it must not be
    assert 0.12 < point["regression"] < 1.0
    assert "REGRESSION" in data["reasons"][0]
    check_run = Store(store_path).get(data["run_id"])
    assert check_run.kind == "check" and check_run.result["gate"]["failed"]
    # the headline is the gated p50 (it was bench's throughput), in the output and the run alike
    assert data["headline"]["kpi"] == "p50_s" and data["headline"]["value"] == point["current_value"]
    assert check_run.result["headline"] == data["headline"]
    assert main(["runs", "list", "--kind", "check", "--json", "--store", str(store_path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert next(r for r in listed if r["id"] == data["run_id"])["headline"]["kpi"] == "p50_s"


@pytest.mark.filterwarnings("ignore::dlperf.testing.PerformanceCheckWarning")  # a busy machine's, on the pass
def test_assert_no_regression_raises_with_the_numbers(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not assert_no_regression(WORKLOAD, "main", store=str(store_path), min_duration_s=0.3).failed
    monkeypatch.setenv("DLPERF_TEST_SLOWDOWN", "1.25")
    with pytest.raises(PerformanceRegression, match=r"REGRESSION, significantly above the 5.0% threshold"):
        assert_no_regression(WORKLOAD, "main", store=str(store_path), min_duration_s=0.3)

    with pytest.raises(ConfigError, match=r"^--duration \(min_duration_s\) must be positive, got -1 s$"):
        assert_no_regression(WORKLOAD, "main", store=str(store_path), min_duration_s=-1)  # named for a Python caller


def test_baseline_list_and_compare_json(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", "list", "--json", "--store", str(store_path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["name"] == "main" and listed[0]["workload"].endswith("sleepy_workload.py:workload")
    # a check run of its own: run alone (-k), the file's earlier tests had made none (IndexError)
    main(["check", WORKLOAD, "--baseline", "main", "--duration", "0.4", "--store", str(store_path), "--json"])
    check_id = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["compare", listed[0]["run_id"], check_id, "--json", "--store", str(store_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["points"][0]["test"]["test"] == "mann-whitney-u"


def test_unknown_baseline_is_a_clear_error(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", WORKLOAD, "--baseline", "nope", "--store", str(store_path)]) == 2
    assert "no baseline named 'nope'" in capsys.readouterr().err


def test_check_gates_p50_at_5_percent_and_95_percent_confidence_by_default(store_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", WORKLOAD, "--baseline", "main", "--duration", "0.1", "--json", "--store", str(store_path)])
    data = json.loads(capsys.readouterr().out)
    assert (data["metric"], data["max_regression"], data["confidence"]) == ("p50", 0.05, 0.95)


def test_check_gates_and_records_with_the_options_given(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The metric, threshold, confidence and duration typed are the ones the gate used and the check run keeps."""
    rc = main(["check", WORKLOAD, "--baseline", "main", "--metric", "mean", "--max-regression", "50%",
               "--confidence", "80%", "--duration", "0.1", "--json", "--store", str(store_path)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0, data["reasons"]
    assert (data["metric"], data["max_regression"], data["confidence"]) == ("mean", 0.5, 0.8)
    record = Store(store_path).get(data["run_id"])
    gate = record.config["gate"]
    assert (gate["metric"], gate["max_regression"], gate["confidence"]) == ("mean", 0.5, 0.8)
    assert record.config["timer"]["min_duration_s"] == 0.1  # the baseline's was 0.4


def test_a_bare_max_regression_above_one_is_refused(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--max-regression 5`, meant as 5%, is 500%: a gate that lets a 4x slowdown pass."""
    assert main(["check", WORKLOAD, "--baseline", "main", "--max-regression", "5", "--store", str(store_path)]) == 2
    assert "--max-regression '5' would be 500%" in capsys.readouterr().err


def test_a_batch_size_the_baseline_lacks_is_refused_before_measuring(store_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    before = len(Store(store_path).list(kind="check", limit=None))
    assert main(["check", WORKLOAD, "--baseline", "main", "--batch-size", "1,4", "--store", str(store_path)]) == 2
    assert "batch size 4 not in baseline 'main'" in capsys.readouterr().err
    assert len(Store(store_path).list(kind="check", limit=None)) == before  # no failed check run recorded
    # from Python the argument is batch_sizes, which the message names beside the option (it named --batch-size alone)
    with pytest.raises(ConfigError, match=r"\(run \w+ measured 1\): --batch-size \(batch_sizes\) picks among those"):
        assert_no_regression(WORKLOAD, "main", store=str(store_path), batch_sizes=(1, 4))


@pytest.mark.slow
def test_pytest_fixture_from_the_plugin(store_path: Path, tmp_path: Path) -> None:
    # no `-p`: installing dlperf registers the plugin through its pytest11 entry point
    test_file = tmp_path / "test_speed.py"
    test_file.write_text(
        "def test_speed(dlperf_check):\n"
        f"    dlperf_check({WORKLOAD!r}, baseline='main', min_duration_s=0.3, max_regression='300%')\n"
    )  # the plugin's plumbing, not the speed: the baseline was measured earlier, and under other load (4 sessions'
    # setups) the same model gated at 5% failed here (PerformanceRegression); 300% still fails a check that breaks
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dlperf-store", str(store_path),
         str(test_file)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_a_check_failing_at_a_later_batch_size_keeps_the_ones_it_measured(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A check that failed (or was interrupted) at its second batch size recorded no result at all."""
    store = tmp_path / "runs.db"
    (tmp_path / "raises.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.shape[0] == 8:\n"
        "            raise RuntimeError('boom at batch 8')\n"
        "        return x * 2\n"
        "def model():\n    return M()\n"
        "def inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")
    workload = str(tmp_path / "raises.py")
    dlperf.bench("zoo:mlp", batch_sizes=(1, 8), min_duration_s=0.05, min_iters=5, store=str(store))
    assert main(["baseline", "set", "b", Store(store).list(kind="bench")[0].id, "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["check", workload, "--baseline", "b", "--duration", "0.05", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "boom at batch 8" in err
    (run,) = Store(store).list(kind="check")
    assert run.status == "failed"
    # the error alone did not say that batch 1 was kept
    assert f"run {run.id} is kept in the store as failed, with what it finished" in err
    assert [p["batch_size"] for p in run.result["points"]] == [1] and run.result["partial"] is True
    # its headline is the gated metric (p50 by default) against the baseline's, not bench's throughput
    headline = run.result["headline"]
    assert (headline["kpi"], headline["batch_size"], headline["unit"]) == ("p50_s", 1, "s")
    assert headline["baseline_value"] > 0 and "regression" in headline


def test_check_measures_under_the_baseline_s_allocator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A baseline taken under tcmalloc and checked under glibc failed the gate (+8%) on the allocator alone."""
    from dlperf.measure.allocator import active_allocator, find_library

    other = "tcmalloc" if active_allocator() != "tcmalloc" else "glibc"
    if other != "glibc" and find_library(other) is None:
        pytest.skip(f"no {other} library on this machine")
    store = str(tmp_path / "runs.db")
    command = [sys.executable, "-m", "dlperf.cli.main"]
    subprocess.run([*command, "bench", "zoo:mlp", "--allocator", other, "--batch-sizes", "1", "--min-duration",
                    "0.05", "--store", store], check=True, capture_output=True, timeout=300)
    run_id = Store(store).list(kind="bench")[0].id
    assert Store(store).get(run_id).environment["allocator"] == other
    assert main(["baseline", "set", "b", run_id, "--store", store]) == 0
    done = subprocess.run([*command, "check", "zoo:mlp", "--baseline", "b", "--duration", "0.05", "--json",
                           "--store", store], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    current = Store(store).get(json.loads(done.stdout)["current_run_id"])
    assert current.environment["allocator"] == other and "allocator" not in done.stderr
    capsys.readouterr()
    main(["check", "zoo:mlp", "--baseline", "b", "--duration", "0.05", "--store", store])  # in-process: no restart
    assert f"note: the baseline ran under {other}, this process runs {active_allocator()}" in capsys.readouterr().err


def test_one_workload_file_typed_from_two_folders_is_one_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A baseline of 'proj/wl.py' checked as 'wl.py' from proj warned that the workloads differ, and `runs history`
    split the one workload in two."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "wl.py").write_text("import torch\ndef model():\n    return torch.nn.Linear(4, 2)\n"
                                   "def inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")
    store = str(tmp_path / "runs.db")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "proj/wl.py", "--batch-sizes", "1", "--min-duration", "0.05", "--store", store]) == 0
    assert main(["baseline", "set", "p", Store(store).list()[0].id, "--store", store]) == 0
    monkeypatch.chdir(project)
    capsys.readouterr()
    assert main(["check", "wl.py", "--baseline", "p", "--duration", "0.05", "--store", store]) in (0, 1)
    assert "the baseline measured workload" not in capsys.readouterr().out
    assert main(["runs", "history", "wl.py", "--kind", "check", "--store", store]) == 0
    assert main(["runs", "history", "wl.py", "--store", store]) == 0  # the bench run typed as proj/wl.py
    capsys.readouterr()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "wl.py").write_text((project / "wl.py").read_text())
    monkeypatch.chdir(tmp_path / "other")  # another file of the same name: not this history
    assert main(["check", "wl.py", "--baseline", "p", "--duration", "0.05", "--store", store]) in (0, 1)
    assert "the baseline measured workload" in capsys.readouterr().out


def test_batch_sizes_left_out_on_purpose_are_no_caveat_of_a_pass(tmp_path: Path) -> None:
    """`batch_sizes=(1,)` against a baseline of 1 and 8 passed "but: batch sizes [8] of the baseline were not
    re-measured": a PerformanceCheckWarning for what the test asked, which fails it under filterwarnings = error."""
    import warnings

    store = tmp_path / "runs.db"
    # one thread, which the check re-measures at too: two OpenMP threads on a busy 2-core machine stall on each
    # other's preemption, 300-600x (+44580% against the 300% allowed, 2 of 4 runs beside other work)
    dlperf.bench("zoo:mlp", batch_sizes=(1, 8), min_duration_s=0.05, min_iters=20, threads=1, store=str(store))
    assert main(["baseline", "set", "b", Store(store).list(kind="bench")[0].id, "--store", str(store)]) == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = assert_no_regression("zoo:mlp", "b", store=str(store), max_regression="300%", min_duration_s=0.05,
                                      batch_sizes=(1,))
    assert [p.batch_size for p in result.points] == [1]
    assert not [str(w.message) for w in caught if "re-measured" in str(w.message)]
