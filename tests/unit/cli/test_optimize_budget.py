"""Where `dlperf optimize`'s time budget counts from: the command's process start, or a caller's call of `main`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dlperf.cli.optimize import budget_start


def test_a_caller_of_main_in_a_long_lived_process_counts_from_its_call() -> None:
    # a process that has run for a while: its age was taken from the budget, up to a minute of it
    time.sleep(max(0.0, 0.6 - (time.time() - psutil.Process().create_time())))
    before = time.monotonic()
    assert budget_start(from_command_line=False) >= before


def test_the_dlperf_command_counts_from_its_process_start() -> None:
    from dlperf.optimize.search import _process_age_s

    age = _process_age_s()  # psutil's reads up to a second more: see the test of the start's precision below
    start = budget_start(from_command_line=True)
    # the process's start, at most 60 s back (the cap for a process older than its command)
    assert time.monotonic() - start >= min(age, 60.0) - 0.5


def test_the_process_start_is_taken_back_at_most_max_age_s() -> None:
    """The budget counted 60 s back whatever the process's age (a `dlperf optimize` started a second ago lost a
    minute of its budget), or the whole age of a process older than its command."""
    from dlperf.optimize.search import _process_age_s, process_started_at

    age = _process_age_s()
    assert time.monotonic() - process_started_at(max_age_s=0.0) == pytest.approx(0.0, abs=0.5)
    assert time.monotonic() - process_started_at(max_age_s=1e6) == pytest.approx(age, abs=0.5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's start time of a process is Linux's")
def test_the_process_start_is_read_to_the_kernel_tick_not_to_the_second() -> None:
    """psutil's start, the boot time in whole seconds plus the process's start after it, read up to a second early:
    `elapsed_s` said 10 s for a 9.5 s command. A child process's start lies between the parent's clock readings
    around starting it (less a 10 ms tick, to which the kernel counts it)."""
    code = "from dlperf.optimize.search import process_started_at; print(repr(process_started_at(max_age_s=1e6)))"
    before = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    after = time.monotonic()
    out, _ = child.communicate(timeout=120)
    assert before - 0.02 <= float(out) <= after + 0.02


def test_ray_is_started_only_once_every_option_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--executor ray` started Ray (5-6 s) before a bad --passes, --export, --device or --resume was refused."""
    from dlperf.cli.main import main
    from dlperf.optimize import executor as executors

    started: list[str] = []
    monkeypatch.setattr(executors, "executor_from_spec", lambda spec: started.append(spec))
    store = f"{tmp_path}/runs.db"
    for bad in (["--passes", "nosuch"], ["--resume", "deadbeef"], ["--device", "cuda:7"]):
        assert main(["optimize", "zoo:mlp", "--executor", "ray", *bad, "--store", store]) == 2
    assert started == []


def test_a_misspelt_pass_export_or_device_is_refused_before_the_workload_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--passes onnxruntim` was refused only after "loading the workload took 2.0 s" (a large model's file takes
    longer), and so were a bad --export and a device this machine lacks; the typo now gets a "did you mean"."""
    from dlperf.cli.main import main
    from dlperf.workload import loader

    loaded: list[str] = []
    monkeypatch.setattr(loader, "load_workload", lambda spec, *a, **k: loaded.append(spec))
    store = f"{tmp_path}/runs.db"
    assert main(["optimize", "zoo:mlp", "--passes", "hygiene,onnxruntim", "--store", store]) == 2
    assert capsys.readouterr().err.rstrip().endswith("; did you mean onnxruntime?")
    for bad in (["--export", str(tmp_path / "runs.db" / "out")], ["--device", "cuda:7"]):
        assert main(["optimize", "zoo:mlp", *bad, "--store", store]) == 2
    assert loaded == []
