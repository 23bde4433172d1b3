"""`dlperf optimize` from the command line: JSON on stdout, export, store, and user errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dlperf.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_optimize_cli_json_export_and_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimize", "zoo:mlp", "--passes", "hygiene", "--max-depth", "1", "--time-budget", "2m",
                 "--min-duration", "0.05", "--store", str(tmp_path / "runs.db"), "--export", str(tmp_path / "out"),
                 "--workdir", str(tmp_path / "work"), "--json", "--max-metric-drop", "0.5%"])
    captured = capsys.readouterr()
    assert code == 0
    data = json.loads(captured.out)
    assert data["workload"] == "zoo:mlp" and data["objective"] == "latency"
    assert data["constraints"]["max_metric_drop"] == pytest.approx(0.005)
    assert [c["label"] for c in data["candidates"]] == ["baseline", "hygiene"]
    assert data["export_dir"] == str(tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    # the artifact names the stored runs it came from (it named none: no way back to `dlperf runs show`)
    assert manifest["run_id"] == data["run_id"]
    exported = next(c for c in data["candidates"] if c["label"] == manifest["label"])
    assert manifest["candidate_run_id"] == exported["run_id"]
    assert "measuring hygiene" in captured.err  # progress goes to stderr
    # the stored runs read back as the command printed them, with one-line headlines
    store = str(tmp_path / "runs.db")
    assert main(["runs", "show", data["run_id"], "--store", store]) == 0
    shown = capsys.readouterr().out
    assert "candidates for zoo:mlp" in shown and '"candidates"' not in shown
    # where the trials ran: rows' `node` and the notes said so for Ray, the run's record did not
    assert data["executor"] == "local" and '"executor": "local"' in " ".join(shown.split())
    assert main(["runs", "list", "--store", store]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    winner = next((c["label"] for c in data["candidates"] if c["key"] == data["winner"]), None)
    assert (f"winner: {winner}" if winner else "no winner") in listed
    assert "hygiene: p50" not in listed  # the candidates' runs: --children lists them
    # two candidates, and a third child where a stalled row was measured again (a busy machine)
    children = re.search(r"(\d+) runs that belong to another run", listed)
    assert children is not None and int(children.group(1)) >= 2, listed
    assert main(["runs", "list", "--children", "--store", store]) == 0
    assert "hygiene: p50" in " ".join(capsys.readouterr().out.split())  # the candidate run's headline


def test_optimize_cli_rejects_unknown_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimize", "zoo:mlp", "--passes", "warp", "--store", str(tmp_path / "runs.db")])
    assert code == 2
    assert "unknown passes warp" in capsys.readouterr().err


def test_optimize_cli_rejects_bad_budget() -> None:
    with pytest.raises(SystemExit):
        main(["optimize", "zoo:mlp", "--time-budget", "soon"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-metric-drop-abs", "nan"], "--max-metric-drop-abs (max_metric_drop_abs) must be a number >= 0, got nan"),
    (["--latency-budget-ms", "nan"], "--latency-budget-ms must be a positive number, got nan"),
    (["--max-metric-drop", "nan"], "--max-metric-drop (max_metric_drop) must be in [0, 100%), got nan (nan%)"),
    # it said "got 1.5": the user wrote 150%
    (["--max-metric-drop", "150%"], "--max-metric-drop (max_metric_drop) must be in [0, 100%), got 1.5 (150%)"),
    (["--max-metric-drop", "-1%"], "--max-metric-drop (max_metric_drop) must be in [0, 100%), got -0.01 (-1%)"),
    # meant as 1%: it said "must be in [0, 100%), got 1.0", not how to write it
    (["--max-metric-drop", "1"], "--max-metric-drop '1' would be 100% of the baseline's metric (a bare number is a "
                                 "fraction, and must be below 1): write 1% for 0.01"),
    (["--threads", "0"], "--threads (threads) must be >= 1, got 0"),
    (["--threads", "-3"], "--threads (threads) must be >= 1, got -3"),
    (["--passes", ","], "--passes (passes) names no pass"),
    (["--passes", ""], "--passes (passes) names no pass"),  # it searched every pass for the whole time budget
])
def test_optimize_cli_refuses_bad_numbers_at_once(argv: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimize", "zoo:mlp", *argv, "--store", str(tmp_path / "runs.db")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "measuring" not in err
    assert len(err.strip().splitlines()) == 1


def test_optimize_cli_refuses_bad_paths_before_the_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "manifest.json").write_text('{"engine": "mine"}')
    (project / "data" / "keep.csv").write_text("x")
    store = ["--store", str(tmp_path / "runs.db")]
    for argv, message in [(["--export", str(a_file)], "is a file, not a folder"),
                          (["--export", "/proc/nope/x"], "cannot be created: no folder can be made in '/proc'"),
                          (["--export", str(project)], "is not empty and not a dlperf artifact"),
                          (["--workdir", str(a_file)], "--workdir"),]:
        code = main(["optimize", "zoo:mlp", *argv, *store])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "measuring" not in err, err
        assert len(err.strip().splitlines()) == 1
    assert (project / "data" / "keep.csv").read_text() == "x"


def test_optimize_cli_prints_the_results_before_an_export_it_cannot_make(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A budget nothing meets, the baseline included: no export, said after the table, exit 2."""
    code = main(["optimize", "zoo:mlp", "--passes", "hygiene", "--max-depth", "1", "--time-budget", "2m",
                 "--min-duration", "0.05", "--latency-budget-ms", "0.0001", "--store", str(tmp_path / "runs.db"),
                 "--export", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")])
    captured = capsys.readouterr()
    assert code == 2
    assert "candidates for zoo:mlp" in captured.out and "0* " not in captured.out
    assert "0 baseline: p99 latency" in captured.out
    assert captured.err.strip().splitlines()[-1].startswith("error: nothing measured meets the constraints")
    assert not (tmp_path / "out").exists()


def test_a_baseline_rejecting_its_inputs_is_named_as_bench_names_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """optimize said only "could not be measured: TypeError: linear(): argument 'input' ... must be Tensor, not
    numpy.ndarray"; bench named the workload and its inputs and gave the fix."""
    wl = tmp_path / "arrays.py"
    wl.write_text("import numpy as np\nimport torch\n\ndef model():\n    return torch.nn.Linear(4, 2)\n\n"
                  "def inputs(batch_size):\n    return (np.zeros((batch_size, 4), np.float32),)\n")
    code = main(["optimize", str(wl), "--time-budget", "60s", "--store", str(tmp_path / "runs.db")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert (f"the baseline of '{wl}' could not be measured: workload 'arrays': the model rejected its example inputs "
            "(input 0: float32[1, 4])") in err
    assert "its inputs include numpy arrays: return torch tensors (torch.from_numpy(x))" in err


def test_a_minimum_duration_above_the_timer_cap_raises_the_cap() -> None:
    """`dlperf optimize zoo:mlp --min-duration 20s` failed the baseline with "max_duration_s (15.0) is below
    min_duration_s (20.0)", a setting the command does not offer; bench raises its cap to the minimum, so does this."""
    from dlperf.cli.main import build_parser
    from dlperf.cli.optimize import search_config

    def config(*argv: str) -> Any:
        return search_config(build_parser().parse_args(["optimize", "zoo:mlp", *argv]))

    long = config("--min-duration", "20s")
    assert (long.min_duration_s, long.max_duration_s) == (20.0, 20.0)
    default = config("--min-duration", "2s")  # the cap, part of a search's resume key, is unchanged below it
    assert (default.min_duration_s, default.max_duration_s) == (2.0, 15.0)


SLOW_IMPORT = '''import time

import torch

time.sleep(2.0)  # an import that takes a while (a big module, a checkpoint read at import)


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())


def inputs(batch_size: int = 4) -> tuple[torch.Tensor]:
    return (torch.randn(batch_size, 8),)
'''


def test_a_workload_slow_to_load_is_said_and_counted_in_the_budget(tmp_path: Path) -> None:
    """The budget counts from the command's start, but nothing said that loading the workload had taken a share of
    it (the start, taken after the load, was capped at 60 s ago: a longer import was partly left out)."""
    import subprocess
    import sys

    wl = tmp_path / "slow_import.py"
    wl.write_text(SLOW_IMPORT)
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli.main", "optimize", str(wl), "--passes", "hygiene",
                           "--max-depth", "1", "--time-budget", "30s", "--min-duration", "0.05", "--json",
                           "--store", str(tmp_path / "runs.db"), "--workdir", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("loading the workload took ") and "of the 30 s time budget (the budget counts" in first
    load_s = float(first.split("took ", 1)[1].split(" s,", 1)[0])
    assert load_s >= 2.0 and json.loads(proc.stdout)["elapsed_s"] >= load_s


def test_sigint_to_the_optimize_process_alone_mid_candidate_keeps_the_run_resumable(tmp_path: Path) -> None:
    """`kill -INT PID` from a scheduler reaches the parent alone, not its candidate's process: the search stops as
    on SIGTERM and the run is kept as interrupted, which the same command resumes. (Started in the background of a
    script without job control, a command inherits SIGINT ignored: docs/optimize.md says so.)"""
    import signal
    import subprocess
    import sys
    import time

    from dlperf.store.db import Store

    argv = [sys.executable, "-m", "dlperf.cli.main", "optimize", "zoo:mlp", "--passes", "hygiene", "--max-depth", "1",
            "--time-budget", "5m", "--min-duration", "5s", "--store", str(tmp_path / "runs.db"),
            "--workdir", str(tmp_path / "work")]
    err = tmp_path / "err.txt"
    with err.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + 240
            while "measuring baseline" not in err.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
    last = err.read_text().splitlines()[-1]
    assert "interrupted: run " in last
    run = Store(tmp_path / "runs.db").list(kind="optimize")[0]
    assert run.status == "interrupted"
    # the line says how to resume it: only `dlperf runs show` of the run did
    assert last.endswith(f"; the same dlperf optimize command resumes it, or --resume {run.id[:8]}"), last
