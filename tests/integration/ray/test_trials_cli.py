"""`dlperf optimize W --executor ray[:ADDRESS]` as a user runs it: refused in one line when Ray cannot be reached, and
ended by SIGTERM as every other command is (exit 143, the run kept as interrupted, no Ray process left behind)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dlperf.optimize.space import Candidate
from dlperf.store.db import Store

from ..serve.helpers import cli_process, free_port, wait_until
from .processes import Watched, all_gone, descendants
from .refusal import refusal_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_an_address_nothing_answers_at_is_refused_in_one_line(tmp_path: Path) -> None:
    """ray.init retried such an address for minutes, printing a warning every few seconds."""
    port = free_port()
    line = refusal_line(f"127.0.0.1:{port}", tmp_path)
    assert line.startswith(f"error: --executor ray:127.0.0.1:{port}: cannot reach Ray at 127.0.0.1:{port}: "
                           "Connection refused; give the head node's address as `ray start --head` prints it"), line


def _cmdline(process: psutil.Process) -> str:
    """The process's command line, '' once it has exited (a trial's child process comes and goes)."""
    try:
        return " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return ""



CONNECT_DELAYS_S = (0.1, 0.3, 0.6)
"""After 'Started a local Ray instance': where a Ctrl-C lands in the construction of Ray's core worker."""


def test_ctrl_c_as_the_local_instance_connects_exits_130_without_a_crash(tmp_path: Path) -> None:
    """Ctrl-C a few hundred ms after 'Started a local Ray instance' landed in the construction of Ray's core worker
    and left it half made: 'interrupted' was printed, then the process died of SIGSEGV at exit (-11; 6 of 12 tries
    at 0.3 s here). Now the signal is held until ray.init returns, Ray is shut down, and the command ends as
    interrupted. One command for each of CONNECT_DELAYS_S, side by side, each with its own local instance: one
    after another they took 17 s each, most of it the instance's start."""
    seen: dict[float, list[psutil.Process]] = {}
    started: dict[float, float] = {}
    signalled: set[float] = set()
    with contextlib.ExitStack() as stack:
        commands: dict[float, tuple[subprocess.Popen[bytes], Path]] = {}
        for delay_s in CONNECT_DELAYS_S:
            folder = tmp_path / f"after-{delay_s:g}s"
            folder.mkdir()
            log = folder / "optimize.log"
            proc = stack.enter_context(cli_process(["optimize", "zoo:mlp", "--executor", "ray", "--store",
                                                    str(folder / "runs.db"), "--workdir", str(folder / "work")], log))
            commands[delay_s] = (proc, log)
        deadline = time.monotonic() + 180
        while len(signalled) < len(commands):
            assert time.monotonic() < deadline, f"timed out waiting for the local instances to start: {started}"
            for delay_s, (proc, log) in commands.items():
                if delay_s in signalled:
                    continue
                if delay_s not in started:
                    started_now = "Started a local Ray instance" in log.read_text()
                    assert proc.poll() is None, (delay_s, log.read_text())
                    if started_now:
                        seen[delay_s] = descendants(proc.pid)
                        started[delay_s] = time.monotonic()
                elif time.monotonic() >= started[delay_s] + delay_s:
                    proc.send_signal(signal.SIGINT)
                    signalled.add(delay_s)
            time.sleep(0.01)
        codes = {delay_s: proc.wait(timeout=120) for delay_s, (proc, _) in commands.items()}
    for delay_s, (_, log) in commands.items():
        text = log.read_text()
        assert codes[delay_s] == 130, (delay_s, text)
        assert text.strip().splitlines()[-1].startswith("interrupted") and "Traceback" not in text, (delay_s, text)
    wait_until(lambda: all_gone([p for processes in seen.values() for p in processes]), 60,
               "the local instances' processes to exit")


