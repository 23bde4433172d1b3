"""pytest plugin: the `dlperf_check` fixture and the `--dlperf-store` option.

Installing dlperf registers it (entry point `pytest11`, under the name `dlperf`: `-p no:dlperf` turns it off).
Only where dlperf is on the path without being installed, enable it with `-p dlperf.testing.plugin` or
`pytest_plugins = ["dlperf.testing.plugin"]` in your conftest.py: with dlperf installed, naming the module again
stops pytest ("Plugin already registered under a different name").

    def test_speed(dlperf_check):
        dlperf_check("zoo:mlp", baseline="main", max_regression=0.05)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlperf")
    group.addoption("--dlperf-store", default=None,
                    help="dlperf run store for dlperf_check (default $DLPERF_STORE or .dlperf/runs.db)")


@pytest.fixture
def dlperf_check(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """A callable like dlperf.testing.assert_no_regression, using the --dlperf-store store by default. A passing
    check's warnings go to pytest's warnings summary (PerformanceCheckWarning), pointing at the test's line."""
    import inspect

    from dlperf.testing import _check, assert_no_regression

    default_store = request.config.getoption("--dlperf-store", default=None)
    defaults = {name: p.default for name, p in inspect.signature(assert_no_regression).parameters.items()
                if p.kind is p.KEYWORD_ONLY}

    def check(workload: Any, baseline: str, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        unknown = set(kwargs) - set(defaults)
        if unknown:  # as assert_no_regression itself would say
            raise TypeError(f"dlperf_check() got an unexpected keyword argument '{sorted(unknown)[0]}'")
        kwargs.setdefault("store", default_store)
        return _check(workload, baseline, **{**defaults, **kwargs}, stacklevel=3)

    return check
