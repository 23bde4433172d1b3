"""The HTML report's figures stand at their values: each table cell is its own KPI in its unit, and each plotted
point, bar, line and reference line is read back off the chart's labelled axes."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from dlperf.measure.stats import Measurement
from dlperf.report.html import render_report
from dlperf.store.records import RunRecord
from tests.unit.report import svg_read

pytestmark = pytest.mark.unit


def _rec(run_id: str, kind: str, result: dict[str, Any], config: dict[str, Any] | None = None) -> RunRecord:
    return RunRecord(id=run_id, kind=kind, workload="zoo:mlp", status="ok", created_at="2026-11-29T10:00:00",
                     config=config or {}, environment={}, result=result)


def _cells(html: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first`."""
    row = re.search(rf"<tr><td[^>]*>{re.escape(first)}</td>(.*?)</tr>", html, flags=re.S)
    assert row is not None, f"no row {first!r}"
    return [first, *re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))]


def _measured(samples_ms: list[float], batch: int = 1) -> dict[str, Any]:
    return Measurement([round(ms * 1e6) for ms in samples_ms], items_per_call=batch).to_dict()


# --- bench -----------------------------------------------------------------------------------------------------


SUMMARY = {"n": 100, "p50_s": 0.001, "p90_s": 0.0015, "p95_s": 0.0017, "p99_s": 0.0019, "mean_s": 0.0012,
           "throughput": 800.0}


@functools.cache
def _bench() -> str:
    points = [{"batch_size": 1, "summary": SUMMARY, "measurement": _measured([1.0] * 50 + [2.0] * 50),
               "peak_rss_bytes": 300 * 2**20, "process_cpu_percent": 95.0},
              {"batch_size": 8, "summary": {**SUMMARY, "throughput": 3000.0}}]
    config = {"batch_sizes": [1, 8], "timer": {"min_duration_s": 2.0, "min_iters": 50, "warmup_iters": 5}}
    return render_report([_rec("b1", "bench", {"points": points}, config)])


def test_the_bench_table_has_each_percentile_in_its_column_and_the_peak_in_mib() -> None:
    table = _bench().split("<h3>Latency per call and throughput</h3>", 1)[1]
    assert _cells(table, "1")[:9] == ["1", "100", "1", "1.5", "1.9", "1.2", "800", "300", "95"]


def test_the_bench_report_tags_the_timer_settings_it_was_measured_with() -> None:
    html = _bench()
    for tag in ("min_duration_s=2.0", "min_iters=50", "warmup_iters=5"):
        assert f'<span class="tag">{tag}</span>' in html


def test_the_latency_histogram_s_bars_are_percent_of_calls_at_their_latency() -> None:
    svg = svg_read.plot(_bench(), "Latency histogram, batch 1 (n=100, 1% tails cut)")
    tall = [(x, top) for x, top, _ in svg_read.bars(svg, "batch 1") if top > 1]
    assert [x for x, _ in tall] == pytest.approx([1.0125, 1.9875], abs=0.005)  # the first and last of 40 bins
    assert [top for _, top in tall] == pytest.approx([50.0, 50.0], abs=0.3)


def test_the_latency_cdf_rises_at_the_calls_latencies_in_ms() -> None:
    svg = svg_read.plot(_bench(), "Latency CDF")
    vertices = svg_read.line(svg, "batch 1")
    assert {round(x, 2) for x, _ in vertices} == {1.0, 2.0}
    assert sorted(svg_read.reference_lines(svg)) == pytest.approx([0.5, 0.99], abs=0.01)


def test_the_throughput_chart_plots_items_per_second_at_each_batch_size() -> None:
    svg = svg_read.plot(_bench(), "Throughput vs batch size")
    drawn = svg_read.points(svg, "throughput", x_log=True)
    assert [x for x, _ in drawn] == pytest.approx([1.0, 8.0], rel=0.01)
    assert [y for _, y in drawn] == pytest.approx([800.0, 3000.0], abs=10)


