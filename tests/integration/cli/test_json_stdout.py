"""With --json, stdout is the JSON document alone: a workload that prints (at import, in its factory) or writes to
file descriptor 1 had its lines before the JSON, and `json.load` of the output (the CI recipe in compare.md)
failed. They go to stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CHATTY = '''import os
import torch
print("loading my model...")
os.write(1, b"a write to descriptor 1\\n")

def model():
    print("building model")
    return torch.nn.Linear(4, 2)

def inputs(batch_size):
    return (torch.randn(batch_size, 4),)
'''


def test_json_output_stays_parseable_when_the_workload_prints(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(CHATTY)
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli.main", "bench", str(tmp_path / "chatty.py"),
                           "--batch-sizes", "1", "--min-duration", "0.05", "--min-iters", "5", "--json",
                           "--store", str(tmp_path / "runs.db")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)  # the whole of stdout
    assert [p["batch_size"] for p in document["result"]["points"]] == [1]
    for line in ("loading my model...", "a write to descriptor 1", "building model"):
        assert line in proc.stderr


def test_in_process_the_workload_prints_go_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`main()` called from Python (no descriptor to move): print() still goes to stderr, the JSON to stdout."""
    from dlperf.cli.main import main

    (tmp_path / "chatty.py").write_text(CHATTY.replace('os.write(1, b"a write to descriptor 1\\n")\n', ""))
    assert main(["bench", str(tmp_path / "chatty.py"), "--batch-sizes", "1", "--min-duration", "0.05",
                 "--min-iters", "5", "--json", "--store", str(tmp_path / "runs.db")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["workload"] == str(tmp_path / "chatty.py")
    assert "loading my model..." in err and "building model" in err


@pytest.mark.parametrize("argv", [["runs", "show", "RUN", "--json"], ["runs", "list"], ["runs", "export", "RUN"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv: list[str], tmp_path: Path) -> None:
    """`dlperf runs show ID --json | head -1`: the write to the closed pipe raised BrokenPipeError, a traceback and
    exit 1. Now no traceback and 141, the status a shell gives a process ended by SIGPIPE."""
    from dlperf.store import Store

    store = tmp_path / "runs.db"
    handle = Store(store).create_run("bench", "zoo:mlp")
    command = [sys.executable, "-m", "dlperf.cli.main", *[handle.id if a == "RUN" else a for a in argv],
               "--store", str(store)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first write
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err


RAISES_AT_BATCH_8 = '''import torch
class M(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 8:
            raise RuntimeError("boom at batch 8")
        return x * 2
def model():
    return M()
def inputs(batch_size):
    return (torch.randn(batch_size, 4),)
'''


@pytest.mark.parametrize("sizes", ["1,8", "8"], ids=["batch-1-kept", "nothing-kept"])
def test_a_failed_run_the_store_kept_prints_its_json_with_the_error(
        sizes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stdout was empty when batch 8 raised, though the store kept the failed run with batch 1 (and Ctrl-C or SIGTERM
    printed the kept run): a CI job had nothing to parse. A run that finished nothing still prints nothing."""
    from dlperf.cli.main import main
    from dlperf.store import Store

    (tmp_path / "raises.py").write_text(RAISES_AT_BATCH_8)
    db = tmp_path / "runs.db"
    code = main(["bench", str(tmp_path / "raises.py"), "--batch-sizes", sizes, "--min-duration", "0.02",
                 "--min-iters", "3", "--warmup", "1", "--store", str(db), "--json"])
    out, err = capsys.readouterr()
    assert code == 2, err  # the error's exit code, as without --json
    assert "boom at batch 8" in err
    (record,) = Store(db).list()
    if sizes == "8":  # the store keeps it, and stderr names it: a script had neither JSON nor the run's id
        assert out == ""
        assert record.status == "failed" and record.result == {}
        kept = f"run {record.id} is kept in the store as failed, with its error (it finished nothing)"
        assert kept in err and err.startswith("error:")  # the error stays the first line, where nothing came before
        return
    document = json.loads(out)  # the whole of stdout
    assert (document["run_id"], document["status"], document["interrupted"]) == (record.id, "failed", False)
    assert "boom at batch 8" in document["error"] and document["error"] == record.error
    assert [p["batch_size"] for p in document["result"]["points"]] == [1]
