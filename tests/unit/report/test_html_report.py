"""The HTML report: a view per kind, drawn plots, graceful fallback, history, and no external resources."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

from dlperf.measure.stats import Measurement
from dlperf.report.html import render_report
from dlperf.report.html_parts import fmt_ms
from dlperf.store.records import RunRecord

pytestmark = pytest.mark.unit

ENV = {"dlperf_version": "0.1.0", "python_version": "3.11.7", "torch_version": "2.13.0+cpu", "os": "Linux",
       "cpu_model": "Test CPU", "cpu_flags": ["avx2"], "physical_cores": 2, "logical_cores": 2, "torch_threads": 2,
       "total_memory_bytes": 8 * 2**30}


def _point(batch: int, median_s: float, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    m = Measurement([int(v) for v in rng.lognormal(np.log(median_s), 0.1, 150) * 1e9], items_per_call=batch)
    return {"batch_size": batch, "summary": m.summary(), "measurement": m.to_dict(), "peak_rss_bytes": 2**28,
            "process_cpu_percent": 90.0}


def _rec(run_id: str, kind: str, result: dict[str, Any], created: str = "2026-11-29T10:00:00",
         env: dict[str, Any] | None = None, **kw: Any) -> RunRecord:
    return RunRecord(id=run_id, kind=kind, workload="zoo:mlp", status=kw.pop("status", "ok"), created_at=created,
                     config=kw.pop("config", {"batch_sizes": [1, 8], "scenario": "offline"}),
                     environment=ENV if env is None else env, result=result, **kw)


@pytest.fixture(scope="module")
def bench_points() -> list[dict[str, Any]]:
    return [_point(1, 0.002, 1), _point(8, 0.009, 2)]


def _plots(html: str) -> list[str]:
    return re.findall(r'<svg class="plot".*?</svg>', html, flags=re.S)


def test_bench_report_has_kpis_histograms_cdf_and_environment(bench_points: list[dict[str, Any]]) -> None:
    html = render_report([_rec("r1", "bench", {"points": bench_points,
                                               "headline": {"kpi": "throughput", "value": 900.0, "batch_size": 8}})])
    assert html.startswith("<!DOCTYPE html>") and html.endswith("</html>")
    p50_ms = bench_points[0]["summary"]["p50_s"] * 1e3
    assert f"{p50_ms:.4g}" in html
    titles = re.findall(r"<svg class=\"plot\"[^>]*><title>([^<]*)</title>", html)
    assert "Latency histogram, batch 1 (n=150, 1% tails cut)" in titles
    assert "Latency CDF" in titles and "Throughput vs batch size" in titles
    assert "Test CPU" in html and "900 items/s (batch 8)" in html
    for svg in _plots(html):
        assert "<polyline" in svg or "<rect x=\"" in svg.split("</title>", 1)[1]


def test_a_bench_of_an_engine_artifact_names_its_precision_threads_and_label(
        bench_points: list[dict[str, Any]]) -> None:
    """The HTML report of `dlperf bench DIR` for an int8 ONNX Runtime artifact read precision=fp32 (bench's autocast
    setting) and named neither the artifact nor the threads it ran with, which the terminal says."""
    config = {"batch_sizes": [1, 8], "scenario": "offline", "precision": "fp32", "threads": None,
              "artifact": {"engine": "onnxruntime", "label": "onnxruntime(precision=int8-dynamic)",
                           "precision": "int8-dynamic", "threads": 1}}
    html = render_report([_rec("r1", "bench", {"points": bench_points}, config=config)])
    tags = re.findall(r'<span class="tag">([^<]*)</span>', html)
    assert "artifact=onnxruntime(precision=int8-dynamic)" in tags
    assert "precision=int8-dynamic (the artifact&#x27;s)" in tags and "threads=1 (the artifact&#x27;s)" in tags
    assert "precision=fp32" not in tags


def test_report_is_self_contained() -> None:
    html = render_report([_rec("r1", "custom", {"x": 1})])
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    assert "<link" not in html
    assert "data-selfcheck" in html  # the in-page check the browser test reads


def test_ab_view_shows_verdict_blocks_and_both_sides(bench_points: list[dict[str, Any]]) -> None:
    a, b = bench_points[0], bench_points[0]
    result = {"ratio": 0.8, "ci": [0.75, 0.85], "confidence": 0.95, "verdict": "faster",
              "block_ratios": [0.78, 0.82, 0.8, 0.79], "a": a["summary"], "b": b["summary"],
              "settings": {"a": {"threads": 1}, "b": {"threads": 2}}, "batch_size": {"a": 1, "b": 1},
              "measurements": {"a": a["measurement"], "b": b["measurement"]}}
    html = render_report([_rec("ab1", "ab", result)])
    assert "B is faster: time B/A 0.800" in html and "threads=2" in html
    titles = re.findall(r"<title>([^<]*)</title>", html)
    assert {"Per-block ratios (ABBA order)", "A vs B latency (1% tails cut)", "A vs B latency CDF"} <= set(titles)
    assert 'class="warn">warning:' not in html
    warned = render_report([_rec("ab1", "ab", {**result, "warnings": ["other processes kept 1.1 cores busy"]})])
    assert '<p class="warn">warning: other processes kept 1.1 cores busy</p>' in warned


def test_optimize_view_draws_the_pareto_frontier_from_child_runs() -> None:
    parent = _rec("opt1", "optimize", {"metric_name": "accuracy", "higher_is_better": True})
    kids = [_rec(f"c{i}", "candidate", {"name": n, "latency_s": lat, "metric": acc}, parent_id="opt1")
            for i, (n, lat, acc) in enumerate([("fp32", 0.010, 0.95), ("bf16", 0.006, 0.949),
                                               ("int8", 0.004, 0.90), ("bad", 0.012, 0.80)])]
    html = render_report([parent], children={"opt1": kids})
    assert "Pareto frontier: latency vs accuracy" in html
    frontier = re.search(r'data-name="Pareto frontier">(.*?)</g>', html, flags=re.S)
    assert frontier is not None and frontier.group(1).count("<circle") == 3  # "bad" is dominated
    assert html.count("<td>yes</td>") == 3


def test_optimize_view_plots_the_paired_latency_the_frontier_uses() -> None:
    """The search's frontier is on the paired axis; the report plotted the isolated p50 beside it (compile at 50x
    isolated, 0.28x paired, drawn on the frontier)."""
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "paired_p50_s": 0.010, "metric": 0.95,
             "pareto": True},
            {"key": "k1", "label": "compile", "status": "ok", "p50_s": 0.0002, "paired_p50_s": 0.036, "metric": 0.95,
             "pareto": False}]
    result = {"metric_name": "accuracy", "higher_is_better": True, "candidates": rows, "winner": "k0"}
    html = render_report([_rec("opt4", "optimize", result)], children={"opt4": []})
    assert "paired p50 latency (ms)" in html and "<th>paired p50 ms</th>" in html  # the column said 'latency ms'
    assert re.search(r"<td>compile</td><td class=\"n\">36", html), "the table shows the paired latency"
    unpaired = [{k: v for k, v in r.items() if k != "paired_p50_s"} for r in rows]
    html = render_report([_rec("opt5", "optimize", {**result, "candidates": unpaired})], children={"opt5": []})
    assert "<th>latency ms</th>" in html and "paired p50" not in html


def test_optimize_view_reads_the_optimize_result_rows() -> None:
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 0.95, "pareto": True},
            {"key": "k1", "label": "bf16", "status": "ok", "p50_s": 0.006, "metric": 0.949, "pareto": True},
            {"key": "k2", "label": "int8", "status": "ok", "p50_s": 0.007, "metric": 0.90, "pareto": False},
            {"key": "k3", "label": "onnx", "status": "failed", "error": "boom"}]
    result = {"metric_name": "accuracy", "higher_is_better": True, "candidates": rows, "winner": "k1"}
    html = render_report([_rec("opt2", "optimize", result)], children={"opt2": []})
    frontier = re.search(r'data-name="Pareto frontier">(.*?)</g>', html, flags=re.S)
    assert frontier is not None and frontier.group(1).count("<circle") == 2
    selected = re.search(r'data-name="selected">(.*?)</g>', html, flags=re.S)
    assert selected is not None and selected.group(1).count("<circle") == 1
    assert "<td>selected</td>" in html
    assert re.search(r"<td>onnx</td><td class=\"n\">-</td>.*?<td>failed</td><td>boom</td>", html)
    # how the winner was chosen: its A/Bs and the search's notes
    result.update(confirmation={"describe": "winner vs baseline: 1.60x speed (95% CI 1.50-1.70x): faster"},
                  runner_up={"key": "k2", "label": "int8", "switched": False, "reason": "bf16 is faster",
                             "describe": "int8 vs bf16: 0.90x speed: slower"}, notes=["a note & more"])
    html = render_report([_rec("opt3", "optimize", result)], children={"opt3": []})
    selection = re.search(r"<h3>Selection</h3><ul>(.*?)</ul>", html, flags=re.S)
    assert selection is not None
    items = re.findall(r"<li>(.*?)</li>", selection.group(1))
    assert items == ["winner: bf16", "A/B against the baseline, both loaded in one process: winner vs baseline: "
                     "1.60x speed (95% CI 1.50-1.70x): faster",
                     "A/B against the runner-up, both loaded in one process: int8 vs bf16: 0.90x speed: slower",
                     "kept bf16: bf16 is faster", "note: a note &amp; more"]


def test_a_memory_search_shows_each_candidate_s_deployed_peak_as_the_terminal_does() -> None:
    """--objective memory ranks by the deployed peak RSS, but the HTML table had no memory column and no line saying
    what the figure is: the number the winner was picked on was nowhere in the report."""
    deployed = {"peak_rss_bytes": 150 * 2**20}
    rows: list[dict[str, Any]] = [
        {"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 0.95,
         "peak_rss_bytes": 400 * 2**20, "deployed_memory": {"peak_rss_bytes": 400 * 2**20}},
        {"key": "k1", "label": "onnxruntime", "status": "ok", "p50_s": 0.008, "metric": 0.95,
         "peak_rss_bytes": 150 * 2**20, "deployed_memory": deployed},
        {"key": "k2", "label": "openvino", "status": "failed", "error": "boom"}]
    result = {"metric_name": "accuracy", "objective": "memory", "candidates": rows, "winner": "k1"}
    html = render_report([_rec("m1", "optimize", result, config={"objective": "memory"})], children={"m1": []})
    assert "<th>peak MiB</th>" in html
    assert re.search(r"<td>onnxruntime</td><td class=\"n\">8</td><td class=\"n\">0.9500</td><td class=\"n\">150.0</td>",
                     html)
    assert re.search(r"<td>openvino</td>.*?<td class=\"n\">-</td>.*?<td>failed</td>", html)
    from dlperf.report.optimize_view import memory_line

    line = memory_line(result)
    assert line is not None and line.startswith("peak MiB: the peak RSS of a fresh process") and line in html
    plain = [{k: v for k, v in r.items() if k != "deployed_memory"} for r in rows]
    latency = render_report([_rec("m2", "optimize", {**result, "objective": "latency", "candidates": plain})],
                            children={"m2": []})
    assert "peak MiB" not in latency
    assert "GPU MiB" not in html  # a search on the CPU
    # on a GPU the GPU memory it ranked by is a column too
    on_gpu = [{**r, "gpu_memory_bytes": 700 * 2**20} if r["key"] == "k1" else r for r in rows]
    gpu_html = render_report([_rec("m3", "optimize", {**result, "candidates": on_gpu}, config={"objective": "memory"})],
                             children={"m3": []})
    assert "<th>peak MiB</th><th>GPU MiB</th>" in gpu_html
    assert re.search(r"<td>onnxruntime</td>(<td class=\"n\">[^<]*</td>){3}<td class=\"n\">700.0</td>", gpu_html)

def test_profile_view_has_breakdown_and_roofline() -> None:
    result = {"verdict": "compute-bound in aten::addmm", "analyses": {
        "breakdown": {"step_s": 0.01, "forward_s": 0.008, "framework_overhead_s": 0.002, "data_wait_s": 0.0},
        "operators": {"operators": [{"name": "aten::addmm", "self_s": 0.006, "share": 0.6, "intensity": 40.0,
                                     "achieved_flops_s": 5e10, "bound": "compute", "pct_of_peak": 0.5}],
                      "peak_flops": {"fp32": 1e11, "bf16": 2e11}, "bandwidth_bytes_s": 2e10}},
        "findings": [{"title": "GEMM-bound", "summary": "try bf16"}]}
    html = render_report([_rec("p1", "profile", result)])
    assert "Time per step (10 ms)" in html and "Roofline" in html
    assert "framework overhead" in html and "GEMM-bound" in html
    roof = next(s for s in _plots(html) if "<title>Roofline</title>" in s)
    assert roof.count("<polyline") == 2 and roof.count("<circle") == 1


def test_load_view_plots_latency_against_throughput() -> None:
    steps = [{"concurrency": c, "throughput_rps": t, "p50_s": p50, "p99_s": p99}
             for c, t, p50, p99 in [(1, 90, 0.010, 0.02), (4, 300, 0.012, 0.03), (16, 380, 0.04, 0.09)]]
    html = render_report([_rec("l1", "load", {"steps": steps})])
    svg = next(s for s in _plots(html) if "Latency vs throughput" in s)
    assert svg.count("<circle") == 6


def test_load_view_reads_levels_with_raw_latencies() -> None:
    levels = [{"mode": "concurrency", "level": c, "throughput_rps": t, "p50_s": a, "p99_s": b, "errors": 0,
               "latencies_ns": [int(a * 1e9)] * 50 + [int(b * 1e9)] * 2} for c, t, a, b in
              [(1, 90, 0.010, 0.02), (8, 400, 0.02, 0.05)]]
    html = render_report([_rec("l2", "load", {"levels": levels})])
    assert "concurrency 8" in html
    titles = re.findall(r"<title>([^<]*)</title>", html)
    assert "Latency vs throughput" in titles and "Latency CDF per level" in titles


def test_load_view_shows_the_peak_search_with_each_rate_s_p99_bound_and_verdict() -> None:
    levels = [{"mode": "rate", "level": rate, "throughput_rps": rate, "p50_s": 0.001, "p99_s": p99,
               "p99_bound_s": bound, "errors": 0, "passed": status == "pass", "verdict": status,
               "verdict_reason": reason}
              for rate, p99, bound, status, reason in [
                  (200, 0.0015, 0.0016, "pass", "p99 <= 1.6 ms at 99% confidence"),
                  (400, 0.0062, 0.0083, "fail", "p99 6.2 ms > 5 ms (123 of 6401 requests over)")]]
    rec = _rec("l3", "load", {"peak": {"slo_p99_s": 0.005, "peak_rate": 200.0}, "levels": levels})
    html = render_report([rec])
    assert "Peak search (MLPerf server scenario), SLO p99 &lt;= 5 ms: <b>200.0 req/s</b>" in html  # as stored before
    assert "p99 bound ms" in html and "class=\"n\">8.3</td>" in html
    assert "fail: p99 6.2 ms &gt; 5 ms (123 of 6401 requests over)" in html
    assert "peak 200.0 req/s at p99 &lt;= 5 ms" in html  # the summary table's headline
    plain = render_report([_rec("l4", "load", {"levels": [{**lv, "verdict": None} for lv in levels]})])
    assert "p99 SLO" not in plain and "p99 bound ms" in plain
    # an SLO at p95, as stored now: the bound column is the p95's (slo_bound_s), not the p99's
    p95 = [{**lv, "slo_bound_s": bound / 2, "verdict_reason": str(lv["verdict_reason"]).replace("p99", "p95")}
           for lv, bound in zip(levels, (0.0016, 0.0083), strict=True)]
    html = render_report([_rec("l5", "load", {"peak": {"slo": {"bound_s": 0.005, "percentile": 95.0},
                                                       "peak_rate": 200.0}, "levels": p95})])
    assert "SLO p95 &lt;= 5 ms: <b>200.0 req/s</b>" in html and "p95 bound ms" in html and "p99 bound ms" not in html
    assert "class=\"n\">4.15</td>" in html and "p95 SLO" in html
    assert "peak 200.0 req/s at p95 &lt;= 5 ms" in html
    assert "server CPU cores" not in html  # a run without --collect-metrics has no resource columns
    # with --collect-metrics: the server's CPU, RSS and GPU use per level
    used = [{**lv, "resources": {"samples": 5, "interval_s": 1.0, "cpu_cores": cores, "rss_max_bytes": 300 * 2**20,
                                 "gpus": {"GPU-a": {"utilization": busy, "power_w": 60.0,
                                                    "memory_used_max_bytes": 1e9, "memory_total_bytes": 8e9}}}}
            for lv, cores, busy in zip(levels, (0.8, 1.6), (0.25, 0.9), strict=True)]
    html = render_report([_rec("l6", "load", {"levels": used})])
    assert "server CPU cores" in html and "server RSS MiB" in html and "GPU busy" in html
    assert "class=\"n\">1.6</td>" in html and "class=\"n\">300</td>" in html and ">90%<" in html


def test_unknown_kinds_and_broken_records_degrade_to_a_json_table() -> None:
    html = render_report([_rec("x1", "custom", {"best": {"batch_size": 64}}),
                          _rec("x2", "bench", {"points": "not a list"}, status="failed", error="boom")])
    assert "best.batch_size" in html
    assert "the bench view could not be drawn" in html and "error: boom" in html


def test_different_environments_are_highlighted(bench_points: list[dict[str, Any]]) -> None:
    other = {**ENV, "torch_threads": 8}
    html = render_report([_rec("r1", "bench", {"points": bench_points}),
                          _rec("r2", "bench", {"points": bench_points}, env=other)])
    assert "torch_threads: 2 vs 8" in html and 'class="diff"' in html
    assert "Comparison at batch 1" in html


def test_history_trend_has_one_point_per_run(bench_points: list[dict[str, Any]]) -> None:
    runs = [_rec(f"h{i}", "bench", {"points": bench_points[:1]}, created=f"2026-11-2{i}T10:00:00") for i in range(5)]
    html = render_report([], history=runs, history_metric="p50", history_workload="zoo:mlp")
    svg = next(s for s in _plots(html) if "History of zoo:mlp: p50" in s)
    assert svg.count("<circle") == 5
    assert "95% bootstrap CI of the median" in html


def test_history_shows_each_run_s_value_orders_batches_by_size_and_ticks_whole_runs() -> None:
    """The table had no values (the trend could not be read as numbers), the legend read batch 1, 32, 8, and the
    run axis had ticks at 1.5 and 2.5."""
    runs = [_rec(f"h{i}", "bench", {"points": [_point(b, 0.001 * b * (1 + i / 10), 1) for b in (1, 32, 8)]},
                 created=f"2026-11-2{i}T10:00:00") for i in range(3)]
    html = render_report([], history=runs, history_metric="p50", history_workload="zoo:mlp")
    section = html.split("History of zoo:mlp: p50 at each batch size", 1)[1]
    titles = re.findall(r"<title>History of zoo:mlp: p50 at batch (\d+)</title>", html)
    assert titles == ["1", "8", "32"]
    svg = next(s for s in _plots(html) if "History of zoo:mlp: p50" in s)
    ticks = re.findall(r'text-anchor="middle">([0-9.]+)</text>', svg)
    assert ticks and all("." not in t for t in ticks)
    table = section.split("<table", 1)[1].split("</table>", 1)[0]
    assert "p50 ms, batch 1" in table and "p50 ms, batch 8" in table and "p50 ms, batch 32" in table
    p50_s = runs[2].result["points"][1]["summary"]["p50_s"]  # the newest run at batch 32
    assert f'<td class="n">{fmt_ms(p50_s)}</td><td></td></tr></tbody>' in table  # then: nothing changed


def test_history_names_the_commit_each_run_was_taken_at() -> None:
    """`dlperf runs history` has had a commit column since runs record their git commit; the report's history, the
    CI artifact docs/compare.md's example uploads, had none: a step in its trend could not be read against git log."""
    envs = [ENV, {**ENV, "git_commit": "a" * 40, "git_dirty": False},
            {**ENV, "git_commit": "b" * 40, "git_dirty": True}]
    runs = [_rec(f"g{i}", "check", {"points": [_point(1, 0.001, 1)]}, created=f"2026-11-2{i}T10:00:00", env=env)
            for i, env in enumerate(envs)]
    html = render_report([], history=runs, history_metric="p50", history_workload="zoo:mlp")
    table = html.split("History of zoo:mlp: p50 at each batch size", 1)[1].split("</table>", 1)[0]
    assert "<th>commit</th>" in table
    cells = re.findall(r'<td(?: class="n")?>(-|[0-9a-f]{12}\+?)</td>', table)
    assert cells == ["-", "a" * 12, "b" * 12 + "+"]
    assert "commit+: taken with uncommitted changes in that checkout" in html
    svg = next(s for s in _plots(html) if "History of zoo:mlp: p50" in s)
    assert "g2 2026-11-22T10:00:00 at " + "b" * 12 + "+" in svg  # the point's label too
    plain = render_report([], history=runs[:1], history_metric="p50", history_workload="zoo:mlp")
    assert "<th>commit</th>" not in plain  # no run recorded one: no column of dashes


