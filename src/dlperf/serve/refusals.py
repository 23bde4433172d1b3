"""A rate-limited log line for refused requests: an operator tailing the server's log sees it shed load.

Requests the server refuses without running the model (queue full, a queue timeout, a client gone, a missing or
wrong token, shutting down) were counted on /metrics only, and wrote no line at any --log-level. Each reason now
writes one warning at its first refusal, then at most one every `every_s`, saying how many came since the last line
and for which models; a refusal costs a lock and a dict update, and a request that is answered nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("dlperf.serve")

EVERY_S = 10.0
"""A reason's refusals are logged at most once in this many seconds."""

WHAT = {
    "REJECTED": "the queue was full (reason REJECTED; --max-queue-size bounds it)",
    "TIMEOUT": "their queue timeout passed before they ran (reason TIMEOUT; --timeout-ms, or the request's "
               "'timeout' parameter)",
    "CANCELED": "their clients went away before the reply (reason CANCELED)",
    "UNAUTHENTICATED": "a missing or wrong bearer token (401 / UNAUTHENTICATED; the server's --token)",
    "UNAVAILABLE": "the server was shutting down (reason UNAVAILABLE: sent while it drained, or still in it when "
                   "--exit-timeout-s ended)",
}
"""The reasons logged, and what each line says of them."""


def _start_timer(delay_s: float, action: Callable[[], None]) -> None:
    timer = threading.Timer(delay_s, action)
    timer.daemon = True  # a pending line does not hold the process at exit
    timer.start()


@dataclass
class _Reason:
    last: float | None = None
    """When its last line was written (None: never)."""
    models: dict[str, int] = field(default_factory=dict)
    """Refusals since that line, by model ('' where none is known: a 401 to a metadata call)."""
    flush_due: bool = False
    """A line for them is scheduled at `last + every_s`."""


class RefusalLog:
    """One warning per reason at its first refusal, then at most one every `every_s` with the count since the last
    (written when the interval ends, so that the end of a burst is not left out until the next refusal).
    `clock` and `schedule(delay_s, action)` are swappable for tests."""

    def __init__(self, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic,
                 schedule: Callable[[float, Callable[[], None]], None] = _start_timer) -> None:
        self.every_s = every_s
        self.clock = clock
        self.schedule = schedule
        self._lock = threading.Lock()
        self._reasons: dict[str, _Reason] = {}

    def note(self, reason: str, model: str = "") -> None:
        """A request refused for `reason` (a key of `WHAT`; others are not logged)."""
        if reason not in WHAT:
            return
        now = self.clock()
        with self._lock:
            state = self._reasons.setdefault(reason, _Reason())
            state.models[model] = state.models.get(model, 0) + 1
            if state.flush_due:
                return
            if state.last is not None and now - state.last < self.every_s:
                state.flush_due = True
                delay = state.last + self.every_s - now
            else:
                line = self._take(reason, state, now)
                delay = None
        if delay is None:
            log.warning("%s", line)
        else:
            self.schedule(delay, lambda: self.flush(reason))

    def flush(self, reason: str) -> None:
        """Write the line of `reason`'s refusals since its last one (its interval is over)."""
        now = self.clock()
        with self._lock:
            state = self._reasons.get(reason)
            if state is None or not state.models:
                return
            state.flush_due = False
            line = self._take(reason, state, now)
        log.warning("%s", line)

    def flush_all(self) -> None:
        """Write every reason's pending line now (the server stops: its timers would not outlive the process)."""
        with self._lock:
            reasons = list(self._reasons)
        for reason in reasons:
            self.flush(reason)

    def _take(self, reason: str, state: _Reason, now: float) -> str:
        n = sum(state.models.values())
        named = sorted((m for m in state.models if m), key=lambda m: -state.models[m])
        models = f" (model {', '.join(f'{m!r}: {state.models[m]}' for m in named)})" if named else ""
        since = "" if state.last is None else f" in the last {now - state.last:.0f} s"
        state.last = now
        state.models = {}
        return f"refused {n} request{'s' * (n != 1)}{since}: {WHAT[reason]}{models}"
