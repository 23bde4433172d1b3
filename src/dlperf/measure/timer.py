"""Time a callable: warm-up, then iterate until BOTH a minimum duration and a minimum count are met.

This is MLPerf LoadGen's stopping rule (and optimum-benchmark's): a short call gets many samples, a long
one at least `min_iters`. Every per-iteration sample is kept. Per-iteration overhead of the loop is one
clock start/stop pair, a list append and the stop test: 0.8-1.7 µs a call over a bare loop on a shared 2-core
VM with perf_counter_ns (benchmarks/harness_accuracy.py, docs/measure.md); a sample holds only the call and
part of the clock reads (an empty call's sample reads 80-140 ns). Warm-up is either a fixed count or "until
stable": windows of iterations are run until two consecutive window medians agree within `stable_tolerance`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlperf.errors import ConfigError, MeasurementError
from dlperf.measure.clock import Clock, CpuClock
from dlperf.measure.stats import Measurement, median

ProgressFn = Callable[[int, float], None]
"""on_progress(iterations_done, seconds_elapsed)."""


@dataclass(frozen=True)
class TimerConfig:
    """How long to warm up and measure. Durations in seconds."""

    warmup_iters: int = 5
    warmup_until_stable: bool = False
    warmup_max_s: float = 10.0
    stable_window: int = 5
    stable_tolerance: float = 0.05
    min_duration_s: float = 1.0
    min_iters: int = 10
    max_iters: int = 1_000_000
    max_duration_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("warmup_iters", "min_iters", "max_iters", "min_duration_s", "max_duration_s", "warmup_max_s",
                     "stable_tolerance", "stable_window"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):  # None, '5': TypeError deep inside
                raise ConfigError(f"{name} must be a number, got {value!r}")
        for name in ("min_duration_s", "max_duration_s", "warmup_max_s", "stable_tolerance"):
            # NaN passes every comparison below, and NaN or inf seconds fail later as the measured call's error
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.warmup_iters < 0:
            raise ConfigError(f"warmup_iters must be >= 0, got {self.warmup_iters}")
        if self.min_iters < 1:
            raise ConfigError(f"min_iters must be >= 1, got {self.min_iters}")
        if self.min_duration_s < 0:
            raise ConfigError(f"min_duration_s must be >= 0, got {self.min_duration_s}")
        if self.max_iters < self.min_iters:
            raise ConfigError(f"max_iters ({self.max_iters}) is below min_iters ({self.min_iters})")
        if self.max_duration_s < self.min_duration_s:
            raise ConfigError(
                f"max_duration_s ({self.max_duration_s}) is below min_duration_s ({self.min_duration_s})"
            )
        if self.stable_window < 2:
            raise ConfigError("stable_window must be >= 2")
        if self.warmup_max_s < 0 or self.stable_tolerance < 0:
            # a negative time ran no window; a negative tolerance never agreed, so warm-up ran to warmup_max_s
            raise ConfigError(f"warmup_max_s and stable_tolerance must be >= 0, got {self.warmup_max_s} and "
                              f"{self.stable_tolerance}")

    @classmethod
    def at_least(cls, min_duration_s: float, min_iters: int, warmup_iters: int) -> TimerConfig:
        """The default caps, each raised to a minimum asked above it: `dlperf bench --min-duration 5m` or
        `--min-iters 2000000` measure that long or that many calls instead of failing on a cap they cannot set."""
        for name, value in (("min_duration_s", min_duration_s), ("min_iters", min_iters),
                            ("warmup_iters", warmup_iters)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):  # max() below would raise TypeError
                raise ConfigError(f"{name} must be a number, got {value!r}")
        return cls(warmup_iters=warmup_iters, min_duration_s=min_duration_s, min_iters=min_iters,
                   max_iters=max(cls.max_iters, min_iters), max_duration_s=max(cls.max_duration_s, min_duration_s))


def time_callable(
    fn: Callable[[], Any],
    config: TimerConfig | None = None,
    clock: Clock | None = None,
    items_per_call: int = 1,
    label: str = "",
    on_progress: ProgressFn | None = None,
) -> Measurement:
    """Warm `fn` up, then time it per `config`; returns every sample. Exceptions become MeasurementError.

    Interrupted (Ctrl-C, or a KeyboardInterrupt subclass) after at least one timed call, the interrupt goes on
    with the calls timed so far as its `dlperf_measured` Measurement, for a caller to keep; so does the
    MeasurementError of a call that raised after some were timed.
    """
    config = TimerConfig() if config is None else config
    # a dict config or a non-callable was reported as "the measured call raised AttributeError/TypeError"
    if not isinstance(config, TimerConfig):
        raise ConfigError(f"config must be a dlperf.TimerConfig, got {type(config).__name__}")
    if not callable(fn):
        raise ConfigError(f"fn must be a function to call, got {type(fn).__name__}: pass `lambda: model(x)`, not "
                          "`model(x)`")
    if isinstance(items_per_call, bool) or not isinstance(items_per_call, int) or items_per_call < 1:
        raise ConfigError(f"items_per_call must be an integer >= 1, got {items_per_call!r}")
    clock = clock or CpuClock()
    now: Callable[[], int] = getattr(clock, "now_ns", time.perf_counter_ns)
    samples: list[int] = []
    warmup = 0
    try:
        warmup = _warm_up(fn, config, clock, now)
        if type(clock) is CpuClock:
            elapsed_ns = _measure_cpu(fn, config, on_progress, samples)
        else:
            elapsed_ns = _measure(fn, config, clock, now, on_progress, samples)
    except KeyboardInterrupt as exc:
        if samples:
            exc.dlperf_measured = Measurement(  # type: ignore[attr-defined]
                list(samples), items_per_call=items_per_call, warmup_iters=warmup, clock=clock.name, label=label,
                extra={"stop_note": f"interrupted after {len(samples):,} timed call{'' if len(samples) == 1 else 's'}"})
        raise
    except MeasurementError:
        raise
    except Exception as exc:
        error = MeasurementError(f"the measured call raised {type(exc).__name__}: {exc}")
        if samples:  # the calls timed before it, for a caller to keep (as on an interrupt)
            error.dlperf_measured = Measurement(  # type: ignore[attr-defined]
                list(samples), items_per_call=items_per_call, warmup_iters=warmup, clock=clock.name, label=label,
                extra={"stop_note": f"failed after {len(samples):,} timed call{'' if len(samples) == 1 else 's'}"})
        raise error from exc
    extra: dict[str, Any] = {}
    cut = stop_note(config, len(samples), elapsed_ns)
    if cut is not None:
        extra["stop_note"] = cut
    return Measurement(samples, items_per_call=items_per_call, warmup_iters=warmup, clock=clock.name,
                       label=label, extra=extra)


def stop_note(config: TimerConfig, n: int, elapsed_ns: int) -> str | None:
    """Why the loop stopped before BOTH minimums were met (a cap cut it), or None when they were."""
    if n >= config.min_iters and elapsed_ns >= int(config.min_duration_s * 1e9):
        return None
    if n >= config.max_iters:
        enough = "; each call is short and this many samples suffice" if n >= 10_000 else ""
        return (f"stopped at the {config.max_iters:,}-iteration cap after {elapsed_ns / 1e9:.2f} s, before the "
                f"minimum duration of {config.min_duration_s:g} s{enough}")
    # a minimum duration raises the cap (TimerConfig.at_least), so say how long the minimum count takes: a model of
    # 0.4 s a call in bench's multi-stream stopped short of its 459 calls, and "lower the minimum iterations" was all
    # it said, which leaves its p99 unbounded. 10% over the calls' time so far: a minimum duration of exactly that time
    # is also the cap, which a slower call than these stops short of the count again
    all_s = elapsed_ns / 1e9 / max(n, 1) * config.min_iters
    pace = f"at this pace all {config.min_iters:,} take about {math.ceil(all_s):,} s"
    return (f"stopped at the {config.max_duration_s:g} s cap after {n:,} iteration{'' if n == 1 else 's'}, under the "
            f"minimum of {config.min_iters:,}: {pace}, "
            f"and a minimum duration above that raises the cap (`dlperf bench --min-duration "
            f"{math.ceil(round(1.1 * all_s, 6))}s`, 10% over); or lower the minimum iterations and expect wider "
            "intervals")


def _measure(fn: Callable[[], Any], config: TimerConfig, clock: Clock, now: Callable[[], int],
             on_progress: ProgressFn | None, samples: list[int]) -> int:
    """Time calls into `samples` until `config` is met; the elapsed nanoseconds."""
    append = samples.append
    start = now()
    min_ns = int(config.min_duration_s * 1e9)
    max_ns = int(config.max_duration_s * 1e9)
    next_report = 0
    while True:
        token = clock.start()
        fn()
        append(clock.stop(token))
        n = len(samples)
        elapsed = now() - start
        if (n >= config.min_iters and elapsed >= min_ns) or n >= config.max_iters or elapsed >= max_ns:
            break
        if on_progress is not None and elapsed >= next_report:
            on_progress(n, elapsed / 1e9)
            next_report = elapsed + 100_000_000
    if on_progress is not None:
        on_progress(len(samples), (now() - start) / 1e9)
    return elapsed


def _measure_cpu(fn: Callable[[], Any], config: TimerConfig, on_progress: ProgressFn | None,
                 samples: list[int]) -> int:
    """The same loop for the host clock, inlined: two perf_counter_ns reads per iteration and no method
    calls, the end of one call's timing doubling as the loop's 'now'."""
    pc = time.perf_counter_ns
    append = samples.append
    min_iters, max_iters = config.min_iters, config.max_iters
    min_ns = int(config.min_duration_s * 1e9)
    max_ns = int(config.max_duration_s * 1e9)
    next_report = 0
    n = 0
    start = pc()
    while True:
        t0 = pc()
        fn()
        t1 = pc()
        append(t1 - t0)
        n += 1
        elapsed = t1 - start
        if (n >= min_iters and elapsed >= min_ns) or n >= max_iters or elapsed >= max_ns:
            break
        if on_progress is not None and elapsed >= next_report:
            on_progress(n, elapsed / 1e9)
            next_report = elapsed + 100_000_000
    if on_progress is not None:
        on_progress(n, (pc() - start) / 1e9)
    return elapsed


def _warm_up(fn: Callable[[], Any], config: TimerConfig, clock: Clock, now: Callable[[], int]) -> int:
    for _ in range(config.warmup_iters):
        fn()
    done = config.warmup_iters
    if not config.warmup_until_stable:
        return done
    deadline = now() + int(config.warmup_max_s * 1e9)
    previous: float | None = None
    while now() < deadline:
        window = []
        for _ in range(config.stable_window):
            token = clock.start()
            fn()
            window.append(float(clock.stop(token)))
        done += config.stable_window
        current = median(window)
        if previous is not None and abs(current - previous) <= config.stable_tolerance * previous:
            break
        previous = current
    return done
