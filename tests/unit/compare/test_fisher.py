"""Error rates with few events are tested exactly (Fisher), not by the z-test's normal approximation."""

from __future__ import annotations

import math

import pytest

from dlperf.compare.stats import fisher_exact, proportion_test

pytestmark = pytest.mark.unit
scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("table", [(1, 3, 0, 1000), (3, 10, 1, 20), (0, 5, 0, 7), (30, 1000, 10, 1000),
                                   (2, 50, 9, 60), (5, 5, 0, 5)])
def test_fisher_matches_scipy(table: tuple[int, int, int, int]) -> None:
    x, n_x, y, n_y = table
    expected = scipy_stats.fisher_exact([[x, n_x - x], [y, n_y - y]]).pvalue
    result = fisher_exact(x, n_x, y, n_y)
    assert result.p_value == pytest.approx(expected, rel=1e-9)
    assert result.rate_x == x / n_x and math.isnan(result.z) and result.to_dict()["test"] == "fisher-exact"


def test_few_events_use_fisher_many_use_the_z_test() -> None:
    # 1 failure in 3 requests against none in 1,000: the z-test says p=1.5e-74, the exact answer is 0.003
    few = proportion_test(1, 3, 0, 1000)
    assert few.test == "fisher-exact" and few.label == "Fisher exact"
    assert few.p_value == pytest.approx(0.00299, rel=1e-3)
    many = proportion_test(30, 1000, 10, 1000)
    assert many.test == "two-proportion-z" and many.label == "z-test"


def test_a_table_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="not a 2x2 table"):
        fisher_exact(4, 3, 0, 10)
