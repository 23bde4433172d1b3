"""Named baselines: only finished runs with samples; listing shows the run's workload."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.compare.baselines import baseline_rows, set_baseline
from dlperf.errors import StoreError
from dlperf.store import Store

from .helpers import add_run, bench_result

pytestmark = pytest.mark.unit


def test_set_list_replace_remove(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    first = add_run(store, "bench", bench_result({1: 0.01}), workload="zoo:mlp")
    second = add_run(store, "bench", bench_result({1: 0.01}), workload="zoo:resnet18")
    assert set_baseline(store, "main", first[:6]).id == first
    set_baseline(store, "main", second)
    rows = baseline_rows(store)
    assert [(r[0], r[1], r[2]) for r in rows] == [("main", second, "zoo:resnet18")]
    store.remove_baseline("main")
    assert baseline_rows(store) == []
    with pytest.raises(StoreError, match="no baseline named 'main'"):
        store.remove_baseline("main")


def test_failed_runs_and_runs_without_samples_are_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    failed = add_run(store, "bench", bench_result({1: 0.01}), status="failed")
    with pytest.raises(StoreError, match="status 'failed'"):
        set_baseline(store, "x", failed)
    profile = add_run(store, "profile", {"verdict": "compute-bound"})
    with pytest.raises(StoreError, match="is a 'profile' run: this takes a bench or check run"):
        set_baseline(store, "x", profile)
    # a load run has samples, per level: the reason is its kind, not "no latency samples" (as it said)
    load = add_run(store, "load", {"levels": [{"mode": "rate", "level": 10, "latencies_ns": [1000000] * 50}]})
    with pytest.raises(StoreError, match="is a 'load' run: this takes a bench or check run"):
        set_baseline(store, "x", load)
    empty = add_run(store, "bench", {"points": []})
    with pytest.raises(StoreError, match="holds no latency samples"):
        set_baseline(store, "x", empty)


def test_replacing_a_baseline_names_the_run_it_pointed_at(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    first = add_run(store, "bench", bench_result({1: 0.01}))
    second = add_run(store, "bench", bench_result({1: 0.01}))
    assert main(["baseline", "set", "main", first, "--store", str(path)]) == 0
    assert "it was run" not in capsys.readouterr().out
    assert main(["baseline", "set", "main", second, "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"baseline 'main' -> run {second}" in out and f"it was run {first}" in out
    assert main(["baseline", "set", "main", second, "--store", str(path)]) == 0
    assert "it was run" not in capsys.readouterr().out  # set again to the same run: nothing replaced


def test_a_replaced_baseline_names_its_own_previous_run_not_another_baseline_s(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    first, second, third = (add_run(store, "bench", bench_result({1: 0.01})) for _ in range(3))
    assert main(["baseline", "set", "aaa", first, "--store", str(path)]) == 0
    assert main(["baseline", "set", "zzz", second, "--store", str(path)]) == 0
    capsys.readouterr()
    assert main(["baseline", "set", "zzz", third, "--store", str(path)]) == 0
    assert f"it was run {second}" in capsys.readouterr().out
    assert main(["baseline", "set", "new", third, "--store", str(path)]) == 0
    assert "it was run" not in capsys.readouterr().out  # a new name replaced nothing


def test_baseline_list_refuses_a_store_that_does_not_exist(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    missing = tmp_path / "typo" / "runs.db"
    assert main(["baseline", "list", "--store", str(missing)]) == 2
    assert "no run store at" in capsys.readouterr().err
    assert not missing.parent.exists()


def test_a_run_kind_takes_its_article() -> None:
    from dlperf.compare.records import a_kind

    assert (a_kind("ab"), a_kind("optimize"), a_kind("bench")) == ("an 'ab'", "an 'optimize'", "a 'bench'")


def test_a_point_without_samples_does_not_hide_the_points_after_it(tmp_path: Path) -> None:
    """A run whose first point has no usable measurement (a batch size that failed) still gives the batch sizes
    measured after it, which a baseline of it compares."""
    from dlperf.compare.records import point_measurements

    store = Store(tmp_path / "runs.db")
    result = bench_result({1: 0.01, 8: 0.02})
    result["points"].insert(0, {"batch_size": 4, "error": "out of memory"})
    record = store.get(add_run(store, "bench", result))
    assert sorted(point_measurements(record)) == [1, 8]


def test_setting_a_baseline_too_short_to_judge_warns_which_batch_sizes(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A bench of 4 calls at batch 1 became a baseline in silence, and every check against it then passed that batch
    size as "too few to judge", a +32.7% slowdown included."""
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    short = add_run(store, "bench", {**bench_result({1: 0.03}, n=4), "points": [
        *bench_result({1: 0.03}, n=4)["points"], *bench_result({8: 0.05}, n=50)["points"]]})
    assert main(["baseline", "set", "few", short, "--store", str(path)]) == 0
    err = capsys.readouterr().err
    assert (f"warning: run {short} has too few samples for a check to judge (4 at batch 1; a 95% interval "
            "needs 6)") in err
    assert "batch 8" not in err and "--min-iters 6" in err
    enough = add_run(store, "bench", bench_result({1: 0.03}, n=6))
    assert main(["baseline", "set", "few", enough, "--store", str(path)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_setting_a_baseline_measured_beside_busy_processes_warns(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A CI job's bench on main, measured while other processes kept 1.4 of 2 cores busy (p50 38 ms at batch 8,
    0.073 ms on a quiet machine: bench warned), became the baseline in silence; every check against it then read
    "-99.8% better ... significantly better: pass", and a slowdown up to 500x would have passed."""
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    busy = bench_result({1: 0.01, 8: 0.02})
    busy["points"][1]["contention_warning"] = ("other processes kept 1.3 cores busy while measuring (this process: "
                                               "0.7): expect slower, noisier numbers; compare with `dlperf ab`")
    run_id = add_run(store, "bench", busy)
    assert main(["baseline", "set", "main", run_id, "--store", str(path)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: run {run_id} was measured beside other busy processes (batch 8: other processes kept 1.3 "
            "cores busy while measuring (this process: 0.7)): its times may be slower than the code's") in err
    assert "pass a slowdown as no regression or as 'better'" in err and "batch 1" not in err
    calm = add_run(store, "bench", bench_result({1: 0.01, 8: 0.02}))
    assert main(["baseline", "set", "main", calm, "--store", str(path)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_baseline_names_the_git_commit_its_run_was_taken_at(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Moving 'main' to a new commit's bench said "baseline 'main' -> run R (bench of W, DATE); it was run P", and
    `baseline list` gave name, run, workload, set at: which commit the checks were judged against took `runs show`."""
    import json

    from dlperf.cli.main import main

    from .helpers import ENV

    path = tmp_path / "runs.db"
    store = Store(path)
    old = add_run(store, "bench", bench_result({1: 0.01}), env={**ENV, "git_commit": "f" * 40, "git_dirty": False})
    new = add_run(store, "bench", bench_result({1: 0.01}), env={**ENV, "git_commit": "a" * 40, "git_dirty": True})
    plain = add_run(store, "bench", bench_result({1: 0.01}))
    assert main(["baseline", "set", "main", old, "--store", str(path)]) == 0
    assert f"run {old} (bench of zoo:mlp, " in capsys.readouterr().out
    assert main(["baseline", "set", "main", new, "--store", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"at commit {'a' * 12}+ (uncommitted changes); it was run {old} at commit {'f' * 12}" in out
    assert main(["baseline", "set", "old", plain, "--store", str(path)]) == 0
    assert "commit" not in capsys.readouterr().out  # none recorded: nothing said
    assert main(["baseline", "list", "--json", "--store", str(path)]) == 0
    listed = {b["name"]: b for b in json.loads(capsys.readouterr().out)}
    assert (listed["main"]["git_commit"], listed["main"]["git_dirty"]) == ("a" * 40, True)
    assert listed["old"]["git_commit"] is None
    assert main(["baseline", "list", "--store", str(path)]) == 0
    table = capsys.readouterr().out
    assert "commit" in table and "a" * 12 + "+" in table
