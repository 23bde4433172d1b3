"""bench's warnings carry the timer's stop note: a cap that cut a batch size short of its minimums is said."""

from __future__ import annotations

import pytest

from dlperf.measure.clock import FakeClock
from dlperf.measure.notes import bench_warnings
from dlperf.measure.timer import TimerConfig, time_callable

pytestmark = pytest.mark.unit


def test_a_capped_batch_size_is_named_in_the_warnings() -> None:
    capped = time_callable(lambda: None,
                           TimerConfig(warmup_iters=0, min_duration_s=5.0, min_iters=5, max_iters=10_000),
                           FakeClock(base_ns=1_000))
    full = time_callable(lambda: None, TimerConfig(warmup_iters=0, min_duration_s=0.0, min_iters=5),
                         FakeClock(base_ns=1_000))
    lines = bench_warnings([{"batch_size": 1, "summary": capped.summary()},
                            {"batch_size": 8, "summary": full.summary()}])
    assert lines == ["batch 1: stopped at the 10,000-iteration cap after 0.01 s, before the minimum duration of 5 s; "
                     "each call is short and this many samples suffice"]
