"""collate() with a fake clock; the Batcher's queue bound, drain and signals; run_batch's split and failure."""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from dlperf.errors import ConfigError
from dlperf.serve.batcher import (
    Batcher,
    BatchPolicy,
    LevelPolicy,
    Occupancy,
    QueueFull,
    ShuttingDown,
    Signals,
    Work,
    _Tracker,
    collate,
)
from dlperf.serve.instances import ServedModel, Signature, TensorSpec, run_batch

pytestmark = pytest.mark.unit

MS = 1_000_000


@dataclass
class Q:
    arrival_ns: int
    items: int = 1
    key: Any = "a"
    deadline_ns: int | None = None
    priority: int = 0


FIXED = BatchPolicy(max_batch_size=8, max_queue_delay_s=0.005, adaptive=False)
BUSY = Signals(in_system=3, peak_in_system=16, busy_arrival_rate=10_000.0)


def test_partial_batch_waits_until_the_oldest_request_has_waited_the_delay() -> None:
    pending = [Q(0), Q(1 * MS), Q(2 * MS)]
    d = collate(pending, 3 * MS, FIXED)
    assert d.take == [] and d.wait_until_ns == 5 * MS
    d = collate(pending, 5 * MS, FIXED)
    assert d.take == [0, 1, 2] and d.reason == "delay"


def test_full_batch_goes_at_once_and_own_batch_dimension_counts() -> None:
    pending = [Q(0, items=3), Q(0, items=4), Q(0, items=2), Q(0, items=1)]
    d = collate(pending, 0, FIXED)
    # 3 + 4 = 7; the next (2) would pass 8, so the batch is as full as it gets and never exceeds the max
    assert d.take == [0, 1] and d.reason == "full"
    d = collate([Q(0, items=8)], 0, FIXED)
    assert d.take == [0] and d.reason == "full"


def test_incompatible_shapes_are_not_joined_and_keep_their_place() -> None:
    pending = [Q(0, key="s64"), Q(1, key="s128"), Q(2, key="s64")]
    d = collate(pending, 10 * MS, FIXED)
    assert d.take == [0, 2]


def test_expired_requests_are_reported_and_the_wake_up_honours_deadlines() -> None:
    pending = [Q(0, deadline_ns=2 * MS), Q(1 * MS, deadline_ns=3 * MS), Q(1 * MS)]
    d = collate(pending, 2 * MS, FIXED)
    assert d.expired == [0]
    assert d.take == []
    # the oldest live request arrived at 1 ms -> delay deadline 6 ms; a request times out at 3 ms first
    assert d.wait_until_ns == 3 * MS


def test_a_delayed_level_keeps_late_requests_and_serves_them_after_its_others() -> None:
    # one level, DELAY: the late request is not expired; the two still in time go first, then it
    delay = dataclasses.replace(FIXED, max_batch_size=2, delayed_levels=frozenset({0}))
    pending = [Q(0, deadline_ns=2 * MS), Q(1 * MS, deadline_ns=50 * MS), Q(1 * MS)]
    d = collate(pending, 10 * MS, delay)
    assert d.expired == [] and d.take == [1, 2] and d.reason == "full"
    # alone, it runs when an instance is free (its queue delay is long past)
    d = collate(pending[:1], 10 * MS, delay)
    assert d.take == [0] and d.reason == "delay"
    # a deadline already passed does not make the instance wake at once and spin: only future ones count
    d = collate([Q(0, key="b", deadline_ns=2 * MS), Q(9 * MS, deadline_ns=12 * MS)], 10 * MS,
                dataclasses.replace(delay, max_batch_size=8))
    assert d.take == [] and d.wait_until_ns == 12 * MS  # not 2 ms, the late one's (other shape) deadline
    d = collate([Q(4 * MS, deadline_ns=8 * MS), Q(9 * MS, deadline_ns=12 * MS)], 10 * MS,
                dataclasses.replace(delay, max_batch_size=8, max_queue_delay_s=0.1))
    assert d.take == [] and d.wait_until_ns == 12 * MS
    # the same queue under REJECT: the late one is expired
    assert collate(pending, 10 * MS, dataclasses.replace(delay, delayed_levels=frozenset())).expired == [0]