def test_history_shows_latencies_to_the_four_digits_bench_shows() -> None:
    """The history table wrote a p50 of 1.2346 ms as 1.23, where the bench view of the same run wrote 1.235."""
    runs = [_rec(f"d{i}", "bench", {"points": [_point(1, 0.0012346, 1)]}, created=f"2026-11-2{i}T10:00:00")
            for i in range(2)]
    p50_s = runs[0].result["points"][0]["summary"]["p50_s"]
    history = render_report([], history=runs, history_metric="p50", history_workload="zoo:mlp")
    bench = render_report([runs[0]])
    assert len(fmt_ms(p50_s).replace(".", "")) == 4
    assert f'<td class="n">{fmt_ms(p50_s)}</td>' in history and f'<td class="n">{fmt_ms(p50_s)}</td>' in bench


def test_the_throughput_chart_ticks_the_measured_batch_sizes() -> None:
    """Its log axis was ticked at 1, 2, 5, 10, 20, 50: a bench of 1, 4, 16 and 64 had no tick at 4, 16 or 64."""
    points = [_point(b, 0.001 * b ** 0.5, b) for b in (1, 4, 16, 64)]
    html = render_report([_rec("t1", "bench", {"points": points}, config={"batch_sizes": [1, 4, 16, 64]})])
    svg = next(s for s in _plots(html) if "<title>Throughput vs batch size</title>" in s)
    axis = svg.split('class="t"', 1)[1]
    x_labels = re.findall(r'y="[0-9.]+" text-anchor="(?:middle|end)">([0-9.]+)</text>', axis)
    assert x_labels[:4] == ["1", "4", "16", "64"]


