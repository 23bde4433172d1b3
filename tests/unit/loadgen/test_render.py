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


def _cells(renderable: Any, width: int = 200) -> tuple[list[str], list[list[str]]]:
    """The header's words and each row's cells of a levels table drawn with its full box."""
    lines = _lines(renderable, width)
    header = next(line for line in lines if "req/s" in line).replace("┃", " ").split()
    rows = [line.replace("│", " ").split() for line in lines if "│" in line]
    return header, rows


def test_the_bound_column_is_at_the_slo_s_percentile_and_the_batch_column_is_the_server_s_mean_batch() -> None:
    """With --slo-ms X --slo-percentile 95 the bound column is the p95 bound, which the verdicts judge; 'batch' is
    the server's mean batch (1.0 here), not its request count."""
    from dlperf.loadgen.generator import Slo

    header, rows = _cells(levels_table(LEVELS, "mlp", Slo(0.05, 95.0)))
    assert header[header.index("bound") - 1] == "p95"
    ok = [int(0.718e6)] * 1217 + [int(2.154e6)] * 24
    p95_bound = LevelResult("concurrency", 1.0, 1, ok, {"200": len(ok)}, 1.0, True, [1217.0]).percentile_bound_s(95)
    assert p95_bound is not None and rows[0][7] == f"{p95_bound * 1e3:.3g}"  # conc, req/s, items/s, p50..p99, bound
    assert rows[0][-2] == "1.0"  # batch, before 'stable'


def test_the_line_a_finished_level_prints_gives_the_judged_percentile() -> None:
    from dlperf.loadgen.render import level_line

    spread = LevelResult("concurrency", 1.0, 1, [i * 1_000_000 for i in range(1, 101)], {"200": 100}, 1.0, True,
                         [100.0])
    assert level_line(spread, 90.0) == f"  concurrency 1: 100.0 req/s, p90 {spread.percentile_s(90) * 1e3:.3g} ms"
    assert spread.percentile_s(90) < spread.percentile_s(99)


def test_the_csv_has_each_percentile_in_its_column_and_no_row_for_a_level_where_nothing_succeeded() -> None:
    """A level where every request failed has no latency to average: --csv ended in a ZeroDivisionError after the
    run was stored."""
    import csv

    from dlperf.loadgen.render import perf_analyzer_csv

    spread = LevelResult("concurrency", 1.0, 1, [i * 1_000_000 for i in range(1, 101)], {"200": 100}, 1.0, True,
                         [100.0])
    failed = LevelResult("concurrency", 2.0, 1, [], {"timeout": 30}, 1.0, False, [0.0])
    rows = list(csv.reader(io.StringIO(perf_analyzer_csv([spread, failed]))))
    assert len(rows) == 2 and rows[1][0] == "1"
    got = dict(zip(rows[0], rows[1], strict=True))
    assert [int(got[f"p{q} latency"]) for q in (50, 90, 95, 99)] == [
        int(spread.percentile_s(q) * 1e6) for q in (50, 90, 95, 99)]
    assert len({got[f"p{q} latency"] for q in (50, 90, 95, 99)}) == 4


def test_a_stored_peak_search_says_which_rates_failed() -> None:
    """A run stored before verdicts were recorded shows pass/FAIL from its steps; a search whose rates were shown to
    miss the SLO says that none kept it, not that none was decided."""
    from dlperf.loadgen.render import stored_view

    slo = {"bound_s": 0.1, "percentile": 99.0}
    old = {"levels": [LEVELS[0].to_dict()], "peak": {"slo": slo, "peak_rate": None, "steps": [{"passed": False}]}}
    text = "\n".join(_lines(Group(*stored_view(old, {"model": "mlp", "url": "u", "find_peak": True})), 160))
    assert "  concurrency 1: FAIL" in text
    judged = {"levels": [{**LEVELS[0].to_dict(), "verdict": "fail", "verdict_reason": "2 of 1241 requests failed"}],
              "peak": {"slo": slo, "peak_rate": None, "steps": [{"verdict": "fail", "passed": False}]}}
    text = "\n".join(_lines(Group(*stored_view(judged, {"model": "mlp", "url": "u", "find_peak": True})), 160))
    assert "no tried rate kept p99 <= 100 ms" in text and "undecided" not in text


