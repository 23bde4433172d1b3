"""`dlperf ab` judges its blocks without those where a side stalled, as optimize's confirming A/B does: a model of
ours sleeps 0.5 ms a call, and side A 50 ms in the blocks the test names (a stall, as a model's OpenMP threads on a
shared machine have, about 1000x for whole blocks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlperf.compare.ab import ABRun, run_ab
from dlperf.compare.settings import parse_settings
from dlperf.measure.ab import SAME
from dlperf.report.compare_text import ab_verdict

pytestmark = pytest.mark.unit

WORKLOAD = '''
import os
import time

import torch

import dlperf


class Sleeper(torch.nn.Module):
    def __init__(self, side):
        super().__init__()
        self.side = side

    def forward(self, x):
        stalled = self.side == "a" and os.environ.get("DLPERF_TEST_STALL") == "1"
        time.sleep(0.05 if stalled else 0.0005)
        return x


def workload(side: str = "a") -> dlperf.Workload:
    return dlperf.Workload(name="sleeper", make_model=lambda: Sleeper(side), make_inputs=lambda b: (torch.zeros(b, 2),))
'''


def _ab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stalled: set[int], blocks: int = 8) -> ABRun:
    (tmp_path / "sleeper.py").write_text(WORKLOAD)
    monkeypatch.setenv("DLPERF_TEST_STALL", "1" if 0 in stalled else "0")  # for block 0 (and the warm-up)

    def on_block(done: int, total: int) -> None:  # block `done` (0-based) runs next
        os.environ["DLPERF_TEST_STALL"] = "1" if done in stalled else "0"

    return run_ab(f"{tmp_path / 'sleeper.py'}:workload", parse_settings("option.side=a"),
                  parse_settings("option.side=b"), blocks=blocks, iters_per_block=4, on_block=on_block)


def test_blocks_where_a_side_stalled_are_left_out_of_the_verdict_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _ab(tmp_path, monkeypatch, {2, 5})
    stalled = run.stalled_blocks
    assert stalled is not None and {2, 5} <= set(stalled["blocks"]), stalled
    assert len(stalled["block_ratios"]) == 8 and len(run.result.block_ratios) == 8 - len(stalled["blocks"])
    assert "3 (A " in stalled["where"] and "6 (A " in stalled["where"]
    assert run.warnings[0].startswith(f"the verdict leaves out {len(stalled['blocks'])} of 8 blocks, a side stalled "
                                      "in them: blocks ")
    assert "over all 8 blocks B speed " in run.warnings[0]
    assert f"without {len(stalled['blocks'])} stalled blocks)" in ab_verdict(run).plain
    again = ABRun.from_dict(run.to_dict())
    assert again.stalled_blocks == stalled and again.warnings[0] == run.warnings[0]


def test_too_many_stalled_blocks_are_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _ab(tmp_path, monkeypatch, {0, 1, 3, 4, 6}, blocks=8)
    assert run.result.verdict == SAME and run.stalled_blocks is not None
    assert "too few blocks left to judge" in run.stalled_blocks["disturbed"]
    assert ab_verdict(run).plain.startswith("verdict: not judged: a side stalled in ")
    assert run.warnings[0].startswith("not judged: ")
