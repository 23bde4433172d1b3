"""Performance regression checks from a test suite: `assert_no_regression(...)` and a pytest fixture.

    from dlperf.testing import assert_no_regression

    def test_model_speed():
        assert_no_regression("zoo:mlp", baseline="main", max_regression=0.05)

With pytest, the plugin (registered on install; see plugin.py) adds the `dlperf_check`
fixture and the `--dlperf-store` option.
"""

from __future__ import annotations

import os
import shlex
import warnings
from typing import Any

from dlperf.compare.gate import GateResult
from dlperf.errors import StoreError


class PerformanceRegression(AssertionError):
    """A significant regression above the threshold; the message gives the numbers and the test used."""

    def __init__(self, result: GateResult, *, workload: str = "", baseline: str = "", store_url: str = "") -> None:
        # in `dlperf check`'s words (report.compare_text.check_lines), which name the runs and how to accept an
        # intended slowdown
        from dlperf.report.compare_text import check_lines

        store = f" --store {store_url}" if store_url else ""
        lines = [line.plain for line in check_lines(result.to_dict(), workload or "the workload",
                                                    baseline or "?", store)]
        super().__init__("\n".join(lines))
        self.result = result


class PerformanceCheckWarning(UserWarning):
    """A caveat of a check that passed (a noisy measurement, a baseline measured on another machine or workload):
    pytest lists it in its warnings summary, as `dlperf check` prints its warnings beside PASS."""


def assert_no_regression(
    workload: Any,
    baseline: str,
    *,
    store: Any = None,
    max_regression: float | str = 0.05,
    metric: str = "p50",
    confidence: float = 0.95,
    min_duration_s: float | None = None,
    batch_sizes: tuple[int, ...] | None = None,
    example_inputs: Any = None,
) -> GateResult:
    """Re-measure `workload` like baseline `baseline` was measured (recording a 'check' run) and raise
    PerformanceRegression when `metric` regressed by more than `max_regression` AND significantly.

    `store` is a Store, a path or URL (default $DLPERF_STORE or .dlperf/runs.db). `max_regression` is a fraction
    (0.05) or a percentage string ('5%'); a number above 1 is refused, as `dlperf check --max-regression 5` is
    (it meant 500%, and no slowdown under 6x failed): give '500%' if you mean it. Returns the verdict; a passing
    verdict's warnings, and the reason of each batch size it passed inconclusively, are issued as
    PerformanceCheckWarning (a failing one's are in the exception's message): a suite run with
    `filterwarnings = error` fails on them unless it lets them through
    (`default::dlperf.testing.PerformanceCheckWarning`).

    `example_inputs`: for an nn.Module `workload`, its inputs, as `dlperf.bench(model, example_inputs, store=...)`
    took them for the baseline (the check is recorded under the same `python:CLASSNAME`).
    """
    __tracebackhide__ = True
    return _check(workload, baseline, store=store, max_regression=max_regression, metric=metric,
                  confidence=confidence, min_duration_s=min_duration_s, batch_sizes=batch_sizes,
                  example_inputs=example_inputs, stacklevel=3)


def _check(workload: Any, baseline: str, *, store: Any, max_regression: float | str, metric: str,
           confidence: float, min_duration_s: float | None, batch_sizes: tuple[int, ...] | None,
           stacklevel: int, example_inputs: Any = None) -> GateResult:
    """assert_no_regression, its warnings issued `stacklevel` frames up (the test function's line)."""
    __tracebackhide__ = True
    from dlperf.compare.check import check_against_baseline
    from dlperf.compare.gate import GateConfig
    from dlperf.store.db import ENV_VAR, STORE_OPTION, Store

    config = GateConfig(metric=metric, max_regression=_fraction(max_regression), confidence=confidence)
    # the baseline is in it: a store that does not exist is a mistyped path, not one to create empty
    try:
        st = store if isinstance(store, Store) else Store(store, create=False)
    except StoreError as exc:
        # the store's own message says "with --store PATH", an option no test function has
        raise StoreError(f"{exc}".replace(f"with {STORE_OPTION} or $DLPERF_STORE",
                                          "with store=PATH (the dlperf_check fixture: pytest --dlperf-store PATH) "
                                          "or $DLPERF_STORE")) from None  # the same error, reworded
    outcome = check_against_baseline(workload, baseline, st, config, min_duration_s=min_duration_s,
                                     batch_sizes=batch_sizes, example_inputs=example_inputs)
    if outcome.gate.failed:
        __tracebackhide__ = True  # pytest shows the test's line and this message, not dlperf's frames
        name = workload if isinstance(workload, str) else outcome.baseline.workload
        explicit = store is not None or os.environ.get(ENV_VAR)  # else the default, which needs no --store
        raise PerformanceRegression(outcome.gate, workload=name, baseline=baseline,
                                    store_url=shlex.quote(st.shown_url) if explicit else "")
    name = workload if isinstance(workload, str) else outcome.baseline.workload
    for said in pass_caveats(outcome.gate):  # a passing check kept them to itself: a noisy or cross-machine PASS
        warnings.warn(f"dlperf check of {name} against baseline '{baseline}' passed, but: {said}",
                      PerformanceCheckWarning, stacklevel=stacklevel)
    return outcome.gate


def pass_caveats(result: GateResult) -> list[str]:
    """What a passing verdict's PerformanceCheckWarnings say: its warnings, and each inconclusive batch size's
    reason (an interval reaching above the threshold: a regression larger than it is not ruled out), which passed
    without a word under pytest while `dlperf check` printed "inconclusive"."""
    inconclusive = [reason for point, reason in zip(result.points, result.reasons(), strict=True)
                    if point.inconclusive]
    return [*inconclusive, *result.warnings]


def _fraction(value: float | str) -> Any:
    """max_regression as a fraction: '5%' -> 0.05; a bare number above 1 refused (5 is 500%, not 5%)."""
    from dlperf.errors import ConfigError

    if isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                return float(text[:-1]) / 100.0
            value = float(text)  # a bare '5' is 500% too
        except ValueError:
            raise ConfigError(f"max_regression {text!r} is not a fraction or a percentage: give 0.05 or '5%'") \
                from None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1.0:
        raise ConfigError(f"max_regression={value:g} would be {value:.0%} (it is a fraction): give {value / 100:g} "
                          f"or '{value:g}%' for {value:g}%, or '{value:.0%}' if you mean it")
    return value  # GateConfig says what is wrong with anything else


__all__ = ["PerformanceCheckWarning", "PerformanceRegression", "assert_no_regression"]