def test_a_live_peak_search_with_a_failed_rate_says_none_kept_the_slo() -> None:
    from dlperf.loadgen.generator import PeakResult, Slo
    from dlperf.loadgen.render import peak_lines

    failed = LevelResult("rate", 50.0, 1, [1_000_000] * 600, {"200": 600, "503": 3}, 12.0, True, [50.0],
                         send_rate=50.0)
    assert peak_lines(PeakResult(Slo(0.1), None, [failed]))[-1] == "no tried rate kept p99 <= 100 ms"


def test_a_stored_sweep_s_bound_is_at_its_slo_s_percentile() -> None:
    """A sweep judged at --slo-percentile 95 (no peak search) has its SLO in its config only."""
    from dlperf.loadgen.render import stored_view

    config = {"model": "mlp", "url": "u", "slo": {"bound_s": 0.05, "percentile": 95.0}}
    text = " ".join("\n".join(_lines(Group(*stored_view({"levels": [LEVELS[0].to_dict()]}, config)), 200)).split())
    assert "p95 bound" in text and "p99 bound" not in text


def test_the_setup_says_which_grpc_transport_carried_the_tensors() -> None:
    from dlperf.loadgen.render import setup_lines

    assert setup_lines({"protocol": "grpc"}) == [
        "transport: gRPC (inference.GRPCInferenceService/ModelInfer, tensors in raw_input_contents; a failed call "
        "counted under the HTTP status of its code)"]
    (streams, shm) = setup_lines({"protocol": "grpc", "streaming": True, "shared_memory": "system"})
    assert streams.startswith("transport: gRPC streams (inference.GRPCInferenceService/ModelStreamInfer, one stream "
                              "per connection, tensors described, in shared memory;")
    assert shm.startswith("transport: system shared memory")


def test_the_csv_splits_the_mean_latency_into_perf_analyzer_s_parts_in_microseconds() -> None:
    """Network+Server Send/Recv is the mean latency less the client's send and receive and the server's queue and
    compute time, each part in its own column; where the server's parts exceed the rest it is 0, not negative."""
    import csv

    from dlperf.loadgen.render import perf_analyzer_csv

    server = ServerSide(100, 0.001, 0.0002, 0.003, 0.0004, 2.0)  # queue, compute input, infer, output
    level = LevelResult("concurrency", 2.0, 2, [10_000_000] * 100, {"200": 100}, 1.0, True, [100.0], server=server,
                        client_send_s=0.0005, client_recv_s=0.0001)
    rows = list(csv.DictReader(io.StringIO(perf_analyzer_csv([level]))))
    got = {k: int(v) for k, v in rows[0].items() if k not in ("Concurrency", "Inferences/Second")}
    assert {k: got[k] for k in list(got)[:7]} == {
        "Client Send": 500, "Network+Server Send/Recv": 10_000 - 500 - 100 - 1000 - 200 - 3000 - 400,
        "Server Queue": 1000, "Server Compute Input": 200, "Server Compute Infer": 3000, "Server Compute Output": 400,
        "Client Recv": 100}
    assert rows[0]["Inferences/Second"] == "200"  # 100 requests of 2 items in 1 s
    slow_server = LevelResult("concurrency", 1.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0],
                              server=ServerSide(10, 0.002, 0.0, 0.0, 0.0, 1.0))
    assert next(csv.DictReader(io.StringIO(perf_analyzer_csv([slow_server]))))["Network+Server Send/Recv"] == "0"


