"""The HTML report's views of optimize (the Pareto frontier), profile (breakdown, roofline), train (step,
tuning, DDP scaling), load (latency vs throughput) and calibrate records."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dlperf.report.html_parts import (
    Raw,
    as_mapping,
    config_tags,
    first_number,
    fmt,
    fmt_ms,
    fmt_pct,
    fmt_rate,
    html_table,
    plot_row,
    wide_range,
)
from dlperf.report.svg import Axis, Series, chart, ecdf, esc, hbars
from dlperf.store.records import RunRecord

if TYPE_CHECKING:
    from dlperf.loadgen.generator import Slo

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
        latency = first_number(c, *LATENCY_KEYS)
        metric = first_number(c, *METRIC_KEYS)
        name = c.get("name") or c.get("label") or c.get("passes") or c.get("pipeline") or key
        if isinstance(name, list):
            name = "+".join(str(n if not isinstance(n, Mapping) else n.get("name", n)) for n in name) or "baseline"
        selected = bool(c.get("selected")) or (winner is not None and c.get("key") == winner)
        rows.append({"name": str(name), "latency_s": latency, "metric": metric, "paired": "paired_p50_s" in c,
                     "pareto": c.get("pareto") if isinstance(c.get("pareto"), bool) else None,
                     "selected": selected, "status": c.get("status"), "error": c.get("error"),
                     "peak_rss_bytes": c.get("peak_rss_bytes"), "gpu_memory_bytes": c.get("gpu_memory_bytes"),
                     "deployed": isinstance(c.get("deployed_memory"), Mapping)})
    return rows


def _peak_mib(row: Mapping[str, Any], key: str = "peak_rss_bytes") -> str:
    """The row's peak RSS (or `key`: its GPU memory) in MiB as the terminal's `peak MiB` column writes it; '-' for a
    candidate that failed or has none."""
    from dlperf.report.optimize_view import _mib

    value = row.get(key)
    return _mib(value) if row.get("status") == "ok" and isinstance(value, (int, float)) else "-"


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
        return config_tags(rec) + '<p class="muted">no candidate finished</p>'
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
    # --objective memory ranks by the deployed peak RSS (`peak_rss_bytes`): its column and the terminal's line saying
    # what it includes (the report had neither, so the figure the winner was picked on was nowhere in it)
    memory = rec.result.get("objective", rec.config.get("objective")) == "memory" or any(r["deployed"] for r in rows)
    # on a GPU, the GPU memory it ranks by too
    gpu = memory and any(r["gpu_memory_bytes"] is not None for r in rows)
    # Each candidate's row number, written beside its point on the plot: a printout of the plot could not tell which
    # grey point was which (the names were in hover tooltips only).
    number = {id(r): i for i, r in enumerate(order, 1)}
    table_rows = [[number[id(r)], r["name"], fmt_ms(r["latency_s"]), fmt_metric(r["metric"]),
                   *([_peak_mib(r)] if memory else []), *([_peak_mib(r, "gpu_memory_bytes")] if gpu else []),
                   on_front(r),
                   "selected" if r["selected"] else (r["status"] or ""), (r["error"] or "")[:120]] for r in order]
    # The search's own front is over latency, metric, size and memory: a smaller, slower candidate is on it though
    # the plot's 2-D frontier (latency vs metric) passes it by, so the column says which front it is.
    front_label = ("on the Pareto front (latency, metric, size, memory)" if flagged
                   else "on the Pareto front (latency, metric)")
    # The table's latency is the plot's, the paired p50 where there is one (not the p50 `runs show` prints).
    paired = any(r["paired"] for r in rows)
    # what the table is judged by: the metric and the constraints (the report named neither, so nothing said why a
    # candidate within 0.4% of the baseline's accuracy was out)
    goal = _optimize_goal(rec.result)
    parts = [config_tags(rec), goal, html_table(("#", "candidate", "paired p50 ms" if paired else "latency ms",
                                           metric_name,
                                           *(["peak MiB"] if memory else []), *(["GPU MiB"] if gpu else []),
                                           front_label, "status", "error"),
                                          table_rows)]
    if memory:
        from dlperf.report.optimize_view import memory_line

        line = memory_line({**rec.result, "objective": "memory"})
        if line:
            parts.append(f'<p class="muted">{esc(line)}</p>')
    with_metric = [r for r in measured if r["metric"] is not None]
    if with_metric:
        # marks are placed first come, first served: the winner's, the baseline's and the frontier's before the rest
        with_metric.sort(key=lambda r: (not r["selected"], r["name"] != "baseline", r not in frontier, number[id(r)]))
        series = [Series("candidates", [r["latency_s"] * 1e3 for r in with_metric], [r["metric"] for r in with_metric],
                         "points", color="#9aa3b1", labels=[f'{number[id(r)]}: {r["name"]}' for r in with_metric],
                         marks=[str(number[id(r)]) for r in with_metric]),
                  Series("Pareto frontier", [r["latency_s"] * 1e3 for r in frontier],
                         [r["metric"] for r in frontier], "line+points", color="#d62728",
                         labels=[r["name"] for r in frontier])]
        selected = [r for r in with_metric if r["selected"]]
        if selected:
            series.append(Series("selected", [r["latency_s"] * 1e3 for r in selected],
                                 [r["metric"] for r in selected], "points", color="#2ca02c"))
        axis = "paired p50 latency (ms)" if paired else "latency (ms)"
        # Candidates from 0.014 to 0.37 ms (an OpenVINO int8 one) on a linear axis put eight of ten in its first
        # tenth, on one another; a log axis past 20x, as the history's and the CDFs' are.
        log = wide_range(series)
        parts.append(plot_row(chart(series, Axis(axis + (", log scale" if log else ""), log=log), Axis(metric_name),
                                    "Pareto frontier: latency vs " + metric_name)))
        caption = "each point is numbered with its row (#) in the table above"
        # the table's "yes" is the search's front, the red line the 2-D one: a row marked "yes" off the red line read
        # as a contradiction, so the caption names those rows and why
        off = [r for r in order if flagged and r["pareto"] and r not in frontier]
        if off:
            named = ", ".join(f'#{number[id(r)]} {r["name"]}' for r in off)
            caption += ("; the red line is the front on latency and the metric alone, the table's column the search's "
                        f"front on latency, the metric, size and memory: {named} "
                        f"{'is' if len(off) == 1 else 'are'} on it by size or memory, off the line")
        parts.append(f'<p class="muted">{esc(caption)}</p>')
    elif measured:
        parts.append(plot_row(hbars([r["name"] for r in measured], [r["latency_s"] * 1e3 for r in measured],
                                    "Candidate latency", " ms")))
    else:  # every candidate failed: the table says why, and there is nothing to plot
        parts.append('<p class="muted">no candidate was measured: nothing to plot</p>')
    if isinstance(rec.result.get("candidates"), list):
        from dlperf.report.optimize_view import why_lines

        # what `dlperf optimize` and `runs show` print under 'why:' (a constraint broken, slower and the likely
        # cause): the table's status said 'ok' for a candidate that lost. Without the terminal's '#': this table
        # has none.
        why = [line.strip().split(" ", 1)[-1] for line in why_lines(dict(rec.result))]
        if why:
            parts.append("<h3>Why each of these lost</h3><ul>"
                         + "".join(f"<li>{esc(line)}</li>" for line in why) + "</ul>")
    # a stopped search's record has no 'winner': selection_lines says it stopped and how to resume it
    if isinstance(rec.result.get("candidates"), list) and ("winner" in rec.result or rec.result.get("partial")):
        from dlperf.report.optimize_view import closest_and_not_tried_lines, selection_lines, stalled_lines

        lines = stalled_lines(dict(rec.result), marked=False) + selection_lines(dict(rec.result))
        # the candidates the time budget left untried: "15 not tried" in the no-winner line listed none here
        lines += closest_and_not_tried_lines(dict(rec.result))
        # the passes the search left out, and why: the selection's "see the skipped passes" pointed at nothing here
        lines += [f"skipped pass: {skipped}" for skipped in rec.result.get("skipped_passes") or []]
        # how long it searched and where the winner went, as `dlperf optimize` and `runs show` end
        if isinstance(rec.result.get("elapsed_s"), (int, float)) and isinstance(rec.result.get("time_budget_s"),
                                                                                (int, float)):
            from dlperf.report.optimize_view import extent_lines

            lines += extent_lines(dict(rec.result))
        parts.append("<h3>Selection</h3><ul>" + "".join(f"<li>{esc(line.strip())}</li>" for line in lines)
                     + "</ul>")
    workdir, size = rec.result.get("workdir"), rec.result.get("workdir_bytes")
    if workdir and isinstance(size, (int, float)) and size:  # as dlperf optimize says: 86 MiB a MiniLM candidate
        parts.append(f'<p class="muted">candidates\' artifacts: {esc(workdir)} ({size / 2**20:.1f} MiB; remove it '
                     "when you no longer need them: the export does not use it)</p>")
    return "".join(parts)


def _optimize_goal(result: Mapping[str, Any]) -> str:
    """The metric and the objective with its constraints, as `dlperf optimize` says them under its table ('' for a
    record without an objective)."""
    if not isinstance(result.get("objective"), str):
        return ""
    from dlperf.report.optimize_view import goal_lines

    return "".join(f'<p class="muted">{esc(line)}</p>' for line in goal_lines(dict(result)))


# --- profile --------------------------------------------------------------------------------------

# Two ways of cutting the same step, each adding up to it, drawn apart: by phase, and (outside the data wait) by
# what the host was doing. One chart of both summed to more than the step.
PHASE_PARTS = (("data_wait_s", "waiting for data"), ("h2d_s", "host-to-device"), ("forward_s", "forward"),
               ("backward_s", "backward"), ("optimizer_s", "optimizer"), ("other_s", "other (outside phases)"))
ACTIVITY_PARTS = (("operator_s", "operators"), ("stalled_op_s", "operator calls stalled (descheduled)"),
                  ("framework_overhead_s", "framework overhead"),
                  ("device_sync_s", "waiting for the device"))


def profile_view(rec: RunRecord) -> str:
    r = rec.result
    analyses = r.get("analyses") if isinstance(r.get("analyses"), Mapping) else r
    from dlperf.report.profile_view import BOUND_LABEL, VERIFICATION_LABEL, share_words

    parts = []
    if r.get("verdict"):
        parts.append(f'<p class="verdict">{esc(r["verdict"])}</p>')
    # as `dlperf profile` prints them: a busy machine, ceilings recorded with a warning (the report showed % of
    # peak with no word of either)
    caveats = [c for c in r.get("caveats") or [] if isinstance(c, str)]
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
            parts.append(f'<p class="muted">device idle {fmt_ms(idle)} ms of the step '
                         f"({fmt_pct(idle / step, sign=False)})</p>")
    ops_data = analyses.get("operators") if isinstance(analyses, Mapping) else None
    if isinstance(ops_data, Mapping):
        svgs.append(_roofline(ops_data))
        ops = [o for o in ops_data.get("operators", []) if isinstance(o, Mapping)][:12]
        if ops:
            # an int8 product's rate is of integer operations, as the roofline's axis and `dlperf profile` say
            rate = "GFLOP/s (int8: GOP/s)" if any(o.get("dtype") == "int8" for o in ops) else "GFLOP/s"
            parts.append(f"<h3>Top operators by {esc(str(ops_data.get('timed_by', 'self time')))}</h3>" + html_table(
                ("operator", "ms/step", "share", "FLOP/B", rate, "bound", "% of roofline"),
                [[o.get("name"), fmt_ms(o.get("self_s")), fmt_pct(o.get("share"), sign=False), fmt(o.get("intensity")),
                  fmt((o.get("achieved_flops_s") or 0) / 1e9 if o.get("achieved_flops_s") else None),
                  # the terminal's words ('dispatch', 'in-cache', 'memory'): the report read 'overhead',
                  # 'cache-resident' and 'bandwidth' for the same operators
                  BOUND_LABEL.get(str(o.get("bound")), o.get("bound")), fmt_pct(o.get("pct_of_peak"), sign=False)]
                 for o in ops]))
    if not svgs and not parts:
        raise ValueError("no breakdown or operators")
    # the verdict and its caveats first, as `dlperf profile` prints them
    parts[1 if r.get("verdict") else 0:1 if r.get("verdict") else 0] = [
        *(f'<p class="warn">caveat: {esc(c)}</p>' for c in caveats), plot_row(*svgs)]
    findings = [f for f in r.get("findings", []) if isinstance(f, Mapping)]
    if findings:
        entries: list[str] = []
        for f in findings[:8]:
            raw_evidence = f.get("evidence")
            # every line: the last is often --verify's measurement, which the first three cut off
            evidence: list[Any] = raw_evidence if isinstance(raw_evidence, list) else []
            # as `dlperf profile` heads a finding: its category, what its share is of ('(248% of the step)' was a
            # memory-capacity finding's share of the memory budget) and its confidence, which the report left out
            category = f.get("category")
            head = [f"[{category}]"] if isinstance(category, str) else []
            if isinstance(f.get("share"), (int, float)) and isinstance(category, str):
                head.append(share_words(f))
            if isinstance(f.get("confidence"), str):
                head.append(f"confidence {f['confidence']}")
            said = f' <span class="muted">{esc(" · ".join(head))}</span>' if head else ""
            checked = f.get("verification")
            label = (f' <span class="{"warn" if checked == "contradicted" else "muted"}">'
                     f"· {esc(VERIFICATION_LABEL.get(checked, checked))}</span>" if isinstance(checked, str) else "")
            entries.append(f"<li><b>{esc(f.get('title') or f.get('category') or 'finding')}</b>{said}{label} "
                         f"{esc(f.get('summary') or '')}"
                         + "".join(f'<br><span class="muted">{esc(e)}</span>' for e in evidence)
                         + (f"<br>fix: {esc(f['fix'])}" if f.get("fix") else "")
                         + (f"<br>apply with: {esc(f['setting'])}" if f.get("setting") else "")
                         + (f"<br>estimated gain: {esc(f['estimated_gain'])}" if f.get("estimated_gain") else "")
                         + "</li>")
        parts.append("<h3>Findings</h3><ol>" + "".join(entries) + "</ol>")
    parts.append(_verified_fixes(r.get("verify")))
    return "".join(parts)


def _verified_fixes(rows: Any) -> str:
    """`--verify`'s table, as `dlperf profile` prints it (the report left it out: a finding whose fix was measured
    slower than estimated showed its estimate alone)."""
    from dlperf.report.profile_view import NOTHING_TO_VERIFY, VERIFY_COLUMNS, VERIFY_TITLE, verify_cells

    if not isinstance(rows, list):
        return ""
    if not rows:
        return f'<p class="warn">{esc(NOTHING_TO_VERIFY)}</p>'
    table = []
    for v in (v for v in rows if isinstance(v, Mapping)):
        cells = verify_cells(v)
        if v.get("outcome") == "contradicted":  # the terminal says so in a line under its table
            cells[5] = f"{cells[5]}: the estimate did not hold"
        table.append(cells)
    return f"<h3>{esc(VERIFY_TITLE)}</h3>" + html_table(VERIFY_COLUMNS, table)


OPERATOR_COLOR = "#222222"
"""The roofline's operators: a colour no roof takes (they were the orange of the palette's fourth colour, the int8
roof's where a CPU has fp32, bf16, fp16 and int8 ceilings, so the legend could not tell them apart)."""


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
    # Past the highest ridge, so every roof shows its flat peak: this CPU's bf16 and int8 ridges (107 and 247 FLOP/B)
    # lay past an axis that ended at 100, where both roofs were the bandwidth slope, drawn one over the other.
    ridges = [float(peak) / bandwidth for peak in peaks.values() if isinstance(peak, (int, float)) and peak > 0
              and isinstance(bandwidth, (int, float)) and bandwidth > 0]
    lo_x, hi_x = min(min(xs) / 4, 0.05), max(max(xs) * 4, 100.0, *(2 * r for r in ridges))
    series = []
    for dtype, peak in peaks.items():
        if not isinstance(peak, (int, float)) or peak <= 0:
            continue
        unit = " (GOP/s)" if dtype == "int8" else ""  # int8 runs integer operations, on the axis the float roofs share
        if isinstance(bandwidth, (int, float)) and bandwidth > 0:
            ridge = peak / bandwidth
            grid = [lo_x, *([ridge] if lo_x < ridge < hi_x else []), hi_x]
            series.append(Series(f"{dtype} roof{unit}", grid, [min(peak, bandwidth * x) / 1e9 for x in grid], "line",
                                 dashed=dtype != "fp32"))
        else:
            series.append(Series(f"{dtype} peak{unit}", [lo_x, hi_x], [peak / 1e9] * 2, "line", dashed=True))
    if ops:
        series.append(Series("operators", xs, [float(o["achieved_flops_s"]) / 1e9 for o in ops], "points",
                             color=OPERATOR_COLOR,
                             labels=[f"{o.get('name')}: {fmt_pct(o.get('share'), sign=False)} of step" for o in ops]))
    int8 = any(dtype == "int8" for dtype in peaks)
    return chart(series, Axis("arithmetic intensity (FLOP/byte" + (", int8: OP/byte)" if int8 else ")"), log=True),
                 Axis("GFLOP/s" + (" (int8: GOP/s)" if int8 else ""), log=True),
                 "Roofline" + (" (ceilings recorded with a warning: see the caveat above)"
                               if ops_data.get("ceilings_caveat") else ""))