def test_the_roofline_says_the_int8_roof_is_in_gop_s() -> None:
    """The int8 roof was drawn on a 'GFLOP/s' axis with the float roofs, though int8 does integer operations."""
    ops = {"operators": [{"name": "aten::addmm", "self_s": 0.006, "share": 0.6, "intensity": 40.0,
                          "achieved_flops_s": 5e10, "bound": "compute", "pct_of_peak": 0.5}],
           "bandwidth_bytes_s": 2e10}
    with_int8 = render_report([_rec("p1", "profile", {"analyses": {"operators": {
        **ops, "peak_flops": {"fp32": 1e11, "int8": 8e11}}}})])
    roof = next(s for s in _plots(with_int8) if "<title>Roofline" in s)
    assert "int8 roof (GOP/s)" in roof and "GFLOP/s (int8: GOP/s)" in roof and "fp32 roof (GOP/s)" not in roof
    fp32 = render_report([_rec("p2", "profile", {"analyses": {"operators": {**ops, "peak_flops": {"fp32": 1e11}}}})])
    assert "GOP/s" not in next(s for s in _plots(fp32) if "<title>Roofline" in s)
    assert "<th>GFLOP/s</th>" in fp32 and "int8: GOP/s</th>" not in fp32
    # the operators table too: torch._int_mm's 1621 read under "GFLOP/s" beside the roofline's "GOP/s"
    int_mm = {"name": "aten::_int_mm", "self_s": 0.08, "share": 0.98, "intensity": 1365.0, "dtype": "int8",
              "achieved_flops_s": 1.62e12, "bound": "compute", "pct_of_peak": 0.76}
    int8_table = render_report([_rec("p3", "profile", {"analyses": {"operators": {
        "operators": [int_mm], "bandwidth_bytes_s": 2e10, "peak_flops": {"fp32": 1e11, "int8": 8e11}}}})])
    assert "<th>GFLOP/s (int8: GOP/s)</th>" in int8_table


def test_check_view_says_the_gate_compares_per_item(bench_points: list[dict[str, Any]]) -> None:
    from dlperf.compare.gate import GateConfig, gate

    measurements = {p["batch_size"]: Measurement.from_dict(p["measurement"]) for p in bench_points}
    verdict = gate(measurements, measurements, GateConfig()).to_dict()
    html = render_report([_rec("c1", "check", {"points": bench_points, "gate": verdict})])
    gate_table = html.split("Gate against baseline run", 1)[1]
    per_item_8 = verdict["points"][1]["baseline_value"] * 1e3
    assert f"{per_item_8:.4g} ms per item" in gate_table  # an eighth of the per-call p50 in the KPI table
    assert f"{verdict['points'][0]['baseline_value'] * 1e3:.4g} ms<" in gate_table  # batch 1: per call = per item


def test_check_view_shows_an_underflowed_p_value_as_a_bound_and_the_ci_level(
        bench_points: list[dict[str, Any]]) -> None:
    from dlperf.compare.gate import GateConfig, gate

    rng = np.random.default_rng(5)
    base = Measurement([int(v) for v in rng.lognormal(np.log(0.001), 0.01, 2000) * 1e9])
    slow = Measurement([int(v) for v in rng.lognormal(np.log(0.002), 0.01, 2000) * 1e9])
    verdict = gate({1: base}, {1: slow}, GateConfig(confidence=0.9)).to_dict()
    html = render_report([_rec("c1", "check", {"points": bench_points, "gate": verdict})])
    gate_table = html.split("Gate against baseline run", 1)[1]
    assert "&lt;1e-300" in gate_table and "<th>90% CI</th>" in gate_table


def test_a_check_run_s_summary_row_is_its_verdict(bench_points: list[dict[str, Any]]) -> None:
    from dlperf.compare.gate import GateConfig, gate

    base = {p["batch_size"]: Measurement.from_dict(p["measurement"]) for p in bench_points}
    slow = {b: Measurement([s * 2 for s in m.samples_ns], items_per_call=m.items_per_call) for b, m in base.items()}
    verdict = gate(base, slow, GateConfig()).to_dict()
    html = render_report([_rec("c1", "check", {"points": bench_points, "gate": verdict,
                                               "headline": {"kpi": "throughput", "value": 900.0, "batch_size": 8}})])
    summary = html.split("<h2>Environment", 1)[0]
    assert ("FAIL: p50 +100.0% worse @ bs1 (regression), +100.0% worse @ bs8 (regression)" in summary
            and "900 items/s" not in summary)


