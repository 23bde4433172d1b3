"""A command interrupted by SIGTERM (`timeout`, a cancelled CI job) ends as on Ctrl-C: its run is kept in the
store as interrupted with what it finished, and the last line names the run. Before, SIGTERM killed `dlperf
bench` without a word and its run stayed "running" in the store for good."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf.store import Store

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("signum", "status", "json_out"),
                         [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)],
                         ids=["SIGTERM", "SIGINT", "SIGTERM-json"])
def test_an_interrupted_bench_keeps_its_run_and_names_it(tmp_path: Path, signum: int, status: int,
                                                         json_out: bool) -> None:
    db = tmp_path / "runs.db"
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "bench", "zoo:mlp", "--batch-sizes", "1,2",
                             "--min-duration", "8s", "--store", str(db), *(["--json"] if json_out else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until batch 1 is measured and saved as a partial result
            if db.exists():
                runs = Store(db).list()
                if runs and "points" in (runs[0].result or {}):
                    break
            time.sleep(0.2)
        else:
            pytest.fail("batch 1 was never recorded")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    record = Store(db).list()[0]
    assert record.status == "interrupted"
    if json_out:  # the kept run on stdout (it was empty: a CI job had nothing to parse)
        doc = json.loads(out)
        assert (doc["run_id"], doc["status"], doc["interrupted"], doc["kind"]) == (record.id, "interrupted", True,
                                                                                  "bench")
        assert [p["batch_size"] for p in doc["result"]["points"]] == [p["batch_size"] for p in record.result["points"]]
    points = (record.result or {})["points"]
    # batch 2 too, with the calls it timed, unless the signal came within its warm-up (a few microseconds)
    assert [p["batch_size"] for p in points] in ([1], [1, 2])
    assert points[0]["summary"]["stop_note"] is None
    if len(points) == 2:
        assert points[1]["summary"]["stop_note"].startswith("interrupted after ")
    assert record.result["headline"]["batch_size"] in (1, 2)  # of what it measured: `runs list`/`runs show` had none
    last = err.strip().splitlines()[-1]
    assert f"run {record.id} is kept in the store as interrupted, with what it finished" in last
    if signum == signal.SIGTERM:
        assert record.error == "terminated by SIGTERM" and last.startswith("terminated by SIGTERM")


def test_a_profile_interrupted_during_verify_keeps_its_capture_and_diagnosis(tmp_path: Path) -> None:
    """The run was stored with an empty result: the capture and diagnosis (most of the work) were lost."""
    db = tmp_path / "runs.db"
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "profile", "zoo:mlp", "--verify",
                             "--max-fixes", "3", "--store", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until the diagnosis is saved and the fixes are being measured
            if proc.poll() is not None:  # say why at once, not after the deadline
                pytest.fail(f"the command ended (exit {proc.returncode}) before its diagnosis was seen in the store: "
                            f"{proc.communicate()[1][-2000:]}")
            if db.exists():
                runs = Store(db).list()
                if runs and (runs[0].result or {}).get("partial"):
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the diagnosis was never saved")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    record = Store(db).list()[0]
    assert record.status == "interrupted"
    assert record.result["verdict"] and record.result["findings"]
    assert record.result["partial"] == "interrupted before --verify finished"
    assert f"run {record.id} is kept in the store as interrupted" in err


TERMINATED_AT_BATCH_2 = '''
import os
import signal

import torch


class TerminatedAtBatch2(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 2:  # batch 1 is measured and saved by then
            os.kill(os.getpid(), signal.SIGTERM)
        return x * 2


def model():
    return TerminatedAtBatch2()


def inputs(batch_size):
    return (torch.zeros(batch_size, 4),)
'''


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_sigterm_in_process_ends_bench_with_143_and_its_json_names_the_reason(
        json_out: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In-process, as the subprocess test above but quick: the exit code CI reads is SIGTERM's 143 (Ctrl-C's 130 is
    another cause), the --json document carries the status and the reason, and without --json stdout has no JSON."""
    from dlperf.cli.main import main

    (tmp_path / "terminated.py").write_text(TERMINATED_AT_BATCH_2)
    db = tmp_path / "runs.db"
    code = main(["bench", str(tmp_path / "terminated.py"), "--batch-sizes", "1,2", "--min-duration", "0.02",
                 "--min-iters", "3", "--warmup", "1", "--store", str(db), *(["--json"] if json_out else [])])
    out, err = capsys.readouterr()
    assert code == 143, err
    record = Store(db).list()[0]
    assert (record.status, record.error) == ("interrupted", "terminated by SIGTERM")
    assert [p["batch_size"] for p in record.result["points"]] == [1]
    assert err.strip().splitlines()[-1].startswith(f"terminated by SIGTERM: run {record.id} is kept in the store")
    if not json_out:
        assert '"interrupted": true' not in out  # the JSON document is for --json only
        return
    doc = json.loads(out)
    assert (doc["run_id"], doc["status"], doc["interrupted"], doc["reason"]) == (
        record.id, "interrupted", True, "terminated by SIGTERM")
    assert [p["batch_size"] for p in doc["result"]["points"]] == [1]


def test_an_interrupted_bench_keeps_the_model_size_and_the_rss_before_it_in_its_view(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A finished bench's `runs show` has 'model size: ...' and the RSS before the model was built under its table;
    an interrupted one's record had neither (only its points and headline), so its view read 'RSS: peak' and said
    nothing of the model's size."""
    from dlperf.cli.main import main

    (tmp_path / "terminated.py").write_text(TERMINATED_AT_BATCH_2)
    db = tmp_path / "runs.db"
    assert main(["bench", str(tmp_path / "terminated.py"), "--batch-sizes", "1,2", "--min-duration", "0.02",
                 "--min-iters", "3", "--warmup", "1", "--store", str(db)]) == 143
    record = Store(db).list()[0]
    assert record.result["partial"] is True
    assert record.result["model_bytes"] == 0  # the model has no parameters
    assert record.result["rss_before_model_bytes"] > 0
    capsys.readouterr()
    assert main(["runs", "show", record.id, "--store", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "model size: 0.0 MiB (parameters + buffers)" in shown
    assert "RSS: the process's peak (" in shown  # it read 'RSS: peak'


SLOW_BUILD = '''
import time

import torch


def model():
    time.sleep(60)  # interrupted here, before anything is measured
    return torch.nn.Linear(8, 4).eval()


def inputs(batch_size):
    return (torch.randn(batch_size, 8),)
'''


def test_a_bench_interrupted_before_it_measured_anything_says_it_finished_nothing(tmp_path: Path) -> None:
    """Stopped while its model was built, a run keeps its config alone: the line said 'with what it finished'."""
    db, workload = tmp_path / "runs.db", tmp_path / "slow_build.py"
    workload.write_text(SLOW_BUILD)
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "bench", str(workload), "--store", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (db.exists() and Store(db).list()) and time.monotonic() < deadline:  # the run is recorded
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    record = Store(db).list()[0]
    assert record.status == "interrupted" and not record.result
    assert err.strip().splitlines()[-1] == (f"interrupted: run {record.id} is kept in the store as interrupted, with "
                                            f"its config (it finished nothing) (`dlperf runs show {record.id[:8]}`)")