# --- train ----------------------------------------------------------------------------------------


def train_view(rec: RunRecord) -> str:
    """A training step's measurement, a `--tune` result (baseline against best, the settings, each trial), or
    a DDP scaling result, as `dlperf train` printed it."""
    r = rec.result
    if "scaling_efficiency" in r or "single_samples_per_s" in r:
        return config_tags(rec) + _ddp_view(r)
    if "trials" in r:
        return config_tags(rec) + _tune_view(r)
    return config_tags(rec) + _step_view(r)


def _ddp_view(r: Mapping[str, Any]) -> str:
    """The scaling table with the efficiency's two factors, the buckets and the findings, as `dlperf train --nproc`
    prints them (the report had the efficiency alone, which read as communication's whatever slowed the ranks)."""
    compute, comm = r.get("compute_scaling"), r.get("communication_scaling")
    tokens = isinstance(r.get("single_tokens_per_s"), (int, float))  # token ids in: tokens/s beside samples/s
    parts = [html_table(
        ("processes", "samples/s", *(("tokens/s",) if tokens else ()), "step ms", "scaling efficiency",
         "of which compute", "of which communication", "exposed all-reduce"),
        [[1, fmt_rate(r.get("single_samples_per_s")), *([fmt_rate(r.get("single_tokens_per_s"))] if tokens else []),
          fmt_ms(r.get("single_step_s")), "-", "-", "-", "-"],
         [r.get("nproc"), fmt_rate(r.get("samples_per_s")), *([fmt_rate(r.get("tokens_per_s"))] if tokens else []),
          fmt_ms(r.get("step_s")), fmt_pct(r.get("scaling_efficiency"), sign=False), fmt_pct(compute, sign=False),
          fmt_pct(comm, sign=False), fmt_pct(r.get("comm_share"), sign=False)]])]
    if isinstance(compute, (int, float)) and isinstance(comm, (int, float)):
        parts.append('<p class="muted">scaling efficiency = compute (the no-sync step on 1 process / on each rank) '
                     "x communication (the rest: the all-reduce and DDP's work with other ranks, against the "
                     "1-process DDP step)</p>")
    if r.get("factors_note"):
        parts.append(f'<p class="warn">the factors: {esc(r["factors_note"])}</p>')
    if r.get("communication_note"):  # the DDP step no longer than the no-sync step: an exposed 0% is noise
        parts.append(f'<p class="warn">communication: {esc(r["communication_note"])}</p>')
    elif isinstance(r.get("comm_share"), (int, float)) and isinstance(r.get("allreduce_s"), (int, float)):
        # the table had the exposed share alone; the all-reduce's own time tells latency from DDP's other work
        parts.append(f"<p>communication: {fmt_pct(r['comm_share'], sign=False)} of the step is exposed gradient "
                     f"all-reduce ({fmt_ms(r.get('exposed_comm_s'))} ms of {fmt_ms(r.get('step_s'))} ms; the "
                     f"all-reduce alone takes {fmt_ms(r['allreduce_s'])} ms)</p>")
    sizes, overlap = r.get("bucket_bytes"), r.get("overlap")
    if isinstance(overlap, (int, float)):
        buckets = (" + ".join(f"{b / 2**20:.2f}" for b in sizes) + " MiB" if isinstance(sizes, list) and sizes
                   else f"of {r.get('bucket_cap_mb')} MiB")
        parts.append(f"<p>overlap: {fmt_pct(overlap, sign=False)} of the all-reduce is hidden behind backward; "
                     f"{esc(r.get('buckets'))} gradient bucket(s) ({esc(buckets)}) for "
                     f"{_mib_text(r.get('gradient_bytes'))} of gradients</p>")
    if r.get("partial"):
        parts.append(f'<p class="warn">{esc(r["partial"])}</p>')
    parts += [f'<p class="warn">finding: {esc(f)}</p>' for f in r.get("findings") or [] if isinstance(f, str)]
    parts += [f'<p class="warn">note: {esc(n)}</p>' for n in r.get("notes") or [] if isinstance(n, str)]
    return "".join(parts)


