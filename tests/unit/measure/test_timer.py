"""The timer's stop rule, caps and warm-up, driven by FakeClock so every count is exact."""

from __future__ import annotations

import itertools

import pytest

from dlperf.errors import ConfigError, MeasurementError
from dlperf.measure.clock import FakeClock
from dlperf.measure.timer import TimerConfig, time_callable

pytestmark = pytest.mark.unit


def _noop() -> None:
    return None


def test_min_duration_dominates_for_short_calls() -> None:
    clock = FakeClock(base_ns=1_000)  # every call takes 1 µs
    m = time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=0.001, min_iters=10), clock)
    assert m.n == 1000  # 1 ms / 1 µs
    assert m.total_s == pytest.approx(0.001)
    assert m.clock == "fake"


def test_min_iters_dominates_for_long_calls() -> None:
    clock = FakeClock(base_ns=50_000_000)  # 50 ms a call; 1 s would be 20 calls
    m = time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=0.1, min_iters=30), clock)
    assert m.n == 30


def test_both_conditions_must_hold() -> None:
    # 10 calls of 1 ms then slow ones of 100 ms: after 10 calls the count is met but only 10 ms passed.
    clock = FakeClock(durations_ns=[1_000_000] * 10, base_ns=100_000_000)
    m = time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=0.2, min_iters=10), clock)
    assert m.n == 12  # 10 ms + 100 ms (11 calls) < 200 ms; + 100 ms (12 calls) >= 200 ms


def test_max_iters_caps() -> None:
    clock = FakeClock(base_ns=1_000)
    m = time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=10.0, min_iters=5, max_iters=50), clock)
    assert m.n == 50
    # the cap cut the run short of --min-duration: the measurement says so rather than stopping silently
    assert m.summary()["stop_note"] == ("stopped at the 50-iteration cap after 0.00 s, before the minimum "
                                        "duration of 10 s")


def test_max_duration_caps() -> None:
    clock = FakeClock(base_ns=1_000)
    config = TimerConfig(warmup_iters=0, min_duration_s=0.0, min_iters=100_000, max_duration_s=0.002)
    m = time_callable(_noop, config, clock)
    assert m.n == 2000
    # how long the minimum count would take (1 us a call): a minimum duration raises the cap
    assert m.summary()["stop_note"] == ("stopped at the 0.002 s cap after 2,000 iterations, under the minimum of "
                                        "100,000: at this pace all 100,000 take about 1 s, and a minimum duration "
                                        "above that raises the cap (`dlperf bench --min-duration 1s`, 10% over); or "
                                        "lower the minimum iterations and expect wider intervals")


def test_one_call_longer_than_the_duration_cap_is_measured_once_and_said_so() -> None:
    # a 150 s call under the default 120 s cap and 10-call minimum: one sample, and the note says why
    m = time_callable(_noop, TimerConfig(warmup_iters=0), FakeClock(base_ns=150_000_000_000))
    assert m.n == 1
    assert m.summary()["stop_note"] == ("stopped at the 120 s cap after 1 iteration, under the minimum of 10: at "
                                        "this pace all 10 take about 1,500 s, and a minimum duration above that "
                                        "raises the cap (`dlperf bench --min-duration 1650s`, 10% over); or lower "
                                        "the minimum iterations and expect wider intervals")


def test_no_stop_note_when_both_minimums_are_met() -> None:
    m = time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=0.001, min_iters=10), FakeClock(base_ns=1_000))
    assert m.summary()["stop_note"] is None
    assert "stop_note" not in m.to_dict()["extra"]


def test_fixed_warmup_is_not_measured() -> None:
    calls = []
    clock = FakeClock(base_ns=1_000)
    m = time_callable(lambda: calls.append(1), TimerConfig(warmup_iters=7, min_duration_s=0.0, min_iters=3), clock)
    assert m.warmup_iters == 7
    assert m.n == 3
    assert len(calls) == 10
    assert clock.calls == 3  # the warm-up calls were not timed


def test_warmup_until_stable_stops_when_two_windows_agree() -> None:
    # windows of 5: medians 5000, 3000, 3000 -> stable after the third window; measured calls are 1000.
    planned = [5000] * 5 + [3000] * 5 + [3000] * 5
    clock = FakeClock(durations_ns=planned, base_ns=1_000)
    config = TimerConfig(warmup_iters=0, warmup_until_stable=True, stable_window=5, stable_tolerance=0.05,
                         min_duration_s=0.0, min_iters=4)
    m = time_callable(_noop, config, clock)
    assert m.warmup_iters == 15
    assert m.samples_ns == [1000, 1000, 1000, 1000]