def test_the_table_s_columns_hold_their_own_figures() -> None:
    """p90 is the 90th percentile (not the 95th), items/s counts the items of each request, 'stable' says whether
    the windows agreed, and the caption's minimum count is the early-stopping test's at the SLO's percentile."""
    from dlperf.loadgen.generator import Slo
    from dlperf.measure.stats import early_stopping_min_count

    spread = LevelResult("concurrency", 1.0, 4, [i * 1_000_000 for i in range(1, 1001)], {"200": 1000}, 10.0, False,
                         [100.0])
    header, rows = _cells(levels_table([spread], "mlp"))
    cells = dict(zip([h for h in header if h != "bound"], rows[0], strict=True))
    assert cells["p90"] == f"{spread.percentile_s(90) * 1e3:.0f}" != f"{spread.percentile_s(95) * 1e3:.0f}"
    assert (cells["req/s"], cells["items/s"], cells["stable"]) == ("100", "400", "no")
    caption = " ".join("\n".join(_lines(levels_table([spread], "mlp", Slo(0.05, 90.0)), 200)).split())
    assert f"within which 90% of requests stay at 99% confidence (- below {early_stopping_min_count(90)} requests)" \
        in caption and early_stopping_min_count(90) != early_stopping_min_count(99)


def test_the_caption_says_what_latencies_count_from() -> None:
    """Rate mode times a request from when it was due, the generator's lag included; the closed loop from its send."""
    rate = LevelResult("rate", 100.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0], send_lag_p99_s=0.2)
    conc = LevelResult("concurrency", 1.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0])
    rate_caption = " ".join("\n".join(_lines(levels_table([rate], "mlp"), 200)).split())
    conc_caption = " ".join("\n".join(_lines(levels_table([conc], "mlp"), 200)).split())
    assert "latencies count from each request's scheduled time, the generator's own lag behind its schedule " \
        "included (--json: send_lag_p99_s)" in rate_caption
    assert "latencies count from each request's send" in conc_caption and "scheduled" not in conc_caption


def test_the_setup_lines_say_what_a_run_sent_and_how_its_levels_ended() -> None:
    """From a stored config (its tolerance a JSON list): random inputs, the default, say nothing, so a --workload
    run says its workload; a checked run gives rtol and atol each in its place; the stability line appears for
    another share than the default or a latency percentile, with the recorded (or default 3) windows."""
    from dlperf.loadgen.generator import DEFAULT_STABILITY
    from dlperf.loadgen.render import setup_lines

    assert setup_lines({"input_data": ["random"], "workload": "zoo:mlp"}) == ["inputs: zoo:mlp's example inputs"]
    assert setup_lines({"input_data": ["random"]}) == []
    checked = setup_lines({"input_data": ["d.json"], "distinct_requests": 2, "batch_size": 1, "validated": True,
                           "tolerance": [0.01, 1e-06], "request_bytes": 2048})
    assert checked == ["inputs: d.json (2 distinct requests of batch 1, 2.0 KiB in memory, every reply checked "
                       "against its validation data within rtol 0.01, atol 1e-06)"]
    assert setup_lines({"stability": DEFAULT_STABILITY, "window_s": 2.0}) == []
    assert setup_lines({"stability": 0.05, "window_s": 0.5}) == [
        "stability: a level ends when 3 windows of 0.5 s agree within 5% on throughput and mean latency"]
    assert setup_lines({"stability_percentile": 95.0, "stable_windows": 4}) == [
        "stability: a level ends when 4 windows of 2 s agree within 10% on throughput and p95 latency"]


def test_a_peak_search_that_only_passed_or_stopped_undecided_says_so() -> None:
    """One failed rate among passing ones is still a failed rate: with no peak the outcome says none kept the SLO
    (not that none was decided); a peak found below an undecided trial is a lower bound, 'at least'."""
    from dlperf.loadgen.generator import PeakResult, Slo
    from dlperf.loadgen.render import peak_lines, peak_outcome

    slo = Slo(0.1)
    failed = LevelResult("rate", 50.0, 1, [1_000_000] * 600, {"200": 600, "503": 3}, 12.0, True, [50.0],
                         send_rate=50.0)
    undecided = LevelResult("rate", 10.0, 1, [1_000_000] * 20, {"200": 20}, 2.0, True, [10.0], send_rate=10.0)
    assert peak_lines(PeakResult(slo, None, [failed, undecided]))[-1] == "no tried rate kept p99 <= 100 ms"
    assert peak_outcome(20.0, slo, 40.0, False)[-1] == "peak: at least 20.0 req/s with p99 <= 100 ms"
    assert peak_outcome(20.0, slo, None, False) == ["peak: 20.0 req/s with p99 <= 100 ms"]