def _mib_text(num_bytes: Any) -> str:
    return f"{num_bytes / 2**20:.2f} MiB" if isinstance(num_bytes, (int, float)) else "-"


def _step_view(m: Mapping[str, Any], title: str = "Training step") -> str:
    from dlperf.report.train_view import PHASE_LABELS, flops_text, job_memory_text, tokens_text

    s = m["summary"]
    rss = m.get("peak_rss_bytes")
    tokens = tokens_text(m)  # a column only for token ids: other models' tables are as they were
    parts = [f"<h3>{esc(title)}</h3>", html_table(
        ("steps", "median step ms", "p90 ms", "mean ms", "samples/s", *(("tokens/s",) if tokens else ()),
         "peak RSS MiB", "MFU"),
        [[s.get("n"), fmt_ms(m.get("step_s")), fmt_ms(s.get("p90_s")), fmt_ms(s.get("mean_s")),
          fmt_rate(m.get("samples_per_s")), *((tokens,) if tokens else ()),
          f"{rss / 2**20:.0f}" if isinstance(rss, (int, float)) else "-", fmt_pct(m.get("mfu"), sign=False)]])]
    phases = [(PHASE_LABELS.get(k, k), float(v) * 1e3) for k, v in (m.get("breakdown_s") or {}).items()
              if isinstance(v, (int, float)) and v > 0]
    # The phases are means (as `dlperf train` says: 'mean ms / step'): on a noisy machine they summed to twice
    # the median step above them, with nothing to say why.
    svgs = [hbars([p[0] for p in phases], [p[1] for p in phases], f"{title}: mean time per step by phase", " ms")
            if phases else ""]
    steps = [float(v) / 1e6 for v in ((m.get("measurement") or {}).get("samples_ns") or [])]
    if len(steps) > 1:
        svgs.append(chart([Series("step time", list(range(1, len(steps) + 1)), steps, "line+points")],
                          Axis("measured step"), Axis("step time (ms)"), f"{title}: each step", y_zero=True))
    job = job_memory_text(m)
    if job:  # the RSS column is the main process's
        parts.append(f"<p>memory: {esc(job)}</p>")
    flops = flops_text(dict(m))
    if flops is not None:  # the MFU column alone left out what it is of: the FLOPs, and the ceiling
        parts.append(f"<p>FLOPs: {esc(flops)}</p>")
    parts.append(plot_row(*svgs))
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
        budget_text,
        config_line,
        no_gain_text,
        not_tried_text,
        settings_confirmed,
    )

    parts = []
    if "best" in r:
        ab = r.get("final_ab")
        confirmed = settings_confirmed(r)
        gain = f"{r['speedup']:.2f}x samples/s ({ab['verdict']} in an interleaved A/B)" if ab else no_gain_text(r)
        tokens = isinstance(r.get("baseline_tokens_per_s"), (int, float))  # token ids in: tokens/s beside samples/s
        parts.append(f'<p class="verdict {"good" if confirmed else "warn"}">gain: {esc(gain)}</p>' + html_table(
            ("", "settings", "samples/s", *(("tokens/s",) if tokens else ())),
            [[which, config_line(r[which]), fmt_rate(r.get(f"{which}_samples_per_s")),
              *([fmt(r.get(f"{which}_tokens_per_s"))] if tokens else [])] for which in ("baseline", "best")]))
        if r.get("disturbed"):  # the totals disagreed with the paired blocks, as the terminal view says
            parts.append(f'<p class="warn">{esc(r["disturbed"])}</p>')
        spent_line = budget_text(r)
        if spent_line:  # how long the tuning took against its budget, and which trial ran past it
            overran = (r.get("time_budget") or {}).get("overrun_by")
            parts.append(f'<p class="{"warn" if overran else "muted"}">{esc(spent_line)}</p>')
        budget_line = not_tried_text(r)
        if budget_line:  # the best is of the knobs tried: the report said nothing of those the budget left out
            parts.append(f'<p class="warn">{esc(budget_line)}</p>')
        if r.get("settings"):
            head = f"<h3>{esc(_sentence(SETTINGS_TITLE if confirmed else UNCONFIRMED_TITLE))}</h3>"
            if not confirmed:
                head += f'<p class="warn">{esc(_sentence(UNCONFIRMED_ADVICE))}.</p>'
            parts.append(head + html_table(
                ("setting", "code", "gain"),
                [[x.get("what"), Raw(f"<code>{esc(x.get('code'))}</code>"),
                  f"{x['speedup']:.2f}x" if isinstance(x.get("speedup"), (int, float)) else "-"]
                 for x in r["settings"]]))
    else:  # stopped before the end: only the trials it finished
        parts.append('<p class="warn">tuning stopped before the baseline and the best were measured</p>')
    if r.get("parity_blind"):  # a model that does not train passes loss parity too: the check proved nothing
        parts.append(f'<p class="warn">note: loss parity: {esc(r["parity_blind"])}</p>')
    rows = []
    trial_tokens = any(isinstance(t.get("tokens_per_s"), (int, float)) for t in r["trials"])
    for t in r["trials"]:
        parity, ci, change, speedup = t.get("parity"), t.get("speedup_ci"), t.get("change"), t.get("speedup")
        rows.append([t.get("knob"), ", ".join(f"{k}={v}" for k, v in change.items()) if change else "-",
                     fmt_pct(parity.get("relative_difference")) if isinstance(parity, Mapping) else "-",
                     fmt_rate(t.get("samples_per_s")), *([fmt_rate(t.get("tokens_per_s"))] if trial_tokens else []),
                     (f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else "-")
                     + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if isinstance(ci, list) and len(ci) == 2 else ""),
                     t.get("status"), "; ".join(x for x in (t.get("reason"), t.get("disturbed")) if x)])
    if rows:
        parts.append("<h3>Trials, each an A/B against the best so far</h3>" + html_table(
            ("knob", "change", "loss", "samples/s", *(("tokens/s",) if trial_tokens else ()), "speedup (95% CI)",
             "result", "why"), rows))
    for key, title in (("baseline_measurement", "Baseline step"), ("best_measurement", "Best step")):
        if isinstance(r.get(key), Mapping) and (key == "baseline_measurement" or r.get("best") != r.get("baseline")):
            parts.append(_step_view(r[key], title))
    return "".join(parts)