def test_a_gated_batch_size_that_could_not_be_judged_says_inconclusive_not_pass(
        bench_points: list[dict[str, Any]]) -> None:
    """A pass from 3 samples, and one whose interval reached above the threshold, read a green 'pass' beside an
    interval wholly above it; the terminal said 'inconclusive'."""
    from dlperf.compare.gate import GateConfig, gate

    base = Measurement.from_dict(bench_points[0]["measurement"])
    few = gate({1: Measurement(base.samples_ns[:3])}, {1: Measurement([s * 2 for s in base.samples_ns[:3]])})
    html = render_report([_rec("c1", "check", {"points": bench_points[:1], "gate": few.to_dict()})])
    row = html.split("Gate against baseline run", 1)[1].split("</table>", 1)[0]
    assert "too few samples: inconclusive, pass" in row and "% to +" not in row  # no interval from 3 samples
    near = gate({1: base}, {1: Measurement([int(s * 1.05) for s in base.samples_ns])}, GateConfig(max_regression=0.05))
    assert near.points[0].inconclusive and not near.failed
    html = render_report([_rec("c2", "check", {"points": bench_points[:1], "gate": near.to_dict()})])
    assert "inconclusive, pass</span>" in html.split("Gate against baseline run", 1)[1]
    assert "(inconclusive)" in html.split("<h2>Environment", 1)[0]  # the runs table's headline too


def test_a_stopped_search_says_so_and_every_search_where_its_artifacts_are() -> None:
    """A stopped search's record has no 'winner': the report had no selection section and said nothing of it; the
    candidates' artifacts (86 MiB a MiniLM candidate) stay in the work folder, which dlperf optimize now names."""
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 0.95}]
    result = {"metric_name": "accuracy", "candidates": rows, "partial": True, "run_id": "opt9",
              "workdir": "/tmp/w/optimize/opt9", "workdir_bytes": 90 * 2**20}
    html = render_report([_rec("opt9", "optimize", result)], children={"opt9": []}).split("raw result fields")[0]
    assert "no winner: the search stopped before it picked one" in html and "--resume opt9" in html
    assert "candidates' artifacts: /tmp/w/optimize/opt9 (90.0 MiB;" in html


def test_the_optimize_table_names_the_axes_of_its_front() -> None:
    # The search's front is over latency, metric, size and memory: a small, slow candidate is on it, off the
    # plot's 2-D frontier; the column said "on the record's Pareto front" beside that plot.
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 1.0, "pareto": True},
            {"key": "k1", "label": "int8", "status": "ok", "p50_s": 0.090, "metric": 0.9999, "pareto": True,
             "size_bytes": 10}]
    html = render_report([_rec("o", "optimize", {"metric_name": "fidelity", "candidates": rows})], children={"o": []})
    assert "<th>on the Pareto front (latency, metric, size, memory)</th>" in html
    frontier = re.search(r'data-name="Pareto frontier">(.*?)</g>', html, flags=re.S)
    assert frontier is not None and frontier.group(1).count("<circle") == 1  # int8 is not on the 2-D one
    # the plot's caption says which front each is, and names the row marked "yes" off the red line
    assert ("the red line is the front on latency and the metric alone, the table&#x27;s column the search&#x27;s "
            "front on latency, the metric, size and memory: #2 int8 is on it by size or memory, off the line") in html
    on_both = [rows[0], {**rows[1], "pareto": False}]
    html = render_report([_rec("o", "optimize", {"metric_name": "fidelity", "candidates": on_both})],
                         children={"o": []})
    assert "the red line is" not in html and "each point is numbered with its row (#)" in html
    unflagged = [{k: v for k, v in r.items() if k != "pareto"} for r in rows]
    html = render_report([_rec("o", "optimize", {"metric_name": "fidelity", "candidates": unflagged})],
                         children={"o": []})
    assert "<th>on the Pareto front (latency, metric)</th>" in html


def test_numbers_are_never_in_scientific_notation(bench_points: list[dict[str, Any]]) -> None:
    fast = _rec("f1", "bench", {"points": bench_points,
                                "headline": {"kpi": "throughput", "value": 33087.86, "batch_size": 1}})
    slow = _rec("l7", "load", {"levels": [{"mode": "concurrency", "level": 64, "throughput_rps": 5.0,
                                           "p50_s": 12.3456, "p99_s": 59.9}]})
    html = render_report([fast, slow])
    assert "33,088 items/s (batch 1)" in html  # was 3.309e+04 items/s
    assert re.search(r"<td>concurrency 64</td><td class=\"n\">5</td><td class=\"n\">12346</td>"
                     r"<td class=\"n\">59900</td>", html)
    assert "e+0" not in html


def test_a_run_that_failed_before_measuring_says_it_has_no_result() -> None:
    html = render_report([_rec("x3", "bench", {}, status="failed", error="WorkloadError: <b>no</b> model & more")])
    section = html.split('id="run-x3"', 1)[1]
    assert "error: WorkloadError: &lt;b&gt;no&lt;/b&gt; model &amp; more" in section
    assert "no result recorded" in section
    assert "could not be drawn" not in section and "{}" not in section  # was a ValueError and a table of '{}'


def test_profile_breakdown_draws_each_cut_of_the_step_apart() -> None:
    breakdown = {"step_s": 0.00025, "forward_s": 0.000225, "other_s": 0.000025, "operator_s": 0.00012,
                 "framework_overhead_s": 0.00013, "device_sync_s": None, "device_idle_s": 0.0001}
    html = render_report([_rec("p2", "profile", {"verdict": "overhead", "analyses": {"breakdown": breakdown}})])
    bars = {svg.split("<title>", 1)[1].split("</title>", 1)[0]: re.findall(r'text-anchor="end">([^<]*)</text>', svg)
            for svg in _plots(html)}
    # by phase, adding up to the step; framework overhead is a part of forward, not a phase beside it
    assert bars["Time per step (0.25 ms)"] == ["forward", "other (outside phases)"]
    assert bars["The step outside the data wait, by activity"] == ["operators", "framework overhead"]
    assert "device idle 0.1 ms of the step (40.0%)" in html


def test_an_optimize_run_whose_candidates_all_failed_shows_them() -> None:
    rows = [{"key": "k0", "label": "baseline", "status": "failed", "phase": "measure", "error": "boom <x>"},
            {"key": "k1", "label": "compile", "status": "failed", "phase": "apply", "error": "inductor & more"}]
    html = render_report([_rec("o6", "optimize", {"metric_name": "accuracy", "candidates": rows, "winner": None})],
                         children={"o6": []})
    assert "could not be drawn" not in html  # was 'no candidates with a latency' and a JSON dump
    assert re.search(r"<td>baseline</td><td class=\"n\">-</td>.*?<td>failed</td><td>boom &lt;x&gt;</td>", html)
    assert "<td>inductor &amp; more</td>" in html and "nothing to plot" in html and not _plots(html)
    assert "no winner: no candidate beat the baseline" in html  # no A/B was run: nothing was 'confirmed'
    stopped = render_report([_rec("o7", "optimize", {"candidates": []}, status="interrupted")], children={"o7": []})
    assert "no candidate finished" in stopped and "could not be drawn" not in stopped


def test_a_load_level_whose_requests_all_failed_stays_in_the_table() -> None:
    levels = [{"mode": "concurrency", "level": 1, "throughput_rps": 90.0, "p50_s": 0.01, "p99_s": 0.02, "errors": 0},
              {"mode": "concurrency", "level": 64, "throughput_rps": 0.0, "p50_s": math.nan, "p99_s": math.nan,
               "errors": 30}]
    html = render_report([_rec("l8", "load", {"levels": levels})])
    assert re.search(r"<td>concurrency 64</td><td class=\"n\">0</td><td class=\"n\">-</td><td class=\"n\">-</td>"
                     r"<td class=\"n\">30</td>", html)
    assert next(s for s in _plots(html) if "Latency vs throughput" in s).count("<circle") == 2  # the level with one
    dead = render_report([_rec("l9", "load", {"levels": levels[1:]})])
    assert "could not be drawn" not in dead and "<td>concurrency 64</td>" in dead and not _plots(dead)
    assert "NaN" not in dead.split("raw result fields")[0]


def test_a_load_level_s_errors_are_shown_by_status_as_dlperf_load_shows_them() -> None:
    """The HTML table showed a bare count (1243; 669 for requests the open loop never sent) where `dlperf load` said
    '503: 1243' and 'dropped: 669'."""
    levels = [{"mode": "rate", "level": 400, "throughput_rps": 152.6, "p50_s": 0.004, "p99_s": 0.077, "errors": 669,
               "statuses": {"200": 458, "dropped": 669}},
              {"mode": "rate", "level": 800, "throughput_rps": 24.8, "p50_s": 0.33, "p99_s": 0.53, "errors": 1244,
               "statuses": {"200": 67, "503": 1243, "timeout": 1}},
              {"mode": "rate", "level": 100, "throughput_rps": 100.0, "p50_s": 0.002, "p99_s": 0.004, "errors": 0,
               "statuses": {"200": 300}}]
    html = render_report([_rec("l10", "load", {"levels": levels})])
    cells = re.findall(r"<td>rate (\d+)</td>(?:<td class=\"n\">[^<]*</td>){3}<td[^>]*>([^<]*)</td>", html)
    assert cells == [("400", "dropped: 669"), ("800", "503: 1243, timeout: 1"), ("100", "0")]


