"""The report's history: each batch size's trend readable on its own axis, and the environment naming each run once."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from dlperf.measure.stats import Measurement
from dlperf.report.html import render_report
from dlperf.report.html_bench import HISTORY_PLOTS
from dlperf.store.records import RunRecord
from tests.unit.report import svg_read

pytestmark = pytest.mark.unit

ENV = {"dlperf_version": "0.1.0", "torch_version": "2.13.0+cpu", "cpu_model": "Test CPU", "physical_cores": 2,
       "logical_cores": 2}


def _point(batch: int, median_s: float) -> dict[str, Any]:
    m = Measurement([int(median_s * 1e9 * (1 + k / 1000)) for k in range(50)], items_per_call=batch)
    return {"batch_size": batch, "summary": m.summary(), "measurement": m.to_dict()}


def _run(run_id: str, points: list[dict[str, Any]], created: str) -> RunRecord:
    return RunRecord(id=run_id, kind="bench", workload="zoo:mlp", status="ok", created_at=created,
                     config={"scenario": "offline"}, environment=ENV, result={"points": points})


def _y_ticks(svg: str) -> list[float]:
    return [float(t) for t in re.findall(r'text-anchor="end">([-0-9.e]+)</text>', svg)]


def test_each_batch_size_has_its_own_axis_so_a_small_latency_trend_is_not_flattened() -> None:
    """Batch 1 at 0.02 ms and batch 8 at 24 ms shared one y-axis from 0 to 25 ms: batch 1's trend (here +10%) was a
    line on the zero tick."""
    runs = [_run(f"h{i}", [_point(1, 20e-6 * (1 + i / 10)), _point(8, 24e-3)], f"2026-11-2{i}T10:00:00")
            for i in range(3)]
    html = render_report([], history=runs, history_metric="p50", history_workload="zoo:mlp")
    plots = re.findall(r'<svg class="plot".*?</svg>', html, flags=re.S)
    batch_1 = next(s for s in plots if "<title>History of zoo:mlp: p50 at batch 1</title>" in s)
    batch_8 = next(s for s in plots if "<title>History of zoo:mlp: p50 at batch 8</title>" in s)
    assert batch_1.count("<circle") == 3 and batch_8.count("<circle") == 3
    assert max(_y_ticks(batch_1)) < 0.05  # ms: the axis spans batch 1's own values
    assert max(_y_ticks(batch_8)) >= 20


def test_batch_sizes_past_the_plotted_ones_are_named_and_stay_in_the_table() -> None:
    batches = [2**k for k in range(HISTORY_PLOTS + 2)]
    runs = [_run(f"h{i}", [_point(b, 1e-3 * b) for b in batches], f"2026-11-2{i}T10:00:00") for i in range(2)]
    html = render_report([], history=runs, history_metric="p50", history_workload="zoo:mlp")
    assert len(re.findall(r"<title>History of zoo:mlp: p50 at batch \d+</title>", html)) == HISTORY_PLOTS
    assert f"Not plotted (the table has them): batch {batches[-2]}, {batches[-1]}." in html
    assert f"p50 ms, batch {batches[-1]}" in html


def test_a_run_both_reported_and_in_the_history_is_named_once_in_the_environment() -> None:
    run = _run("aaaa11112222", [_point(1, 1e-3)], "2026-11-20T10:00:00")
    other = _run("bbbb11112222", [_point(1, 1e-3)], "2026-11-21T10:00:00")
    html = render_report([run], history=[run, other], history_workload="zoo:mlp")
    environment = html.split("<h2>Environment</h2>", 1)[1].split("</section>", 1)[0]
    assert "<th>aaaa11112222, bbbb11112222</th>" in environment


def test_the_history_says_where_the_machine_or_the_settings_changed() -> None:
    """A new runner (another CPU) or another precision moved the trend with nothing to tell it from a change of the
    code."""
    first = _run("aaaa00000001", [_point(1, 1e-3)], "2026-11-20T10:00:00")
    same = _run("aaaa00000002", [_point(1, 1e-3)], "2026-11-21T10:00:00")
    other_cpu = RunRecord(id="aaaa00000003", kind="bench", workload="zoo:mlp", status="ok",
                          created_at="2026-11-22T10:00:00", config={"scenario": "offline", "precision": "bf16"},
                          environment={**ENV, "cpu_model": "Other CPU"}, result={"points": [_point(1, 2e-3)]})
    first.config["precision"] = same.config["precision"] = "fp32"
    html = render_report([], history=[first, same, other_cpu], history_workload="zoo:mlp")
    table = html.split("changed from the run before", 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr>")[1:]
    assert "precision fp32 -&gt; bf16" in rows[2] and "cpu_model: Test CPU vs Other CPU" in rows[2]
    assert "warn" not in rows[0] + rows[1]  # the same settings and machine: nothing said
    assert "a step in the trend there may come from that" in html


def test_a_history_spanning_decades_is_drawn_on_a_log_axis() -> None:
    """p95 at batch 8 of 0.061, 0.049 and then 23.3 ms (a run beside a busy process): on a linear axis from 0 the
    first two runs lay on the zero line, indistinguishable."""
    runs = [_run(f"r{i}", [_point(8, ms / 1e3)], f"2026-12-05T08:1{i}:00") for i, ms in enumerate((0.061, 0.049, 23.3))]
    html = render_report([], history=runs, history_metric="p95", history_workload="zoo:mlp")
    svg = re.search(r"<title>History of zoo:mlp: p95 at batch 8</title>.*?</svg>", html, re.S)
    assert svg is not None
    assert "p95 latency (ms), log scale" in svg.group(0)
    assert re.findall(r'text-anchor="end">([^<]*)</text>', svg.group(0)) == ["0.1", "1", "10"]
    flat = [_run(f"f{i}", [_point(8, ms / 1e3)], f"2026-12-05T08:1{i}:00") for i, ms in enumerate((0.061, 0.049, 0.07))]
    html = render_report([], history=flat, history_metric="p95", history_workload="zoo:mlp")
    assert "log scale" not in html


def _summarized(p50_ms: float) -> dict[str, Any]:
    """A batch-1 point whose p50, p99, median CI and throughput differ, so a chart of one cannot pass for another's."""
    return {"batch_size": 1, "summary": {"n": 100, "p50_s": p50_ms / 1e3, "p99_s": 3 * p50_ms / 1e3,
                                         "median_ci_s": [0.9 * p50_ms / 1e3, 1.2 * p50_ms / 1e3],
                                         "throughput": 1000 / p50_ms}}


