"""The HTML report of a load run says what `dlperf load` and `runs show` say of it: each level's warnings, and
what a peak search that stopped undecided found."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dlperf.report.html import render_report
from dlperf.store.records import RunRecord

pytestmark = pytest.mark.unit


def _load(result: dict[str, Any]) -> str:
    rec = RunRecord(id="l1", kind="load", workload="127.0.0.1:8000/mlp", status="ok", created_at="2026-12-05T08:19:00",
                    config={"url": "127.0.0.1:8000", "model": "mlp"}, environment={}, result=result)
    return render_report([rec]).split("raw result fields")[0]


def _level(rate: float, **kw: Any) -> dict[str, Any]:
    return {"mode": "rate", "level": rate, "throughput_rps": rate, "p50_s": 0.002, "p99_s": 0.012, "errors": 0,
            "latencies_ns": [2_000_000, 3_000_000, 12_000_000], **kw}


def test_each_level_s_warnings_are_in_the_report() -> None:
    # a level whose every request timed out: the table said 'errors 26230' and nothing of why, nor that the
    # other level's windows never agreed (`dlperf load` printed both)
    html = _load({"levels": [
        _level(50.0, warnings=["the last 3 windows of 1 s did not agree within 10% on throughput and mean latency "
                               "before the level's bound (4 s): results may be unstable"]),
        {"mode": "concurrency", "level": 2.0, "throughput_rps": 0.0, "p50_s": float("nan"), "p99_s": float("nan"),
         "errors": 26230, "statuses": {"timeout": 26230}, "latencies_ns": [],
         "warnings": ["no request succeeded while the level measured (timeout: 26230): is the server up, and does "
                      "it answer within --request-timeout-s?"]}]})
    assert ('<p class="warn">warning (rate 50): the last 3 windows of 1 s did not agree within 10% on throughput '
            "and mean latency before the level&#x27;s bound (4 s): results may be unstable</p>") in html
    assert "warning (concurrency 2): no request succeeded while the level measured (timeout: 26230)" in html


def test_a_peak_found_before_the_search_stopped_undecided_is_a_lower_bound() -> None:
    # the search found 40 req/s, then stopped on an undecided 80: `dlperf load` says 'at least 40.0 req/s';
    # the report said '40.0 req/s', a peak the search never showed
    peak = {"slo": {"bound_s": 0.02, "percentile": 99.0}, "peak_rate": 40.0, "undecided_at": 80.0,
            "steps": [{"passed": True, "verdict": "pass"}, {"passed": False, "verdict": "undecided"}]}
    html = _load({"peak": peak, "levels": [_level(40.0), _level(80.0)]})
    assert "SLO p99 &lt;= 20 ms: <b>at least 40.0 req/s</b>" in html
    assert '<p class="warn">the search stopped at 80 req/s: undecided' in html


@pytest.mark.parametrize(("verdicts", "said"), [
    (("fail", "undecided"), "no tried rate kept it"),
    (("undecided",), "no tried rate was shown to keep it (none was shown to miss it either: undecided)"),
])
def test_no_peak_says_whether_a_rate_was_shown_to_miss(verdicts: tuple[str, ...], said: str) -> None:
    # it said 'no tried rate passed' either way: a shown miss and a search that decided nothing read alike
    peak = {"slo": {"bound_s": 0.02, "percentile": 99.0}, "peak_rate": None,
            "steps": [{"passed": False, "verdict": v} for v in verdicts]}
    html = _load({"peak": peak, "levels": [_level(40.0 * (i + 1)) for i in range(len(verdicts))]})
    assert f"SLO p99 &lt;= 20 ms: {said}</p>" in html


def test_the_latency_plot_draws_the_slo_and_the_cdf_starts_at_zero() -> None:
    peak = {"slo": {"bound_s": 0.005, "percentile": 95.0}, "peak_rate": 40.0,
            "steps": [{"passed": True, "verdict": "pass"}]}
    html = _load({"peak": peak, "levels": [_level(40.0)]})
    plot = re.search(r'<svg class="plot"[^>]*><title>Latency vs throughput</title>.*?</svg>', html, re.S)
    assert plot is not None and 'class="reft">SLO p95 &lt;= 5 ms</text>' in plot.group(0)
    cdf = re.search(r"<title>Latency CDF per level</title>.*?</svg>", html, re.S)
    assert cdf is not None and 'text-anchor="end">0</text>' in cdf.group(0)


def test_the_load_table_has_the_p90_p95_and_server_columns_that_runs_show_gives() -> None:
    from dlperf.loadgen.generator import LevelResult, ServerSide

    server = ServerSide(600, 0.000129, 0.00001, 0.000158, 0.00001, 2.5)
    latencies = [int(v * 1e6) for v in range(1, 101)]  # 1 to 100 ms
    level = LevelResult("concurrency", 4.0, 1, latencies, {"200": 100}, 1.0, True, [100.0], server=server)
    html = _load({"levels": [level.to_dict()]})
    header = re.search(r"<tr><th>level</th>.*?</tr>", html)
    assert header is not None
    names = re.findall(r"<th>(.*?)</th>", header.group(0))
    # the table had p50 and p99 only, and none of the server's own figures
    assert names[:9] == ["level", "throughput req/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "errors",
                         "server queue ms", "server compute ms"]
    assert "server batch" in names
    row = re.findall(r"<td[^>]*>(.*?)</td>", html[header.end():].split("</tr>")[0])
    cells = dict(zip(names, row, strict=False))
    assert (cells["p90 ms"], cells["p95 ms"]) == ("90.1", "95.05")
    assert (cells["server queue ms"], cells["server compute ms"], cells["server batch"]) == ("0.129", "0.178", "2.5")
