"""One self-contained HTML report of stored runs: environment, KPI tables and static SVG plots per kind.

Views: bench/check (KPIs, latency histogram and CDF, throughput vs batch, the gate), ab (verdict, block
ratios, A vs B distributions), optimize (Pareto frontier: latency vs metric), profile (time breakdown,
roofline), load (latency vs throughput), train (the step and its phases, a tuning's trials, DDP scaling),
calibrate (the ceilings), a history trend; any other kind, or a record whose fields are missing, degrades to a
table of its JSON. No network is needed to open the file: styles and the small self-check script are inline
(the script counts drawn plots and errors for the rendering test).

This module holds the page (header, environment, one section per run); the views are in `html_bench` (bench,
check, ab, comparison, history) and `html_kinds` (optimize, profile, train, load, calibrate), their building
blocks in `html_parts`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dlperf.compare.runs import RunComparison
from dlperf.report.html_bench import ab_view, bench_view, comparison_section, history_section, verdict_section
from dlperf.report.html_kinds import calibrate_view, load_view, optimize_view, profile_view, train_view
from dlperf.report.html_parts import Raw, config_tags, fmt_ms, html_table, json_table
from dlperf.report.svg import esc
from dlperf.store.records import RunRecord

KIND_TITLES = {"bench": "Benchmark", "check": "Regression check", "ab": "A/B", "optimize": "Optimization",
               "profile": "Profile", "load": "Load test", "candidate": "Optimization candidate", "train": "Training",
               "train-trial": "Tuning trial", "calibrate": "Machine ceilings"}

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
svg .ref{stroke:#555;stroke-dasharray:4 3;stroke-width:1}svg .reft{fill:#555}svg .mk{font-weight:600}
.nw{white-space:nowrap}
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


MOMENT_KEYS = ("load_average", "git_commit", "git_dirty")
"""Environment fields of the moment a run started and of the code it ran, not of the machine: runs differing only
there share a column (a check at a pull request's commit and main's baseline are one machine)."""


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
    return f"<section><h2>Environment</h2>{note}{html_table(headers, rows, classes, numeric=False)}</section>"



# --- the page ---------------------------------------------------------------------------------------

View = Callable[[RunRecord], str]


def run_section(rec: RunRecord, children: Sequence[RunRecord] = ()) -> str:
    views: dict[str, View] = {"bench": bench_view, "check": bench_view, "ab": ab_view, "profile": profile_view,
                              "load": load_view, "train": train_view, "calibrate": calibrate_view,
                              "optimize": lambda r: optimize_view(r, children)}
    view = views.get(rec.kind)
    body = ""
    if not rec.result:  # a run that failed or was stopped before it measured anything: nothing to draw
        return (f'<section>{_run_header(rec)}{config_tags(rec)}<p class="muted">no result recorded</p>'
                "</section>")
    if view is not None:
        try:
            body = view(rec)
        except Exception as exc:  # a record from another version or a partial run: degrade, don't fail
            body = (f'<p class="warn">the {esc(rec.kind)} view could not be drawn from this record '
                    f"({esc(type(exc).__name__)}: {esc(exc)}); its fields follow.</p>")
            body += json_table(rec.result)
    else:
        body = config_tags(rec) + json_table(rec.result)
    if view is not None and not body.startswith('<p class="warn">the'):
        body += f"<details><summary>raw result fields</summary>{json_table(rec.result)}</details>"
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
    comparisons: Sequence[RunComparison] = (),
    uncompared: Sequence[str] = (),
) -> str:
    """The whole HTML document for `records` (plus child runs by parent id, plus an optional history, plus the
    comparisons of its sampled runs, `build.run_comparisons`, and the ids of those it left out, `uncompared`)."""
    children = children or {}
    generated_at = generated_at or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = list(records)
    title = title or ("dlperf report: " + ", ".join(sorted({r.workload for r in shown}))[:120] if shown
                      else f"dlperf history: {history_workload}")
    # text, so '100.0 req/s, ...' stays left
    summary = html_table(("run", "kind", "workload", "when", "status", "headline"), [
        [Raw(f'<a href="#run-{esc(r.id)}">{esc(r.id)}</a>'), r.kind,
         Raw(f'<span class="wrap">{esc(r.workload)}</span>'),  # a long name wraps, not the whole table
         r.created_at[:19], r.status, _headline(r)] for r in shown], numeric=False) if shown else ""
    sections = [f"<section><h2>Runs</h2>{summary}</section>" if shown else ""]
    all_for_env = [*shown, *(history or [])]
    sections.append(environment_section(all_for_env))
    sections.append(verdict_section(comparisons, uncompared))
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



def _headline(rec: RunRecord) -> str:
    from dlperf.report.terminal import error_headline

    return _result_headline(rec) or error_headline(rec)


def _result_headline(rec: RunRecord) -> str:
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
                 else f"{kpi.removesuffix('_s')} {fmt_ms(value)} ms")
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