# --- load -----------------------------------------------------------------------------------------

THROUGHPUT_KEYS = ("throughput_rps", "achieved_rps", "throughput", "rps", "requests_per_s", "summary.throughput_rps",
                   "summary.throughput")
P50_KEYS = ("p50_s", "latency_p50_s", "latency.p50_s", "summary.p50_s", "latency_s.p50")
P99_KEYS = ("p99_s", "latency_p99_s", "latency.p99_s", "summary.p99_s", "latency_s.p99")


MAX_CDFS = 8
"""Levels drawn on the latency CDF at most (more lines cannot be told apart); its title says when levels are left out:
a sweep of 16 levels drew 8 under the plain title."""


def load_view(rec: RunRecord) -> str:
    from dlperf.loadgen.generator import Slo
    from dlperf.loadgen.render import errors_text, level_text

    r = rec.result
    peak = r.get("peak")
    slo = Slo.from_record(peak) or Slo.from_record(rec.config)
    judged_at = slo.name if slo is not None else "p99"
    lists = [v for k, v in r.items() if isinstance(v, list) and k in ("levels", "steps", "points", "results", "stages")]
    rows: list[tuple[str, float, float | None, float | None, str]] = []
    judged: list[list[Any]] = []  # the SLO's bound and verdict, the server's resources: where the run had them
    tails: list[list[str]] = []  # p90 and p95, between the p50 and p99 columns as in `dlperf load`'s table
    cdfs: list[Series] = []
    with_latencies = 0
    warnings: list[str] = []  # a level's own: unstable windows, no request succeeded (and what came back)
    for item in (lists[0] if lists else [r]):
        if not isinstance(item, Mapping):
            continue
        thr = first_number(item, *THROUGHPUT_KEYS)
        p50, p99 = first_number(item, *P50_KEYS), first_number(item, *P99_KEYS)
        if thr is None:
            continue
        offered = first_number(item, "concurrency", "rate", "target_rps", "offered_rps", "level")
        label = f"{item.get('mode', '')} {fmt(offered) if offered is None else level_text(offered)}".strip()
        statuses = item.get("statuses")
        # by status, as `dlperf load` shows them: a bare count mixed the open loop's unsent ('dropped') in
        errors = (errors_text(statuses) if isinstance(statuses, Mapping)
                  else fmt(first_number(item, "error_rate", "errors", "failures")))
        rows.append((label, thr, p50, p99, errors))
        tails.append([fmt_ms(first_number(item, "p90_s")), fmt_ms(first_number(item, "p95_s"))])
        rss = first_number(item, "resources.rss_max_bytes")
        gpus = (item.get("resources") or {}).get("gpus") if isinstance(item.get("resources"), Mapping) else None
        busy = [g.get("utilization") for g in (gpus or {}).values() if isinstance(g, Mapping)]
        batched = (first_number(item, "items_per_request") or 1) > 1  # `--batch-size B`: items/s is B x req/s
        judged.append([fmt_rate(first_number(item, "throughput_items_per_s")) if batched else "-",
                       fmt_ms(first_number(item, "slo_bound_s", "p99_bound_s") if judged_at == "p99"
                              else first_number(item, "slo_bound_s")),
                       f"{item['verdict']}: {item.get('verdict_reason', '')}" if isinstance(item.get("verdict"), str)
                       else "-",
                       # the server's own per-request means and mean batch, as `dlperf load` and `runs show` give
                       fmt_ms(first_number(item, "server.queue_s")), fmt_ms(first_number(item, "server.compute_s")),
                       f"{batch:.1f}" if (batch := first_number(item, "server.average_batch_size")) is not None
                       else "-",
                       fmt(first_number(item, "resources.cpu_cores")),
                       fmt(rss / 2**20) if rss is not None else "-",
                       ", ".join(f"{b:.0%}" for b in busy if isinstance(b, (int, float))) or "-"])
        warnings += [f"warning ({label}): {w}" for w in item.get("warnings") or [] if isinstance(w, str)]
        lat = item.get("latencies_ns")
        if isinstance(lat, list) and lat:
            with_latencies += 1
            if len(cdfs) < MAX_CDFS:
                cdfs.append(Series(label, *ecdf([float(v) / 1e6 for v in lat]), mode="step"))
    if not rows:
        raise ValueError("no load levels with a throughput")
    extras = ("items/s", f"{judged_at} bound ms", f"{judged_at} SLO", "server queue ms", "server compute ms",
              "server batch", "server CPU cores", "server RSS MiB", "GPU busy")
    shown = [i for i in range(len(extras)) if any(j[i] != "-" for j in judged)]  # where present
    tail_names = ("p90 ms", "p95 ms")
    shown_tails = [i for i in range(len(tail_names)) if any(t[i] != "-" for t in tails)]
    table = html_table(("level", "throughput req/s", "p50 ms", *(tail_names[i] for i in shown_tails), "p99 ms",
                        "errors", *(extras[i] for i in shown)),
                       [[o, fmt(t), fmt_ms(a), *(tl[i] for i in shown_tails), fmt_ms(b), e] + [j[i] for i in shown]
                        for (o, t, a, b, e), tl, j in zip(rows, tails, judged, strict=True)])
    if isinstance(peak, Mapping) and slo is not None:
        table = _peak_outcome(peak, slo) + table
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
    # the SLO's bound, so a point above it reads as a miss without the table
    bound = [(slo.bound_s * 1e3, f"SLO {slo}")] if slo is not None else []
    svgs = [chart(series, Axis("throughput (requests/s)"), Axis("latency (ms)"), "Latency vs throughput",
                  y_zero=True, hlines=bound) if series else ""]
    if cdfs:
        svgs.append(chart(cdfs, Axis("request latency (ms)", log=wide_range(cdfs)), Axis("fraction of requests"),
                          "Latency CDF per level" + (f" (the first {len(cdfs)} of {with_latencies})"
                                                     if with_latencies > len(cdfs) else ""),
                          hlines=[(0.5, "p50"), (0.99, "p99")], y_zero=True))
    return (config_tags(rec) + table + plot_row(*svgs)
            + "".join(f'<p class="warn">{esc(w)}</p>' for w in warnings)
            + "".join(f'<p class="verdict bad">{esc(line)}</p>' for line in _load_gate(rec)))


