"""Refused requests (queue full, queue timeout, canceled, 401, shutting down) wrote no log line at any
--log-level: now one per reason at the first, then at most one every 10 s with the count since the last."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlperf.serve.metrics import Metrics
from dlperf.serve.refusals import RefusalLog

pytestmark = pytest.mark.unit


class _Timers:
    """A fake clock and scheduler: the test moves time and runs the lines that are due."""

    def __init__(self) -> None:
        self.now = 100.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def schedule(self, delay_s: float, action: Callable[[], None]) -> None:
        self.due.append((self.now + delay_s, action))

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        for when, action in sorted((d for d in self.due if d[0] <= end), key=lambda d: d[0]):
            self.due.remove((when, action))
            self.now = when  # each runs at its time, as a timer would
            action()
        self.now = end


def test_refusals_are_logged_once_per_reason_then_counted_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    timers = _Timers()
    refusals = RefusalLog(every_s=10.0, clock=lambda: timers.now, schedule=timers.schedule)
    with caplog.at_level("WARNING", logger="dlperf.serve"):
        refusals.note("REJECTED", "mlp")  # the first: at once
        for _ in range(36):
            timers.advance(0.1)
            refusals.note("REJECTED", "mlp")
        refusals.note("REJECTED", "bert")
        refusals.note("UNAUTHENTICATED")
        refusals.note("INVALID", "mlp")  # a bad request is the client's to see, not load shedding: no line
        assert len(caplog.records) == 2  # the rest of the burst waits for the interval's end
        timers.advance(10.0)  # the burst's end is written when its interval ends, not at the next refusal
        timers.advance(50.0)
        refusals.note("REJECTED", "mlp")
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "refused 1 request: the queue was full (reason REJECTED; --max-queue-size bounds it) "
                    "(model 'mlp': 1)"),
        ("WARNING", "refused 1 request: a missing or wrong bearer token (401 / UNAUTHENTICATED; the server's "
                    "--token)"),
        ("WARNING", "refused 37 requests in the last 10 s: the queue was full (reason REJECTED; --max-queue-size "
                    "bounds it) (model 'mlp': 36, 'bert': 1)"),
        ("WARNING", "refused 1 request in the last 54 s: the queue was full (reason REJECTED; --max-queue-size "
                    "bounds it) (model 'mlp': 1)"),
    ]
    assert not timers.due  # nothing pending: no line without refusals


def test_a_recorder_s_refusals_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Metrics().recorder("mlp", "default")
    with caplog.at_level("WARNING", logger="dlperf.serve"):
        recorder.failure("TIMEOUT", 1000)
        recorder.failure("CANCELED", 1000)
        recorder.failure("UNAVAILABLE", 1000)  # shutting down: it wrote no line, unlike the other refusals
        recorder.failure("BACKEND", 1000)  # logged where the batch failed, with its traceback
    assert [r.getMessage() for r in caplog.records] == [
        "refused 1 request: their queue timeout passed before they ran (reason TIMEOUT; --timeout-ms, or the "
        "request's 'timeout' parameter) (model 'mlp': 1)",
        "refused 1 request: their clients went away before the reply (reason CANCELED) (model 'mlp': 1)",
        "refused 1 request: the server was shutting down (reason UNAVAILABLE: sent while it drained, or still in "
        "it when --exit-timeout-s ended) (model 'mlp': 1)",
    ]
