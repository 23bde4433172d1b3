"""The confirming A/B of a search judged without the paired blocks where a side stalled: a fake clock gives the
baseline's calls ~1000x in some blocks, as attn_wl.py's onnxruntime confirmation had in 5 of 16."""

from __future__ import annotations

import pytest

from dlperf.measure.ab import FASTER, SAME, ABConfig, ABResult, ab_test
from dlperf.measure.clock import FakeClock
from dlperf.optimize.evaluate import ab_without_stalled_blocks
from dlperf.optimize.explain import stalled_blocks

pytestmark = pytest.mark.unit

BLOCKS, PER = 16, 5
A_NS, B_NS, STALLED_NS = 4_000, 1_000, 4_000_000  # the candidate (B) 4x faster; A stalled 1000x


def _timed(stalled_a: set[int], noise: int = 0) -> ABResult:
    """An A/B on a fake clock whose planned durations follow ab_test's ABBA order."""
    planned: list[int] = []
    for k in range(BLOCKS):
        a = [(STALLED_NS if k in stalled_a else A_NS) + (j * noise) for j in range(PER)]
        b = [B_NS + ((k * 7 + j) % 3) * noise for j in range(PER)]
        planned += a + b if k % 2 == 0 else b + a
    config = ABConfig(blocks=BLOCKS, iters_per_block=PER, warmup_iters=0)
    return ab_test(lambda: None, lambda: None, config, FakeClock(planned))


def test_stalled_baseline_blocks_are_left_out_and_said() -> None:
    result = _timed({0, 1, 2, 3, 9}, noise=10)
    assert result.speedup > 10  # the 20% trim keeps 2 of the 5 stalled blocks: 11.38x in the walk-through
    out = ab_without_stalled_blocks(result, ("baseline", "winner"))
    ab = out["ab"]
    assert ab["speedup"] == pytest.approx(4.0, rel=0.03)
    assert ab["verdict"] == FASTER
    assert ab["stalled_blocks"]["blocks"] == [0, 1, 2, 3, 9]
    assert ab["stalled_blocks"]["all_blocks"]["speedup"] == pytest.approx(result.speedup)
    assert len(ab["block_ratios"]) == BLOCKS  # every block's ratio is kept in the record
    assert "11 paired blocks" in out["describe"] and "5 of 16 blocks left out" in out["describe"]
    assert "blocks 1 (baseline 995x), 2 (baseline 995x)" in out["describe"]


def test_too_many_stalled_blocks_are_not_judged() -> None:
    result = _timed(set(range(0, 16, 2)) | {1})  # 9 of 16
    out = ab_without_stalled_blocks(result, ("baseline", "winner"))
    assert out["ab"]["verdict"] == SAME
    assert "too few blocks left" in out["ab"]["disturbed"]
    assert out["describe"].startswith("winner vs baseline: not judged")


def test_an_unstalled_ab_is_unchanged() -> None:
    result = _timed(set(), noise=10)
    out = ab_without_stalled_blocks(result, ("baseline", "winner"))
    assert out["ab"] == result.to_dict()
    assert out["describe"] == result.describe("baseline", "winner")


def test_stalled_blocks_names_the_side_and_factor() -> None:
    found = stalled_blocks([1.0, 1.1, 0.9, 1.0], [2.0, 2.0, 40.0, 2.0])
    assert list(found) == [2]
    assert found[2][0] == "b" and found[2][1] == pytest.approx(20.0)  # of the fastest B block, 2.0
    assert stalled_blocks([1.0, 9.0, 1.0, 1.0], [1.0] * 4) == {}  # 9x is under STALL_FACTOR
    assert list(stalled_blocks([50.0, 1.0, 50.0, 50.0], [1.0] * 4)) == [0, 2, 3]  # most blocks stalled