def test_sigterm_during_a_search_on_a_local_instance_keeps_the_run_and_leaves_no_ray_process(
        ray_cluster: Any, tmp_path: Path) -> None:
    """`--executor ray` starts a new local instance even where RAY_ADDRESS names a cluster (ray.init joined it, then
    refused the local instance's timing resource). SIGTERM while a candidate's trial runs: ray.init had replaced the
    CLI's SIGTERM handler with its own sys.exit (the run stored as failed, its candidate left running, exit 1 or an
    abort); and a SIGTERM landing in Ray's blocking wait came out as Ctrl-C (exit 130)."""
    store_path, workdir, log = tmp_path / "runs.db", tmp_path / "work", tmp_path / "optimize.log"
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    argv = ["optimize", "zoo:mlp", "--executor", "ray", "--store", str(store_path), "--workdir", str(workdir),
            "--passes", "hygiene,dynamic_int8", "--max-depth", "1", "--min-duration", "0.5s", "--time-budget", "10m"]
    with cli_process(argv, log, env=env) as proc:
        # the baseline measured, then the first candidate's trial running in its Ray worker
        baseline = Candidate().key
        wait_until(lambda: proc.poll() is not None or any(
            f.parent.name != baseline for f in workdir.glob("*/*/ray-trial-1.json")), 300, "the second trial to start")
        assert proc.poll() is None, log.read_text()
        ray_processes = descendants(proc.pid)  # the local instance: its GCS, raylet, and the trial's worker
        trial_workers = [p for p in ray_processes if "default_worker" in _cmdline(p) or _cmdline(p).startswith("ray::")]
        assert ray_processes and trial_workers, [_cmdline(p) for p in ray_processes]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and "SIGTERM received" not in text, text
    assert "Connecting to existing Ray cluster" not in text, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("terminated by SIGTERM: run ") and "is kept in the store as interrupted" in last, text
    store = Store(store_path)
    (search,) = store.list(kind="optimize", limit=None)
    assert search.status == "interrupted" and search.config["executor"] == "ray"  # the record said neither
    candidates = {c.config["label"]: c.status for c in store.list(kind="candidate", parent_id=search.id, limit=None)}
    assert candidates == {"baseline": "ok", "hygiene": "interrupted"}
    wait_until(lambda: all_gone(ray_processes), 60, "the local Ray instance's processes to exit")


def test_sigterm_while_the_local_instance_starts_exits_143_and_stops_it(tmp_path: Path) -> None:
    """Ray's own SIGTERM handler, set at the start of ray.init, made it exit 15, and the instance's agents were left
    running (orphaned) after both SIGTERM and Ctrl-C there."""
    log = tmp_path / "optimize.log"
    with cli_process(["optimize", "zoo:mlp", "--executor", "ray", "--store", str(tmp_path / "runs.db")], log) as proc:
        watched = Watched(proc)
        wait_until(lambda: watched.look() or "raylet" in watched.named(), 120,
                   "the local instance to start its raylet")
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        wait_until(watched.look, 120, "the command to exit")
    text = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert text.strip().splitlines()[-1] == "terminated by SIGTERM" and "Traceback" not in text, text
    assert {"gcs_server", "raylet"} <= watched.named(), watched.names
    wait_until(watched.all_gone, 60, "the local instance's processes to exit")