def test_a_gate_point_recorded_per_call_is_not_labelled_per_item() -> None:
    """The gate records whether it compared per-item times; a batch size other than 1 guesses so only for a record
    without the flag."""
    gate = {"metric": "p50", "max_regression": 0.05, "failed": False, "baseline_run_id": "b0", "confidence": 0.95,
            "points": [{"batch_size": batch, "metric": "p50", "baseline_value": 0.001, "current_value": 0.001,
                        "regression": 0.0, "regression_ci": [-0.01, 0.01], "change": 0.0, "change_ci": [-0.01, 0.01],
                        "lower_is_better": True, "per_item": per_item, "failed": False}
                       for batch, per_item in ((4, False), (8, True))]}
    html = render_report([_rec("c1", "check", {"points": [{"batch_size": 4, "summary": SUMMARY}], "gate": gate})])
    gated = html.split("<h3>Gate against baseline run b0", 1)[1]
    assert _cells(gated, "4")[2:4] == ["1 ms", "1 ms"]
    assert _cells(gated, "8")[2:4] == ["1 ms per item", "1 ms per item"]


# --- ab --------------------------------------------------------------------------------------------------------


@functools.cache
def _ab() -> str:
    a, b = [1.0] * 50 + [1.2] * 50, [2.0] * 50 + [2.4] * 50
    result = {"ratio": 0.8, "ci": [0.75, 0.85], "confidence": 0.95, "verdict": "faster", "block_ratios": [0.8, 0.8],
              "a": {"n": 100}, "b": {"n": 100}, "batch_size": {"a": 1, "b": 1},
              "measurements": {"a": _measured(a), "b": _measured(b)}}
    return render_report([_rec("ab1", "ab", result)])


def test_an_ab_s_speed_is_the_inverse_of_its_time_ratio() -> None:
    assert "time B/A 0.800 (95% CI 0.750 to 0.850; speed 1.250x)" in _ab()


def test_an_ab_s_cdfs_are_each_side_s_own_latencies_in_ms() -> None:
    svg = svg_read.plot(_ab(), "A vs B latency CDF")
    assert {round(x, 2) for x, _ in svg_read.line(svg, "A")} == {1.0, 1.2}
    assert {round(x, 2) for x, _ in svg_read.line(svg, "B")} == {2.0, 2.4}


# --- optimize --------------------------------------------------------------------------------------------------


def _optimize(candidates: list[tuple[str, float, float]], higher_is_better: bool = True,
              selected: str = "") -> str:
    parent = _rec("opt", "optimize", {"metric_name": "score", "higher_is_better": higher_is_better})
    kids = [RunRecord(id=f"c{i}", kind="candidate", workload="zoo:mlp", status="ok", created_at="2026-11-29T10:00:00",
                      parent_id="opt", result={"name": name, "latency_s": latency_s, "metric": metric,
                                               "selected": name == selected})
            for i, (name, latency_s, metric) in enumerate(candidates)]
    return render_report([parent], children={"opt": kids})


def _candidate(html: str, name: str) -> list[str]:
    """The cells of candidate `name`'s row, from its name on (after its row number, `#`)."""
    row = re.search(rf'<tr><td class="n">\d+</td><td>{re.escape(name)}</td>(.*?)</tr>', html, flags=re.S)
    assert row is not None, f"no candidate {name!r}"
    return [name, *re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))]


def _front(html: str, names: tuple[str, ...]) -> list[str]:
    """The candidates among `names` that the table puts on the Pareto front."""
    return [name for name in names if _candidate(html, name)[3] == "yes"]


