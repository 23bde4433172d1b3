"""The measurement engine: clocks, the timer, raw-sample statistics, memory, utilization, environment."""

from dlperf.measure.ab import ABConfig, ABResult, ab_test
from dlperf.measure.clock import Clock, CpuClock, CudaEventClock, FakeClock, clock_for
from dlperf.measure.stats import Measurement, bootstrap_ci, percentile
from dlperf.measure.timer import TimerConfig, time_callable

__all__ = [
    "ABConfig",
    "ABResult",
    "Clock",
    "CpuClock",
    "CudaEventClock",
    "FakeClock",
    "Measurement",
    "TimerConfig",
    "ab_test",
    "bootstrap_ci",
    "clock_for",
    "percentile",
    "time_callable",
]
