"""The confirmed pick meets the runner-up in one process: equally fast, the simpler pipeline wins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.measure.ab import FASTER, SAME
from dlperf.optimize.artifact import read_manifest
from dlperf.optimize.search import OptimizeConfig, optimize

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSES = str(Path(__file__).with_name("sleep_passes.py"))
WORKLOAD = str(Path(__file__).parents[1] / "compare" / "sleepy_workload.py") + ":workload"


def test_equally_fast_candidates_go_to_the_one_with_fewer_passes(tmp_path: Path) -> None:
    """`shorten` and `tidy + shorten` both sleep 5 ms against the original's 10: whichever the ranking puts
    first, their A/B in one process decides, and when it finds no significant difference (the usual case;
    a busy machine can tip a sleep-timed A/B either way) the search settles on `shorten` (one pass)."""
    config = OptimizeConfig(passes=("shorten", "tidy"), extra_modules=(PASSES,), max_depth=2, time_budget_s=240,
                            warmup_iters=2, min_duration_s=0.1, min_iters=5, max_duration_s=2.0, ab_blocks=16,
                            ab_iters_per_block=3, workdir=str(tmp_path / "work"))
    events: list[str] = []
    result = optimize(WORKLOAD, config, store=None, on_event=lambda kind, data: events.append(kind),
                      export_dir=tmp_path / "out")
    labels = {r["key"]: r["label"] for r in result.rows}
    assert set(labels.values()) == {"baseline", "shorten", "tidy", "tidy + shorten"}
    assert result.winner is not None and labels[result.winner] in ("shorten", "tidy + shorten")
    assert result.confirmation is not None and result.confirmation["ab"]["verdict"] == "faster"
    assert 1.6 < result.confirmation["ab"]["speedup"] < 2.5

    found = result.runner_up
    assert found is not None and "paired blocks" in found["describe"], found
    assert "versus" in events
    runner = labels[found["key"]]
    first = ({"shorten", "tidy + shorten"} - {runner}).pop()
    assert labels[result.winner] == (runner if found["switched"] else first)
    verdict = found["ab"]["verdict"]
    if verdict == SAME:
        assert labels[result.winner] == "shorten"
        assert found["reason"] == ("no significant difference, and shorten has fewer passes (1 against 2)"
                                   if runner == "shorten" else
                                   "no significant difference, and tidy + shorten is not simpler")
    else:  # the faster one by that A/B, as long as its own A/B against the baseline agrees
        assert found["switched"] == (verdict == FASTER)
        assert found["reason"] == f"{runner if verdict == FASTER else first} is faster"
    if found["switched"]:
        assert events.count("confirm") == 2  # the runner-up was confirmed against the baseline itself

    # The exported recipe replays a pass of the search's own pass module: a fresh process imports it from the
    # manifest (this process has it registered already, so the load is checked in another one).
    manifest = read_manifest(tmp_path / "out")
    assert manifest["label"] == labels[result.winner]
    assert manifest["pass_modules"] == [str(Path(PASSES).resolve())]
    code = ("import torch, dlperf; f = dlperf.load(r'%s'); print(tuple(f(torch.zeros(3, 4)).shape), f.sleep_s)"
            % (tmp_path / "out"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(3,", "2)", "0.005"]  # shortened: 5 ms of sleep, not the original's 10
