"""Dynamic batching: a pure `collate` decision against monotonic deadlines, and the thread-safe queue around it.

`collate(pending, now_ns, policy, signals)` decides, for an idle model instance, which queued requests
to run now (in arrival order, compatible with the oldest, a request's own batch dimension counting
towards `max_batch_size`), which have timed out, and until when to wait otherwise. It is a pure
function of its arguments, so it is tested with a fake clock. `Batcher` holds the queue, calls
`collate` under a lock from each instance thread, and tracks the load signals the adaptive wait uses.

The wait: a partial batch waits at most `max_queue_delay` after its oldest request arrived (Triton's
`max_queue_delay_microseconds`). With `adaptive=True` (the default) it is dispatched earlier when the
measured traffic says waiting cannot pay off: every request the clients currently have outstanding is
already in the server (closed-loop clients, e.g. concurrency 1), or fewer than one more compatible
arrival is expected before the deadline (open-loop traffic at a low rate). See docs/serve.md.

Priority levels (Triton's `priority_levels`): with `BatchPolicy.priority_levels` N > 0 a request carries a
level 1 (highest) .. N, and a batch is filled from the highest level down, in arrival order within a
level; a request asking for priority 0 or one above N gets `default_priority_level`, as in Triton. The
queue bound holds per level; `LevelPolicy` (Triton's `priority_queue_policy`) gives a level its own bound,
timeout and timeout action.

Timeout actions (Triton's `timeout_action`): a queued request past its deadline is failed (REJECT, the
default: `collate` lists it as expired), or, on a level in `BatchPolicy.delayed_levels` (DELAY), kept and
served after every request of its level still within its deadline, before any lower level's.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dlperf.errors import ConfigError, ServingError


class Queued(Protocol):
    """What `collate` needs of a queued request."""

    @property
    def arrival_ns(self) -> int: ...

    @property
    def items(self) -> int: ...

    @property
    def key(self) -> Hashable: ...

    @property
    def deadline_ns(self) -> int | None: ...

    @property
    def priority(self) -> int: ...


TIMEOUT_ACTIONS = ("reject", "delay")
"""What happens to a request still queued at its deadline: failed with 503, or served late (Triton's REJECT
and DELAY)."""


@dataclass(frozen=True)
class LevelPolicy:
    """One priority level's own queue policy (an entry of Triton's `priority_queue_policy`): its queue bound,
    its requests' queue timeout, what a timeout does and whether a request's own timeout counts, each
    overriding `--max-queue-size` / `--timeout-ms` / `--timeout-action` / `--no-timeout-override` where set."""

    level: int
    max_queue_size: int | None = None
    """Queued requests of this level beyond which new ones get 503 (0 = unbounded); None: --max-queue-size."""
    timeout_s: float | None = None
    """Queue timeout of this level's requests (a request's own may shorten it); None: --timeout-ms."""
    timeout_action: str | None = None
    """'reject' or 'delay' (`TIMEOUT_ACTIONS`); None: --timeout-action."""
    allow_timeout_override: bool | None = None
    """Whether a request's own 'timeout' parameter may shorten the level's; None: the server's setting."""

    def __post_init__(self) -> None:
        where = f"--priority-queue-policy {self.level}"
        if (self.max_queue_size, self.timeout_s, self.timeout_action, self.allow_timeout_override) == (None,) * 4:
            raise ConfigError(f"{where}: give at least one of max_queue_size=N, timeout_ms=T, "
                              "timeout_action=reject|delay, allow_timeout_override=true|false")
        if self.timeout_action is not None and self.timeout_action not in TIMEOUT_ACTIONS:
            raise ConfigError(f"{where}: timeout_action must be reject or delay, got '{self.timeout_action}'")
        if self.max_queue_size is not None and self.max_queue_size < 0:
            raise ConfigError(f"{where}: max_queue_size must be >= 0 (0 = unbounded), got {self.max_queue_size}")
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ConfigError(f"{where}: timeout_ms must be a positive number, got {self.timeout_s * 1000:g}")


