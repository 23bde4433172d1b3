"""Performance regression checks from a test suite: `assert_no_regression(...)` and a pytest fixture.

    from dlperf.testing import assert_no_regression

    def test_model_speed():
        assert_no_regression("zoo:mlp", baseline="main", max_regression=0.05)

With pytest, the plugin (registered on install; see plugin.py) adds the `dlperf_check`
fixture and the `--dlperf-store` option.
"""

from __future__ import annotations

from typing import Any

from dlperf.compare.gate import GateResult


class PerformanceRegression(AssertionError):
    """A significant regression above the threshold; the message gives the numbers and the test used."""

    def __init__(self, result: GateResult) -> None:
        super().__init__("performance regression:\n" + result.describe())
        self.result = result


def assert_no_regression(
    workload: Any,
    baseline: str,
    *,
    store: Any = None,
    max_regression: float = 0.05,
    metric: str = "p50",
    confidence: float = 0.95,
    min_duration_s: float | None = None,
    batch_sizes: tuple[int, ...] | None = None,
) -> GateResult:
    """Re-measure `workload` like baseline `baseline` was measured (recording a 'check' run) and raise
    PerformanceRegression when `metric` regressed by more than `max_regression` AND significantly.

    `store` is a Store, a path or URL (default $DLPERF_STORE or .dlperf/runs.db). Returns the verdict.
    """
    from dlperf.compare.check import check_against_baseline
    from dlperf.compare.gate import GateConfig
    from dlperf.store.db import Store

    # the baseline is in it: a store that does not exist is a mistyped path, not one to create empty
    st = store if isinstance(store, Store) else Store(store, create=False)
    config = GateConfig(metric=metric, max_regression=max_regression, confidence=confidence)
    outcome = check_against_baseline(workload, baseline, st, config, min_duration_s=min_duration_s,
                                     batch_sizes=batch_sizes)
    if outcome.gate.failed:
        raise PerformanceRegression(outcome.gate)
    return outcome.gate


__all__ = ["PerformanceRegression", "assert_no_regression"]