def test_a_delayed_request_waits_for_its_level_but_not_for_lower_ones() -> None:
    # level 1 delays, level 2 rejects: a late level-1 request goes after level 1's others and before level 2
    policy = dataclasses.replace(LEVELS, max_batch_size=1, delayed_levels=frozenset({1}))
    late1, fresh1 = Q(0, priority=1, deadline_ns=1 * MS), Q(2 * MS, priority=1)
    fresh2, late2 = Q(1 * MS, priority=2), Q(0, priority=2, deadline_ns=1 * MS)
    pending = [late1, fresh2, fresh1, late2]
    d = collate(pending, 10 * MS, policy)
    assert d.expired == [3] and d.take == [2]
    d = collate([late1, fresh2], 10 * MS, policy)
    assert d.take == [0]


def test_unbatched_policy_sends_one_request_at_a_time() -> None:
    d = collate([Q(0), Q(0)], 0, BatchPolicy(0, 0.005))
    assert d.take == [0] and d.reason == "unbatched"


@pytest.mark.parametrize(
    ("signals", "reason"),
    [
        (Signals(in_system=1, peak_in_system=1, busy_arrival_rate=math.inf), "closed-loop"),
        (Signals(in_system=2, peak_in_system=16, busy_arrival_rate=50.0), "low-rate"),
        # 250/s over the 4 ms left: exactly one more arrival expected, which is worth waiting for
        (Signals(in_system=2, peak_in_system=16, busy_arrival_rate=250.0), ""),
        (BUSY, ""),
    ],
)
def test_adaptive_wait_ends_early_only_when_waiting_cannot_help(signals: Signals, reason: str) -> None:
    policy = BatchPolicy(8, 0.005, adaptive=True)
    d = collate([Q(0), Q(0)], 1 * MS, policy, signals)
    assert d.reason == reason
    assert (d.take == [0, 1]) == bool(reason)


def _work(key: str = "a", items: int = 1, arrival: int = 0) -> Work:
    return Work([np.zeros((items, 2), np.float32)], items, key, arrival)


LEVELS = BatchPolicy(max_batch_size=4, max_queue_delay_s=0.005, adaptive=False, priority_levels=3)


def test_priority_levels_fill_a_batch_from_the_highest_level_down_fifo_within_a_level() -> None:
    pending = [Q(0, priority=3), Q(1, priority=2), Q(2, priority=1), Q(3, priority=3), Q(4, priority=1)]
    d = collate(pending, 5, LEVELS)
    # full at 4: both level-1 requests, then level 2, then the oldest level 3; the newest level 3 waits
    assert d.take == [2, 4, 1, 0] and d.reason == "full"
    # without levels the same queue goes in arrival order
    d = collate(pending, 5, dataclasses.replace(LEVELS, priority_levels=0))
    assert d.take == [0, 1, 2, 3]


def test_a_partial_batch_waits_for_its_oldest_member_whatever_its_level() -> None:
    pending = [Q(0, priority=2), Q(3 * MS, priority=1)]
    d = collate(pending, 4 * MS, LEVELS)
    assert d.take == [] and d.wait_until_ns == 5 * MS  # the level-2 request arrived first
    d = collate(pending, 5 * MS, LEVELS)
    assert d.take == [1, 0] and d.reason == "delay"


def test_a_high_level_request_of_another_shape_goes_first_alone() -> None:
    pending = [Q(0, key="s64", priority=2), Q(1, key="s128", priority=1), Q(2, key="s64", priority=2)]
    d = collate(pending, 10 * MS, LEVELS)
    assert d.take == [1]


@pytest.mark.parametrize(("priority", "level", "level_default_1"),
                         [(0, 3, 1), (1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 3, 1), (2**64 - 1, 3, 1)])
def test_priority_to_level_follows_triton_zero_or_too_high_gets_the_default(
        priority: int, level: int, level_default_1: int) -> None:
    assert LEVELS.level_of(priority) == level
    assert dataclasses.replace(LEVELS, default_priority_level=1).level_of(priority) == level_default_1
    assert BatchPolicy().level_of(priority) == 0


