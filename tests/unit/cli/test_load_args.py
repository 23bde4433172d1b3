"""`dlperf load --concurrency/--rate`: lists and perf_analyzer's START:END[:STEP] ranges, refused clearly when
they cannot be meant."""

from __future__ import annotations

import argparse

import pytest

from dlperf.cli.load import MAX_LEVELS, _concurrency_levels, _rate_levels


def test_lists_and_ranges_give_the_levels_in_order_with_the_end_included() -> None:
    assert _concurrency_levels("1,4,16") == (1, 4, 16)
    assert _concurrency_levels("1:4") == (1, 2, 3, 4)  # STEP 1 by default, as perf_analyzer
    assert _concurrency_levels("1:16:4") == (1, 5, 9, 13)  # 17 would pass END
    assert _concurrency_levels("1,2,4:8:2") == (1, 2, 4, 6, 8)
    assert _rate_levels("100:500:100") == (100.0, 200.0, 300.0, 400.0, 500.0)
    assert _rate_levels("0.1:0.3:0.1") == (0.1, 0.2, 0.3)  # no float drift past END
    assert _rate_levels("12.5") == (12.5,)


@pytest.mark.parametrize(("parse", "text", "message"), [
    (_concurrency_levels, "0", "must be positive, got '0'"),
    (_concurrency_levels, "2.5", "'2.5' in '2.5' is not a whole number; write e.g. 1,4,16 or 1:16:4"),
    (_concurrency_levels, "1:4:0", "must be positive, got '0'"),
    (_concurrency_levels, "8:1", "END 1 is below START 8"),
    (_concurrency_levels, "1:2:3:4", "is not START:END[:STEP]"),
    (_concurrency_levels, f"1:{MAX_LEVELS + 1}",
     f"gives {MAX_LEVELS + 1} levels, at most {MAX_LEVELS}: give a larger STEP"),
    (_concurrency_levels, ",", "no concurrency values"),
    (_rate_levels, "fast", "'fast' in 'fast' is not a number; write e.g. 50,100 or 100:500:100"),
    (_rate_levels, "-5", "rate values must be positive"),
    (_rate_levels, "nan", "rate values must be positive"),
])
def test_bad_levels_say_what_is_wrong(parse: object, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(text)  # type: ignore[operator]
    assert message in str(info.value)


def test_the_open_loop_cap_and_the_request_timeout_are_options() -> None:
    from dlperf.cli.load import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = parser.parse_args(["127.0.0.1:8000", "--model", "m"])
    assert (defaults.max_outstanding, defaults.request_timeout_s) == (1024, 60.0)
    given = parser.parse_args(["127.0.0.1:8000", "--model", "m", "--max-outstanding", "8",
                               "--request-timeout-s", "2.5"])
    assert (given.max_outstanding, given.request_timeout_s) == (8, 2.5)


def test_a_peak_search_stopped_undecided_says_so_under_json_too() -> None:
    """With --json only "SLO not met: no tried rate kept ..." reached the terminal when the search had stopped on an
    undecided trial; the line saying where and why it stopped was printed only without --json."""
    import io
    import types

    from rich.console import Console

    from dlperf.cli.load import _peak_exit
    from dlperf.loadgen.generator import Slo

    steps = [{"verdict": "fail"}, {"verdict": "undecided"}]
    run_ = types.SimpleNamespace(result={"peak": {"peak_rate": None, "undecided_at": 50.0, "steps": steps}})
    for json_out in (True, False):
        buffer = io.StringIO()
        assert _peak_exit(Console(file=buffer, width=400), run_, Slo(0.01), json_out) == 1
        said = buffer.getvalue()
        assert said.endswith("SLO not met: no tried rate kept p99 <= 10 ms\n")
        # without --json the search's own lines said it already
        assert ("the search stopped at 50 req/s: undecided" in said) is json_out