def test_a_rate_sweep_is_titled_and_split_by_its_own_columns() -> None:
    """A rate sweep's first column is 'rate' in the table and 'Request Rate' in the CSV; queue and compute are the
    server's queue and compute means, each in its column."""
    import csv

    from dlperf.loadgen.render import perf_analyzer_csv

    server = ServerSide(100, 0.004, 0.0, 0.001, 0.0, 1.0)  # 4 ms queued, 1 ms computing
    level = LevelResult("rate", 50.0, 1, [10_000_000] * 100, {"200": 100}, 2.0, True, [50.0], server=server)
    header, rows = _cells(levels_table([level], "mlp"))
    assert header[0] == "rate"
    cells = dict(zip([h for h in header if h != "bound"], rows[0], strict=True))
    assert (cells["queue"], cells["compute"]) == ("4", "1")
    assert next(csv.reader(io.StringIO(perf_analyzer_csv([level]))))[0] == "Request Rate"


def test_the_setup_lines_give_the_slo_the_shared_memory_outputs_and_the_recorded_schedule() -> None:
    from dlperf.loadgen.render import setup_lines

    lines = setup_lines({"slo": {"bound_s": 0.05, "percentile": 99.0}, "shared_memory": "system", "validated": False,
                         "request_intervals": "gaps.txt", "intervals": 120, "trace_rate": 41.5})
    assert lines[0].startswith("SLO: p99 <= 50 ms at 99% confidence")
    assert "the outputs written to regions of their own" in lines[1]
    assert lines[2] == "schedule: gaps.txt (120 gaps, looped; 41.5 req/s as recorded, scaled to each level's rate)"
    checked = setup_lines({"input_data": ["d.json"], "validated": True, "shared_memory": "system"})
    assert "the outputs in the reply, to check them against the validation data" in checked[-1]


def test_a_peak_search_stopped_on_an_undecided_trial_says_where_live_and_stored() -> None:
    """Live (peak_lines) and in `dlperf runs show` (stored_view): where the search stopped, the peak below it as a
    lower bound, and each step's warnings."""
    from dlperf.loadgen.generator import PeakResult, Slo
    from dlperf.loadgen.render import peak_lines, stored_view

    slo = Slo(0.1)
    passed = LevelResult("rate", 20.0, 1, [1_000_000] * 600, {"200": 600}, 30.0, True, [20.0], send_rate=20.0)
    short = LevelResult("rate", 40.0, 1, [1_000_000] * 100, {"200": 100}, 2.5, True, [40.0], send_rate=40.0,
                        warnings=["the level ended before 3 windows agreed"])
    peak = PeakResult(slo, 20.0, [passed, short], undecided_at=short)
    live = peak_lines(peak)
    assert live[-2].startswith("the search stopped at 40 req/s: undecided")
    assert live[-1] == "peak: at least 20.0 req/s with p99 <= 100 ms"
    stored = {"levels": [r.to_dict() for r in (passed, short)], "peak": peak.to_dict()}
    text = " ".join("\n".join(_lines(Group(*stored_view(stored, {"model": "mlp", "url": "u", "find_peak": True})),
                                     200)).split())
    assert "the search stopped at 40 req/s: undecided" in text and "peak: at least 20.0 req/s" in text
    assert "warning (rate 40): the level ended before 3 windows agreed" in text