@pytest.mark.parametrize(("levels", "default", "message"), [
    (-1, 0, r"priority-levels \(priority_levels\) must be >= 0"), (0, 2, "needs --priority-levels"),
    (3, 4, "must be in 1..3"),
])
def test_bad_priority_configuration_is_refused(levels: int, default: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BatchPolicy(priority_levels=levels, default_priority_level=default)


def test_with_priority_levels_the_queue_bound_holds_for_each_level() -> None:
    b = Batcher(LEVELS, max_queue_size=2, clock=lambda: 0)
    for _ in range(2):
        low = _work()
        low.priority = 3
        b.submit(low)
    extra = _work()
    extra.priority = 3
    with pytest.raises(QueueFull, match="2 requests are queued at priority level 3"):
        b.submit(extra)
    high = _work()
    high.priority = 1
    b.submit(high)  # the flood at level 3 does not lock level 1 out
    assert b.pending_count == 3


def test_draining_keeps_the_priority_order() -> None:
    b = Batcher(LEVELS, clock=lambda: 0)
    low, high = _work(), _work()
    low.priority, high.priority = 3, 1
    b.submit(low)
    b.submit(high)
    b.close()
    assert b.next_batch() == [high, low]


def test_bounded_queue_rejects_at_once_and_close_refuses_new_work() -> None:
    b = Batcher(BatchPolicy(4, 0.005), max_queue_size=2, clock=lambda: 0)
    b.submit(_work())
    b.submit(_work())
    with pytest.raises(QueueFull, match="Exceeds maximum queue size"):
        b.submit(_work())
    assert b.pending_count == 2
    b.close()
    with pytest.raises(ShuttingDown):
        b.submit(_work())
    # draining: what is queued still runs (the wait is cut short), then None
    batch = b.next_batch()
    assert batch is not None and len(batch) == 2
    assert b.next_batch() is None


def test_the_queue_bound_counts_what_is_still_queued_after_every_way_out_of_the_queue() -> None:
    """The bound is checked against running counts (not a pass over the queue on each submit): each way a request
    leaves the queue (a batch, an expiry, a withdrawal, the drain) must give its place back, per level."""
    now = [0]
    b = Batcher(dataclasses.replace(LEVELS, max_batch_size=1), max_queue_size=2, clock=lambda: now[0])

    def at(level: int, deadline_ns: int | None = None) -> Work:
        w = _work()
        w.priority, w.deadline_ns = level, deadline_ns
        return w

    first, second = at(1), at(1, deadline_ns=10)
    b.submit(first)
    b.submit(second)
    with pytest.raises(QueueFull, match="2 requests are queued at priority level 1"):
        b.submit(at(1))
    b.submit(at(2))  # another level has its own room
    assert b.withdraw(first)
    third = at(1)
    b.submit(third)  # the withdrawn one's place
    with pytest.raises(QueueFull):
        b.submit(at(1))
    now[0] = 20  # `second` is past its deadline
    assert b.expire(second)
    b.submit(at(1))
    with pytest.raises(QueueFull):
        b.submit(at(1))
    assert b.next_batch() == [third]  # a batch of one (max batch 1), the oldest level-1 request
    b.submit(at(1))
    with pytest.raises(QueueFull):
        b.submit(at(1))
    b.close()
    drained = 0
    while (batch := b.next_batch()) is not None:
        drained += len(batch)
    assert drained == 3 and b._queued == {1: 0, 2: 0} and b._handed == 0


def test_a_level_with_its_own_bound_rejects_at_it_and_the_others_keep_the_default() -> None:
    b = Batcher(LEVELS, max_queue_size=2, clock=lambda: 0, level_queue_sizes={1: 1, 3: 0})

    def at(level: int) -> Work:
        w = _work()
        w.priority = level
        return w

    b.submit(at(1))
    with pytest.raises(QueueFull, match=r"1 requests are queued at priority level 1 "
                                        r"\(--priority-queue-policy 1:max_queue_size=1\)"):
        b.submit(at(1))
    b.submit(at(2))
    b.submit(at(2))
    with pytest.raises(QueueFull, match=r"at priority level 2 \(--max-queue-size 2\)"):
        b.submit(at(2))
    for _ in range(5):  # level 3: 0 = unbounded, although --max-queue-size is 2
        b.submit(at(3))
    assert b.pending_count == 8


def test_level_policies_refuse_what_cannot_work() -> None:
    with pytest.raises(ConfigError, match="give at least one of max_queue_size=N, timeout_ms=T, timeout_action"):
        LevelPolicy(1)
    with pytest.raises(ConfigError, match="timeout_action must be reject or delay, got 'drop'"):
        LevelPolicy(1, timeout_action="drop")
    assert LevelPolicy(1, allow_timeout_override=False).timeout_action is None
    with pytest.raises(ConfigError, match="max_queue_size must be >= 0"):
        LevelPolicy(1, max_queue_size=-1)
    with pytest.raises(ConfigError, match="timeout_ms must be a positive number, got 0"):
        LevelPolicy(2, timeout_s=0.0)


def test_expire_fails_a_still_queued_request_once_and_leaves_a_taken_one_alone() -> None:
    now = [0]
    done: list[Work] = []
    b = Batcher(BatchPolicy(1, 0.0), clock=lambda: now[0])
    taken, queued = _work(), _work()
    for w in (taken, queued):
        w.on_done = done.append
        b.submit(w)
    assert b.next_batch() == [taken]
    now[0] = 250 * MS
    assert b.expire(queued) is True
    assert done == [queued] and queued.error_reason == "TIMEOUT"
    assert "waited 250.0 ms in the queue" in str(queued.error)
    assert b.pending_count == 0 and b.in_system == 1  # the taken one is still running
    assert b.expire(queued) is False and b.expire(taken) is False
    assert done == [queued] and taken.error is None


def test_withdraw_takes_a_queued_request_out_unanswered_and_leaves_a_taken_one_alone() -> None:
    done: list[Work] = []
    b = Batcher(BatchPolicy(1, 0.0))
    taken, queued, last = _work(), _work(), _work()
    for w in (taken, queued, last):
        w.on_done = done.append
        b.submit(w)
    assert b.next_batch() == [taken]
    assert b.withdraw(queued) is True
    assert done == [] and queued.error is None  # no answer: whoever withdraws it answers, if anyone
    assert b.pending_count == 1 and b.in_system == 2  # `last` queued, `taken` running
    assert b.withdraw(queued) is False and b.withdraw(taken) is False
    assert b.next_batch() == [last]  # the queue goes on without it


def test_next_batch_fails_expired_requests_through_their_callbacks() -> None:
    now = [10 * MS]
    done: list[Work] = []
    b = Batcher(BatchPolicy(1, 0.0), clock=lambda: now[0])
    late = _work(arrival=0)
    late.deadline_ns = 5 * MS
    late.on_done = done.append
    ok = _work(arrival=1)
    b.submit(late)
    b.submit(ok)
    batch = b.next_batch()
    assert batch == [ok]
    assert done == [late] and late.error_reason == "TIMEOUT"
    assert "Request timeout expired" in str(late.error)


def test_requests_that_expire_in_the_queue_leave_the_closed_loop_count() -> None:
    """A request failed for its timeout by next_batch is out of the system: counted on, each expiry raised the
    in-system count for good, and the closed-loop signal (in system >= its recent peak) read a loop that was not."""
    now = [0]
    b = Batcher(BatchPolicy(1, 0.0), clock=lambda: now[0])
    late, ok = _work(), _work()
    late.deadline_ns = 5 * MS
    b.submit(late)
    b.submit(ok)
    assert b.in_system == 2
    now[0] = 10 * MS
    assert b.next_batch() == [ok] and late.error_reason == "TIMEOUT"
    assert b.in_system == 1  # `ok` runs; `late` is gone
    b.release(1)
    assert b.in_system == 0


def test_the_recent_peak_in_the_system_spans_the_last_one_to_two_seconds() -> None:
    """The closed-loop signal compares the requests in the system with their recent peak: the peak of the window
    that just ended is kept through the next one (forgotten at the window's roll, 4 clients that had all been in
    the server read as a loop of 0), a window older than that is forgotten (4 clients gone, 1 left, read as a loop
    of 4 that never completes), and what is in the system when a window starts is that window's peak so far."""
    now = [0]
    occupancy = Occupancy(clock=lambda: now[0])
    for _ in range(4):
        occupancy.arrive(0)
    assert occupancy.counts(0) == (4, 4)
    occupancy.leave(500 * MS, 4)
    assert occupancy.counts(1500 * MS) == (0, 4)  # a new window: the last one's peak still counts
    for _ in range(3):
        occupancy.arrive(1600 * MS)
    occupancy.leave(1700 * MS, 2)
    assert occupancy.counts(1700 * MS) == (1, 4)
    # 2.5 s after the window began: both windows are past, and the one request still in is the peak
    assert occupancy.counts(4000 * MS) == (1, 1)


def test_the_busy_arrival_rate_counts_only_arrivals_into_a_busy_system() -> None:
    """The low-rate rule asks how many requests will join a waiting batch: those that arrive while one is already
    in the system. Counting every arrival, a client sending one request at a time (each served before the next)
    read as 10 arrivals per busy 10 ms, and batches waited for company that never came."""
    tracker = _Tracker(0)
    for i in range(20):  # one request every 100 ms, served in 10 ms
        tracker.arrive(i * 100 * MS)
        tracker.leave(i * 100 * MS + 10 * MS, 1)
    assert tracker.signals(2000 * MS).busy_arrival_rate == 0.0
    for i in range(20, 40):  # now a second request comes 5 ms into each busy 10 ms: about 100/s while busy
        tracker.arrive(i * 100 * MS)
        tracker.arrive(i * 100 * MS + 5 * MS)
        tracker.leave(i * 100 * MS + 10 * MS, 2)
    assert tracker.signals(4000 * MS).busy_arrival_rate == pytest.approx(100.0, rel=0.25)


def test_closed_loop_signal_tracks_requests_in_the_system() -> None:
    now = [0]
    b = Batcher(BatchPolicy(8, 1.0), clock=lambda: now[0])
    for _ in range(3):
        b.submit(_work())
    assert b.in_system == 3
    batch = b.next_batch()  # 3 in the system = the peak: nobody else is coming
    assert batch is not None and len(batch) == 3 and b.last_reason == "closed-loop"
    b.release(3)
    assert b.in_system == 0


def test_a_request_an_idle_instance_is_woken_for_is_not_counted_as_queued() -> None:
    """Two clients, one idle instance, --max-queue-size 1: the second request may arrive before the instance
    thread, woken for the first, has taken it. Both were counted as queued and the second refused (40% of two
    synchronous tritonclient clients' requests, zoo:mlp at max batch 1); a third one is queued past the bound."""
    b = Batcher(BatchPolicy(1, 0.0), max_queue_size=1)
    got: list[list[Work] | None] = []
    instance = threading.Thread(target=lambda: got.append(b.next_batch()), daemon=True)
    instance.start()
    for _ in range(3000):
        if b.idle_instances == 1:
            break
        instance.join(0.01)
    assert b.idle_instances == 1
    first, second = _work(), _work()
    with b._cond:  # the instance cannot take the first request before the second one comes
        b.submit(first)
        b.submit(second)
        with pytest.raises(QueueFull, match="1 requests are queued"):
            b.submit(_work())
    instance.join(30)
    assert got == [[first]]
    assert b.next_batch() == [second]
    b.close()


def test_a_b_variants_count_their_clients_as_one_closed_loop() -> None:
    """Two clients split over variants a and b: once both are in the server, nobody else is coming, so a's
    partial batch goes at once. Each batcher counted only its own requests, and a variant that had once held
    both clients waited the whole queue delay (1000 s here) for a second request that was b's."""
    now = [0]
    occupancy = Occupancy(clock=lambda: now[0])
    policy = BatchPolicy(8, 1000.0)
    a = Batcher(policy, clock=lambda: now[0], occupancy=occupancy)
    b = Batcher(policy, clock=lambda: now[0], occupancy=occupancy)
    for _ in range(2):  # chance sent both clients to a: the peak is 2
        a.submit(_work())
    first = a.next_batch()
    assert first is not None and len(first) == 2
    a.release(2)
    a.submit(_work())  # now one client each
    got: list[list[Work] | None] = []
    waiter = threading.Thread(target=lambda: got.append(a.next_batch()), daemon=True)
    waiter.start()
    b.submit(_work())  # completes the loop: a must not wait for the deadline
    waiter.join(30)
    waited_out = waiter.is_alive()
    if waited_out:
        a.close()  # hand the waiting instance its batch, so that the thread ends
        waiter.join(30)
    assert not waited_out and got and got[0] is not None and a.last_reason == "closed-loop"
    batch = b.next_batch()
    assert batch is not None and b.last_reason == "closed-loop"
    assert occupancy.counts(now[0]) == (2, 2)


SIG = Signature((TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1, 2)),))


