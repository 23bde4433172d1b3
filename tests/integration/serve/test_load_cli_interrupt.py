"""`dlperf load` interrupted by Ctrl-C (SIGINT) or SIGTERM in its last level: a `dlperf load` subprocess against a
real server on 127.0.0.1 keeps the levels it finished (in the store, the table and --csv), marks the run interrupted
and releases its shared memory."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig
from dlperf.store import Store

from .helpers import get_text, wait_until

pytestmark = pytest.mark.integration

SWEEP = ["--duration", "60s", "--window-s", "0.5", "--warmup-s", "0.2"]
"""Rates 100 and 200 end after --requests; rate 1 would take 40 s for them, so a signal lands in it."""


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=16, allow_client_shm=True))
    yield running
    running.stop()


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """`dlperf load ARGS` in a subprocess, its stdout and stderr in files."""
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "load", *args], stdout=o, stderr=e,
                                env={**os.environ, "COLUMNS": "200"})
    return proc, out, err


def _signal_after(proc: subprocess.Popen[bytes], err: Path, line: str, signum: int) -> int:
    """Send `signum` once `line` is on the subprocess's stderr (its progress lines); its exit code."""
    try:
        wait_until(lambda: line in err.read_text() or proc.poll() is not None, 120, f"'{line}' on stderr")
        assert proc.poll() is None, err.read_text()
        proc.send_signal(signum)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_in_the_last_level_keeps_the_finished_ones(server: Running, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    store, table = tmp_path / "runs.db", tmp_path / "out.csv"
    proc, out, err = _start(tmp_path, server.url, "--model", "mlp", "--rate", "100,200,1", "--requests", "40", *SWEEP,
                            "--csv", str(table), "--store", str(store))
    assert _signal_after(proc, err, "rate 200:", signal.SIGINT) == 130
    (record,) = Store(store).list(kind="load")
    assert record.status == "interrupted" and record.error == "interrupted by the user (Ctrl-C)"
    levels = record.result["levels"]
    assert [lv["level"] for lv in levels] == [100.0, 200.0]
    assert all(lv["requests_ok"] == len(lv["latencies_ns"]) > 0 and lv["errors"] == 0 for lv in levels)
    printed = out.read_text()
    assert "(interrupted, 2 levels finished)" in printed
    assert f"interrupted: 2 levels finished, recorded as run {record.id} (status interrupted)" in err.read_text()
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(float(r["Request Rate"]) for r in rows) == [100.0, 200.0]
    # `dlperf runs show`: the levels table of the finished levels, not "no result recorded"
    assert main(["runs", "show", record.id, "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "interrupted" in shown and "no result recorded" not in shown and "p99 bound" in shown


def test_sigterm_records_the_run_interrupted_and_releases_the_shared_memory(server: Running,
                                                                            tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    proc, out, err = _start(tmp_path, server.url, "--model", "mlp", "--rate", "100,200,1", "--requests", "40", *SWEEP,
                            "--shared-memory", "system", "--json", "--store", str(store))
    regions = f"dlperf_load_{proc.pid}_"
    assert _signal_after(proc, err, "rate 200:", signal.SIGTERM) == 128 + signal.SIGTERM
    (record,) = Store(store).list(kind="load")
    assert record.status == "interrupted" and record.error == "terminated by SIGTERM"
    assert [lv["level"] for lv in record.result["levels"]] == [100.0, 200.0]
    printed = json.loads(out.read_text())  # --json: the finished levels
    assert printed["run_id"] == record.id and printed["status"] == "interrupted"
    assert [lv["level"] for lv in printed["levels"]] == [100.0, 200.0]
    # the regions are unregistered from the server and unlinked on this host, as on Ctrl-C
    assert json.loads(get_text(f"http://{server.url}/v2/systemsharedmemory/status")) == []
    if os.path.isdir("/dev/shm"):
        assert not [name for name in os.listdir("/dev/shm") if name.startswith(regions)]
    assert "leaked shared_memory" not in err.read_text()


def test_an_interrupted_peak_search_keeps_its_steps_without_a_peak(server: Running, tmp_path: Path) -> None:
    # every request is over a 1 us SLO: each trial fails at its first window, and the search halves down
    store = tmp_path / "runs.db"
    proc, out, err = _start(tmp_path, server.url, "--model", "mlp", "--find-peak", "--p99-ms", "0.001", "--rate",
                            "50", "--duration", "20s", "--window-s", "0.5", "--warmup-s", "0.2", "--store", str(store))
    assert _signal_after(proc, err, "25.0 req/s: FAIL", signal.SIGINT) == 130
    (record,) = Store(store).list(kind="load")
    assert record.status == "interrupted"
    assert "peak" not in record.result  # the search did not end: no peak is claimed
    steps = record.result["levels"]
    assert [s["level"] for s in steps][:2] == [50.0, 25.0]  # the signal may land in a later trial
    assert {s["verdict"] for s in steps} == {"fail"}
    assert f"rate search (interrupted, {len(steps)} levels finished)" in out.read_text()
