"""One self-contained HTML report of stored runs: environment, KPI tables and static SVG plots per kind.

Views: bench/check (KPIs, latency histogram and CDF, throughput vs batch, the gate), ab (verdict, block
ratios, A vs B distributions), optimize (Pareto frontier: latency vs metric), profile (time breakdown,
roofline), load (latency vs throughput), train (the step and its phases, a tuning's trials, DDP scaling),
calibrate (the ceilings), a history trend; any other kind, or a record whose fields are missing, degrades to a
table of its JSON. No network is needed to open the file: styles and the small self-check script are inline
(the script counts drawn plots and errors for the rendering test).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dlperf.compare.stats import SMALLEST_P
from dlperf.report.svg import PALETTE, Axis, Series, chart, ecdf, esc, fmt_number, hbars, histogram_bins
from dlperf.store.records import RunRecord

KIND_TITLES = {"bench": "Benchmark", "check": "Regression check", "ab": "A/B", "optimize": "Optimization",
               "profile": "Profile", "load": "Load test", "candidate": "Optimization candidate", "train": "Training",
               "train-trial": "Tuning trial", "calibrate": "Machine ceilings"}
PLOTTED_KPIS = ("p50", "p90", "p99", "mean", "throughput")
HISTORY_PLOTS = 6
"""Batch sizes a history draws a chart of (the first by size); its table has every one."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#b9c0cc}main{padding:8px 28px 40px;max-width:1240px}
section{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;margin:16px 0}
h2{font-size:18px;margin:2px 0 8px}h3{font-size:15px;margin:14px 0 6px;color:#394150}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid #e6e9ee;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#fff6e0}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots svg{border:1px solid #e6e9ee;border-radius:6px}
svg text{font:11px system-ui,sans-serif;fill:#394150}svg .t{font-size:13px;font-weight:600}
svg .al{font-size:12px}svg .g{stroke:#eceff3;stroke-width:1}svg .frame{fill:none;stroke:#aab2bf}
svg .ref{stroke:#555;stroke-dasharray:4 3;stroke-width:1}svg .reft{fill:#555}
.tag{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;background:#e8ebf0;margin-right:4px}
.good{color:#11733a;font-weight:600}.bad{color:#b3261e;font-weight:600}.warn{color:#8a5a00}
.verdict{font-size:16px;margin:6px 0}.muted{color:#6b7383}code{background:#f0f2f5;padding:0 4px;border-radius:3px}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px;max-height:320px}
h1,h2,.tag,.wrap{overflow-wrap:anywhere}
"""

HEAD_SCRIPT = """window.__dlperfErrors=[];
window.addEventListener('error',function(e){window.__dlperfErrors.push(String(e.message||e))});
(function(){var ce=console.error;console.error=function(){
window.__dlperfErrors.push(Array.prototype.join.call(arguments,' '));ce.apply(console,arguments)}})();"""

CHECK_SCRIPT = """(function(){var plots=document.querySelectorAll('svg.plot'),drawn=0;
for(var i=0;i<plots.length;i++){var r=plots[i].getBoundingClientRect();
var marks=plots[i].querySelectorAll('polyline,circle,g.series rect,rect[fill]:not([x="0"])').length;
if(r.width>0&&r.height>0&&marks>0){drawn++}}
var b=document.body;b.setAttribute('data-plots-total',plots.length);b.setAttribute('data-plots-drawn',drawn);
b.setAttribute('data-errors',window.__dlperfErrors.length);
b.setAttribute('data-page-width',document.documentElement.scrollWidth);
b.setAttribute('data-selfcheck',(drawn===plots.length&&window.__dlperfErrors.length===0)?'ok':'fail');
})();"""


# --- small helpers ---------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], row_classes: Sequence[str] = (),
           numeric: bool = True) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if i < len(row_classes) and row_classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f'<td class="n">{_cell(v)}</td>' if numeric and _numeric(v)
                                           else f"<td>{_cell(v)}</td>"
                                           for v in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _numeric(value: Any) -> bool:
    if isinstance(value, Raw):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    text = str(value).strip().rstrip("%").split(" ")[0]
    try:
        float(text.replace("+", "", 1))
    except ValueError:
        return text == "-"
    return True


class Raw(str):
    """Already-escaped HTML for a table cell."""


def _cell(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float):
        return esc(fmt_number(value)) if math.isfinite(value) else "-"
    if value is None:
        return "-"
    return esc(value)


def _ms(seconds: Any) -> str:
    """Milliseconds to four digits; whole ones from 10 s up, where '.4g' wrote 1.235e+04."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "-"
    ms = float(seconds) * 1e3
    return f"{ms:.0f}" if abs(ms) >= 1e4 else f"{ms:.4g}"


def _num(data: Any, *paths: str) -> float | None:
    """The first number found at one of the dotted `paths` in nested dicts."""
    for path in paths:
        value: Any = data
        for key in path.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _json_table(data: Any, limit: int = 80) -> str:
    flat: list[tuple[str, str]] = []

    def walk(value: Any, prefix: str, depth: int) -> None:
        if len(flat) >= limit:
            return
        if isinstance(value, Mapping) and depth < 3 and value:
            for k, v in value.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
        elif isinstance(value, list) and value and depth < 3 and all(not isinstance(v, (dict, list)) for v in value):
            text = json.dumps(value[:12], default=str) + (" ..." if len(value) > 12 else "")
            flat.append((prefix, text))
        else:
            text = json.dumps(value, default=str)
            flat.append((prefix, text if len(text) < 300 else text[:300] + " ..."))

    walk(data, "", 0)
    if not flat:
        return '<p class="muted">(empty)</p>'
    return _table(("field", "value"), [(k, Raw(f'<span style="font-family:monospace">{esc(v)}</span>'))
                                       for k, v in flat])


def _plots(*svgs: str) -> str:
    drawn = [s for s in svgs if s]
    return f'<div class="plots">{"".join(drawn)}</div>' if drawn else ""


def _measurement(point: Mapping[str, Any]) -> tuple[list[float], int] | None:
    m = point.get("measurement")
    if not isinstance(m, Mapping) or not m.get("samples_ns"):
        return None
    return [float(s) / 1e9 for s in m["samples_ns"]], int(m.get("items_per_call", 1) or 1)


# --- run header, environment -----------------------------------------------------------------------


def _run_header(rec: RunRecord) -> str:
    title = KIND_TITLES.get(rec.kind, rec.kind)
    status_cls = "good" if rec.status == "ok" else "bad"
    parts = [f'<h2 id="run-{esc(rec.id)}">{esc(title)}: {esc(rec.workload)}</h2><p>'
             f'<span class="tag">run {esc(rec.id)}</span><span class="tag">{esc(rec.created_at[:19])}</span>'
             f'<span class="tag {status_cls}">{esc(rec.status)}</span>'
             + (f'<span class="tag">parent {esc(rec.parent_id)}</span>' if rec.parent_id else "") + "</p>"]
    if rec.error:
        parts.append(f'<p class="bad">error: {esc(rec.error)}</p>')
    return "".join(parts)


ENV_ROWS = (
    ("dlperf", "dlperf_version"), ("python", "python_version"), ("torch", "torch_version"), ("OS", "os"),
    ("CPU", "cpu_model"), ("CPU flags", "cpu_flags"), ("cores (physical/logical)", "cores"),
    ("usable cores (affinity)", "usable_cores"), ("torch threads", "torch_threads"),
    ("thread variables", "thread_env"), ("CPU governor", "cpu_governor"), ("allocator", "allocator"),
    ("memory", "total_memory_bytes"), ("GPU", "gpu_name"),
    ("CUDA", "cuda_version"), ("GPU driver", "gpu_driver"), ("packages", "packages"),
)


def _env_value(env: Mapping[str, Any], key: str) -> str:
    if key == "cores":
        return f"{env.get('physical_cores', '?')}/{env.get('logical_cores', '?')}"
    value = env.get(key)
    if key == "total_memory_bytes" and isinstance(value, (int, float)):
        return f"{value / 2**30:.1f} GiB"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "-"
    if key == "thread_env" and isinstance(value, Mapping):
        from dlperf.measure.env import thread_env_text

        return thread_env_text(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    return "-" if value is None else str(value)


MOMENT_KEYS = ("load_average",)
"""Environment fields of the moment a run started, not of the machine: runs differing only there share a column."""


def _same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k not in MOMENT_KEYS} == {k: v for k, v in b.items() if k not in MOMENT_KEYS}


def environment_section(records: Sequence[RunRecord]) -> str:
    # a run is one id in its column: a run named in the report and also in its --history was listed twice
    envs = list({r.id: (r.id, r.environment) for r in records
                 if isinstance(r.environment, Mapping) and r.environment}.values())
    if not envs:
        return '<section><h2>Environment</h2><p class="muted">no environment recorded</p></section>'
    distinct: list[tuple[list[str], Mapping[str, Any]]] = []
    for run_id, env in envs:
        for ids, seen in distinct:
            if _same_machine(seen, env):
                ids.append(run_id)
                break
        else:
            distinct.append(([run_id], env))
    headers = ["", *[", ".join(ids[:4]) + (" ..." if len(ids) > 4 else "") for ids, _ in distinct]]
    rows, classes = [], []
    for label, key in ENV_ROWS:
        values = [_env_value(env, key) for _, env in distinct]
        if all(v == "-" for v in values):
            continue
        rows.append([label, *values])
        classes.append("diff" if len(set(values)) > 1 else "")
    note = ""
    if len(distinct) > 1:
        from dlperf.measure.env import environment_differences

        diffs = environment_differences(dict(distinct[0][1]), dict(distinct[1][1]))
        note = ('<p class="warn">The runs were taken in different environments; timings are not directly '
                "comparable" + (": " + esc("; ".join(diffs)) if diffs else "") + ".</p>")
    return f"<section><h2>Environment</h2>{note}{_table(headers, rows, classes, numeric=False)}</section>"


# --- bench / check --------------------------------------------------------------------------------


def bench_view(rec: RunRecord) -> str:
    points = [p for p in rec.result.get("points", []) if isinstance(p, Mapping)]
    if not points:
        raise ValueError("no points")
    rows = []
    for p in points:
        s = p.get("summary") or {}
        rss = p.get("peak_rss_bytes")
        rows.append([p.get("batch_size"), s.get("n"), _ms(s.get("p50_s")), _ms(s.get("p90_s")), _ms(s.get("p99_s")),
                     _ms(s.get("mean_s")), _fmt(s.get("throughput")),
                     f"{rss / 2**20:.0f}" if isinstance(rss, (int, float)) else "-",
                     _fmt(p.get("process_cpu_percent")),
                     Raw(f'<span class="warn">{esc(s["noise_warning"])}</span>') if s.get("noise_warning") else ""])
    from dlperf.report.terminal import bench_notes

    parts = [_config_line(rec), "<h3>Latency per call and throughput</h3>",
             _table(("batch", "n", "p50 ms", "p90 ms", "p99 ms", "mean ms", "items/s", "peak RSS MiB", "CPU %",
                     "noise"), rows)]
    # what else bench warned of (the noise is in its column): a batch size cut short by a cap, other load
    parts += [f'<p class="warn">warning: {esc(w)}</p>' for w in bench_notes(points)]
    sampled = [(p.get("batch_size"), m) for p in points if (m := _measurement(p)) is not None]
    svgs = []
    for batch, (samples, _) in sampled[:3]:
        ms = [s * 1e3 for s in samples]
        lo, hi = _trimmed_range(ms)
        log = lo > 0 and hi / lo > 5
        xs, ys = histogram_bins(ms, 40, lo, hi, log=log)
        svgs.append(chart([Series(f"batch {batch}", xs, [y * 100 for y in ys], "bars")],
                          Axis("latency per call (ms)", log=log), Axis("% of calls"),
                          f"Latency histogram, batch {batch} (n={len(ms)}, 1% tails cut)", y_zero=True))
    if sampled:
        series = []
        for batch, (samples, _) in sampled:
            xs, ys = ecdf([s * 1e3 for s in samples])
            series.append(Series(f"batch {batch}", xs, ys, "step"))
        svgs.append(chart(series, Axis("latency per call (ms)", log=_wide(series)), Axis("fraction of calls"),
                          "Latency CDF", hlines=[(0.5, "p50"), (0.99, "p99")]))
    thr: list[tuple[float, float]] = []
    for p in points:
        b, t = p.get("batch_size"), (p.get("summary") or {}).get("throughput")
        if isinstance(b, (int, float)) and isinstance(t, (int, float)):
            thr.append((float(b), float(t)))
    if len(thr) > 1:
        svgs.append(chart([Series("throughput", [b for b, _ in thr], [t for _, t in thr], "line+points")],
                          Axis("batch size", log=True), Axis("items/s"), "Throughput vs batch size", y_zero=True))
    parts.append(_plots(*svgs))
    gate = rec.result.get("gate")
    if isinstance(gate, Mapping):
        parts.append(_gate_view(gate))
    return "".join(parts)


def _gate_view(gate: Mapping[str, Any]) -> str:
    failed = bool(gate.get("failed"))
    verdict = ('<p class="verdict bad">FAIL: significant regression above the threshold</p>' if failed
               else '<p class="verdict good">PASS: no significant regression above the threshold</p>')
    rows = []
    for p in gate.get("points", []):
        ci = p.get("regression_ci") or [math.nan, math.nan]
        # The gate compares per-item times: at a batch of 8 its p50 is an eighth of the per-call table's.
        per_item = (" per item" if p.get("metric") != "throughput" and p.get("per_item", p.get("batch_size") != 1)
                    else "")
        rows.append([p.get("batch_size"), p.get("metric"),
                     _fmt_metric(p.get("metric"), p.get("baseline_value")) + per_item,
                     _fmt_metric(p.get("metric"), p.get("current_value")) + per_item, _pct(p.get("regression")),
                     f"{_pct(ci[0])} to {_pct(ci[1])}", _p_value((p.get("mann_whitney") or {}).get("p_value")),
                     Raw('<span class="bad">regression</span>' if p.get("failed")
                         else '<span class="good">pass</span>')])
    warnings = "".join(f'<p class="warn">warning: {esc(w)}</p>' for w in gate.get("warnings", []))
    return (f"<h3>Gate against baseline run {esc(gate.get('baseline_run_id'))}: max regression "
            f"{_pct(gate.get('max_regression'), sign=False)}</h3>{verdict}"
            + _table(("batch", "metric", "baseline", "now", "regression", _ci_header(gate.get("confidence")),
                      "Mann-Whitney p", "verdict"), rows)
            + warnings)


def comparison_section(records: Sequence[RunRecord]) -> str:
    """Overlaid CDFs of several sampled runs at their first common batch size."""
    sampled = []
    for rec in records:
        pts = {p.get("batch_size"): p for p in rec.result.get("points", []) if isinstance(p, Mapping)}
        if any(_measurement(p) for p in pts.values()):
            sampled.append((rec, pts))
    if len(sampled) < 2:
        return ""
    common = set.intersection(*(set(p) for _, p in sampled))
    if not common:
        return ""
    batch = min(common, key=lambda b: (not isinstance(b, (int, float)), b if isinstance(b, (int, float)) else 0))
    series, rows = [], []
    for rec, pts in sampled:
        m = _measurement(pts[batch])
        if m is None:
            continue
        xs, ys = ecdf([s * 1e3 for s in m[0]])
        series.append(Series(f"{rec.id} {rec.created_at[5:16]}", xs, ys, "step"))
        s = pts[batch].get("summary") or {}
        rows.append([Raw(f'<a href="#run-{esc(rec.id)}">{esc(rec.id)}</a>'), rec.kind, rec.workload,
                     rec.created_at[:19], _ms(s.get("p50_s")), _ms(s.get("p90_s")), _ms(s.get("p99_s")),
                     _fmt(s.get("throughput"))])
    from dlperf.compare.runs import config_differences

    first = sampled[0][0]
    # runs of other workloads or settings in one table read as a change of the code (one of them: fp32 vs bf16)
    differ = [f"{rec.id} against {first.id}: {'; '.join(d)}" for rec, _ in sampled[1:]
              if (d := ([f"workload {rec.workload}"] if rec.workload != first.workload else [])
                  + config_differences(first.config or {}, rec.config or {}))]
    # One colour a run: past the palette, two runs' curves share a colour and cannot be told apart.
    shown, cut = series[:len(PALETTE)], len(series) - len(PALETTE)
    return (f"<section><h2>Comparison at batch {batch}</h2>"
            + _table(("run", "kind", "workload", "when", "p50 ms", "p90 ms", "p99 ms", "items/s"), rows)
            + (f'<p class="warn">Measured differently (A is the first run, B the other): {esc(" | ".join(differ))}'
               "</p>" if differ else "")
            + _plots(chart(shown, Axis("latency per call (ms)", log=_wide(shown)), Axis("fraction of calls"),
                           f"Latency CDF, batch {batch}" + (f" (the first {len(shown)} runs)" if cut > 0 else ""),
                           hlines=[(0.5, "p50"), (0.99, "p99")]))
            + (f'<p class="muted">The plot leaves out the last {cut} run(s) of the table: one colour a run.</p>'
               if cut > 0 else "")
            + '<p class="muted">Runs measured at different times are not interleaved: machine drift between '
              "them looks like a difference. <code>dlperf compare A B</code> tests it; <code>dlperf ab</code> "
              "measures two settings interleaved.</p></section>")


# --- ab -------------------------------------------------------------------------------------------


def ab_view(rec: RunRecord) -> str:
    r = rec.result
    ratio, ci, verdict = r["ratio"], r["ci"], r["verdict"]
    settings = r.get("settings") or rec.config
    cls = "good" if verdict == "faster" else "bad" if verdict == "slower" else "warn"
    said = f"B is {verdict}" if verdict in ("faster", "slower") else verdict
    parts = [f'<p class="verdict {cls}">{esc(said)}: time B/A {ratio:.3f} '
             f"({float(r.get('confidence', 0.95)):.0%} CI {ci[0]:.3f} to {ci[1]:.3f}; speed {1 / ratio:.3f}x)</p>"]
    rows = []
    for side in ("a", "b"):
        s = r.get(side) or {}
        rows.append([side.upper(), _describe_settings(settings.get(side) if isinstance(settings, Mapping) else None),
                     (r.get("batch_size") or {}).get(side), s.get("n"), _ms(s.get("p50_s")), _ms(s.get("p90_s")),
                     _ms(s.get("p99_s")), _fmt(s.get("throughput"))])
    parts.append(_table(("side", "settings", "batch", "n", "p50 ms", "p90 ms", "p99 ms", "items/s"), rows))
    svgs = []
    blocks = r.get("block_ratios") or []
    if blocks:
        svgs.append(chart([Series("B/A per block", list(range(1, len(blocks) + 1)), blocks, "line+points")],
                          Axis("paired block"), Axis("time ratio B/A"), "Per-block ratios (ABBA order)",
                          hlines=[(1.0, "no change"), (ci[0], "CI low"), (ci[1], "CI high")]))
    ms_ = r.get("measurements") or {}
    sides = {k: [float(s) / 1e6 for s in v.get("samples_ns", [])] for k, v in ms_.items() if isinstance(v, Mapping)}
    if sides.get("a") and sides.get("b"):
        lo, hi = _trimmed_range(sides["a"] + sides["b"])
        log = lo > 0 and hi / lo > 5
        hist = []
        for side in ("a", "b"):
            xs, ys = histogram_bins(sides[side], 40, lo, hi, log=log)
            hist.append(Series(side.upper(), xs, [y * 100 for y in ys], "bars"))
        svgs.append(chart(hist, Axis("latency per call (ms)", log=log), Axis("% of calls"),
                          "A vs B latency (1% tails cut)", y_zero=True))
        cdf = [Series(side.upper(), *ecdf(sides[side]), mode="step") for side in ("a", "b")]
        svgs.append(chart(cdf, Axis("latency per call (ms)", log=_wide(cdf)), Axis("fraction of calls"),
                          "A vs B latency CDF", hlines=[(0.5, "p50")]))
    parts.append(_plots(*svgs))
    return "".join(parts)


def _describe_settings(settings: Any) -> str:
    if not isinstance(settings, Mapping):
        return "-"
    parts = [f"{k}={v}" for k, v in settings.items() if v not in (None, False, {}, "fp32", "cpu")]
    opts = settings.get("options")
    if isinstance(opts, Mapping):
        parts = [p for p in parts if not p.startswith("options=")] + [f"option.{k}={v}" for k, v in opts.items()]
    return ",".join(parts) or "defaults"


# --- optimize -------------------------------------------------------------------------------------
# A candidate's latency is its paired p50 where the search recorded one: the axis its Pareto frontier and
# ranking use (the isolated p50s of different processes differ by more than many passes' effects).

LATENCY_KEYS = ("paired_p50_s", "latency_s", "p50_s", "median_s", "summary.p50_s", "latency.p50_s", "measurement.p50_s",
                "result.latency_s", "result.p50_s", "result.summary.p50_s", "kpis.p50_s", "p90_s", "mean_s")
METRIC_KEYS = ("metric", "metric_value", "accuracy", "score", "eval.metric", "result.metric", "kpis.metric",
               "quality")


def _candidates(rec: RunRecord, children: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Candidate rows from the optimize record (`candidates`), else from its child `candidate` runs."""
    rows: list[dict[str, Any]] = []
    lists = [v for k, v in rec.result.items() if isinstance(v, list) and k in ("candidates", "trials", "results")]
    items: list[tuple[str, Any]] = [(str(i), c) for lst in lists for i, c in enumerate(lst) if isinstance(c, Mapping)]
    if not items:
        items = [(c.id, {**c.result, "name": c.result.get("name") or c.result.get("label") or c.config.get("label")
                         or c.id}) for c in children if isinstance(c.result, Mapping)]
    winner = rec.result.get("winner")
    for key, c in items:
        latency = _num(c, *LATENCY_KEYS)
        metric = _num(c, *METRIC_KEYS)
        name = c.get("name") or c.get("label") or c.get("passes") or c.get("pipeline") or key
        if isinstance(name, list):
            name = "+".join(str(n if not isinstance(n, Mapping) else n.get("name", n)) for n in name) or "baseline"
        selected = bool(c.get("selected")) or (winner is not None and c.get("key") == winner)
        rows.append({"name": str(name), "latency_s": latency, "metric": metric, "paired": "paired_p50_s" in c,
                     "pareto": c.get("pareto") if isinstance(c.get("pareto"), bool) else None,
                     "selected": selected, "status": c.get("status"), "error": c.get("error")})
    return rows


def _frontier(rows: list[dict[str, Any]], higher_is_better: bool) -> list[dict[str, Any]]:
    """The 2-D Pareto set of (lower latency, better metric), fastest first."""
    sign = 1.0 if higher_is_better else -1.0
    frontier, best = [], -math.inf
    usable = [r for r in rows if r["metric"] is not None and r["latency_s"] is not None]
    for r in sorted(usable, key=lambda r: (r["latency_s"], -sign * r["metric"])):
        if sign * r["metric"] > best:
            frontier.append(r)
            best = sign * r["metric"]
    return frontier


def optimize_view(rec: RunRecord, children: Sequence[RunRecord] = ()) -> str:
    rows = _candidates(rec, children)
    measured = [r for r in rows if r["latency_s"] is not None]
    if not rows:  # stopped before its first candidate finished
        return _config_line(rec) + '<p class="muted">no candidate finished</p>'
    higher = rec.result.get("higher_is_better", rec.config.get("higher_is_better", True))
    metric_name = str(rec.result.get("metric_name") or rec.config.get("metric_name") or "metric")
    frontier = _frontier(measured, bool(higher))
    flagged = any(r["pareto"] is not None for r in rows)

    def on_front(r: dict[str, Any]) -> str:
        if flagged:
            return "yes" if r["pareto"] else ""
        return "yes" if r in frontier else ""

    order = sorted(rows, key=lambda r: (r["latency_s"] is None, r["latency_s"] or 0.0))
    from dlperf.report.optimize_view import fmt_metric

    # the metric as optimize prints it (4 decimals, 4 significant digits below 0.1): 3 digits showed a fidelity of
    # 0.9996 as 1
    table_rows = [[r["name"], _ms(r["latency_s"]), fmt_metric(r["metric"]), on_front(r),
                   "selected" if r["selected"] else (r["status"] or ""), (r["error"] or "")[:120]] for r in order]
    # The search's own front is over latency, metric, size and memory: a smaller, slower candidate is on it though
    # the plot's 2-D frontier (latency vs metric) passes it by, so the column says which front it is.
    front_label = ("on the Pareto front (latency, metric, size, memory)" if flagged
                   else "on the Pareto front (latency, metric)")
    # The table's latency is the plot's, the paired p50 where there is one (not the p50 `runs show` prints).
    paired = any(r["paired"] for r in rows)
    parts = [_config_line(rec), _table(("candidate", "paired p50 ms" if paired else "latency ms", metric_name,
                                        front_label, "status", "error"), table_rows)]
    with_metric = [r for r in measured if r["metric"] is not None]
    if with_metric:
        series = [Series("candidates", [r["latency_s"] * 1e3 for r in with_metric], [r["metric"] for r in with_metric],
                         "points", color="#9aa3b1", labels=[r["name"] for r in with_metric]),
                  Series("Pareto frontier", [r["latency_s"] * 1e3 for r in frontier],
                         [r["metric"] for r in frontier], "line+points", color="#d62728",
                         labels=[r["name"] for r in frontier])]
        selected = [r for r in with_metric if r["selected"]]
        if selected:
            series.append(Series("selected", [r["latency_s"] * 1e3 for r in selected],
                                 [r["metric"] for r in selected], "points", color="#2ca02c"))
        axis = "paired p50 latency (ms)" if paired else "latency (ms)"
        parts.append(_plots(chart(series, Axis(axis), Axis(metric_name), "Pareto frontier: latency vs "
                                  + metric_name)))
    elif measured:
        parts.append(_plots(hbars([r["name"] for r in measured], [r["latency_s"] * 1e3 for r in measured],
                                  "Candidate latency", " ms")))
    else:  # every candidate failed: the table says why, and there is nothing to plot
        parts.append('<p class="muted">no candidate was measured: nothing to plot</p>')
    if isinstance(rec.result.get("candidates"), list) and "winner" in rec.result:
        from dlperf.report.optimize_view import selection_lines

        lines = selection_lines(dict(rec.result))
        parts.append("<h3>Selection</h3><ul>" + "".join(f"<li>{esc(line.strip())}</li>" for line in lines)
                     + "</ul>")
    return "".join(parts)


# --- profile --------------------------------------------------------------------------------------

# Two ways of cutting the same step, each adding up to it, drawn apart: by phase, and (outside the data wait) by
# what the host was doing. One chart of both summed to more than the step.
PHASE_PARTS = (("data_wait_s", "waiting for data"), ("h2d_s", "host-to-device"), ("forward_s", "forward"),
               ("backward_s", "backward"), ("optimizer_s", "optimizer"), ("other_s", "other (outside phases)"))
ACTIVITY_PARTS = (("operator_s", "operators"), ("framework_overhead_s", "framework overhead"),
                  ("device_sync_s", "waiting for the device"))


def profile_view(rec: RunRecord) -> str:
    r = rec.result
    analyses = r.get("analyses") if isinstance(r.get("analyses"), Mapping) else r
    parts = []
    if r.get("verdict"):
        parts.append(f'<p class="verdict">{esc(r["verdict"])}</p>')
    svgs = []
    breakdown = analyses.get("breakdown") if isinstance(analyses, Mapping) else None
    if isinstance(breakdown, Mapping):
        step = breakdown.get("step_s")
        step_title = "Time per step" + (f" ({float(step) * 1e3:.3g} ms)" if isinstance(step, (int, float)) else "")
        for cut, title in ((PHASE_PARTS, step_title), (ACTIVITY_PARTS, "The step outside the data wait, by activity")):
            items = [(label, float(breakdown[k]) * 1e3) for k, label in cut
                     if isinstance(breakdown.get(k), (int, float)) and breakdown[k] > 0]
            if items:
                svgs.append(hbars([i[0] for i in items], [i[1] for i in items], title, " ms"))
        idle = breakdown.get("device_idle_s")
        if isinstance(idle, (int, float)) and isinstance(step, (int, float)) and step > 0:
            parts.append(f'<p class="muted">device idle {_ms(idle)} ms of the step ({_pct(idle / step, sign=False)})'
                         "</p>")
    ops_data = analyses.get("operators") if isinstance(analyses, Mapping) else None
    if isinstance(ops_data, Mapping):
        svgs.append(_roofline(ops_data))
        ops = [o for o in ops_data.get("operators", []) if isinstance(o, Mapping)][:12]
        if ops:
            parts.append(f"<h3>Top operators by {esc(str(ops_data.get('timed_by', 'self time')))}</h3>" + _table(
                ("operator", "ms/step", "share", "FLOP/B", "GFLOP/s", "bound", "% of roofline"),
                [[o.get("name"), _ms(o.get("self_s")), _pct(o.get("share"), sign=False), _fmt(o.get("intensity")),
                  _fmt((o.get("achieved_flops_s") or 0) / 1e9 if o.get("achieved_flops_s") else None),
                  o.get("bound"), _pct(o.get("pct_of_peak"), sign=False)] for o in ops]))
    if not svgs and not parts:
        raise ValueError("no breakdown or operators")
    parts.insert(1 if r.get("verdict") else 0, _plots(*svgs))  # the verdict first, as `dlperf profile` prints it
    findings = [f for f in r.get("findings", []) if isinstance(f, Mapping)]
    if findings:
        entries: list[str] = []
        for f in findings[:8]:
            raw_evidence = f.get("evidence")
            evidence: list[Any] = raw_evidence if isinstance(raw_evidence, list) else []
            share = f" ({_pct(f.get('share'), sign=False)} of the step)" if isinstance(f.get("share"), float) else ""
            entries.append(f"<li><b>{esc(f.get('title') or f.get('category') or 'finding')}</b>{esc(share)} "
                         f"{esc(f.get('summary') or '')}"
                         + "".join(f'<br><span class="muted">{esc(e)}</span>' for e in evidence[:3])
                         + (f"<br>fix: {esc(f['fix'])}" if f.get("fix") else "") + "</li>")
        parts.append("<h3>Findings</h3><ol>" + "".join(entries) + "</ol>")
    return "".join(parts)


def _roofline(ops_data: Mapping[str, Any]) -> str:
    ops = [o for o in ops_data.get("operators", []) if isinstance(o, Mapping)
           and isinstance(o.get("intensity"), (int, float)) and isinstance(o.get("achieved_flops_s"), (int, float))
           and o["intensity"] > 0 and o["achieved_flops_s"] > 0]
    peak_data = ops_data.get("peak_flops")
    peaks: Mapping[str, Any] = peak_data if isinstance(peak_data, Mapping) else {}
    bandwidth = ops_data.get("bandwidth_bytes_s")
    if not ops and not peaks:
        return ""
    xs = [float(o["intensity"]) for o in ops] or [1.0]
    lo_x, hi_x = min(min(xs) / 4, 0.05), max(max(xs) * 4, 100.0)
    series = []
    for dtype, peak in peaks.items():
        if not isinstance(peak, (int, float)) or peak <= 0:
            continue
        if isinstance(bandwidth, (int, float)) and bandwidth > 0:
            ridge = peak / bandwidth
            grid = [lo_x, *([ridge] if lo_x < ridge < hi_x else []), hi_x]
            series.append(Series(f"{dtype} roof", grid, [min(peak, bandwidth * x) / 1e9 for x in grid], "line",
                                 dashed=dtype != "fp32"))
        else:
            series.append(Series(f"{dtype} peak", [lo_x, hi_x], [peak / 1e9] * 2, "line", dashed=True))
    if ops:
        series.append(Series("operators", xs, [float(o["achieved_flops_s"]) / 1e9 for o in ops], "points",
                             color="#ff7f0e", labels=[f"{o.get('name')}: {_pct(o.get('share'), sign=False)} of step"
                                                      for o in ops]))
    return chart(series, Axis("arithmetic intensity (FLOP/byte)", log=True), Axis("GFLOP/s", log=True), "Roofline")


# --- train ----------------------------------------------------------------------------------------


def train_view(rec: RunRecord) -> str:
    """A training step's measurement, a `--tune` result (baseline against best, the settings, each trial), or
    a DDP scaling result, as `dlperf train` printed it."""
    r = rec.result
    if "scaling_efficiency" in r or "single_samples_per_s" in r:
        return _config_line(rec) + _table(
            ("processes", "samples/s", "step ms", "scaling efficiency", "exposed all-reduce"),
            [[1, _fmt(r.get("single_samples_per_s")), _ms(r.get("single_step_s")), "-", "-"],
             [r.get("nproc"), _fmt(r.get("samples_per_s")), _ms(r.get("step_s")),
              _pct(r.get("scaling_efficiency"), sign=False), _pct(r.get("comm_share"), sign=False)]])
    if "trials" in r:
        return _config_line(rec) + _tune_view(r)
    return _config_line(rec) + _step_view(r)


def _step_view(m: Mapping[str, Any], title: str = "Training step") -> str:
    from dlperf.report.train_view import PHASE_LABELS

    s = m["summary"]
    rss = m.get("peak_rss_bytes")
    parts = [f"<h3>{esc(title)}</h3>", _table(
        ("steps", "median step ms", "p90 ms", "samples/s", "peak RSS MiB", "MFU"),
        [[s.get("n"), _ms(m.get("step_s")), _ms(s.get("p90_s")), _fmt(m.get("samples_per_s")),
          f"{rss / 2**20:.0f}" if isinstance(rss, (int, float)) else "-", _pct(m.get("mfu"), sign=False)]])]
    phases = [(PHASE_LABELS.get(k, k), float(v) * 1e3) for k, v in (m.get("breakdown_s") or {}).items()
              if isinstance(v, (int, float)) and v > 0]
    svgs = [hbars([p[0] for p in phases], [p[1] for p in phases], f"{title}: time per step by phase", " ms")
            if phases else ""]
    steps = [float(v) / 1e6 for v in ((m.get("measurement") or {}).get("samples_ns") or [])]
    if len(steps) > 1:
        svgs.append(chart([Series("step time", list(range(1, len(steps) + 1)), steps, "line+points")],
                          Axis("measured step"), Axis("step time (ms)"), f"{title}: each step", y_zero=True))
    parts.append(_plots(*svgs))
    parts += [f'<p class="warn">{esc(line)}</p>' for line in [*m.get("findings", []), *m.get("notes", [])]]
    return "".join(parts)


def _sentence(text: str) -> str:
    """`text` with its first letter capitalized (a terminal line as an HTML heading or paragraph)."""
    return text[:1].upper() + text[1:]


def _tune_view(r: Mapping[str, Any]) -> str:
    from dlperf.report.train_view import (
        SETTINGS_TITLE,
        UNCONFIRMED_ADVICE,
        UNCONFIRMED_TITLE,
        config_line,
        settings_confirmed,
    )

    parts = []
    if "best" in r:
        ab = r.get("final_ab")
        confirmed = settings_confirmed(r)
        gain = (f"{r['speedup']:.2f}x samples/s ({ab['verdict']} in an interleaved A/B)" if ab
                else "none: no knob was both faster and within loss parity")
        parts.append(f'<p class="verdict {"good" if confirmed else "warn"}">gain: {esc(gain)}</p>' + _table(
            ("", "settings", "samples/s"),
            [["baseline", config_line(r["baseline"]), _fmt(r.get("baseline_samples_per_s"))],
             ["best", config_line(r["best"]), _fmt(r.get("best_samples_per_s"))]]))
        if r.get("disturbed"):  # the totals disagreed with the paired blocks, as the terminal view says
            parts.append(f'<p class="warn">{esc(r["disturbed"])}</p>')
        if r.get("settings"):
            head = f"<h3>{esc(_sentence(SETTINGS_TITLE if confirmed else UNCONFIRMED_TITLE))}</h3>"
            if not confirmed:
                head += f'<p class="warn">{esc(_sentence(UNCONFIRMED_ADVICE))}.</p>'
            parts.append(head + _table(
                ("setting", "code", "gain"),
                [[x.get("what"), Raw(f"<code>{esc(x.get('code'))}</code>"),
                  f"{x['speedup']:.2f}x" if isinstance(x.get("speedup"), (int, float)) else "-"]
                 for x in r["settings"]]))
    else:  # stopped before the end: only the trials it finished
        parts.append('<p class="warn">tuning stopped before the baseline and the best were measured</p>')
    rows = []
    for t in r["trials"]:
        parity, ci, change, speedup = t.get("parity"), t.get("speedup_ci"), t.get("change"), t.get("speedup")
        rows.append([t.get("knob"), ", ".join(f"{k}={v}" for k, v in change.items()) if change else "-",
                     _pct(parity.get("relative_difference")) if isinstance(parity, Mapping) else "-",
                     _fmt(t.get("samples_per_s")),
                     (f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else "-")
                     + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if isinstance(ci, list) and len(ci) == 2 else ""),
                     t.get("status"), "; ".join(x for x in (t.get("reason"), t.get("disturbed")) if x)])
    if rows:
        parts.append("<h3>Trials, each an A/B against the best so far</h3>" + _table(
            ("knob", "change", "loss", "samples/s", "speedup (95% CI)", "result", "why"), rows))
    for key, title in (("baseline_measurement", "Baseline step"), ("best_measurement", "Best step")):
        if isinstance(r.get(key), Mapping) and (key == "baseline_measurement" or r.get("best") != r.get("baseline")):
            parts.append(_step_view(r[key], title))
    return "".join(parts)


# --- load -----------------------------------------------------------------------------------------

THROUGHPUT_KEYS = ("throughput_rps", "achieved_rps", "throughput", "rps", "requests_per_s", "summary.throughput_rps",
                   "summary.throughput")
P50_KEYS = ("p50_s", "latency_p50_s", "latency.p50_s", "summary.p50_s", "latency_s.p50")
P99_KEYS = ("p99_s", "latency_p99_s", "latency.p99_s", "summary.p99_s", "latency_s.p99")


def load_view(rec: RunRecord) -> str:
    from dlperf.loadgen.generator import Slo

    r = rec.result
    peak = r.get("peak")
    slo = Slo.from_record(peak) or Slo.from_record(rec.config)
    judged_at = slo.name if slo is not None else "p99"
    lists = [v for k, v in r.items() if isinstance(v, list) and k in ("levels", "steps", "points", "results", "stages")]
    rows: list[tuple[str, float, float | None, float | None, float | None]] = []
    judged: list[list[Any]] = []  # the SLO's bound and verdict, the server's resources: where the run had them
    cdfs: list[Series] = []
    for item in (lists[0] if lists else [r]):
        if not isinstance(item, Mapping):
            continue
        thr = _num(item, *THROUGHPUT_KEYS)
        p50, p99 = _num(item, *P50_KEYS), _num(item, *P99_KEYS)
        if thr is None:
            continue
        offered = _num(item, "concurrency", "rate", "target_rps", "offered_rps", "level")
        label = f"{item.get('mode', '')} {_fmt(offered)}".strip()
        rows.append((label, thr, p50, p99, _num(item, "error_rate", "errors", "failures")))
        rss = _num(item, "resources.rss_max_bytes")
        gpus = (item.get("resources") or {}).get("gpus") if isinstance(item.get("resources"), Mapping) else None
        busy = [g.get("utilization") for g in (gpus or {}).values() if isinstance(g, Mapping)]
        judged.append([_ms(_num(item, "slo_bound_s", "p99_bound_s") if judged_at == "p99"
                           else _num(item, "slo_bound_s")),
                       f"{item['verdict']}: {item.get('verdict_reason', '')}" if isinstance(item.get("verdict"), str)
                       else "-",
                       _fmt(_num(item, "resources.cpu_cores")),
                       _fmt(rss / 2**20) if rss is not None else "-",
                       ", ".join(f"{b:.0%}" for b in busy if isinstance(b, (int, float))) or "-"])
        lat = item.get("latencies_ns")
        if isinstance(lat, list) and lat and len(cdfs) < 8:
            cdfs.append(Series(label, *ecdf([float(v) / 1e6 for v in lat]), mode="step"))
    if not rows:
        raise ValueError("no load levels with a throughput")
    extras = (f"{judged_at} bound ms", f"{judged_at} SLO", "server CPU cores", "server RSS MiB", "GPU busy")
    shown = [i for i in range(len(extras)) if any(j[i] != "-" for j in judged)]  # where present
    table = _table(("level", "throughput req/s", "p50 ms", "p99 ms", "errors", *(extras[i] for i in shown)),
                   [[o, _fmt(t), _ms(a), _ms(b), _fmt(e)] + [j[i] for i in shown]
                    for (o, t, a, b, e), j in zip(rows, judged, strict=True)])
    if isinstance(peak, Mapping) and slo is not None:
        found = peak.get("peak_rate")
        table = (f"<p>Peak search (MLPerf server scenario), SLO {esc(str(slo))}: "
                 + (f"<b>{float(found):.1f} req/s</b>" if isinstance(found, (int, float)) else "no tried rate passed")
                 + "</p>" + table)
    series = []
    for idx, name in ((2, "p50"), (3, "p99")):
        pts: list[tuple[float, float, str]] = []
        for row in rows:
            value = row[idx]
            if isinstance(value, float):
                pts.append((row[1], value, row[0]))
        if pts:
            series.append(Series(name, [p[0] for p in pts], [p[1] * 1e3 for p in pts], "line+points",
                                 labels=[p[2] for p in pts]))
    # A level whose every request failed has no latency: it stays in the table (with its errors), off the plot.
    svgs = [chart(series, Axis("throughput (requests/s)"), Axis("latency (ms)"), "Latency vs throughput",
                  y_zero=True) if series else ""]
    if cdfs:
        svgs.append(chart(cdfs, Axis("request latency (ms)", log=_wide(cdfs)), Axis("fraction of requests"),
                          "Latency CDF per level", hlines=[(0.5, "p50"), (0.99, "p99")]))
    return _config_line(rec) + table + _plots(*svgs)


# --- calibrate ------------------------------------------------------------------------------------


def calibrate_view(rec: RunRecord) -> str:
    """The machine's ceilings as `dlperf calibrate` prints them (its JSON read 165272096103.7736, no unit)."""
    from dlperf.report.terminal import fmt_si

    r = rec.result
    details = _mapping(r.get("details"))
    gemm = r.get("gemm_flops")
    if not isinstance(gemm, Mapping) or not isinstance(r.get("memory_bandwidth_bytes_s"), (int, float)):
        raise ValueError("no ceilings")
    rows = []
    for dtype, flops in gemm.items():
        how = _mapping(details.get(f"gemm_{dtype}"))
        rows.append([f"GEMM {dtype}", fmt_si(float(flops), "OP/s" if dtype == "int8" else "FLOP/s"),
                     f"{how.get('n', '?')}³ matmul, {how.get('samples', '?')} calls"])
    skipped = _mapping(details.get("skipped"))
    rows += [[f"GEMM {dtype}", "not measured", why] for dtype, why in skipped.items()]
    copy = _mapping(details.get("copy"))
    copied = copy.get("bytes")
    rows.append(["memory bandwidth", fmt_si(float(r["memory_bandwidth_bytes_s"]), "B/s"),
                 f"copy of {copied / 2**20:.1f} MiB (read + write), {copy.get('samples', '?')} calls"
                 if isinstance(copied, (int, float)) else "-"])
    threads = r.get("threads", "?")
    source = "cached" if r.get("cached") else "measured"
    quick = " (quick mode: small sizes, not a real ceiling)" if r.get("quick") else ""
    warnings = [str(w) for w in details.get("warnings", []) or []]
    warnings += [f"{k}: {v['noise_warning']}" for k, v in details.items()
                 if isinstance(v, Mapping) and v.get("noise_warning")]
    return (_config_line(rec)
            + f"<h3 class=\"wrap\">Ceilings on {esc(r.get('device', rec.workload))} ({esc(threads)} thread"
            + ("" if threads == 1 else "s") + ")</h3>"
            + _table(("what", "ceiling", "measured with"), rows, numeric=False)
            + f'<p class="muted wrap">{esc(source)} at {esc(r.get("measured_at", "?"))}{esc(quick)}; key '
              f'{esc(r.get("machine_key", "?"))}</p>'
            + "".join(f'<p class="warn">warning: {esc(w)}</p>' for w in warnings))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# --- history --------------------------------------------------------------------------------------


def history_section(records: Sequence[RunRecord], metric: str = "p50", workload: str = "") -> str:
    """Trend of `metric` (p50, p90, p95, p99, mean or throughput) over bench/check runs, oldest first, with each
    run's value per batch size in its table."""
    ordered = sorted(records, key=lambda r: r.created_at)
    per_batch: dict[Any, list[tuple[int, float, tuple[float, float] | None, str]]] = {}
    for i, rec in enumerate(ordered):
        for p in rec.result.get("points", []) if isinstance(rec.result, Mapping) else []:
            s = p.get("summary") if isinstance(p, Mapping) else None
            if not isinstance(s, Mapping):
                continue
            value = s.get("throughput") if metric == "throughput" else s.get(f"{metric}_s")
            if not isinstance(value, (int, float)):
                continue
            ci = s.get("median_ci_s") if metric == "p50" else None
            err = (ci[0] * 1e3, ci[1] * 1e3) if isinstance(ci, list) and len(ci) == 2 else None
            shown = float(value) if metric == "throughput" else float(value) * 1e3
            per_batch.setdefault(p.get("batch_size"), []).append((i + 1, shown, err, f"{rec.id} {rec.created_at[:19]}"))
    head = f"History of {workload or 'the workload'}"
    title = f"{head}: {metric} at each batch size"
    if not per_batch:
        return f'<section><h2>{esc(title)}</h2><p class="muted">no bench or check runs with {esc(metric)}</p></section>'
    # batch 8 before batch 32 (sorted as text, 32 came first); a batch size that is no number after them
    batches = sorted(per_batch, key=lambda b: (0, b, "") if isinstance(b, int) else (1, 0, str(b)))
    unit = "items/s" if metric == "throughput" else f"{metric} latency (ms)"
    # One chart a batch size, each on its own y-axis: on one axis a batch of 8 at 24 ms flattened batch 1's
    # 0.02 ms trend onto the zero line. The run axis is the same in every chart, so run 3 is above run 3.
    runs_axis = Axis("run (oldest to newest)", lo=0.5, hi=len(ordered) + 0.5, integer=True)
    svgs = []
    for i, batch in enumerate(batches[:HISTORY_PLOTS]):
        pts = per_batch[batch]
        errs = [e if e is not None else (v, v) for _, v, e, _ in pts]
        series = Series(f"batch {batch}", [p[0] for p in pts], [p[1] for p in pts], "line+points",
                        color=PALETTE[i % len(PALETTE)], labels=[p[3] for p in pts],
                        y_err=errs if any(p[2] for p in pts) else ())
        svgs.append(chart([series], runs_axis, Axis(unit), f"{head}: {metric} at batch {batch}",
                          y_zero=True))
    left_out = batches[HISTORY_PLOTS:]
    values = {(batch, index): value for batch in batches for index, value, _, _ in per_batch[batch]}
    from dlperf.report.changes import history_changes

    # a step in the trend that another runner or precision made, said where it happened
    changes = history_changes(ordered)
    rows = [[i + 1, r.id, r.kind, r.created_at[:19], r.status,
             *(_fmt(values[(b, i + 1)]) if (b, i + 1) in values else "" for b in batches),
             Raw(f'<span class="warn">{esc("; ".join(changes[r.id]))}</span>') if r.id in changes else ""]
            for i, r in enumerate(ordered)]
    short = "items/s" if metric == "throughput" else f"{metric} ms"
    return (f"<section><h2>{esc(title)}</h2>"
            + _plots(*svgs)
            + (f'<p class="muted">Not plotted (the table has them): batch {esc(", ".join(map(str, left_out)))}.</p>'
               if left_out else "")
            + ('<p class="muted">Whiskers: 95% bootstrap CI of the median.</p>' if metric == "p50" else "")
            + ('<p class="warn">The settings or the machine changed between runs (last column): a step in the trend '
               "there may come from that, not from the code.</p>" if changes else "")
            + _table(("#", "run", "kind", "when (UTC)", "status", *(f"{short}, batch {b}" for b in batches),
                      "changed from the run before"), rows)
            + "</section>")


# --- the page ---------------------------------------------------------------------------------------

View = Callable[[RunRecord], str]


def run_section(rec: RunRecord, children: Sequence[RunRecord] = ()) -> str:
    views: dict[str, View] = {"bench": bench_view, "check": bench_view, "ab": ab_view, "profile": profile_view,
                              "load": load_view, "train": train_view, "calibrate": calibrate_view,
                              "optimize": lambda r: optimize_view(r, children)}
    view = views.get(rec.kind)
    body = ""
    if not rec.result:  # a run that failed or was stopped before it measured anything: nothing to draw
        return (f'<section>{_run_header(rec)}{_config_line(rec)}<p class="muted">no result recorded</p>'
                "</section>")
    if view is not None:
        try:
            body = view(rec)
        except Exception as exc:  # a record from another version or a partial run: degrade, don't fail
            body = (f'<p class="warn">the {esc(rec.kind)} view could not be drawn from this record '
                    f"({esc(type(exc).__name__)}: {esc(exc)}); its fields follow.</p>")
            body += _json_table(rec.result)
    else:
        body = _config_line(rec) + _json_table(rec.result)
    if view is not None and not body.startswith('<p class="warn">the'):
        body += f"<details><summary>raw result fields</summary>{_json_table(rec.result)}</details>"
    return f"<section>{_run_header(rec)}{body}</section>"


def render_report(
    records: Sequence[RunRecord],
    *,
    children: Mapping[str, Sequence[RunRecord]] | None = None,
    history: Sequence[RunRecord] | None = None,
    history_metric: str = "p50",
    history_workload: str = "",
    title: str | None = None,
    generated_at: str | None = None,
) -> str:
    """The whole HTML document for `records` (plus child runs by parent id, plus an optional history)."""
    children = children or {}
    generated_at = generated_at or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = list(records)
    title = title or ("dlperf report: " + ", ".join(sorted({r.workload for r in shown}))[:120] if shown
                      else f"dlperf history: {history_workload}")
    # text, so '100.0 req/s, ...' stays left
    summary = _table(("run", "kind", "workload", "when", "status", "headline"), [
        [Raw(f'<a href="#run-{esc(r.id)}">{esc(r.id)}</a>'), r.kind,
         Raw(f'<span class="wrap">{esc(r.workload)}</span>'),  # a long name wraps, not the whole table
         r.created_at[:19], r.status, _headline(r)] for r in shown], numeric=False) if shown else ""
    sections = [f"<section><h2>Runs</h2>{summary}</section>" if shown else ""]
    all_for_env = [*shown, *(history or [])]
    sections.append(environment_section(all_for_env))
    sections.append(comparison_section(shown))
    sections += [run_section(r, children.get(r.id, ())) for r in shown]
    if history is not None:
        sections.append(history_section(history, history_metric, history_workload))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style><script>{HEAD_SCRIPT}</script></head><body>"
        f"<header><h1>{esc(title)}</h1><p>generated {esc(generated_at)} by dlperf; "
        "profile, don't guess; measure every change</p></header>"
        f"<main>{''.join(s for s in sections if s)}</main><script>{CHECK_SCRIPT}</script></body></html>"
    )


# --- formatting -----------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    return fmt_number(float(value)) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _p_value(value: Any) -> str:
    """A p-value that underflowed to zero is shown as a bound, not as a certain 0."""
    if isinstance(value, (int, float)) and 0 <= value < SMALLEST_P:
        return f"<{SMALLEST_P:.0e}"
    return _fmt(value)


def _ci_header(confidence: Any) -> str:
    return f"{confidence:.0%} CI" if isinstance(confidence, (int, float)) else "CI"


def _pct(value: Any, sign: bool = True) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value * 100:+.1f}%" if sign else f"{value * 100:.1f}%"


def _fmt_metric(metric: Any, value: Any) -> str:
    return _fmt(value) + " items/s" if metric == "throughput" else _ms(value) + " ms"


def _headline(rec: RunRecord) -> str:
    from dlperf.report.terminal import check_headline, fmt_value

    r = rec.result if isinstance(rec.result, Mapping) else {}
    if rec.kind == "check" and isinstance(r.get("gate"), dict):  # its verdict, not the throughput it also has
        verdict = check_headline(r["gate"])
        if verdict is not None:
            return verdict
    head = r.get("headline")
    if isinstance(head, Mapping) and isinstance(head.get("value"), (int, float)):
        kpi = str(head.get("kpi"))
        value = float(head["value"])
        shown = (fmt_value(value, "items/s") if kpi == "throughput"
                 else f"{kpi.removesuffix('_s')} {_ms(value)} ms")
        return f"{shown} (batch {head.get('batch_size')})"
    from dlperf.report.terminal import kind_headline

    own = kind_headline(rec.kind, rec.result)
    if own is not None:
        return own
    if isinstance(r.get("gate"), Mapping):
        return "gate " + ("FAIL" if r["gate"].get("failed") else "PASS")
    if isinstance(r.get("verdict"), str):
        return r["verdict"][:80]
    return ""


def _config_line(rec: RunRecord) -> str:
    cfg = rec.config if isinstance(rec.config, Mapping) else {}
    keep = [(k, v) for k, v in cfg.items() if not isinstance(v, (dict, list)) and v is not None and k != "version"]
    if isinstance(cfg.get("batch_sizes"), list):
        keep.insert(0, ("batch_sizes", ",".join(str(b) for b in cfg["batch_sizes"])))
    timer = cfg.get("timer")
    if isinstance(timer, Mapping):
        keep += [(k, timer[k]) for k in ("min_duration_s", "min_iters", "warmup_iters") if k in timer]
    if not keep:
        return ""
    return "<p>" + "".join(f'<span class="tag">{esc(k)}={esc(v)}</span>' for k, v in keep[:14]) + "</p>"


def _trimmed_range(values: Sequence[float]) -> tuple[float, float]:
    """1st..99th percentile, so a few outliers do not squash a histogram into one bar."""
    data = sorted(values)
    if not data:
        return 0.0, 1.0
    lo = data[int(0.01 * (len(data) - 1))]
    hi = data[math.ceil(0.99 * (len(data) - 1))]
    return (lo, hi) if hi > lo else (data[0], data[-1])


def _wide(series: Sequence[Series]) -> bool:
    """Log axis when the values span more than 20x."""
    xs = [float(v) for s in series for v in s.xs if float(v) > 0]
    return bool(xs) and max(xs) / min(xs) > 20