def _load_gate(rec: RunRecord) -> list[str]:
    """Why `dlperf load` exited 1 (SLO missed, too many failed requests, replies that did not match), as it said
    last; none for a record whose levels do not read back."""
    from dlperf.loadgen.generator import LevelResult
    from dlperf.loadgen.render import stored_gate_lines

    try:
        levels = [LevelResult.from_dict(d) for d in rec.result["levels"]]
        return stored_gate_lines(levels, dict(rec.result), dict(rec.config or {}))
    except (KeyError, TypeError, ValueError, AttributeError):
        return []


def _peak_outcome(peak: Mapping[str, Any], slo: Slo) -> str:
    """What the peak search found, as `dlperf load` and `runs show` say it: a peak found before a search that
    stopped on an undecided rate is a lower bound ('at least'), and no peak is either a shown miss or undecided."""
    from dlperf.loadgen.render import peak_outcome

    found, stopped = peak.get("peak_rate"), peak.get("undecided_at")
    stopped_at = float(stopped) if isinstance(stopped, (int, float)) else None
    steps = peak.get("steps")
    failed = isinstance(steps, list) and any(isinstance(s, Mapping) and s.get("verdict") == "fail" for s in steps)
    if isinstance(found, (int, float)):
        outcome = f"<b>{'at least ' if stopped_at is not None else ''}{float(found):.1f} req/s</b>"
    elif failed:  # a rate was shown to miss it
        outcome = "no tried rate kept it"
    else:
        outcome = "no tried rate was shown to keep it (none was shown to miss it either: undecided)"
    note = peak_outcome(None, slo, stopped_at, failed)[0] if stopped_at is not None else ""
    return (f"<p>Peak search (MLPerf server scenario), SLO {esc(str(slo))}: {outcome}</p>"
            + (f'<p class="warn">{esc(note)}</p>' if note else ""))