def test_the_latency_cdf_of_a_long_sweep_says_which_levels_it_draws() -> None:
    levels = [{"mode": "concurrency", "level": c, "throughput_rps": 10.0 * c, "p50_s": 0.001 * c, "p99_s": 0.002 * c,
               "latencies_ns": [1_000_000 * c, 2_000_000 * c]} for c in range(1, 13)]
    titles = re.findall(r"<title>([^<]*)</title>", render_report([_rec("l11", "load", {"levels": levels})]))
    assert "Latency CDF per level (the first 8 of 12)" in titles
    titles = re.findall(r"<title>([^<]*)</title>", render_report([_rec("l12", "load", {"levels": levels[:8]})]))
    assert "Latency CDF per level" in titles


def test_a_load_run_of_batched_requests_shows_items_per_second() -> None:
    """`dlperf load --batch-size 8` printed items/s beside req/s; the HTML table had req/s only."""
    level = {"mode": "concurrency", "level": 2, "throughput_rps": 100.0, "p50_s": 0.004, "p99_s": 0.009,
             "statuses": {"200": 300}, "items_per_request": 8, "throughput_items_per_s": 800.0}
    html = render_report([_rec("l13", "load", {"levels": [level]})])
    assert "<th>items/s</th>" in html
    assert re.search(r"<td>concurrency 2</td><td class=\"n\">100</td>(?:<td[^>]*>[^<]*</td>){3}"
                     r"<td class=\"n\">800</td>", html)
    single = render_report([_rec("l14", "load", {"levels": [{**level, "items_per_request": 1,
                                                                "throughput_items_per_s": 100.0}]})])
    assert "items/s" not in single.split("raw result fields")[0]


def test_bench_view_shows_the_stop_note_and_the_contention_warning(bench_points: list[dict[str, Any]]) -> None:
    point = {**bench_points[0], "contention_warning": "other processes kept 1.1 cores busy & more",
             "other_load_percent": 110.0}
    point["summary"] = {**point["summary"], "stop_note": "stopped at the 1,000-iteration cap after 0.2 s"}
    html = render_report([_rec("b9", "bench", {"points": [point, bench_points[1]]})])
    body = html.split("raw result fields")[0]
    assert '<p class="warn">warning: batch 1: stopped at the 1,000-iteration cap after 0.2 s</p>' in body
    assert '<p class="warn">warning: batch 1: other processes kept 1.1 cores busy &amp; more</p>' in body


def test_bench_view_says_what_the_process_held_before_the_model(bench_points: list[dict[str, Any]]) -> None:
    """The peak RSS column is the process's (a 0.3 MiB model read 247 MiB): the terminal names what it held before
    the model was built, the report did not."""
    html = render_report([_rec("b8", "bench", {"points": bench_points, "rss_before_model_bytes": 240.5 * 2**20})])
    assert "it held 240.5 MiB before the model was built" in html.split("raw result fields")[0]
    assert "before the model was built" not in render_report([_rec("b7", "bench", {"points": bench_points})])


def _step(step_s: float, samples_per_s: float) -> dict[str, Any]:
    m = Measurement([int(step_s * 1e9), int(step_s * 1.1e9), int(step_s * 0.9e9)], items_per_call=64)
    return {"workload": "mlp", "config": {"batch_size": 64, "precision": "fp32"}, "step_s": step_s,
            "samples_per_s": samples_per_s, "summary": m.summary(), "measurement": m.to_dict(),
            "breakdown_s": {"data": 0.0004, "forward": 0.014, "backward": 0.025, "optimizer": 0.0035},
            "peak_rss_bytes": 326 * 2**20, "mfu": None, "findings": [], "notes": ["noisy: IQR & more"]}


def test_train_runs_have_their_own_view() -> None:
    measured = _rec("t1", "train", _step(0.0306, 1469.0), config={"mode": "measure", "steps": 5})
    trials = [{"knob": "threads", "change": {"threads": 1}, "status": "accepted", "reason": "",
               "parity": {"relative_difference": 0.0}, "speedup": 4.89, "speedup_ci": [2.79, 8.57],
               "samples_per_s": 10557.0},
              {"knob": "precision", "change": {}, "status": "skipped", "reason": "this CPU has no bf16 <b>"}]
    tuned = _rec("t2", "train", {
        "workload": "mlp", "baseline": {"batch_size": 64}, "best": {"batch_size": 64, "threads": 1}, "speedup": 2.84,
        "final_ab": {"verdict": "faster"}, "baseline_samples_per_s": 3125.0, "best_samples_per_s": 10603.0,
        "settings": [{"what": "threads", "code": "torch.set_num_threads(1)", "speedup": 4.89}], "trials": trials,
        "baseline_measurement": _step(0.0143, 3542.0), "best_measurement": _step(0.0024, 14606.0)},
        config={"mode": "tune"})
    ddp = _rec("t3", "train", {"workload": "mlp", "nproc": 2, "single_samples_per_s": 1000.0, "single_step_s": 0.064,
                               "samples_per_s": 1800.0, "step_s": 0.071, "scaling_efficiency": 0.9,
                               "comm_share": 0.12}, config={"mode": "ddp"})
    html = render_report([measured, tuned, ddp])
    assert "could not be drawn" not in html and "<h2 id=\"run-t1\">Training: zoo:mlp</h2>" in html
    # steps, median ms, p90, mean (the phases' bars are means: on a noisy machine they summed to twice the median
    # step, with no mean in the table), samples/s, RSS
    assert re.search(r"<td class=\"n\">3</td><td class=\"n\">30.6</td><td class=\"n\">[0-9.]+</td>"
                     r"<td class=\"n\">30.6</td><td class=\"n\">1,469</td><td class=\"n\">326</td>", html)
    titles = re.findall(r"<svg class=\"plot\"[^>]*><title>([^<]*)</title>", html)
    assert {"Training step: mean time per step by phase", "Training step: each step", "Baseline step: each step",
            "Best step: mean time per step by phase"} <= set(titles)
    assert "gain: 2.84x samples/s (faster in an interleaved A/B)" in html and "noisy: IQR &amp; more" in html
    assert "<code>torch.set_num_threads(1)</code>" in html and "4.89x (2.79-8.57)" in html
    assert "<td>precision</td><td class=\"n\">-</td>" in html and "no bf16 &lt;b&gt;" in html
    assert re.search(r"<td class=\"n\">2</td><td class=\"n\">1,800</td><td class=\"n\">71</td>"
                     r"<td class=\"n\">90.0%</td>", html)


def test_ddp_and_tune_reports_say_what_the_terminal_says() -> None:
    """The DDP report had the efficiency alone (read as communication's, whatever slowed the ranks) and no buckets
    or findings; a tune report left out that loss parity could not tell a model that does not train."""
    ddp = _rec("t4", "train", {"workload": "mlp", "nproc": 2, "single_samples_per_s": 1000.0, "single_step_s": 0.064,
                               "samples_per_s": 400.0, "step_s": 0.32, "scaling_efficiency": 0.2,
                               "compute_scaling": 0.29, "communication_scaling": 0.69, "comm_share": 0.32,
                               "exposed_comm_s": 0.1024, "allreduce_s": 0.00064,
                               "overlap": 0.4, "buckets": 2, "bucket_bytes": [1.01 * 2**20, 3.01 * 2**20],
                               "bucket_cap_mb": 25, "gradient_bytes": 4.02 * 2**20,
                               "findings": ["ranks contend for the CPUs & more"]}, config={"mode": "ddp"})
    tuned = _rec("t5", "train", {"workload": "mlp", "trials": [], "parity_blind": "a model that does not train <b>"},
                 config={"mode": "tune"})
    html = render_report([ddp, tuned])
    assert re.search(r"<td class=\"n\">20.0%</td><td class=\"n\">29.0%</td><td class=\"n\">69.0%</td>", html)
    assert "2 gradient bucket(s) (1.01 + 3.01 MiB) for 4.02 MiB of gradients" in html
    # the terminal's communication line, with the all-reduce's own time, was missing
    assert ("communication: 32.0% of the step is exposed gradient all-reduce (102.4 ms of 320 ms; the all-reduce "
            "alone takes 0.64 ms)") in html
    assert "finding: ranks contend for the CPUs &amp; more" in html
    assert "note: loss parity: a model that does not train &lt;b&gt;" in html


def test_a_train_report_adds_the_loader_workers_memory() -> None:
    """The peak RSS column is the main process's; the workers' private memory was in the terminal view only."""
    step = {**_step(0.0306, 1469.0), "workers_peak_uss_bytes": 16.5 * 2**20, "worker_processes": 2}
    html = render_report([_rec("t6", "train", step, config={"mode": "measure", "steps": 5})])
    assert "peak RSS 326.0 MiB main process + 16.5 MiB in its 2 loader workers" in html and "= 342.5 MiB" in html



