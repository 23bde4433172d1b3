"""The load results table and headline as a console of a given width shows them."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console, Group

from dlperf.loadgen.generator import LevelResult, ServerSide
from dlperf.loadgen.render import levels_table, load_headline

pytestmark = pytest.mark.unit


def _lines(renderable: Any, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in text.splitlines()]


def _level(level: float, rps: int, latency_ms: float, statuses: dict[str, int] | None = None) -> LevelResult:
    ok = [int(latency_ms * 1e6)] * rps + [int(latency_ms * 3e6)] * (rps // 50)
    server = ServerSide(rps, 0.000129, 0.00001, 0.000158, 0.00001, 1.0)
    return LevelResult("concurrency", level, 1, ok if statuses is None else [], statuses or {"200": len(ok)},
                       1.0, statuses is None, [float(rps)], server=server)


LEVELS = [_level(1, 1217, 0.718), _level(4, 1964, 1.78)]


def test_the_levels_table_keeps_its_numbers_whole_on_80_columns() -> None:
    lines = _lines(levels_table(LEVELS, "mlp at 127.0.0.1:37173"), 80)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "…" not in text  # rich squeezed every column ('r…', 'p9…', an empty p50 column)
    header = next(line for line in lines if line.lstrip().startswith("conc"))
    assert header.split() == ["conc", "req/s", "items/s", "p50", "p90", "p99", "p99", "bound", "errors", "queue",
                              "compute", "batch", "stable"]
    row = next(line for line in lines if line.split()[:1] == ["4"])
    assert row.split()[3:6] == ["1.78", "1.78", "5.34"]  # p50, p90, p99
    assert lines[0].startswith("mlp at 127.0.0.1:37173 (latencies in ms)")
    assert "not shown at this width: p95, p99.9 (--json has them)" in " ".join(text.split())


def test_the_levels_table_has_every_column_where_they_fit() -> None:
    lines = _lines(levels_table(LEVELS, "mlp"), 160)
    header = next(line for line in lines if "req/s" in line)
    assert [c for c in header.replace("┃", " ").split()] == [
        "conc", "req/s", "items/s", "p50", "p90", "p95", "p99", "p99", "bound", "p99.9", "errors", "queue", "compute",
        "batch", "stable"]
    assert "not shown" not in "\n".join(lines)


def test_a_p99_9_of_fewer_than_1000_replies_is_not_shown_as_a_tail_figure() -> None:
    """Of 100-999 replies the p99.9 is the slowest one; it was printed beside the p99 bound as if it were a tail
    estimate. 1217 and 2003 replies show it, 510 do not, and the caption says why."""
    few = _level(8, 500, 2.5)
    lines = _lines(levels_table([*LEVELS, few], "mlp"), 200)
    header = next(line for line in lines if "req/s" in line).replace("┃", " ").split()
    at = header.index("p99.9") - 1  # 'p99 bound' is two words in the header, one cell in a row

    def cell(level: str) -> str:
        row = next(line for line in lines if line.replace("│", " ").split()[:1] == [level])
        return row.replace("│", " ").split()[at]

    assert (cell("1"), cell("4"), cell("8")) == ("2.15", "5.34", "-")
    assert "p99.9: - below 1000 replies (it is their slowest)" in " ".join("\n".join(lines).split())
    assert "p99.9: -" not in " ".join("\n".join(_lines(levels_table(LEVELS, "mlp"), 200)).split())


def test_a_level_where_every_request_failed_keeps_its_errors_readable_on_80_columns() -> None:
    failed = _level(2, 0, 1.0, statuses={"timeout": 3003})
    lines = _lines(levels_table([failed], "mlp"), 80)
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if line.split()[:1] == ["2"])
    assert "timeout: 3003" in row and row.split()[-1] == "no"


def test_the_headline_of_a_level_where_every_request_failed_says_so() -> None:
    levels = [{"mode": "concurrency", "level": 2.0, "throughput_rps": 0.0, "p99_s": float("nan")}]
    assert load_headline({"levels": levels}) == "0.0 req/s, no request succeeded at concurrency 2"
    # a run with a level that answered picks that one
    levels.append({"mode": "concurrency", "level": 4.0, "throughput_rps": 12.5, "p99_s": 0.02})
    assert load_headline({"levels": levels}) == "12.5 req/s, p99 20 ms at concurrency 4"


def test_the_headline_of_a_level_where_some_requests_failed_says_how_many() -> None:
    """'24.8 req/s, p99 528 ms at concurrency 64' was the whole headline of a level whose 1243 of 1310 requests got
    503 (runs list, the HTML report's runs table)."""
    level = {"mode": "concurrency", "level": 64.0, "throughput_rps": 24.8, "p99_s": 0.528,
             "statuses": {"503": 1243, "200": 67}}
    assert (load_headline({"levels": [level]})
            == "24.8 req/s, p99 528 ms at concurrency 64, 94.9% of 1310 requests failed")
    # requests the open loop did not send are not failures of the server (their own warning says it)
    dropped = {**level, "mode": "rate", "level": 30.0, "statuses": {"200": 67, "dropped": 5}}
    assert load_headline({"levels": [dropped]}) == "24.8 req/s, p99 528 ms at rate 30"


def test_a_level_s_verdict_keeps_its_indent_where_it_wraps() -> None:
    from rich.console import Group

    from dlperf.loadgen.render import stored_view

    level = {**LEVELS[0].to_dict(), "verdict": "pass",
             "verdict_reason": "p99 <= 8.78 ms at 99% confidence (0 of 2912 requests over 50 ms)"}
    lines = _lines(Group(*stored_view({"levels": [level]}, {"model": "mlp", "url": "127.0.0.1:8000"})), 80)
    at = next(i for i, line in enumerate(lines) if line.startswith("  concurrency 1: pass: p99 <= 8.78 ms"))
    assert lines[at + 1].startswith("  ") and "50 ms)" in lines[at + 1]  # it went to column 0


def test_the_line_a_finished_level_prints_gives_the_latency_as_the_table_does() -> None:
    from dlperf.loadgen.render import level_line

    slow = LevelResult("rate", 800.0, 1, [int(1.52328e9)] * 100, {"200": 100}, 1.0, False, [100.0])
    assert level_line(slow) == "  rate 800: 100.0 req/s, p99 1523 ms"  # 'p99 1523.28 ms'
    fast = LevelResult("concurrency", 1.0, 1, [51_200] * 100, {"200": 100}, 0.01, True, [100.0])
    assert level_line(fast, 90.0) == "  concurrency 1: 10000.0 req/s, p90 0.0512 ms"  # 'p90 0.05 ms'
    failed = LevelResult("concurrency", 2.0, 1, [], {"timeout": 30}, 1.0, False, [0.0])
    assert level_line(failed) == "  concurrency 2: 0.0 req/s, no request succeeded"


def test_the_line_a_finished_level_prints_counts_its_errors() -> None:
    """It said 'rate 150: 76.1 req/s, p99 151 ms' of a level where 284 of 600 requests timed out in the server's
    queue: with --json that line is all a terminal shows, and the exit code was 0."""
    from dlperf.loadgen.render import level_line

    timed_out = LevelResult("rate", 150.0, 1, [int(0.151e9)] * 316, {"200": 316, "503": 284}, 4.15, True, [80.0])
    assert level_line(timed_out) == "  rate 150: 76.1 req/s, p99 151 ms, errors 503: 284"
    dropped = LevelResult("rate", 100.0, 1, [int(0.09e9)] * 119, {"200": 119, "dropped": 180, "503": 2}, 3.0, False,
                          [40.0])
    assert level_line(dropped) == "  rate 100: 39.7 req/s, p99 90 ms, errors 503: 2, dropped: 180"


def test_a_rate_the_peak_search_computed_is_shown_to_a_tenth_everywhere() -> None:
    """The table, the warnings and 'the search stopped at' said 227.713 and 28.4641 beside 'trying 227.7 req/s'."""
    from dlperf.loadgen.generator import Slo
    from dlperf.loadgen.render import level_text, peak_outcome

    rate = LevelResult("rate", 227.71258891250264, 1, [1_000_000] * 20, {"200": 20}, 1.0, True, [20.0],
                       warnings=["the load generator fell behind its schedule"])
    row = next(line for line in _lines(levels_table([rate], "mlp"), 160) if "│" in line and "req/s" not in line)
    assert row.replace("│", " ").split()[0] == "227.7"
    assert peak_outcome(None, Slo(0.02), 28.46407361406283, True)[0].startswith("the search stopped at 28.5 req/s")
    assert load_headline({"levels": [{**rate.to_dict(), "p99_s": 0.001}]}).endswith("at rate 227.7")
    # a level as the user gave it stays as given
    assert [level_text(v) for v in (16.0, 50.0, 2.25, 0.5)] == ["16", "50", "2.25", "0.5"]


def test_runs_show_titles_a_peak_search_as_dlperf_load_did() -> None:
    from dlperf.loadgen.render import stored_view

    config = {"model": "mlp", "url": "127.0.0.1:8000", "find_peak": True}
    text = "\n".join(_lines(Group(*stored_view({"levels": [LEVELS[0].to_dict()]}, config)), 120))
    assert "mlp at 127.0.0.1:8000: rate search (latencies in ms)" in text
    sweep = "\n".join(_lines(Group(*stored_view({"levels": [LEVELS[0].to_dict()]}, {**config, "find_peak": False})),
                             120))
    assert "mlp at 127.0.0.1:8000 (latencies in ms)" in sweep