def test_a_candidate_no_better_than_a_faster_one_is_off_the_frontier() -> None:
    """Equal metric and slower, or equal latency and a worse metric: dominated, whichever comes first."""
    html = _optimize([("a", 0.004, 0.90), ("b", 0.006, 0.95), ("c", 0.008, 0.95), ("d", 0.006, 0.93)], selected="b")
    assert _front(html, ("a", "b", "c", "d")) == ["a", "b"]
    svg = svg_read.plot(html, "Pareto frontier: latency vs score")
    assert svg_read.points(svg, "Pareto frontier") == [pytest.approx((4.0, 0.90), abs=0.005),
                                                       pytest.approx((6.0, 0.95), abs=0.005)]
    assert sorted(svg_read.points(svg, "candidates")) == [
        pytest.approx(p, abs=0.005) for p in [(4.0, 0.90), (6.0, 0.93), (6.0, 0.95), (8.0, 0.95)]]
    assert svg_read.points(svg, "selected") == [pytest.approx((6.0, 0.95), abs=0.005)]


def test_a_frontier_of_latencies_over_20x_apart_is_drawn_on_a_log_axis() -> None:
    """Ten candidates from 0.014 to 0.37 ms drew on a linear axis, eight of them in its first tenth on one another."""
    html = _optimize([("a", 0.000014, 0.90), ("b", 0.000016, 0.91), ("c", 0.00037, 0.92)])
    svg = svg_read.plot(html, "Pareto frontier: latency vs score")
    assert "paired p50 latency (ms), log scale" not in svg and "latency (ms), log scale" in svg
    assert svg_read.points(svg, "candidates", x_log=True) == [
        pytest.approx(p, rel=0.01) for p in [(0.014, 0.90), (0.016, 0.91), (0.37, 0.92)]]
    near = _optimize([("a", 0.004, 0.90), ("b", 0.006, 0.95)])
    assert "log scale" not in svg_read.plot(near, "Pareto frontier: latency vs score")


def test_a_metric_lower_is_better_makes_the_frontier_of_the_lower_ones() -> None:
    html = _optimize([("a", 0.004, 0.5), ("b", 0.006, 0.3), ("c", 0.008, 0.4)], higher_is_better=False)
    assert _front(html, ("a", "b", "c")) == ["a", "b"]


def test_a_failed_candidate_has_no_peak_memory_in_a_memory_search() -> None:
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.01, "metric": 0.95,
             "peak_rss_bytes": 400 * 2**20, "deployed_memory": {"peak_rss_bytes": 400 * 2**20}},
            {"key": "k1", "label": "openvino", "status": "failed", "error": "boom", "peak_rss_bytes": 900 * 2**20}]
    html = render_report([_rec("m", "optimize", {"metric_name": "accuracy", "objective": "memory", "candidates": rows,
                                                 "winner": "k0"})], children={"m": []})
    assert _candidate(html, "openvino")[1:4] == ["-", "-", "-"]  # latency, metric, peak MiB: it measured nothing


# --- profile ---------------------------------------------------------------------------------------------------


@functools.cache
def _profile() -> str:
    result = {"verdict": "compute-bound", "analyses": {
        "breakdown": {"step_s": 0.01, "forward_s": 0.008},
        "operators": {"operators": [{"name": "aten::addmm", "self_s": 0.006, "share": 0.6, "intensity": 40.0,
                                     "achieved_flops_s": 5e10, "bound": "compute", "pct_of_peak": 0.5}],
                      "peak_flops": {"fp32": 1e11}, "bandwidth_bytes_s": 2e10}}}
    return render_report([_rec("p1", "profile", result)])


def test_the_operators_table_gives_the_achieved_rate_in_gflop_s() -> None:
    assert _cells(_profile(), "aten::addmm")[1:5] == ["6", "60.0%", "40", "50"]


