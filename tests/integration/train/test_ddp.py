from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from dlperf.cli.main import main
from dlperf.errors import TrainError
from dlperf.measure.env import usable_cores
from dlperf.train.ddp import DdpConfig, DdpResult, RankStats, launch
from dlperf.train.loop import StepConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_gloo_processes_report_scaling_communication_and_buckets_at_the_threads_asked_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI (it calls `run_ddp`): one launch of each size is ~10 s here, so one test checks both what the
    result holds and that `--threads` reaches the ranks."""
    threads = usable_cores() // 2 + 1  # never the default (usable CPUs // nproc)
    code = main(["train", "zoo:mlp", "--nproc", "2", "--threads", str(threads), "--batch-size", "32", "--steps", "4",
                 "--warmup", "1", "--json", "--store", str(tmp_path / "s.db")])
    assert code == 0
    data = json.loads(capsys.readouterr().out)["result"]
    result = DdpResult(data["workload"], data["backend"], data["threads_per_process"], data["bucket_cap_mb"],
                       RankStats.from_dict(data["single"]), RankStats.from_dict(data["multi"]), data["findings"])
    assert result.threads_per_process == threads
    assert result.single.world_size == 1 and result.multi.world_size == 2
    assert result.backend == "gloo"
    assert len(result.multi.per_rank_step_s) == 2
    assert result.multi.step_s == max(result.multi.per_rank_step_s)
    assert data["scaling_efficiency"] == pytest.approx(
        (2 * 32 / result.multi.step_s) / (2 * 32 / result.single.step_s))
    # zoo:mlp: (64*256 + 256 + 256*256 + 256 + 256*10 + 10) fp32 gradients, one 25 MiB bucket
    assert result.multi.gradient_bytes == (64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10) * 4
    assert result.multi.buckets == 1
    assert result.multi.allreduce_s > 0
    assert 0.0 <= data["comm_share"] < 1.0
    assert any("one bucket" in f for f in result.findings)


HANGING_RANK = '''
"""A workload whose ranks hang while building it; each writes its pid first."""
import os
import time
from pathlib import Path

from dlperf.workload.zoo import mlp

Path(__file__).with_name(f"rank-{os.getpid()}.pid").write_text(str(os.getpid()))


def workload():
    time.sleep(600)
    return mlp.workload()
'''


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_launch_that_times_out_leaves_no_rank_running(tmp_path: Path) -> None:
    """Killing torchrun alone (subprocess.run's timeout) left its ranks training with no parent."""
    workload = tmp_path / "hanging.py"
    workload.write_text(HANGING_RANK)
    with pytest.raises(TrainError, match="did not finish in 15 s: raise --timeout"):
        launch(f"{workload}:workload", StepConfig(batch_size=8), DdpConfig(nproc=2, timeout_s=15), 2, threads=1)
    pids = [int(p.read_text()) for p in tmp_path.glob("rank-*.pid")]
    assert len(pids) == 2, "the ranks did not start within the timeout: nothing was checked"
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:  # don't leave them running when the test fails
        psutil.Process(pid).kill()
    assert not left


def test_a_failing_rank_reports_its_error_not_torchruns_summary(tmp_path: Path) -> None:
    workload = tmp_path / "empty.py"
    workload.write_text("x = 1\n")
    with pytest.raises(TrainError) as raised:
        launch(str(workload), StepConfig(batch_size=8), DdpConfig(nproc=2, timeout_s=120), 1, threads=1)
    message = str(raised.value)
    assert message.startswith("torchrun with 1 process(es) failed (exit 1):\n")
    assert f"WorkloadError: workload file '{workload}' defines no workload" in message
    assert "Traceback" not in message and "error_file" not in message


def test_a_failed_scaling_launch_keeps_the_one_process_figures(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The 1-process launch finished, the N-process one failed (or was interrupted, or timed out): the run kept
    nothing ("no result recorded")."""
    workload = tmp_path / "fails_on_two.py"
    workload.write_text(
        "import os\nimport dlperf\n"
        "from dlperf.workload.zoo import get\n"
        "if os.environ.get('WORLD_SIZE') == '2':\n"
        "    raise RuntimeError('no room for a second rank')\n"
        "workload = get('mlp')\n")
    store = tmp_path / "s.db"
    assert main(["train", str(workload), "--nproc", "2", "--threads", "1", "--steps", "2", "--warmup", "0",
                 "--store", str(store)]) == 2
    assert "no room for a second rank" in capsys.readouterr().err
    from dlperf.store import Store

    (run,) = Store(store).list(kind="train")
    assert run.status == "failed" and run.result["single_samples_per_s"] > 0
    assert run.result["partial"] == "stopped before the 2-process launch finished: the 1-process figures only"
    assert main(["runs", "show", run.id, "--store", str(store)]) == 0
    assert "the 1-process figures only" in " ".join(capsys.readouterr().out.split())
