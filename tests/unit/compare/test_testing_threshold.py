"""assert_no_regression's max_regression: a fraction or a percentage string; a bare number above 1 is refused, as
`dlperf check --max-regression 5` is, before anything is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.store import Store
from dlperf.testing import _fraction, assert_no_regression

from .helpers import add_run, bench_result

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value", [5, 5.0, "5", 30])
def test_a_bare_number_above_one_is_refused_before_measuring(tmp_path: Path, value: float | str) -> None:
    store = Store(tmp_path / "runs.db")
    store.set_baseline("main", add_run(store, "bench", bench_result({1: 0.01})))
    # max_regression=5 was a 500% threshold: a test written for 5% passed every slowdown under 6x
    with pytest.raises(ConfigError, match=r"^max_regression=\d+ would be \d+% \(it is a fraction\): give 0\.\d+ or "
                                          r"'\d+%' for \d+%, or '\d+%' if you mean it$"):
        assert_no_regression("zoo:mlp", "main", store=store, max_regression=value)
    assert store.list(kind="check") == []  # refused before a check run was measured and recorded


def test_percentages_and_fractions() -> None:
    assert _fraction("5%") == pytest.approx(0.05)
    assert _fraction(" 500% ") == pytest.approx(5.0)  # above 100% when said so
    assert _fraction(0.05) == 0.05 and _fraction(1) == 1 and _fraction("0.1") == pytest.approx(0.1)
    with pytest.raises(ConfigError, match=r"^max_regression 'x%' is not a fraction or a percentage"):
        _fraction("x%")