def test_the_roofline_bends_at_the_ridge_and_puts_each_operator_at_its_intensity_and_rate() -> None:
    """fp32 peak 100 GFLOP/s over 20 GB/s: the roof climbs at 20 GFLOP/s per FLOP/B up to 5 FLOP/B, then is flat."""
    svg = svg_read.plot(_profile(), "Roofline")
    roof = svg_read.line(svg, "fp32 roof", x_log=True, y_log=True)
    assert [(x, y / x) for x, y in roof[:1]] == [pytest.approx((0.05, 20.0), rel=0.02)]
    assert roof[1:] == [pytest.approx((5.0, 100.0), rel=0.02), pytest.approx((160.0, 100.0), rel=0.02)]
    assert svg_read.points(svg, "operators", x_log=True, y_log=True) == [pytest.approx((40.0, 50.0), rel=0.02)]


def test_every_roof_reaches_its_peak_and_the_operators_have_a_colour_of_their_own() -> None:
    """A profile on a CPU with fp32, bf16, fp16 and int8 ceilings: the bf16 and int8 ridges (107 and 247 FLOP/B) lay
    past the axis's end at 100, so those roofs were one bandwidth slope drawn twice, their peaks nowhere; and the
    operators were the int8 roof's orange."""
    peaks = {"fp32": 4.70e11, "bf16": 1.46e12, "fp16": 1.56e11, "int8": 3.39e12}
    result = {"analyses": {"operators": {
        "operators": [{"name": "aten::addmm", "self_s": 8e-6, "share": 0.13, "intensity": 0.48,
                       "achieved_flops_s": 2.4e9}],
        "peak_flops": peaks, "bandwidth_bytes_s": 1.37e10}}}
    svg = svg_read.plot(render_report([_rec("p2", "profile", result)]), "Roofline")
    for dtype, peak in peaks.items():
        name = f"{dtype} roof" + (" (GOP/s)" if dtype == "int8" else "")
        roof = svg_read.line(svg, name, x_log=True, y_log=True)
        assert roof[-1][1] == pytest.approx(peak / 1e9, rel=0.02) and roof[-2][1] == pytest.approx(peak / 1e9, rel=0.02)
    colours = re.findall(r'<g class="series" data-name="([^"]+)"><(?:polyline|circle)[^>]*?(?:stroke|fill)="(#\w+)"',
                         svg)
    assert len(colours) == 5 and len({c for _, c in colours}) == 5, colours


# --- load ------------------------------------------------------------------------------------------------------


@functools.cache
def _load() -> str:
    levels = [{"mode": "rate", "level": rate, "throughput_rps": rate, "p50_s": p50, "p99_s": p99, "errors": 0,
               "latencies_ns": [round(p50 * 1e9)] * 98 + [round(p99 * 1e9)] * 2}
              for rate, p50, p99 in [(100.0, 0.002, 0.004), (200.0, 0.003, 0.006)]]
    levels[1]["resources"] = {"cpu_cores": 1.5}  # --collect-metrics read the second level only
    return render_report([_rec("l1", "load", {"peak": {"slo_p99_s": 0.005, "peak_rate": 100.0}, "levels": levels})])


def test_the_load_plot_puts_each_level_at_its_throughput_and_latencies_in_ms_under_the_slo() -> None:
    svg = svg_read.plot(_load(), "Latency vs throughput")
    assert svg_read.points(svg, "p50") == [pytest.approx((100.0, 2.0), abs=0.05), pytest.approx((200.0, 3.0), abs=0.05)]
    assert svg_read.points(svg, "p99") == [pytest.approx((100.0, 4.0), abs=0.05), pytest.approx((200.0, 6.0), abs=0.05)]
    assert svg_read.reference_lines(svg) == [pytest.approx(5.0, abs=0.05)]


def test_the_load_cdfs_rise_at_each_level_s_request_latencies_in_ms() -> None:
    svg = svg_read.plot(_load(), "Latency CDF per level")
    assert {round(x, 2) for x, _ in svg_read.line(svg, "rate 100")} == {2.0, 4.0}