def test_a_train_report_gives_the_flops_and_the_ceiling_behind_its_mfu() -> None:
    """`dlperf train` prints 'FLOPs  30.3 MFLOP / step, ..., MFU 5.3% of the fp32 GEMM ceiling ...'; the report had
    the MFU column alone, with neither the FLOPs per step nor the ceiling it is a share of."""
    step = {**_step(0.0306, 1469.0), "flops_per_step": 30.3e6, "achieved_flops": 2.4e9, "mfu": 0.053,
            "ceiling_dtype": "fp32", "ceiling_flops": 45.1e9}
    html = render_report([_rec("t7", "train", step, config={"mode": "measure", "steps": 5})])
    assert "FLOPs: 30.3 MFLOP / step, 2.4 GFLOP/s, MFU 5.3% of the fp32 GEMM ceiling 45.1 GFLOP/s" in html
    unknown = render_report([_rec("t8", "train", _step(0.0306, 1469.0), config={"mode": "measure", "steps": 5})])
    assert "FLOPs:" not in unknown  # --no-mfu: nothing counted, nothing said


def test_settings_the_final_ab_did_not_confirm_are_not_given_as_advice() -> None:
    """A trial accepted channels_last at 1.08x; the final A/B found no significant difference (1.03x, CI
    0.95-1.10x), and the report still said 'Put this into your training code'."""
    result = {
        "workload": "digits-cnn", "baseline": {"batch_size": 64}, "best": {"batch_size": 64, "channels_last": True},
        "speedup": 1.03, "final_ab": {"verdict": "no significant difference"}, "baseline_samples_per_s": 36266.0,
        "best_samples_per_s": 37208.0, "trials": [],
        "settings": [{"what": "memory format", "code": "model.to(memory_format=torch.channels_last)", "speedup": 1.08}],
        "baseline_measurement": _step(0.0018, 36266.0), "best_measurement": _step(0.0017, 37208.0)}
    html = render_report([_rec("t4", "train", result, config={"mode": "tune"})]).split("raw result fields")[0]
    assert "Put this into your training code" not in html
    assert "<h3>What the trials accepted, unconfirmed by the final A/B</h3>" in html
    assert '<p class="verdict warn">gain: 1.03x samples/s (no significant difference' in html
    confirmed = render_report([_rec("t5", "train", {**result, "final_ab": {"verdict": "faster"}},
                                    config={"mode": "tune"})])
    assert "<h3>Put this into your training code</h3>" in confirmed and "unconfirmed" not in confirmed

def test_the_summary_s_headlines_are_text_aligned_alike(bench_points: list[dict[str, Any]]) -> None:
    load = _rec("l10", "load", {"levels": [{"mode": "rate", "level": 100, "throughput_rps": 100.0, "p50_s": 0.002,
                                            "p99_s": 0.003}]})
    html = render_report([load, _rec("b10", "bench", {"points": bench_points})])
    summary = html.split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    assert 'class="n"' not in summary  # '100.0 req/s, p99 3 ms at rate 100' was right-aligned as a number
    assert "<td>100.0 req/s, p99 3 ms at rate 100</td>" in summary


def test_a_profile_s_verdict_comes_before_its_plots() -> None:
    result = {"verdict": "framework/launch overhead: 56% of the step",
              "analyses": {"breakdown": {"step_s": 0.01, "forward_s": 0.01}}}
    html = render_report([_rec("p3", "profile", result)]).split('id="run-p3"', 1)[1]
    assert html.index('<p class="verdict">framework/launch overhead') < html.index('<svg class="plot"')


def test_a_profile_report_has_the_caveats_every_evidence_line_and_the_verified_fixes() -> None:
    """The report dropped the caveats (a busy machine, ceilings recorded with a warning), cut each finding's
    evidence to three lines (the fourth was --verify's measurement) and left out the verified-fixes table: a
    finding whose fix measured slower than its estimate showed the estimate alone."""
    evidence = ["one", "two", "three", "--verify: measured 0.80x against an estimated 2.00x"]
    result = {"verdict": "input pipeline: 60% of the step",
              "caveats": ["the ceilings were calibrated while the machine was busy"],
              "analyses": {"breakdown": {"step_s": 0.01, "forward_s": 0.004, "data_wait_s": 0.006},
                           "operators": {"operators": [], "peak_flops": {"fp32": 1e11}, "bandwidth_bytes_s": 2e10,
                                         "ceilings_caveat": "the ceilings were calibrated while the machine was busy"}},
              "findings": [{"title": "input pipeline", "summary": "waits", "evidence": evidence,
                            "verification": "contradicted", "category": "input_pipeline"}],
              "verify": [{"fix": {"label": "workers=2"}, "category": "input_pipeline", "estimated_speedup": 2.0,
                          "speedup": 0.8, "speedup_ci": [0.7, 0.9], "verdict": "slower", "outcome": "contradicted",
                          "setup_s": 1.5}]}
    html = render_report([_rec("p4", "profile", result)]).split('id="run-p4"', 1)[1].split("raw result fields")[0]
    assert html.index('<p class="verdict">') < html.index("caveat: the ceilings were calibrated") < html.index("<svg")
    assert "--verify: measured 0.80x against an estimated 2.00x" in html
    assert "estimate not confirmed by --verify" in html
    assert "Verified fixes" in html and "slower: the estimate did not hold" in html and "0.70-0.90x" in html
    assert "Roofline (ceilings recorded with a warning" in html


def test_the_comparison_overlays_no_more_runs_than_it_has_colours(bench_points: list[dict[str, Any]]) -> None:
    runs = [_rec(f"m{i:02d}", "bench", {"points": bench_points}, created=f"2026-11-29T10:{i:02d}:00")
            for i in range(14)]
    section = render_report(runs).split("<h2>Comparison at batch 1</h2>", 1)[1].split("</section>", 1)[0]
    assert section.count('<a href="#run-m') == 14  # the table has every run
    cdf = _plots(section)[0]
    assert 'data-series="10"' in cdf and "Latency CDF, batch 1 (the first 10 runs)" in cdf  # 14 lines, 10 colours
    assert "leaves out the last 4 run(s)" in section


def test_the_optimize_table_shows_the_metric_to_four_decimals() -> None:
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 1.0},
            {"key": "k1", "label": "int8", "status": "ok", "p50_s": 0.006, "metric": 0.99962}]
    html = render_report([_rec("o8", "optimize", {"metric_name": "fidelity", "candidates": rows})], children={"o8": []})
    assert re.search(r"<td>int8</td><td class=\"n\">6</td><td class=\"n\">0.9996</td>", html)  # was '1', as baseline
    assert re.search(r"<td>baseline</td><td class=\"n\">10</td><td class=\"n\">1.0000</td>", html)


def test_environment_table_shows_affinity_governor_load_and_thread_variables(
        bench_points: list[dict[str, Any]]) -> None:
    env = {**ENV, "usable_cores": 1, "cpu_governor": "powersave", "load_average": [1.5, 0.8, 0.4],
           "thread_env": {"OMP_NUM_THREADS": "1"}, "allocator": "jemalloc"}
    later = {**env, "load_average": [0.2, 0.5, 0.4]}  # the same machine at another moment: one column
    html = render_report([_rec("r1", "bench", {"points": bench_points}, env=env),
                          _rec("r2", "bench", {"points": bench_points}, env=later)])
    for row in ("<th>r1, r2</th>", "usable cores (affinity)</td><td>1<", "CPU governor</td><td>powersave<",
                "thread variables</td><td>OMP_NUM_THREADS=1<", "allocator</td><td>jemalloc<"):
        assert row in html, row
    assert "different environments" not in html


def test_runs_at_two_commits_of_one_machine_share_an_environment_column(
        bench_points: list[dict[str, Any]]) -> None:
    """A check at a pull request's commit against main's baseline: the code differs, the machine does not. Each
    commit got a column of identical rows and 'The runs were taken in different environments; timings are not
    directly comparable', which named no difference: the very change a CI report is made to show."""
    base = _rec("r1", "bench", {"points": bench_points}, env={**ENV, "git_commit": "a" * 40, "git_dirty": False})
    check = _rec("r2", "check", {"points": bench_points}, env={**ENV, "git_commit": "b" * 40, "git_dirty": True})
    html = render_report([base, check])
    assert "<th>r1, r2</th>" in html
    assert "different environments" not in html


def test_the_comparison_names_other_workloads_and_settings(bench_points: list[dict[str, Any]]) -> None:
    """Runs of two workloads, or fp32 beside bf16, stood in one table and one CDF with no word of it."""
    import dataclasses

    config = {"batch_sizes": [1, 8], "scenario": "offline", "precision": "fp32"}
    first = _rec("a1", "bench", {"points": bench_points}, config=config)
    other = dataclasses.replace(_rec("b2", "bench", {"points": bench_points}, config={**config, "precision": "bf16"}),
                                workload="raises.py")
    section = render_report([first, other]).split("<h2>Comparison at batch 1</h2>", 1)[1].split("</section>", 1)[0]
    assert "<th>workload</th>" in section and "raises.py" in section
    assert ("Measured differently (A is the first run, B the other): b2 against a1: workload raises.py; precision: "
            "A fp32, B bf16") in section
    same = render_report([first, _rec("c3", "bench", {"points": bench_points}, config=config)])
    assert "Measured differently" not in same


