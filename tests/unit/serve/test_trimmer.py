"""The server's memory trimmer: once per idle spell, never under load (a fake clock and counters)."""

from __future__ import annotations

import pytest

from dlperf.serve.server import IdleTrimmer

pytestmark = pytest.mark.unit


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.received = 0
        self.in_flight = 0
        self.trims = 0

    def trimmer(self, idle_s: float = 5.0) -> IdleTrimmer:
        return IdleTrimmer(lambda: (self.received, self.in_flight), self.trim, idle_s, lambda: self.now)

    def trim(self) -> None:
        self.trims += 1

    def tick(self, trimmer: IdleTrimmer, seconds: float) -> None:
        self.now += seconds
        trimmer.tick()


def test_trims_once_after_the_idle_time_and_again_only_after_new_traffic() -> None:
    w = World()
    t = w.trimmer()
    for _ in range(4):
        w.tick(t, 1.0)
    assert w.trims == 0  # 4 s idle (the start counts as activity)
    w.tick(t, 1.0)
    w.tick(t, 1.0)
    assert w.trims == 1
    for _ in range(30):
        w.tick(t, 1.0)
    assert w.trims == 1  # one idle spell, one trim
    w.received += 3
    w.tick(t, 1.0)
    for _ in range(4):
        w.tick(t, 1.0)
    assert w.trims == 1
    w.tick(t, 1.0)
    assert w.trims == 2 and t.trims == 2


def test_never_trims_under_load_or_while_a_request_is_in_flight() -> None:
    w = World()
    t = w.trimmer()
    for _ in range(60):  # a request every second: never idle
        w.received += 1
        w.tick(t, 1.0)
    assert w.trims == 0
    w.in_flight = 1  # one long batch, no new arrivals
    for _ in range(60):
        w.tick(t, 1.0)
    assert w.trims == 0
    w.in_flight = 0
    for _ in range(6):
        w.tick(t, 1.0)
    assert w.trims == 1


def test_the_server_s_trimmer_follows_the_state_s_request_counts() -> None:
    """`start_memory_trimmer` hands the trimmer the server's received and in-flight counts: read from anything
    else (a count that never moves), the trimmer would see one idle spell from the start and never trim again
    after later traffic, or trim while a request is in flight."""
    from types import SimpleNamespace

    from dlperf.serve.server import start_memory_trimmer

    state = SimpleNamespace(received=0, in_flight=0)
    trimmer = start_memory_trimmer(state, poll_s=3600.0)  # type: ignore[arg-type]
    if trimmer is None:
        pytest.skip("this allocator has no call that gives memory back")
    assert trimmer.activity() == (0, 0)
    state.received, state.in_flight = 7, 2
    assert trimmer.activity() == (7, 2)