def test_runs_show_of_a_load_that_failed_its_gate_says_why_as_dlperf_load_did() -> None:
    """`dlperf load` exits 1 with 'more requests failed than --max-error-ratio 0 allows at: ...' or 'SLO ... not met
    at: ...' as its last line; the stored run is 'ok' and its view ended at the warnings, so nothing said the sweep
    had failed."""
    from dlperf.loadgen.render import stored_view

    timed_out = LevelResult("concurrency", 2.0, 1, [int(2.75e6)] * 2, {"200": 2, "timeout": 1652}, 3.0, False, [0.7])
    config = {"model": "mlp", "url": "127.0.0.1:8000", "max_error_ratio": 0.0}
    text = "\n".join(_lines(Group(*stored_view({"levels": [timed_out.to_dict()]}, config)), 400))
    assert text.endswith("more requests failed than --max-error-ratio 0 allows at: concurrency 2 (99.9% failed, 1652 "
                          "of 1654 requests); the errors column says which statuses (--max-error-ratio R lets a share "
                          "R of a level's requests fail)")
    missed = {**LEVELS[1].to_dict(), "passed": False, "verdict": "fail", "verdict_reason": "p99 over 1 ms"}
    slo = {**config, "slo": {"bound_s": 0.001, "percentile": 99.0}}
    text = "\n".join(_lines(Group(*stored_view({"levels": [LEVELS[0].to_dict(), missed]}, slo)), 400))
    assert text.endswith("SLO p99 <= 1 ms not met at: concurrency 4 (fail)")
    passed = "\n".join(_lines(Group(*stored_view({"levels": [LEVELS[0].to_dict()]}, config)), 400))
    assert "not met" not in passed and "more requests failed" not in passed


def test_runs_show_of_an_interrupted_load_run_titles_it_interrupted_as_dlperf_load_did() -> None:
    from dlperf.report.terminal import record_view
    from dlperf.store.records import RunRecord

    config = {"model": "mlp", "url": "127.0.0.1:8000"}
    result = {"levels": [LEVELS[0].to_dict()]}
    stopped = "\n".join(_lines(record_view(RunRecord("l1", "load", "127.0.0.1:8000/mlp", "interrupted", "2026-01-01",
                                                     config=config, result=result)), 200))
    assert "mlp at 127.0.0.1:8000 (interrupted, 1 level finished)" in stopped  # the title dropped it
    done = "\n".join(_lines(record_view(RunRecord("l2", "load", "127.0.0.1:8000/mlp", "ok", "2026-01-01",
                                                  config=config, result=result)), 200))
    assert "mlp at 127.0.0.1:8000" in done and "(interrupted" not in done


def test_a_peak_below_undecided_rates_says_the_edge_may_lie_among_them() -> None:
    """An undecided trial counts as not passing, so the bisection goes below it: against a 10 ms M/D/1 server with a
    50 ms p99 SLO (theory's edge 51.9 req/s) the search passed 48.6, failed 60.7 and left 54.7, 51.6 and 50.1
    undecided, and said only "peak: 48.6 req/s with p99 <= 50 ms", as if those three had missed it; live and stored."""
    from dlperf.loadgen.generator import PeakResult, Slo
    from dlperf.loadgen.render import peak_lines, stored_view

    def step(rate: float, n: int, slow: int = 0) -> LevelResult:
        return LevelResult("rate", rate, 1, [10_000_000] * (n - slow) + [200_000_000] * slow, {"200": n}, 10.0, True,
                           [rate], send_rate=rate)

    steps = [step(97.2, 600, 100), step(48.6, 600), step(72.9, 600, 100), step(60.7, 600, 100), step(54.7, 200),
             step(51.6, 200), step(50.1, 200)]
    assert peak_lines(PeakResult(Slo(0.05), 48.6, steps))[-1] == (
        "peak: 48.6 req/s with p99 <= 50 ms; 50.1, 51.6 and 54.7 req/s above it were undecided (too few requests to "
        "show either way, counted as not passing): the edge lies between 48.6 and 60.7 req/s, the lowest rate shown "
        "to miss it")
    # decided both ways: the peak alone, as before
    assert peak_lines(PeakResult(Slo(0.05), 48.6, steps[:4]))[-1] == "peak: 48.6 req/s with p99 <= 50 ms"
    stored = {"levels": [r.to_dict() for r in steps], "peak": PeakResult(Slo(0.05), 48.6, steps).to_dict()}
    text = " ".join("\n".join(_lines(Group(*stored_view(stored, {"model": "m", "url": "u", "find_peak": True})),
                                     200)).split())
    assert "50.1, 51.6 and 54.7 req/s above it were undecided" in text and "between 48.6 and 60.7 req/s" in text