def test_a_disturbed_tuning_says_so_in_the_report() -> None:
    """The terminal view printed a tune's and a trial's 'disturbed: ...' note (totals outside the paired blocks'
    interval); the HTML report left both out, so its samples/s beside the speedup were unexplained."""
    trials = [{"knob": "prefetch", "change": {"prefetch_factor": 4}, "status": "not faster", "reason": "",
               "parity": {"relative_difference": 0.0}, "speedup": 2.89, "speedup_ci": [0.43, 19.6],
               "samples_per_s": 1209.0, "disturbed": "disturbed: trial <totals> 1.40x"}]
    tuned = _rec("t2", "train", {
        "workload": "mlp", "baseline": {"batch_size": 64}, "best": {"batch_size": 64, "threads": 1}, "speedup": 2.84,
        "final_ab": {"verdict": "faster"}, "baseline_samples_per_s": 3125.0, "best_samples_per_s": 10603.0,
        "disturbed": "disturbed: final <totals> 2.62x", "settings": [], "trials": trials}, config={"mode": "tune"})
    html = render_report([tuned])
    assert '<p class="warn">disturbed: final &lt;totals&gt; 2.62x</p>' in html
    assert "<td>disturbed: trial &lt;totals&gt; 1.40x</td>" in html


def test_the_comparison_leaves_out_only_the_runs_without_its_batch_size(bench_points: list[dict[str, Any]]) -> None:
    """Three runs at batch 1 and 8 and one at batch 4 only: the report had no comparison at all, and no word of
    why; now the three are compared at batch 1 and the fourth is named."""
    runs = [_rec(f"r{i}", "bench", {"points": bench_points}) for i in range(3)]
    other = _rec("cnn4", "bench", {"points": [_point(4, 0.004, 7)]})
    html = render_report([*runs, other])
    section = html.split("<h2>Comparison at batch 1</h2>", 1)[1].split("</section>", 1)[0]
    assert section.count('<a href="#run-r') == 3 and "#run-cnn4" not in section
    assert "Not compared (no batch 1): cnn4." in section
    assert "Not compared" not in render_report(runs)
    assert "<h2>Comparison" not in render_report([runs[0], other])  # no batch size two runs share


def test_a_cdf_of_one_sample_or_equal_samples_starts_at_zero() -> None:
    """A bench of one sample drew its CDF on a fraction axis from 0.5 to 1, of five equal samples from 0.2: a
    CDF's axis is 0 to 1 whatever the data."""
    for samples in ([1_000_000], [1_000_000] * 5):
        m = Measurement(samples, items_per_call=1)
        point = {"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}
        html = render_report([_rec("one", "bench", {"points": [point]})])
        cdf = next(s for s in _plots(html) if "<title>Latency CDF</title>" in s)
        assert 'text-anchor="end">0</text>' in cdf


def test_the_optimize_view_says_why_each_candidate_lost() -> None:
    """`dlperf optimize` printed 'why:' under its table (a constraint broken, slower and the likely cause); the
    report's status column said 'ok' for those and nothing more."""
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 0.95, "pareto": True},
            {"key": "k1", "label": "dynamic_int8", "status": "ok", "p50_s": 0.012, "metric": 0.95, "pareto": False,
             "slower_reasons": ["at batch 1 quantizing activations costs about as much as the int8 GEMMs save"]},
            {"key": "k2", "label": "pruning", "status": "ok", "p50_s": 0.009, "metric": 0.80, "pareto": True,
             "violations": ["metric drop 15.8% > 1.0%"]},
            {"key": "k3", "label": "onnx", "status": "failed", "phase": "build", "error": "boom <x>"}]
    html = render_report([_rec("opt4", "optimize", {"metric_name": "accuracy", "candidates": rows, "winner": None})])
    why = re.search(r"<h3>Why each of these lost</h3><ul>(.*?)</ul>", html, flags=re.S)
    assert why is not None
    assert re.findall(r"<li>(.*?)</li>", why.group(1)) == [
        "dynamic_int8: slower: at batch 1 quantizing activations costs about as much as the int8 GEMMs save",
        "pruning: metric drop 15.8% &gt; 1.0%", "onnx: failed in build: boom &lt;x&gt;"]


def test_an_optimize_report_lists_the_passes_the_search_skipped() -> None:
    """'no candidate besides the baseline was measured ... (see the skipped passes)', and the page listed none."""
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 1.0}]
    result = {"metric_name": "fidelity", "candidates": rows, "winner": None, "run_id": "opt1",
              "skipped_passes": ["channels_last: not applicable: the model has no 2-D convolution"]}
    html = render_report([_rec("opt1", "optimize", result)], children={"opt1": []}).split("raw result fields")[0]
    assert "<li>skipped pass: channels_last: not applicable: the model has no 2-D convolution</li>" in html


def test_a_profile_report_heads_each_finding_as_the_terminal_does() -> None:
    """The report's findings had no confidence, no 'apply with' and no estimated gain, and read every share as
    '(X% of the step)': a memory-capacity finding at 248% of its budget read '(248.0% of the step)'."""
    from dlperf.profile.diagnose import MEMORY_CAPACITY

    result = {"verdict": "framework/launch overhead: 59% of the step",
              "analyses": {"breakdown": {"step_s": 0.01, "forward_s": 0.01}},
              "findings": [{"category": "framework/launch overhead", "title": "the step is dominated by its fixed "
                            "per-call cost", "share": 0.586, "confidence": "low", "evidence": ["5 operators"],
                            "fix": "a larger batch", "setting": "--batch-size, pass compile",
                            "estimated_gain": "up to 1.78x faster steps (estimate)"},
                           {"category": MEMORY_CAPACITY, "title": "the peak is over the memory budget",
                            "share": 2.48, "confidence": "high", "evidence": [], "fix": "a smaller batch"}]}
    html = render_report([_rec("p5", "profile", result)]).split('id="run-p5"', 1)[1].split("raw result fields")[0]
    assert "[framework/launch overhead] · explains 59% · confidence low" in html
    assert "apply with: --batch-size, pass compile" in html
    assert "estimated gain: up to 1.78x faster steps (estimate)" in html
    assert f"[{MEMORY_CAPACITY}] · 248% of the memory budget in use · confidence high" in html
    assert "of the step)" not in html


def test_an_optimize_report_says_the_constraints_the_search_time_and_the_export() -> None:
    """dlperf optimize and `runs show` say the metric, the objective and its constraints, how long it searched and
    where the winner was exported; the report said none of them, so a table of accuracies had no budget to read
    them against."""
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 0.98, "feasible": True},
            {"key": "k1", "label": "int8", "status": "ok", "p50_s": 0.006, "metric": 0.97, "feasible": False}]
    result = {"metric_name": "accuracy", "objective": "latency", "candidates": rows, "winner": None,
              "constraints": {"max_metric_drop": 0.005, "max_metric_drop_abs": None, "latency_budget_s": None},
              "elapsed_s": 41.6, "time_budget_s": 90.0, "export_dir": "out/winner"}
    html = render_report([_rec("o9", "optimize", result)], children={"o9": []})
    html = html.split('id="run-o9"', 1)[1].split("raw result fields")[0]
    assert "metric: accuracy on the workload&#x27;s eval data" in html
    assert "objective: latency; constraints: metric drop &lt;= 0.50%" in html
    assert "searched 2 candidates in 42 s of a 90 s budget" in html
    assert "exported to out/winner (load it with dlperf.load)" in html


def test_a_load_report_says_why_the_load_failed_its_gate() -> None:
    """`dlperf load` exited 1 with 'more requests failed than --max-error-ratio 0 allows at: ...'; the report showed
    the levels and warnings of an 'ok' run and no word that it had failed."""
    from dlperf.loadgen.generator import LevelResult

    timed_out = LevelResult("concurrency", 2.0, 1, [int(2.75e6)] * 2, {"200": 2, "timeout": 1652}, 3.0, False, [0.7])
    fine = LevelResult("concurrency", 1.0, 1, [int(1e6)] * 300, {"200": 300}, 3.0, True, [100.0])
    config = {"model": "mlp", "url": "127.0.0.1:8000", "max_error_ratio": 0.0}
    html = render_report([_rec("l9", "load", {"levels": [timed_out.to_dict()]}, config=config)])
    assert ('<p class="verdict bad">more requests failed than --max-error-ratio 0 allows at: concurrency 2 (99.9% '
            "failed, 1652 of 1654 requests)") in html
    passed = render_report([_rec("l10", "load", {"levels": [fine.to_dict()]}, config=config)])
    assert "more requests failed" not in passed and "not met at" not in passed


def test_an_interrupted_ab_report_says_its_verdict_is_of_the_blocks_it_finished(
        bench_points: list[dict[str, Any]]) -> None:
    """`runs show` of an A/B stopped by Ctrl-C notes 'interrupted after 13 of 400 paired blocks: the verdict is of
    those'; the report printed the verdict alone."""
    a = bench_points[0]
    result = {"ratio": 1.48, "ci": [1.45, 1.52], "confidence": 0.95, "verdict": "slower",
              "block_ratios": [1.55, 1.5, 1.47], "a": a["summary"], "b": a["summary"],
              "settings": {"a": {"threads": 1}, "b": {"threads": 2}}, "batch_size": {"a": 16, "b": 16},
              "partial": "interrupted after 3 of 400 paired blocks: the verdict is of those"}
    html = render_report([_rec("ab2", "ab", result, status="interrupted")])
    assert '<p class="warn">note: interrupted after 3 of 400 paired blocks: the verdict is of those</p>' in html


