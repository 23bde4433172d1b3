"""The units and ranges of what is typed on the command line: each unit's factor, the unit a bare number is read in,
and the values an option refuses before anything runs (a mutation audit found these unchecked)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dlperf.cli.common import duration_s, memory_size
from dlperf.errors import ConfigError
from dlperf.optimize.search import OptimizeConfig

pytestmark = pytest.mark.unit


def test_every_duration_unit_has_its_own_factor_and_a_bare_number_is_seconds() -> None:
    """`--time-budget 2h` read as 2 minutes, or `--duration 90` as 90 minutes, would cut a run short or let it run for
    hours, with no error."""
    assert duration_s("2h") == 7200.0
    assert duration_s("1.5h") == 5400.0
    assert duration_s("90") == 90.0
    assert duration_s(" 0.5 ") == 0.5
    assert duration_s("3m") == 180.0 and duration_s("250ms") == pytest.approx(0.25)


@pytest.mark.parametrize(("text", "size"), [
    ("4k", 4 * 2**10), ("4KiB", 4 * 2**10), ("4000kb", 4 * 10**6),  # k and KiB binary, kB decimal
    ("2t", 2 * 2**40), ("2TiB", 2 * 2**40), ("2TB", 2 * 10**12),
])
def test_kilo_and_tera_sizes_are_binary_without_b_and_with_ib_decimal_with_b(text: str, size: int) -> None:
    """'--memory-budget 2TB' read as 2 TiB (10% more) or '4k' as 4000 bytes: the budget checked is not the one given."""
    assert memory_size(text) == size


def test_a_size_past_any_machine_s_memory_is_refused() -> None:
    """1e19 bytes (8.7 EiB) is not a budget anyone means: a missing unit or a typo, refused as 1e400 is."""
    with pytest.raises(ConfigError, match="beyond any machine's memory"):
        memory_size("1e19")
    assert memory_size("4e18") == 4 * 10**18  # below 2**62: a size, if a large one


def test_bench_refuses_zero_min_iters() -> None:
    """`--min-iters 0` measured the scenario's default count without a word (0 read as 'not given')."""
    from dlperf.cli import bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(ConfigError, match="--min-iters must be >= 1, got 0"):
        bench.build_config(parser.parse_args(["zoo:mlp", "--min-iters", "0"]))


def _check_args(*argv: str, store: Path) -> argparse.Namespace:
    from dlperf.cli import check

    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    return parser.parse_args(["zoo:mlp", "--baseline", "b", "--store", str(store), *argv])


@pytest.mark.parametrize(("argv", "message"), [
    (("--max-regression", "1000%"), "--max-regression must be a fraction >= 0"),  # 10x slower would pass the gate
    (("--confidence", "1"), r"--confidence must be in \(0.5, 1\)"),  # a certain interval: no regression ever found
    (("--confidence", "100%"), r"--confidence must be in \(0.5, 1\)"),
    (("--confidence", "0.3"), r"--confidence must be in \(0.5, 1\)"),  # 30%: most noise read as a regression
])
def test_check_refuses_a_threshold_or_confidence_out_of_range(argv: tuple[str, ...], message: str,
                                                              tmp_path: Path) -> None:
    from dlperf.cli import check

    with pytest.raises(ConfigError, match=message):
        check.run(_check_args(*argv, store=tmp_path / "none.db"))


def test_check_takes_a_zero_regression_threshold(tmp_path: Path) -> None:
    """0 (any significant slowdown fails) is a threshold, not a mistake: the command goes on to open the store (and
    stops there, as it does not exist), instead of refusing the option."""
    from dlperf.cli import check
    from dlperf.errors import StoreError

    with pytest.raises(StoreError, match="no run store at"):
        check.run(_check_args("--max-regression", "0", "--confidence", "0.99", store=tmp_path / "none.db"))


def _optimize_config(*argv: str) -> OptimizeConfig:
    from dlperf.cli import optimize

    parser = argparse.ArgumentParser()
    optimize.add_arguments(parser)
    return optimize.search_config(parser.parse_args(["zoo:mlp", *argv]))


def test_optimize_s_budgets_are_read_in_their_units() -> None:
    """--latency-budget-ms 5 is 5 ms (read as 5 us every candidate would fail it); an absolute drop budget replaces
    the relative default instead of adding it; --min-duration past the cap raises the cap; the search's own default
    time is 10 minutes."""
    config = _optimize_config("--latency-budget-ms", "5", "--min-duration", "20s")
    assert config.constraints.latency_budget_s == pytest.approx(0.005)
    assert config.min_duration_s == 20.0 and config.max_duration_s == 20.0
    assert config.time_budget_s == 600.0 and config.candidate_timeout_s == 300.0
    absolute = _optimize_config("--max-metric-drop-abs", "0.005").constraints
    assert absolute.max_metric_drop_abs == 0.005 and absolute.max_metric_drop is None
    relative = _optimize_config("--max-metric-drop", "2%").constraints
    assert relative.max_metric_drop == pytest.approx(0.02) and relative.max_metric_drop_abs is None
    assert _optimize_config().constraints.max_metric_drop == 0.01


def test_load_refuses_an_infinite_rate_a_failure_share_above_one_and_too_long_a_list() -> None:
    """`--rate inf` would send as fast as the loop can with no level to report; `--max-error-ratio 5` (meant 5%)
    would let every request fail; a list of 65 levels passed the 64-level cap that a range of 65 is held to."""
    from dlperf.cli.load import MAX_LEVELS, _concurrency_levels, _error_ratio, _rate_levels

    with pytest.raises(argparse.ArgumentTypeError, match="rate values must be positive"):
        _rate_levels("inf")
    with pytest.raises(argparse.ArgumentTypeError, match="not a share between 0 and 1"):
        _error_ratio("5")
    assert _error_ratio("1") == 1.0 and _error_ratio("0.01") == 0.01
    many = ",".join(str(i) for i in range(1, MAX_LEVELS + 2))
    with pytest.raises(argparse.ArgumentTypeError, match=f"gives {MAX_LEVELS + 1} levels, at most {MAX_LEVELS}"):
        _concurrency_levels(many)
    assert len(_concurrency_levels(",".join(str(i) for i in range(1, MAX_LEVELS + 1)))) == MAX_LEVELS


@pytest.mark.parametrize("budget", ["nan", "inf", "0", "-5"])
def test_optimize_refuses_a_latency_budget_that_is_not_a_positive_number(budget: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """NaN passed `budget <= 0` and turned the p99 limit off: every candidate met it."""
    from dlperf.cli.main import main

    assert main(["optimize", "zoo:mlp", f"--latency-budget-ms={budget}", "--store", str(tmp_path / "r.db")]) == 2
    assert "--latency-budget-ms must be a positive number" in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()
