"""deploy/: the Grafana dashboard and the Prometheus alert rules name only metrics a real server exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dlperf.serve.metrics import GPU_METRIC_NAMES
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig

from .helpers import get_text

pytestmark = pytest.mark.integration

yaml = pytest.importorskip("yaml")
httpclient = pytest.importorskip("tritonclient.http")

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
METRIC = re.compile(r"\b((?:dlperf|process)_[a-z0-9_]+)")


@pytest.fixture(scope="module")
def exported() -> Iterator[set[str]]:
    # with priority levels, so that the per-level histograms are exported too
    running: Running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_queue_size=8, priority_levels=2))
    try:
        x = np.zeros((1, 64), np.float32)
        inp = httpclient.InferInput("x", [1, 64], "FP32")
        inp.set_data_from_numpy(x)
        httpclient.InferenceServerClient(running.url).infer("mlp", [inp])
        text = get_text(f"http://{running.url}/metrics")
    finally:
        running.stop()
    yield {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def _check(names: set[str], exported: set[str], where: str) -> None:
    assert names, f"{where} names no metric"
    missing = sorted(n for n in names if n not in exported and n not in GPU_METRIC_NAMES)
    assert not missing, f"{where} uses metrics the server does not export: {missing}"


def test_alert_rules_cover_the_five_alerts_and_use_real_metrics(exported: set[str]) -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    assert {a["alert"] for a in alerts} == {
        "DlperfP99LatencyOverSLO", "DlperfErrorRatioHigh", "DlperfQueueSaturated", "DlperfNoTraffic",
        "DlperfMemoryGrowing"}
    for alert in alerts:
        assert alert["labels"]["severity"] and alert["annotations"]["summary"] and alert["for"]
        _check(set(METRIC.findall(alert["expr"])), exported, f"alert {alert['alert']}")


def test_queue_saturation_compares_each_priority_level_with_its_own_bound() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "DlperfQueueSaturated"]
    expr = " ".join(rule["expr"].split())
    # the bounds hold per level: their sum (queue_capacity) let a full level sit at 2/12 of it
    assert ("dlperf_inference_priority_pending_requests / (dlperf_inference_priority_queue_capacity > 0) ) > 0.8"
            in expr)


def test_dashboard_queries_use_real_metrics(exported: set[str]) -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    names = {n for e in exprs for n in METRIC.findall(e)}
    _check(names, exported, "the dashboard")
    # every dlperf serving family appears somewhere on the dashboard
    for family in ("request_success_total", "request_failure_total", "count_total", "exec_count_total",
                   "pending_requests", "request_duration_seconds_bucket", "queue_duration_seconds_bucket",
                   "compute_duration_seconds_bucket", "batch_size_bucket",
                   "priority_request_duration_seconds_bucket", "priority_queue_duration_seconds_bucket",
                   "priority_pending_requests", "priority_queue_capacity"):
        assert f"dlperf_inference_{family}" in names


def _balanced(expr: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quoted = False
    for ch in expr:
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack and not quoted


def test_dashboard_and_rules_are_well_formed() -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in panels:
        assert panel["title"] and panel["type"] and {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs)
        for target in panel["targets"]:
            assert _balanced(target["expr"]), target["expr"]
            assert set(re.findall(r"\$(\w+)", target["expr"])) <= variables | {"__rate_interval"}
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        assert _balanced(rule["expr"]), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"])


def test_latency_quantiles_leave_failures_out_and_process_series_are_dlperf_s() -> None:
    """An overloaded server answering 24,056 instant 503s beside 161 slow successes: the p99 over both outcomes was
    0.5 ms, over the successes 700 ms, so the SLO alert stayed silent at 7x its threshold and the panel showed
    sub-millisecond latency. The process panel showed every scraped target's processes."""
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    quantiles = [e for e in exprs if "dlperf_inference_request_duration_seconds_bucket" in e]
    assert quantiles and all('outcome="success"' in e for e in quantiles)
    for expr in (e for e in exprs if "process_" in e and "deriv(" not in e):
        assert "on (instance) dlperf_server_ready" in expr, expr
    no_traffic = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "DlperfNoTraffic")
    assert "request_failure_total" in no_traffic["expr"]
    assert "dlperf_inference_traffic_weight == 0" in no_traffic["expr"]


def test_the_traffic_weight_of_each_variant_is_exported() -> None:
    """The no-traffic alert fired for good on a variant kept warm with --split 100:0."""
    from dlperf.serve.metrics import parse_variant_metrics

    config = ServeConfig(port=0, variants=(("main", "zoo:mlp"), ("warm", "zoo:mlp")), split=(100, 0))
    with start_in_thread(config) as running:
        text = get_text(f"http://{running.url}/metrics")
    weights = dict(re.findall(r'dlperf_inference_traffic_weight\{model="mlp",variant="(\w+)"\} ([0-9.]+)', text))
    assert weights == {"main": "100.0", "warm": "0.0"}
    assert set(parse_variant_metrics(text)) == {"main", "warm"}