# --- calibrate ------------------------------------------------------------------------------------


def calibrate_view(rec: RunRecord) -> str:
    """The machine's ceilings as `dlperf calibrate` prints them (its JSON read 165272096103.7736, no unit)."""
    from dlperf.report.terminal import fmt_si

    r = rec.result
    details = as_mapping(r.get("details"))
    gemm = r.get("gemm_flops")
    if not isinstance(gemm, Mapping) or not isinstance(r.get("memory_bandwidth_bytes_s"), (int, float)):
        raise ValueError("no ceilings")
    rows = []
    for dtype, flops in gemm.items():
        how = as_mapping(details.get(f"gemm_{dtype}"))
        rows.append([f"GEMM {dtype}", fmt_si(float(flops), "OP/s" if dtype == "int8" else "FLOP/s"),
                     f"{how.get('n', '?')}³ matmul, {how.get('samples', '?')} calls"])
    skipped = as_mapping(details.get("skipped"))
    rows += [[f"GEMM {dtype}", "not measured", why] for dtype, why in skipped.items()]
    copy = as_mapping(details.get("copy"))
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
    return (config_tags(rec)
            + f"<h3 class=\"wrap\">Ceilings on {esc(r.get('device', rec.workload))} ({esc(threads)} thread"
            + ("" if threads == 1 else "s") + ")</h3>"
            + html_table(("what", "ceiling", "measured with"), rows, numeric=False)
            + f'<p class="muted wrap">{esc(source)} at {esc(r.get("measured_at", "?"))}{esc(quick)}; key '
              f'{esc(r.get("machine_key", "?"))}</p>'
            + "".join(f'<p class="warn">warning: {esc(w)}</p>' for w in warnings))