@dataclass(frozen=True)
class BatchPolicy:
    """How requests are joined into batches. `max_batch_size` 0 or 1 disables batching."""

    max_batch_size: int = 32
    max_queue_delay_s: float = 0.005
    adaptive: bool = True
    priority_levels: int = 0
    """0: one level, a request's `priority` is ignored; N: levels 1 (highest) .. N."""
    default_priority_level: int = 0
    """The level of a request without a valid priority; 1..N when there are levels (default: N, the lowest)."""
    delayed_levels: frozenset[int] = frozenset()
    """Levels (0 without priority levels) whose requests past their deadline stay queued behind the level's
    others instead of failing (Triton's timeout_action DELAY)."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 0:
            raise ConfigError(f"--max-batch-size (max_batch_size) must be >= 0 (0 or 1: no batching), "
                              f"got {self.max_batch_size}")
        if not 0 <= self.max_queue_delay_s < math.inf:  # NaN too: the batcher's wait would fail on every request
            raise ConfigError(f"--max-queue-delay-ms (max_queue_delay_s, in seconds) must be a number >= 0, "
                              f"got {self.max_queue_delay_s * 1000:g} ms")
        if self.priority_levels < 0:
            raise ConfigError("--priority-levels (priority_levels) must be >= 0 (0 = none), "
                              f"got {self.priority_levels}")
        if self.priority_levels == 0 and self.default_priority_level != 0:
            raise ConfigError(f"--default-priority-level (default_priority_level) {self.default_priority_level} needs "
                              "--priority-levels (priority_levels)")
        if self.priority_levels and not 0 <= self.default_priority_level <= self.priority_levels:
            raise ConfigError(f"--default-priority-level (default_priority_level) must be in 1..{self.priority_levels} "
                              f"(--priority-levels), got {self.default_priority_level}")

    @property
    def default_level(self) -> int:
        """The level given to requests without a valid priority (the lowest unless configured)."""
        return self.default_priority_level or self.priority_levels

    def level_of(self, priority: int) -> int:
        """A request's queue level from its `priority` parameter, Triton's rule: 0, or a value above the
        levels, gets the default level; without levels every request is level 0."""
        if not self.priority_levels:
            return 0
        return priority if 1 <= priority <= self.priority_levels else self.default_level

    @property
    def batch_limit(self) -> int:
        return max(1, self.max_batch_size)

    @property
    def max_queue_delay_ns(self) -> int:
        return int(self.max_queue_delay_s * 1e9)


@dataclass(frozen=True)
class Signals:
    """Measured traffic that lets the adaptive wait end early."""

    in_system: int = 0
    """Requests now queued or executing."""
    peak_in_system: int = 0
    """The most requests in the system recently (about the clients' concurrency in a closed loop)."""
    busy_arrival_rate: float = math.inf
    """Arrivals per second while the system held at least one request (inf: unknown yet)."""


@dataclass(frozen=True)
class Decision:
    take: list[int]
    """Indices into `pending` to run now as one batch (empty: run nothing now)."""
    expired: list[int]
    """Indices of requests whose own deadline has passed: fail them (503)."""
    wait_until_ns: int | None
    """When to decide again if nothing new arrives (None: wait for an arrival)."""
    reason: str = ""
    """Why the batch went now: full, delay, closed-loop, low-rate, unbatched (for tests and debugging)."""


def collate(pending: Sequence[Queued], now_ns: int, policy: BatchPolicy, signals: Signals = Signals()) -> Decision:
    """Decide what an idle instance runs now. Pure: depends only on its arguments."""

    def late(p: Queued) -> bool:
        return p.deadline_ns is not None and p.deadline_ns <= now_ns

    expired = [i for i, p in enumerate(pending) if late(p) and p.priority not in policy.delayed_levels]
    dead = set(expired)
    live = [i for i in range(len(pending)) if i not in dead]
    if not live:
        return Decision([], expired, None)
    if policy.priority_levels or policy.delayed_levels:
        # stable: arrival order within a level, a level's delayed requests (late and kept) after its others
        live.sort(key=lambda i: (pending[i].priority, late(pending[i])))
    head = pending[live[0]]
    limit = policy.batch_limit
    take: list[int] = []
    items = 0
    blocked = False
    for i in live:
        p = pending[i]
        if p.key != head.key:
            continue
        if take and items + p.items > limit:
            blocked = True
            break
        take.append(i)
        items += p.items
    deadline = min(pending[i].arrival_ns for i in take) + policy.max_queue_delay_ns
    reason = ""
    if policy.max_batch_size <= 1:
        reason = "unbatched"
    elif items >= limit or blocked:
        reason = "full"
    elif now_ns >= deadline:
        reason = "delay"
    elif policy.adaptive:
        if signals.peak_in_system > 0 and signals.in_system >= signals.peak_in_system:
            reason = "closed-loop"
        elif signals.busy_arrival_rate * (deadline - now_ns) / 1e9 < 1.0:
            reason = "low-rate"
    if reason:
        return Decision(take, expired, None, reason)
    wake = min([deadline] + [p.deadline_ns for p in (pending[i] for i in live)
                             if p.deadline_ns is not None and p.deadline_ns > now_ns])
    return Decision([], expired, wake)


class QueueFull(ServingError):
    """The queue holds max_queue_size requests: rejected at once (503)."""


class ShuttingDown(ServingError):
    """The server is draining for shutdown and accepts no new requests (503)."""


class RequestTimeout(ServingError):
    """The request waited in the queue past its timeout (503)."""


@dataclass
class Work:
    """One request in the queue: its input arrays, how many items it carries, and where its result goes."""

    arrays: list[Any]
    items: int
    key: Hashable
    arrival_ns: int
    deadline_ns: int | None = None
    on_done: Callable[[Work], None] | None = None
    result: list[Any] | None = None
    error: BaseException | None = None
    error_reason: str = ""
    timings_ns: dict[str, int] = field(default_factory=dict)
    batch_size: int = 0
    context: Any = None
    priority: int = 0
    """The queue level (1 highest; 0 when the server has no priority levels)."""
    request_id: str | None = None
    """The request's own `id` (the protocol's optional field), named where its batch's failure is logged."""
    handed: bool = False
    """Submitted while an instance sat idle on an empty queue: that instance takes it as soon as it wakes, so it
    does not count against the queue bound (see Batcher.submit)."""

    def finish(self) -> None:
        """Hand the result (or error) over, once. The callback is dropped first: it typically holds what
        will hold this Work (the server's future), and that cycle would keep the request and its input
        arrays alive until Python's cyclic GC came round."""
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done(self)


_DECAY_S = 1.0
"""Time constant of the decayed arrival-rate estimate, and the window of the peak in-system count."""


class _Tracker:
    """Arrival rate while busy (exponentially decayed) and the recent peak of requests in the system."""

    def __init__(self, now_ns: int) -> None:
        self.in_system = 0
        self.last_ns = now_ns
        self.busy_s = 0.0
        self.busy_arrivals = 0.0
        self.window_start_ns = now_ns
        self.peak_now = 0
        self.peak_prev = 0

    def _advance(self, now_ns: int) -> None:
        dt = max(0, now_ns - self.last_ns) / 1e9
        if dt > 0:
            decay = math.exp(-dt / _DECAY_S)
            self.busy_arrivals *= decay
            if self.in_system > 0:
                # busy time decays as the integral of the weight over [last, now]
                self.busy_s = self.busy_s * decay + _DECAY_S * (1 - decay)
            else:
                self.busy_s *= decay
        self.last_ns = now_ns
        if now_ns - self.window_start_ns >= _DECAY_S * 1e9:
            self.peak_prev = self.peak_now if now_ns - self.window_start_ns < 2 * _DECAY_S * 1e9 else 0
            self.peak_now = self.in_system
            self.window_start_ns = now_ns

    def arrive(self, now_ns: int) -> None:
        self._advance(now_ns)
        if self.in_system > 0:
            self.busy_arrivals += 1
        self.in_system += 1
        self.peak_now = max(self.peak_now, self.in_system)

    def leave(self, now_ns: int, n: int) -> None:
        self._advance(now_ns)
        self.in_system = max(0, self.in_system - n)

    def signals(self, now_ns: int) -> Signals:
        self._advance(now_ns)
        rate = self.busy_arrivals / self.busy_s if self.busy_s > 1e-3 else math.inf
        return Signals(self.in_system, max(self.peak_now, self.peak_prev), rate)


class Occupancy:
    """Requests in the system across the batchers of one served model's A/B variants, and its recent peak: the
    closed-loop signal. Each variant has its own queue, but the clients that send to the model are one closed
    loop: with 4 clients split 50:50, a variant that holds 2 of them waited out the whole queue delay while its
    own count (2) stayed below the 4 it saw when chance sent all four its way (p50 5.9 ms against 0.6 ms with
    one variant, zoo:mlp at the default 5 ms delay). Its own lock: the batchers update it under theirs."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._lock = threading.Lock()
        self._counts = _Tracker(clock())
        self._batchers: list[Batcher] = []

    def join(self, batcher: Batcher) -> None:
        with self._lock:
            self._batchers.append(batcher)

    def arrive(self, now_ns: int) -> None:
        with self._lock:
            self._counts.arrive(now_ns)

    def leave(self, now_ns: int, n: int) -> None:
        with self._lock:
            self._counts.leave(now_ns, n)

    def counts(self, now_ns: int) -> tuple[int, int]:
        """(requests now in the system, its recent peak)."""
        with self._lock:
            signals = self._counts.signals(now_ns)
        return signals.in_system, signals.peak_in_system

    def others(self, batcher: Batcher) -> list[Batcher]:
        with self._lock:
            return [b for b in self._batchers if b is not batcher]


class Batcher:
    """The request queue shared by the model instances; `next_batch()` blocks an idle instance."""

    def __init__(self, policy: BatchPolicy, max_queue_size: int = 0,
                 clock: Callable[[], int] = time.monotonic_ns,
                 level_queue_sizes: Mapping[int, int] | None = None, occupancy: Occupancy | None = None) -> None:
        if max_queue_size < 0:
            raise ConfigError(f"max queue size must be >= 0 (0 = unbounded), got {max_queue_size}")
        self.policy = policy
        self.max_queue_size = max_queue_size
        self.level_queue_sizes = dict(level_queue_sizes or {})
        """Priority levels with their own queue bound (`LevelPolicy.max_queue_size`); others: max_queue_size."""
        self.clock = clock
        self._pending: list[Work] = []
        self._handed = 0
        """Requests in `_pending` that an idle instance was woken for (`Work.handed`)."""
        self._queued: dict[int, int] = {}
        """Requests in `_pending` not handed, by priority level: what the queue bound counts. Kept up to date
        where `_pending` changes, so that `submit` does not count them in a pass over the queue."""
        self._cond = threading.Condition()
        self._closed = False
        self._idle = 0
        """Instances blocked on an empty queue (woken ones included until they hold the lock again)."""
        self._tracker = _Tracker(clock())
        self._occupancy = occupancy
        """Shared with the other variants of the model: the closed-loop signal counts their requests too."""
        if occupancy is not None:
            occupancy.join(self)
        self.last_reason = ""

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def queued_at(self, level: int) -> int:
        """Requests queued at priority `level` as its queue bound counts them (not those handed to a waking
        instance)."""
        return self._queued.get(level, 0)

    @property
    def in_system(self) -> int:
        return self._tracker.in_system

    @property
    def idle_instances(self) -> int:
        """Instances waiting for a request on an empty queue."""
        return self._idle

    @property
    def occupancy(self) -> Occupancy | None:
        """The closed-loop counts this batcher shares with its model's other variants (None: its own)."""
        return self._occupancy

    def submit(self, work: Work) -> None:
        """Queue `work`, or raise QueueFull / ShuttingDown at once."""
        with self._cond:
            if self._closed:
                raise ShuttingDown("the server is shutting down and accepts no new requests")
            limit, option = self.max_queue_size, f"--max-queue-size {self.max_queue_size}"
            if work.priority in self.level_queue_sizes:
                limit = self.level_queue_sizes[work.priority]
                option = f"--priority-queue-policy {work.priority}:max_queue_size={limit}"
            # a request that an idle instance will take the moment it wakes is not queued: counted, it made
            # --max-queue-size 1 refuse 40% of 2 synchronous clients' requests (zoo:mlp, max batch 1), the second
            # client's request arriving before the instance thread, woken for the first, had taken it
            work.handed = self._idle > self._handed
            if limit and not work.handed:
                if self.policy.priority_levels:
                    # as in Triton, the bound holds for each priority level: a flood at one level does not
                    # lock the others out
                    queued = self._queued.get(work.priority, 0)
                    where = f" at priority level {work.priority}"
                else:  # one level, 0 (a sum over the few levels counted, should a request carry another)
                    queued, where = sum(self._queued.values()), ""
                if queued >= limit:
                    raise QueueFull(
                        f"Exceeds maximum queue size: {queued} requests are queued{where} ({option}); "
                        "retry later or add capacity"
                    )
            self._pending.append(work)
            self._count(work, 1)
            now = self.clock()
            self._tracker.arrive(now)
            if self._occupancy is not None:
                self._occupancy.arrive(now)
            self._cond.notify()
        if self._occupancy is not None:
            # this arrival may complete the closed loop for a sibling variant's waiting partial batch; woken
            # after our lock is released, so no thread ever holds two batchers' locks
            for other in self._occupancy.others(self):
                other.wake()

    def _count(self, work: Work, sign: int) -> None:
        """Count `work` in (1) or out of (-1) the queue's handed and per-level counts."""
        if work.handed:
            self._handed += sign
        else:
            self._queued[work.priority] = self._queued.get(work.priority, 0) + sign

    def _take_out(self, indices: set[int]) -> list[Work]:
        """Remove the queued requests at `indices` (under the lock), in queue order."""
        taken = [w for i, w in enumerate(self._pending) if i in indices]
        self._pending = [w for i, w in enumerate(self._pending) if i not in indices]
        for work in taken:
            self._count(work, -1)
        return taken

    def wake(self) -> None:
        """Have an idle instance decide again (another variant's arrival changed the closed-loop signal)."""
        with self._cond:
            if self._pending:
                self._cond.notify()

    def _signals(self, now_ns: int) -> Signals:
        signals = self._tracker.signals(now_ns)
        if self._occupancy is None:
            return signals
        in_system, peak = self._occupancy.counts(now_ns)
        return dataclasses.replace(signals, in_system=in_system, peak_in_system=peak)

    def _leave(self, now_ns: int, n: int) -> None:
        self._tracker.leave(now_ns, n)
        if self._occupancy is not None:
            self._occupancy.leave(now_ns, n)

    def next_batch(self) -> list[Work] | None:
        """Block until a batch is due and return it; None once closed and drained."""
        while True:
            expired: list[Work] = []
            batch: list[Work] = []
            with self._cond:
                while True:
                    if not self._pending:
                        if self._closed:
                            return None
                        self._idle += 1
                        try:
                            self._cond.wait()
                        finally:
                            self._idle -= 1
                        continue
                    now = self.clock()
                    decision = collate(self._pending, now, self.policy, self._signals(now))
                    if decision.expired or decision.take:
                        expired = [self._pending[i] for i in decision.expired]
                        batch = [self._pending[i] for i in decision.take]  # in the order collate chose them
                        self._take_out(set(decision.take) | set(decision.expired))
                        if expired:
                            self._leave(now, len(expired))
                        self.last_reason = decision.reason
                        if self._pending:
                            self._cond.notify()
                        break
                    if self._closed:
                        # draining: no more arrivals will come, so waiting cannot fill the batch
                        forced = collate(self._pending, now, dataclasses.replace(self.policy, max_queue_delay_s=0.0,
                                                                                 adaptive=False))
                        batch = [self._pending[i] for i in forced.take]
                        self._take_out(set(forced.take))
                        break
                    timeout = None if decision.wait_until_ns is None else max(0, decision.wait_until_ns - now) / 1e9
                    self._cond.wait(timeout)
            for work in expired:
                self._time_out(work)
            if batch:
                return batch

    def expire(self, work: Work) -> bool:
        """Fail `work` with a timeout if it is still queued, e.g. when its deadline passes while every instance
        is busy (the instances look at deadlines only when one is idle); False if a batch took it already."""
        if not self.withdraw(work):
            return False
        self._time_out(work)
        return True

    def withdraw(self, work: Work) -> bool:
        """Take `work` out of the queue unrun and unanswered (its client went away); False if a batch took it
        already (the batch runs, and its result for `work` goes nowhere)."""
        with self._cond:
            index = next((i for i, w in enumerate(self._pending) if w is work), None)
            if index is None:
                return False
            del self._pending[index]
            self._count(work, -1)
            self._leave(self.clock(), 1)
        return True

    def _time_out(self, work: Work) -> None:
        work.error = RequestTimeout(
            f"Request timeout expired: waited {(self.clock() - work.arrival_ns) / 1e6:.1f} ms in the queue"
        )
        work.error_reason = "TIMEOUT"
        work.finish()

    def release(self, n: int) -> None:
        """`n` requests of a batch are finished (their results delivered)."""
        with self._cond:
            self._leave(self.clock(), n)

    def close(self) -> None:
        """Accept nothing more; instances drain the queue, then next_batch() returns None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