def test_a_resource_column_is_shown_where_one_level_has_it() -> None:
    html = _load()
    assert "<th>server CPU cores</th>" in html
    assert _cells(html, "rate 200")[-1] == "1.5" and _cells(html, "rate 100")[-1] == "-"


# --- train -----------------------------------------------------------------------------------------------------


def test_a_ddp_run_stopped_after_its_one_process_launch_shows_that_launch() -> None:
    result = {"workload": "zoo:mlp", "nproc": 2, "backend": "gloo", "batch_size": 32, "single_samples_per_s": 1500.0,
              "single_step_s": 0.0213, "partial": "stopped before the 2-process launch finished: the 1-process "
                                                  "figures only"}
    html = render_report([_rec("t1", "train", result)])
    assert _cells(html, "1")[:3] == ["1", "1,500", "21.3"]
    assert "stopped before the 2-process launch finished" in html and "raw result fields" not in html.split(
        "<h2>Environment</h2>")[0]


def test_a_training_run_s_step_chart_is_each_step_s_time_in_ms() -> None:
    step = Measurement([round(ms * 1e6) for ms in (30.0, 33.0, 27.0)], items_per_call=64)
    result = {"workload": "mlp", "config": {"batch_size": 64}, "step_s": 0.03, "samples_per_s": 2133.0,
              "summary": step.summary(), "measurement": step.to_dict(), "breakdown_s": {"forward": 0.01}}
    svg = svg_read.plot(render_report([_rec("t2", "train", result)]), "Training step: each step")
    assert svg_read.points(svg, "step time") == [pytest.approx(p, abs=0.1) for p in [(1, 30.0), (2, 33.0), (3, 27.0)]]


def test_each_candidate_point_is_numbered_with_its_table_row_without_overlaps() -> None:
    """The ten candidates of a digits MLP's optimize: their names were in hover tooltips only, so a printout of the
    plot could not tell which grey point was which; four of them sit within 0.0035 ms of one another."""
    search = [("onnxruntime", 0.01392, 0.9093), ("pruning(amount=0.5)", 0.01446, 0.7506),
              ("pruning", 0.01471, 0.8942), ("baseline", 0.01562, 0.9093), ("onnxruntime int8", 0.01687, 0.9093),
              ("hygiene", 0.01735, 0.9093), ("dynamic_int8", 0.03983, 0.9093), ("precision", 0.05878, 0.9118),
              ("openvino", 0.06441, 0.9093), ("openvino int8", 0.3686, 0.9093)]
    html = _optimize([(name, ms / 1e3, metric) for name, ms, metric in search], selected="precision")
    numbers = {name: re.search(rf'<tr><td class="n">(\d+)</td><td>{re.escape(name)}</td>', html)
               for name, _, _ in search}
    assert {name: m and m.group(1) for name, m in numbers.items()} == {
        name: str(i) for i, (name, _, _) in enumerate(search, 1)}  # the table's '#', fastest first
    svg = svg_read.plot(html, "Pareto frontier: latency vs score")
    marks = svg_read.marks(svg)
    assert sorted(int(text) for text, _, _ in marks) == list(range(1, 11))
    dots = svg_read.dots(svg, "candidates")
    sx, sy = svg_read.axis(svg, "x", log=True), svg_read.axis(svg, "y")
    for i, (text, box, line_from) in enumerate(marks):
        assert not any(svg_read.boxes_overlap(box, other) for _, other, _ in marks[i + 1:]), text
        assert not any(svg_read.boxes_overlap(box, (x - 3.6, y - 3.6, x + 3.6, y + 3.6)) for x, y in dots), text
        centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
        # the point a mark names: the one its line starts at, else the nearest
        px, py = line_from or min(dots, key=lambda d: (d[0] - centre[0]) ** 2 + (d[1] - centre[1]) ** 2)
        _, ms, metric = search[int(text) - 1]
        assert (sx.value(px), sy.value(py)) == (pytest.approx(ms, rel=0.01), pytest.approx(metric, abs=0.002)), text