def test_after_ray_shuts_down_sigterm_still_reaches_the_handler(tmp_path: Path) -> None:
    """ray.shutdown() resets SIGTERM to its default disposition underneath Python (signal.getsignal still named the
    handler): a SIGTERM after a search's Ray executor closed killed the process outright (-15). shutdown_ray
    installs the handlers again."""
    script = tmp_path / "check.py"
    script.write_text(
        "import os, signal, ray\n"
        "from dlperf.ray.address import shutdown_ray\n"
        "ray.init(address='local', include_dashboard=False, log_to_driver=False)\n"
        "signal.signal(signal.SIGTERM, lambda s, f: print('handled', flush=True))  # after: ray.init sets its own\n"
        "shutdown_ray()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print('alive', flush=True)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["handled", "alive"], done.stdout + done.stderr


def test_a_local_instance_whose_node_dies_mid_trial_says_so_and_the_same_command_resumes(tmp_path: Path) -> None:
    """The raylet of the local instance killed (SIGKILL) as the first candidate's trial (hygiene) starts. That trial
    still finishes, ok: its worker, already running it, outlives the raylet. The next candidate (dynamic_int8),
    submitted after the kill, finds no live node: the search stops there, that candidate stored as failed without a
    result. The command ended with "no live node of the Ray cluster offers the 'dlperf_timing' resource: start each
    node with `ray start --resources ...`", a fix for a setup the user never made; the same command again started
    afresh (only an interrupted search resumed automatically)."""
    store_path, workdir, log = tmp_path / "runs.db", tmp_path / "work", tmp_path / "optimize.log"
    argv = ["optimize", "zoo:mlp", "--executor", "ray", "--store", str(store_path), "--workdir", str(workdir),
            "--passes", "hygiene,dynamic_int8", "--max-depth", "1", "--min-duration", "0.5s", "--time-budget", "10m"]
    # the GCS finds the killed raylet in ~5 s instead of ~15 (its default health check: every 3 s, dead after 5
    # failures); a check's own timeout stays at Ray's 10 s, so a node slow to answer on a busy machine is not dead
    env = {**os.environ, "RAY_health_check_period_ms": "1000"}
    with cli_process(argv, log, env=env) as proc:
        baseline = Candidate().key
        wait_until(lambda: proc.poll() is not None or any(
            f.parent.name != baseline for f in workdir.glob("*/*/ray-trial-1.json")), 300, "the second trial to start")
        assert proc.poll() is None, log.read_text()
        ray_processes = descendants(proc.pid)
        (raylet,) = [p for p in ray_processes if p.name() == "raylet"]
        raylet.kill()
        code = proc.wait(timeout=180)
    text = log.read_text()
    last = text.strip().splitlines()[-1]
    assert code != 0 and "Traceback" not in text, text
    assert last.startswith("error: the local Ray instance this command started lost its node: "), text
    assert "the same dlperf optimize command resumes it (or --resume RUN_ID)" in last, text
    assert "ray start --resources" not in last, text
    (search,) = Store(store_path).list(kind="optimize", limit=None)
    assert search.status == "failed" and search.config["executor"] == "ray"
    candidates = Store(store_path).list(kind="candidate", parent_id=search.id, limit=None)
    first = {c.config["label"]: c.status for c in candidates}
    # the candidate the search stopped at: failed, no result
    assert first["baseline"] == "ok" and "failed" in first.values(), first
    wait_until(lambda: all_gone(ray_processes), 60, "the local Ray instance's processes to exit")
    # the same command again resumes it (it started afresh, measuring the baseline again): what finished taken over,
    # the candidate it stopped at measured
    again = subprocess.run([sys.executable, "-m", "dlperf.cli.main", *argv], capture_output=True, text=True,
                           timeout=300, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming run {search.id}" in again.stderr, again.stderr
    resumed = Store(store_path).list(kind="optimize", limit=None)[0]
    assert resumed.status == "ok" and resumed.config["resumed_from"] == search.id
    rows = {c.config["label"]: c for c in Store(store_path).list(kind="candidate", parent_id=resumed.id, limit=None)}
    assert {label for label, c in rows.items() if c.config.get("reused_from")} == {
        label for label, status in first.items() if status == "ok"}, rows  # what it finished taken over
    lost = [label for label, status in first.items() if status == "failed"]
    assert all(rows[label].status == "ok" for label in lost), rows  # the candidate it stopped at measured


def test_ray_local_is_a_new_local_instance_like_plain_ray(tmp_path: Path) -> None:
    """`--executor ray:local` (Ray's own name for a new local instance) started one without the timing resource, and
    was refused with "no live node of the Ray cluster offers the 'dlperf_timing' resource: start each node with
    `ray start --resources ...`"."""
    store_path = tmp_path / "runs.db"
    done = subprocess.run([sys.executable, "-m", "dlperf.cli.main", "optimize", "zoo:mlp", "--executor", "ray:local",
                           "--store", str(store_path), "--workdir", str(tmp_path / "work"), "--passes", "hygiene",
                           "--max-depth", "1", "--min-duration", "0.1s", "--json"],
                          capture_output=True, text=True, timeout=240, env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stderr
    assert "dlperf_timing" not in done.stderr
    (search,) = Store(store_path).list(kind="optimize", limit=None)
    assert search.status == "ok" and search.config["executor"] == "ray"