NEWEST_FIRST = [_run(f"h{i}", [_summarized(ms)], f"2026-11-2{i}T10:00:00")
                for i, ms in reversed(list(enumerate((2.0, 2.5, 4.0))))]


@functools.cache
def _history(metric: str) -> str:
    html = render_report([], history=NEWEST_FIRST, history_metric=metric, history_workload="zoo:mlp")
    return svg_read.plot(html, f"History of zoo:mlp: {metric} at batch 1")


@pytest.mark.parametrize(("metric", "values"), [("p50", [2.0, 2.5, 4.0]), ("p99", [6.0, 7.5, 12.0]),
                                                 ("throughput", [500.0, 400.0, 250.0])])
def test_each_run_is_plotted_oldest_first_at_its_value_of_the_metric(metric: str, values: list[float]) -> None:
    """Runs given newest first are drawn at 1, 2, 3 from the oldest, each at its own value of the metric the
    history is of, in ms (throughput in items/s), and inside the plot."""
    svg = _history(metric)
    drawn = svg_read.points(svg, "batch 1")
    assert [x for x, _ in drawn] == pytest.approx([1.0, 2.0, 3.0], abs=0.01)
    assert [y for _, y in drawn] == pytest.approx(values, rel=0.01)
    left, _, right, _ = svg_read.frame(svg)
    assert all(left < svg_read.axis(svg, "x").pixel(x) < right for x, _ in drawn)
    assert svg_read.ticks(svg, "y")[0][0] == 0.0  # a linear axis from 0: a 1% change is not a full-height step


def test_the_whiskers_are_the_median_s_interval_on_a_p50_history_only() -> None:
    whiskers = svg_read.whiskers(_history("p50"), "batch 1")
    assert [(x, sorted((lo, hi))) for x, lo, hi in whiskers] == [
        (pytest.approx(i + 1.0, abs=0.01), pytest.approx([0.9 * ms, 1.2 * ms], rel=0.01))
        for i, ms in enumerate((2.0, 2.5, 4.0))]
    assert svg_read.whiskers(_history("p99"), "batch 1") == []  # the median's interval is no p99's