def test_the_per_block_ratios_go_on_a_log_axis_where_one_block_stalled(bench_points: list[dict[str, Any]]) -> None:
    """An A/B on a busy machine had one block at 627x among twelve at about 1.5x (the trimmed verdict leaves it out):
    on a linear axis ticked 0, 200, 400, 600, the twelve and the interval's lines lay flat on 'no change'."""
    a = bench_points[0]
    blocks = [1.55, 1.5, 626.92, 1.47, 1.46, 1.46, 1.44, 1.48, 1.49, 1.46, 1.38, 1.57, 1.47]
    result = {"ratio": 1.48, "ci": [1.45, 1.52], "confidence": 0.95, "verdict": "slower", "block_ratios": blocks,
              "a": a["summary"], "b": a["summary"], "settings": {"a": {}, "b": {}}, "batch_size": {"a": 1, "b": 1}}
    html = render_report([_rec("ab3", "ab", result)])
    svg = next(s for s in _plots(html) if "Per-block ratios" in s)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert "100" in labels and "200" not in labels  # decades, not a linear 0-600
    steady = render_report([_rec("ab4", "ab", {**result, "block_ratios": [1.5, 1.46, 1.49]})])
    svg = next(s for s in _plots(steady) if "Per-block ratios" in s)
    assert "100" not in re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_a_bench_report_gives_the_headline_with_its_bound_and_the_model_size(
        bench_points: list[dict[str, Any]]) -> None:
    """bench and `runs show` print 'headline: p90 ... (<= ... at 99% confidence, MLPerf's early stopping)' and
    'model size: ...' under the table; the report had neither (a single-stream run's result is that bound), nor an
    interrupted run's 'of the batch sizes measured before the run stopped'."""
    head = {"kpi": "p90_s", "value": 2.5789e-05, "unit": "s", "batch_size": 1, "bound_99": 2.5909e-05}
    result = {"points": bench_points[:1], "headline": head, "model_bytes": 22796,
              "model_bytes_of": "parameters + buffers"}
    html = render_report([_rec("s1", "bench", result, config={"scenario": "single-stream"})])
    assert ("<p>headline: p90 0.0258 ms at batch 1 (&lt;= 0.0259 ms at 99% confidence, MLPerf&#x27;s early "
            "stopping)</p>") in html
    assert "<p>model size: 0.022 MiB (parameters + buffers)</p>" in html
    stopped = render_report([_rec("s2", "bench", {"points": bench_points, "partial": True, "headline": {
        "kpi": "throughput", "value": 900.0, "unit": "items/s", "batch_size": 8}}, status="interrupted")])
    assert "(of the batch sizes measured before the run stopped: 1, 8)" in stopped


def test_a_profile_report_names_each_operator_s_bound_as_the_terminal_does() -> None:
    """dlperf profile's table reads 'dispatch', 'in-cache' and 'memory'; the report's read 'overhead',
    'cache-resident' and 'bandwidth' for the same operators."""
    ops = [{"name": f"aten::op{i}", "self_s": 1e-4, "share": 0.1, "bound": bound}
           for i, bound in enumerate(("overhead", "cache-resident", "bandwidth", "compute"))]
    html = render_report([_rec("p6", "profile", {"analyses": {"operators": {"operators": ops}}})])
    cells = re.findall(r"<td>aten::op\d</td>(?:<td[^>]*>[^<]*</td>){4}<td>([^<]*)</td>", html)
    assert cells == ["dispatch", "in-cache", "memory", "compute"]


def test_a_tuning_cut_short_by_its_time_budget_says_so_in_the_report() -> None:
    """`dlperf train --tune --time-budget 1s` printed 'gain none: every knob was skipped (why below), nothing was
    tried' and 'time budget spent: not tried threads, compile'; the report said 'none: no knob was both faster and
    within loss parity' of knobs it never ran, and nothing of the budget."""
    reason = "not tried: the time budget (1s) would be exceeded"
    skipped: list[dict[str, Any]] = [{"knob": k, "change": {}, "status": "skipped", "reason": reason}
                                     for k in ("threads", "compile")]
    result = {"workload": "mlp", "baseline": {"batch_size": 32}, "best": {"batch_size": 32}, "speedup": 1.0,
              "final_ab": None, "baseline_samples_per_s": 24035.0, "best_samples_per_s": 24035.0, "settings": [],
              "not_tried": ["threads", "compile"], "trials": skipped}
    html = render_report([_rec("t9", "train", result, config={"mode": "tune"})]).split("raw result fields")[0]
    assert "gain: none: every knob was skipped (why below), nothing was tried" in html
    assert '<p class="warn">time budget spent: not tried threads, compile (why below)</p>' in html
    old = {k: v for k, v in result.items() if k != "not_tried"}  # stored before the budget existed
    html = render_report([_rec("t10", "train", old, config={"mode": "tune"})]).split("raw result fields")[0]
    assert "time budget spent" not in html and "nothing was tried" in html


def test_a_tuning_that_ran_past_its_time_budget_says_by_how_much_and_which_trial_in_the_report() -> None:
    """A trial that started within `--time-budget` and ended past it was recorded nowhere."""
    result = {"workload": "mlp", "baseline": {"batch_size": 32}, "best": {"batch_size": 32}, "speedup": 1.0,
              "final_ab": None, "baseline_samples_per_s": 24035.0, "best_samples_per_s": 24035.0, "settings": [],
              "not_tried": [], "trials": [{"knob": "compile", "change": {"compile": True}, "status": "not faster",
                                            "reason": "A/B: no significant difference"}],
              "time_budget": {"budget_s": 2.5, "spent_s": 9.7, "overrun_s": 7.2,
                              "overrun_by": "compile: torch.compile(model) (started at 1.5s, took 8.2s)"}}
    html = render_report([_rec("t11", "train", result, config={"mode": "tune"})]).split("raw result fields")[0]
    assert ('<p class="warn">time budget 2.5s: the loss curves and trials took 9.7s, 7.2s over, during compile: '
            "torch.compile(model) (started at 1.5s, took 8.2s)</p>") in html


def test_a_run_that_failed_before_it_measured_anything_is_headlined_by_its_error_in_the_summary() -> None:
    """`runs list` headlined it by its error; the report's summary row of the same run had an empty headline."""
    error = ("WorkloadError: workload 'boom': the model rejected its example inputs (input 0: float32[8, 8]): "
             "RuntimeError: batch too big\n  File \"bad.py\", line 9, in forward")
    failed = _rec("f1", "bench", {}, status="failed", error=error)
    summary = render_report([failed]).split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    assert "<td>WorkloadError: workload &#x27;boom&#x27;: the model rejected its example inputs …</td>" in summary


def test_an_optimize_report_lists_the_candidates_the_time_budget_left_untried() -> None:
    """`dlperf optimize --time-budget 3s` printed 'no winner: the time budget ran out before any candidate was
    measured (15 not tried; ...)' and then 'not tried (15): hygiene (time budget: ...); ...'; the report had the
    first line and left out the second, so its '15 not tried' named none of them."""
    rows = [{"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.010, "metric": 1.0, "feasible": True}]
    not_tried = [{"label": f"pass{i}", "key": f"n{i}", "reason": "time budget: about 3 s needed, 0 s left"}
                 for i in range(6)]
    result = {"metric_name": "fidelity", "candidates": rows, "winner": None, "run_id": "opt2", "not_tried": not_tried,
              "baseline": {"key": "k0"}}
    html = render_report([_rec("opt2", "optimize", result)], children={"opt2": []}).split("raw result fields")[0]
    assert "the time budget ran out before any candidate was measured (6 not tried" in html
    assert "<li>not tried (6): pass0 (time budget: about 3 s needed, 0 s left); pass1 (" in html
    assert "pass4 (time budget: about 3 s needed, 0 s left) ...</li>" in html
    old = {k: v for k, v in result.items() if k != "not_tried"}  # stored before the field existed
    assert "not tried" not in render_report([_rec("opt3", "optimize", old)], children={"opt3": []})


def test_a_noisy_point_with_little_other_load_reads_in_the_report_as_bench_prints_it() -> None:
    """bench printed 'noisy at batch 1 (IQR/p50 > 10%) with little other load on the machine (at most 0.1 cores):
    the model's own per-call variation ...'; the report's noise column gave the stored warning, which names 'other
    load on the machine' first, for the same point. Under load, or without the load (an older run), it keeps it."""
    from dlperf.measure.stats import NOISE_CAUSES

    def point(other: float | None, contention: str | None = None) -> dict[str, Any]:
        return {"batch_size": 1, "summary": {"n": 200, "p50_s": 0.002, "noise_warning":
                                             f"noisy: IQR is 44% of the median (> 10%); {NOISE_CAUSES}"},
                "peak_rss_bytes": 2**28, "other_load_percent": other, "contention_warning": contention}

    html = render_report([_rec("n1", "bench", {"points": [point(12.0)]})])
    assert ("noisy: IQR is 44% of the median (&gt; 10%) with little other load on the machine (0.1 cores): the "
            "model&#x27;s own per-call variation") in html
    for busy in (point(150.0, "other processes kept 1.5 cores busy"), point(None)):
        html = render_report([_rec("n2", "bench", {"points": [busy]})])
        assert "noisy: IQR is 44% of the median (&gt; 10%); other load on the machine" in html
        assert "with little other load" not in html