def _model(runner: Any) -> ServedModel:
    return ServedModel("m", SIG, lambda i: runner)


def test_run_batch_splits_outputs_back_to_each_request() -> None:
    works = [Work([np.full((n, 2), float(n), np.float32)], n, "a", 0) for n in (1, 3, 2)]
    finished: list[Work] = []
    for w in works:
        w.on_done = finished.append
    run_batch(lambda arrays: [arrays[0] * 10], works, _model(None))
    assert finished == works
    for w in works:
        assert w.error is None and w.batch_size == 6
        np.testing.assert_array_equal(w.result[0], np.full((w.items, 2), 10.0 * w.items))  # type: ignore[index]


def test_a_failing_batch_fails_each_request_with_a_useful_message() -> None:
    def boom(arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("shape mismatch in layer 3")

    works = [_work(), _work()]
    run_batch(boom, works, _model(boom))
    for w in works:  # each also failed alone (run again after the batch failed): its own error
        assert w.error_reason == "BACKEND"
        assert "model 'm' failed on a batch of 1 item (1 request; first request: x[1, 2])" in str(w.error)
        assert "RuntimeError: shape mismatch in layer 3" in str(w.error)
    # with variants, which one failed (an A/B audit could not tell)
    from dlperf.serve.metrics import Metrics

    works = [_work()]
    run_batch(boom, works, _model(boom), Metrics().recorder("m", "b"))
    assert "model 'm' (variant 'b') failed on a batch of 1 item" in str(works[0].error)


def test_a_request_batched_with_one_that_makes_the_model_raise_gets_its_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    """One request's input that made the model raise failed every request of its batch, with that input's error (a
    walk-through saw 23 of 190 good requests fail so): each is run again alone, and only the bad one fails."""
    from dlperf.serve.metrics import Metrics, parse_variant_metrics

    calls: list[int] = []

    def picky(arrays: list[np.ndarray]) -> list[np.ndarray]:
        calls.append(arrays[0].shape[0])
        if (arrays[0] < 0).any():
            raise ValueError(f"negative input in row {int(np.argmax((arrays[0] < 0).any(axis=1)))}")
        return [arrays[0] * 10]

    works = [Work([np.full((n, 2), v, np.float32)], n, "a", 0) for n, v in ((1, 1.0), (2, -1.0), (3, 3.0))]
    works[1].request_id = "bad-1"
    metrics = Metrics()
    with caplog.at_level("WARNING", logger="dlperf.serve"):
        run_batch(picky, works, _model(picky), metrics.recorder("m", "default"))
    assert calls == [6, 1, 2, 3]  # the batch once, then each request alone, once
    np.testing.assert_array_equal(works[0].result[0], np.full((1, 2), 10.0))  # type: ignore[index]
    np.testing.assert_array_equal(works[2].result[0], np.full((3, 2), 30.0))  # type: ignore[index]
    assert works[0].error is None and works[2].error is None and works[0].batch_size == 1
    # the bad request gets its own error (row 0 of its own input), not the batch's (row 1 of the joined one)
    assert works[1].error_reason == "BACKEND" and works[1].result is None
    assert str(works[1].error).endswith("failed on a batch of 2 items (1 request; first request: x[2, 2]): "
                                        "ValueError: negative input in row 0")
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert logged == [
        ("WARNING", "model 'm' failed on a batch of 6 items (3 requests; first request: x[1, 2]): ValueError: "
                    "negative input in row 1; its requests are run again one at a time [request id: bad-1]"),
        ("ERROR", "model 'm' failed on a batch of 2 items (1 request; first request: x[2, 2]): ValueError: "
                  "negative input in row 0 [request id: bad-1]"),
    ]
    m = parse_variant_metrics(metrics.exposition()[0].decode())["default"]
    assert m.batch_retry_total == 1 and m.exec_count_total == 2 and m.inference_count_total == 4
    stats = metrics.stats_dict("m", "1")
    assert stats["execution_count"] == 2 and stats["inference_count"] == 4
    # a batch that succeeds runs once, and a batch of one that fails is not run again
    calls.clear()
    run_batch(picky, [_work(), _work()], _model(picky))
    single = [Work([np.full((1, 2), -1.0, np.float32)], 1, "a", 0)]
    run_batch(picky, single, _model(picky), metrics.recorder("m", "default"))
    assert calls == [2, 1] and single[0].error_reason == "BACKEND"
    assert parse_variant_metrics(metrics.exposition()[0].decode())["default"].batch_retry_total == 1


def test_a_failed_batch_is_logged_with_the_ids_of_its_requests(caplog: pytest.LogCaptureFixture) -> None:
    def boom(arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("nan in layer 3")

    works = [_work(), _work(), _work()]
    works[0].request_id, works[2].request_id = "a1", "c3"  # the second request sent no id
    many = [_work() for _ in range(20)]
    for i, w in enumerate(many):
        w.request_id = f"r{i}"
    with caplog.at_level("WARNING", logger="dlperf.serve"):
        run_batch(boom, works, _model(boom))
        run_batch(boom, [_work()], _model(boom))
        run_batch(boom, many, _model(boom))
    logged = [r.getMessage() for r in caplog.records]
    then = "; its requests are run again one at a time"
    assert logged[0].endswith(f"RuntimeError: nan in layer 3{then} [request ids: a1, c3]")
    # each failed alone too, logged with its own id
    ends = ("nan in layer 3 [request id: a1]", "nan in layer 3", "nan in layer 3 [request id: c3]")
    assert all(m.endswith(end) and "batch of 1 item" in m for m, end in zip(logged[1:4], ends, strict=True))
    assert logged[4].endswith("RuntimeError: nan in layer 3")  # no id sent: none named
    assert logged[5].endswith(f"{then} [request ids: {', '.join(f'r{i}' for i in range(16))} and 4 more]")
    assert all("a1" not in str(w.error) for w in works)  # the clients' message names no other request


def test_a_model_that_drops_the_batch_dimension_is_an_error() -> None:
    works = [_work(), _work()]
    run_batch(lambda arrays: [np.zeros((1, 2), np.float32)], works, _model(None))
    # run again alone, each request's [1, 2] fits its batch of 1: it is the batch that the model cannot take
    assert all(w.error is None and w.batch_size == 1 for w in works)
    works = [_work(), _work()]
    run_batch(lambda arrays: [np.zeros((len(arrays[0]) + 1, 2), np.float32)], works, _model(None))
    assert all("first dimension of 1" in str(w.error) for w in works)


def test_a_single_request_hands_its_own_writable_aligned_arrays_to_the_model() -> None:
    seen: list[np.ndarray] = []

    def runner(arrays: list[np.ndarray]) -> list[np.ndarray]:
        seen.extend(arrays)
        return [arrays[0] + 1]

    writable = np.ones((1, 2), np.float32)
    run_batch(runner, [Work([writable], 1, "a", 0)], _model(runner))
    assert seen[0] is writable  # no copy

    read_only = np.frombuffer(np.ones(2, np.float32).tobytes(), np.float32).reshape(1, 2)
    work = Work([read_only], 1, "a", 0)
    run_batch(runner, [work], _model(runner))
    assert seen[1] is not read_only and seen[1].flags.writeable  # torch refuses read-only memory: copied
    np.testing.assert_array_equal(work.result[0], np.full((1, 2), 2.0))  # type: ignore[index]


def test_variants_with_other_signatures_are_refused_saying_what_differs() -> None:
    """The A/B audit's two variants, 64 and 32 input features: the error did not say what differed."""
    from dlperf.serve.service import ServeConfig, build_state

    def model(features: int) -> ServedModel:
        sig = Signature((TensorSpec("x", "FP32", (-1, features)),), (TensorSpec("y", "FP32", (-1, 4)),))
        return ServedModel("m", sig, lambda i: (lambda arrays: arrays))

    config = ServeConfig(variants=(("a", "wide"), ("b", "narrow")), port=0)
    with pytest.raises(ConfigError) as caught:
        build_state(config, {"wide": model(64), "narrow": model(32)})
    assert ("variant 'b' (narrow) has another signature than variant 'a' (inputs: 'a' x FP32 [64]; "
            "'b' x FP32 [32]; shapes past the batch dimension)") in str(caught.value)


def test_a_failure_is_logged_once_then_at_most_every_interval_with_the_count_meanwhile(
        caplog: pytest.LogCaptureFixture) -> None:
    from dlperf.errors import ServingError
    from dlperf.serve.instances import _FailureLog

    now = [100.0]
    failures = _FailureLog(every_s=60.0, clock=lambda: now[0])

    def fail(message: str) -> bool:
        try:
            raise ValueError(message)
        except ValueError as exc:
            return failures.report(ServingError(f"model 'm' failed: {exc}"), exc)

    with caplog.at_level("ERROR", logger="dlperf.serve"):
        assert fail("bad input")
        now[0] += 30
        assert not fail("bad input") and not fail("bad input")
        assert fail("another cause")  # a different failure is logged at once
        now[0] += 31
        assert fail("bad input")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["model 'm' failed: bad input", "model 'm' failed: another cause",
                        "model 'm' failed: bad input (the same failure came 2 more time(s) in the last 61 s)"]
    assert all(r.exc_info is not None and r.exc_info[0] is ValueError for r in caplog.records)


def test_batches_whose_requests_all_succeed_alone_say_the_model_may_not_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    """A model that fails on every batch of two or more had each batch fail and its requests run again one at a
    time, forever: only dlperf_inference_batch_retry_total and a line per failure message said so, and none said
    that every request succeeded alone. The first such batch says it, then at most one line a minute with the count."""
    from dlperf.serve.instances import _FailureLog
    from dlperf.serve.metrics import Metrics

    def single_only(arrays: list[np.ndarray]) -> list[np.ndarray]:
        if len(arrays[0]) > 1:
            raise RuntimeError(f"a batch of {len(arrays[0])} is not supported")
        if (arrays[0] < 0).any():
            raise ValueError("negative input")
        return [arrays[0] * 10]

    now = [100.0]
    failures = _FailureLog(every_s=60.0, clock=lambda: now[0])
    recorder = Metrics().recorder("m", "b")
    hint = ("succeeded alone: the model may not support batching (each such batch fails, then its requests run one "
            "at a time: batch-1 throughput plus the failed batch); serve it with --max-batch-size 1")
    with caplog.at_level("WARNING", logger="dlperf.serve"):
        works = [_work(), _work(), _work()]
        run_batch(single_only, works, _model(single_only), recorder, failures=failures)
        assert all(w.error is None for w in works)
        for n in (2, 5, 4):
            now[0] += 10
            run_batch(single_only, [_work() for _ in range(n)], _model(single_only), recorder, failures=failures)
        # a batch with a request that fails alone too is a bad input, not batching: not counted
        bad = [_work(), Work([np.full((1, 2), -1.0, np.float32)], 1, "a", 0)]
        run_batch(single_only, bad, _model(single_only), recorder, failures=failures)
        assert bad[1].error_reason == "BACKEND"
        now[0] += 31
        run_batch(single_only, [_work(), _work()], _model(single_only), recorder, failures=failures)
    lines = [r.getMessage() for r in caplog.records if "succeeded alone" in r.getMessage()]
    assert lines == [
        f"model 'm' (variant 'b'): a batch of 3 requests failed while each of its requests {hint}",
        f"model 'm' (variant 'b'): 4 batches of 2-5 requests failed in the last 61 s while each of their requests "
        f"{hint}",
    ]


def test_inputs_that_disagree_on_the_batch_size_are_both_named() -> None:
    from dlperf.serve.instances import validate_inputs
    from dlperf.serve.protocol import ProtocolError, Tensor

    model = ServedModel("two", Signature((TensorSpec("a", "FP32", (-1, 2)), TensorSpec("b", "FP32", (-1, 3))),
                                         (TensorSpec("y", "FP32", (-1, 2)),)), lambda i: lambda arrays: arrays)
    inputs = [Tensor("b", "FP32", np.zeros((3, 3), np.float32)), Tensor("a", "FP32", np.zeros((2, 2), np.float32))]
    with pytest.raises(ProtocolError) as info:
        validate_inputs(model, inputs, 8)
    # "an earlier input has 2" did not say which
    assert str(info.value) == "inputs disagree on the batch size: 'b' has 3, 'a' has 2"


def test_a_model_that_returns_more_rows_than_the_batch_is_an_error() -> None:
    """Two rows per item (a model that flattens a pair dimension into the batch) split at the batch's item
    counts would hand each request rows of the others, with a 200."""
    works = [_work(), _work()]
    run_batch(lambda arrays: [np.zeros((2 * len(arrays[0]), 2), np.float32)], works, _model(None))
    # run again alone too (after the batch failed), each fails with its own [2, 2]
    assert all(w.result is None and "has shape [2, 2], not a first dimension of 1" in str(w.error) for w in works)


def test_the_infer_time_is_the_model_call_s_and_the_input_time_the_join_before_it() -> None:
    """The statistics' compute_input and compute_infer (Triton's: perf_analyzer reports them apart) and each request's
    timings: the model's own time measured inside the call lies within the infer span, whatever the machine's
    speed; swapped, the infer time would be the join's (microseconds)."""
    import time

    from dlperf.serve.metrics import Metrics

    spans: list[int] = []

    def runner(arrays: list[np.ndarray]) -> list[np.ndarray]:
        start = time.monotonic_ns()
        while time.monotonic_ns() - start < 50 * MS:
            pass
        spans.append(time.monotonic_ns() - start)
        return [arrays[0] + 1]

    metrics = Metrics()
    works = [_work(), _work()]
    run_batch(runner, works, _model(runner), metrics.recorder("m", "default"))
    stats = metrics.stats_dict("m", "1")["batch_stats"]
    assert [s["batch_size"] for s in stats] == [2]
    assert stats[0]["compute_infer"]["ns"] >= spans[0]  # the model call lies between the infer span's two reads
    assert all(w.timings_ns["infer"] >= spans[0] for w in works)


def test_a_request_with_an_empty_batch_is_refused_and_batch_sizes_share_a_batching_key() -> None:
    """A [0, 2] request is a 400 (it ran the model on nothing and counted an execution); requests of 1 and 3 items of
    the same per-item shape can share a batch, so the batch size is not part of their key."""
    from dlperf.serve.instances import validate_inputs
    from dlperf.serve.protocol import ProtocolError, Tensor

    model = _model(None)
    with pytest.raises(ProtocolError, match="the request's batch dimension is 0") as info:
        validate_inputs(model, [Tensor("x", "FP32", np.zeros((0, 2), np.float32))], 8)
    assert info.value.status == 400
    _, one, key_one = validate_inputs(model, [Tensor("x", "FP32", np.zeros((1, 2), np.float32))], 8)
    _, three, key_three = validate_inputs(model, [Tensor("x", "FP32", np.zeros((3, 2), np.float32))], 8)
    assert (one, three) == (1, 3) and key_one == key_three