def test_warmup_until_stable_gives_up_at_its_time_cap() -> None:
    # medians alternate 1000 / 2000 forever: never stable; the cap is 100 µs of (fake) time.
    planned = ([1000] * 5 + [2000] * 5) * 100
    clock = FakeClock(durations_ns=planned, base_ns=1_000)
    config = TimerConfig(warmup_iters=0, warmup_until_stable=True, warmup_max_s=100e-6, stable_window=5,
                         min_duration_s=0.0, min_iters=1)
    m = time_callable(_noop, config, clock)
    # windows cost 5000 and 10000 ns: 5000+10000 ... the first window end at or past 100 µs is window 14
    assert m.warmup_iters == 70
    assert m.n == 1


def test_progress_reports_final_count() -> None:
    seen: list[tuple[int, float]] = []
    clock = FakeClock(base_ns=1_000_000)
    time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=0.05, min_iters=1), clock,
                  on_progress=lambda n, s: seen.append((n, s)))
    assert seen[-1] == (50, pytest.approx(0.05))
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))


def test_items_per_call_and_label() -> None:
    m = time_callable(_noop, TimerConfig(warmup_iters=0, min_duration_s=0.0, min_iters=4), FakeClock(base_ns=2_000),
                      items_per_call=16, label="bs=16")
    assert m.items_per_call == 16 and m.label == "bs=16"
    assert m.throughput == pytest.approx(16 / 2e-6)


def test_a_raising_call_becomes_measurement_error() -> None:
    def boom() -> None:
        raise RuntimeError("shape mismatch")

    with pytest.raises(MeasurementError, match="RuntimeError: shape mismatch"):
        time_callable(boom, TimerConfig(warmup_iters=0, min_duration_s=0.0, min_iters=1), FakeClock())


@pytest.mark.parametrize("clock", [FakeClock(base_ns=2_000), None])  # the generic loop and the host clock's own
def test_an_interrupt_carries_the_calls_timed_before_it(clock: FakeClock | None) -> None:
    calls = 0

    def interrupted_at_the_ninth() -> None:
        nonlocal calls
        calls += 1
        if calls == 9:
            raise KeyboardInterrupt

    config = TimerConfig(warmup_iters=2, min_duration_s=0.0, min_iters=100)
    with pytest.raises(KeyboardInterrupt) as caught:
        time_callable(interrupted_at_the_ninth, config, clock, items_per_call=4, label="bs=4")
    m = caught.value.dlperf_measured  # type: ignore[attr-defined]
    assert m.n == 6 and m.warmup_iters == 2 and m.items_per_call == 4 and m.label == "bs=4"
    assert m.extra["stop_note"] == "interrupted after 6 timed calls"
    calls = 0
    with pytest.raises(KeyboardInterrupt) as in_warmup:  # during the warm-up: nothing to carry
        time_callable(interrupted_at_the_ninth, TimerConfig(warmup_iters=20), clock)
    assert not hasattr(in_warmup.value, "dlperf_measured")


@pytest.mark.parametrize("kwargs", [
    {"warmup_iters": -1}, {"min_iters": 0}, {"min_duration_s": -1.0}, {"min_iters": 10, "max_iters": 5},
    {"min_duration_s": 5.0, "max_duration_s": 1.0}, {"stable_window": 1},
    {"min_duration_s": float("nan")}, {"min_duration_s": float("inf"), "max_duration_s": float("inf")},
    {"max_duration_s": float("nan")}, {"warmup_max_s": float("nan")}, {"stable_tolerance": float("nan")},
    {"warmup_max_s": -1.0}, {"stable_tolerance": -0.05},
])
def test_bad_timer_config(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        TimerConfig(**kwargs)  # type: ignore[arg-type]


def test_at_least_raises_only_the_caps_a_minimum_is_above() -> None:
    config = TimerConfig.at_least(min_duration_s=300.0, min_iters=2_000_000, warmup_iters=2)
    assert (config.max_duration_s, config.max_iters, config.warmup_iters) == (300.0, 2_000_000, 2)
    default = TimerConfig()
    assert TimerConfig.at_least(1.0, 10, 5) == default
    with pytest.raises(ConfigError, match="finite"):
        TimerConfig.at_least(float("nan"), 10, 5)


def test_fake_clock_noise_is_seeded() -> None:
    a = [FakeClock(base_ns=1000, noise_ns=100, seed=5).stop(0) for _ in range(1)]
    c1, c2 = FakeClock(base_ns=1000, noise_ns=100, seed=5), FakeClock(base_ns=1000, noise_ns=100, seed=5)
    s1 = [c1.stop(c1.start()) for _ in range(20)]
    s2 = [c2.stop(c2.start()) for _ in range(20)]
    assert s1 == s2 and a[0] == s1[0]
    assert all(900 <= s <= 1100 for s in s1) and len(set(s1)) > 1
