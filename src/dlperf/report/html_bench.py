"""The HTML report's views of sampled latency runs: bench and check (with the gate), ab, the comparison of several
runs, and a workload's history."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.compare.gate import recorded_change, recorded_improved, verdict_line
from dlperf.compare.runs import MEDIAN_KPI, NOT_BEYOND_MIN_EFFECT, TEST_NOTE, RunComparison
from dlperf.compare.stats import change_text
from dlperf.report.html_parts import (
    Raw,
    ci_header,
    config_tags,
    fmt,
    fmt_kpi,
    fmt_ms,
    fmt_p_value,
    fmt_pct,
    fmt_rate,
    html_table,
    plot_row,
    sampled_seconds,
    trimmed_range,
    wide_range,
)
from dlperf.report.svg import PALETTE, Axis, Series, chart, ecdf, esc, histogram_bins
from dlperf.store.records import RunRecord

HISTORY_PLOTS = 6
"""Batch sizes a history draws a chart of (the first by size); its table has every one."""


# --- bench / check --------------------------------------------------------------------------------


def bench_view(rec: RunRecord) -> str:
    points = [p for p in rec.result.get("points", []) if isinstance(p, Mapping)]
    if not points:
        raise ValueError("no points")
    from dlperf.measure.notes import bench_notes, point_noise_text
    from dlperf.report.terminal import bench_headline_line, fmt_mib

    rows = []
    for p in points:
        s = p.get("summary") or {}
        rss = p.get("peak_rss_bytes")
        noise = point_noise_text(p)  # bench's wording: 'other load on the machine' first read as a fact when idle
        rows.append([p.get("batch_size"), s.get("n"), fmt_ms(s.get("p50_s")), fmt_ms(s.get("p90_s")),
                     fmt_ms(s.get("p99_s")), fmt_ms(s.get("mean_s")), fmt_rate(s.get("throughput")),
                     f"{rss / 2**20:.0f}" if isinstance(rss, (int, float)) else "-",
                     fmt(p.get("process_cpu_percent")),
                     Raw(f'<span class="warn">{esc(noise)}</span>') if noise else ""])
    parts = [config_tags(rec), "<h3>Latency per call and throughput</h3>",
             html_table(("batch", "n", "p50 ms", "p90 ms", "p99 ms", "mean ms", "items/s", "peak RSS MiB", "CPU %",
                         "noise"), rows)]
    # as bench and `runs show` print them under the table: a single-stream run's p90 with MLPerf's 99%-confidence
    # bound (the scenario's result), an interrupted run's 'of the batch sizes measured', and the model's size
    try:
        headline = bench_headline_line(dict(rec.result))
    except (KeyError, TypeError, ValueError, AttributeError):  # an older record's headline: the summary has it
        headline = None
    if headline:
        parts.append(f"<p>{esc(headline)}</p>")
    if isinstance(rec.result.get("model_bytes"), (int, float)):
        parts.append(f"<p>model size: {fmt_mib(rec.result['model_bytes'])} MiB "
                     f"({esc(rec.result.get('model_bytes_of') or 'parameters + buffers')})</p>")
    # what else bench warned of (the noise is in its column): a batch size cut short by a cap, other load
    parts += [f'<p class="warn">warning: {esc(w)}</p>' for w in bench_notes(points)]
    before = rec.result.get("rss_before_model_bytes")
    if isinstance(before, (int, float)):  # the peak is the process's: a 0.3 MiB model read 247 MiB
        parts.append(f"<p>Peak RSS is the process's; it held {fmt_mib(before)} MiB before the model was built.</p>")
    sampled = [(p.get("batch_size"), m) for p in points if (m := sampled_seconds(p)) is not None]
    svgs = []
    for batch, (samples, _) in sampled[:3]:
        ms = [s * 1e3 for s in samples]
        lo, hi = trimmed_range(ms)
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
        svgs.append(chart(series, Axis("latency per call (ms)", log=wide_range(series)), Axis("fraction of calls"),
                          "Latency CDF", hlines=[(0.5, "p50"), (0.99, "p99")], y_zero=True))
    thr: list[tuple[float, float]] = []
    for p in points:
        b, t = p.get("batch_size"), (p.get("summary") or {}).get("throughput")
        if isinstance(b, (int, float)) and isinstance(t, (int, float)):
            thr.append((float(b), float(t)))
    if len(thr) > 1:
        svgs.append(chart([Series("throughput", [b for b, _ in thr], [t for _, t in thr], "line+points")],
                          Axis("batch size", log=True, at=tuple(b for b, _ in thr)), Axis("items/s"),
                          "Throughput vs batch size", y_zero=True))
    parts.append(plot_row(*svgs))
    gate = rec.result.get("gate")
    if isinstance(gate, Mapping):
        parts.append(_gate_view(gate))
    return "".join(parts)


def _point_verdict(p: Mapping[str, Any]) -> str:
    """A gated batch size's verdict cell, as the terminal words it: a pass the interval cannot confirm, or one from
    too few samples, is 'inconclusive' (it read a green 'pass' beside an interval wholly above the threshold)."""
    if p.get("failed"):
        return '<span class="bad">regression</span>'
    if p.get("too_few_samples"):
        return '<span class="warn">too few samples: inconclusive, pass</span>'
    if p.get("inconclusive"):
        return '<span class="warn">inconclusive, pass</span>'
    if recorded_improved(p):
        return '<span class="good">significantly better: pass</span>'
    return '<span class="good">pass</span>'


def _gate_view(gate: Mapping[str, Any]) -> str:
    failed = bool(gate.get("failed"))
    said = verdict_line(failed, str(gate.get("metric", "")), float(gate.get("max_regression") or 0.0))
    verdict = f'<p class="verdict {"bad" if failed else "good"}">{esc(said)}</p>'
    rows = []
    for p in gate.get("points", []):
        # the metric's own change, and which way it is (a throughput loss read +25.1%, where compare said -25.1%)
        change, ci, lower = recorded_change(p) or (math.nan, [math.nan, math.nan], True)
        # The gate compares per-item times: at a batch of 8 its p50 is an eighth of the per-call table's.
        per_item = (" per item" if p.get("metric") != "throughput" and p.get("per_item", p.get("batch_size") != 1)
                    else "")
        rows.append([p.get("batch_size"), p.get("metric"),
                     fmt_kpi(p.get("metric"), p.get("baseline_value")) + per_item,
                     fmt_kpi(p.get("metric"), p.get("current_value")) + per_item,
                     change_text(change, lower) if math.isfinite(change) else "-",
                     # below the samples an interval needs, none is shown (bench prints '-'); the terminal says why
                     "-" if p.get("too_few_samples") else f"{fmt_pct(ci[0])} to {fmt_pct(ci[1])}",
                     fmt_p_value((p.get("mann_whitney") or {}).get("p_value")), Raw(_point_verdict(p))])
    warnings = "".join(f'<p class="warn">warning: {esc(w)}</p>' for w in gate.get("warnings", []))
    return (f"<h3>Gate against baseline run {esc(gate.get('baseline_run_id'))}: max regression "
            f"{fmt_pct(gate.get('max_regression'), sign=False)}</h3>{verdict}"
            + html_table(("batch", "metric", "baseline", "now", "change", ci_header(gate.get("confidence")),
                          "Mann-Whitney p", "verdict"), rows)
            + warnings)


def comparison_section(records: Sequence[RunRecord]) -> str:
    """Overlaid CDFs of several sampled runs at the batch size most of them measured (the smallest of a tie),
    naming the runs that did not measure it."""
    sampled = []
    for rec in records:
        pts = {p.get("batch_size"): p for p in rec.result.get("points", []) if isinstance(p, Mapping)}
        if any(sampled_seconds(p) for p in pts.values()):
            sampled.append((rec, pts))
    if len(sampled) < 2:
        return ""
    # Not only a batch size common to all: one run of other batch sizes among three left the report without a
    # comparison, and without a word of why.
    shared = Counter(b for _, pts in sampled for b in pts)
    batch = min(shared, key=lambda b: (-shared[b], not isinstance(b, (int, float)),
                                       b if isinstance(b, (int, float)) else 0))
    if shared[batch] < 2:
        return ""
    left_out = [rec.id for rec, pts in sampled if batch not in pts]
    sampled = [(rec, pts) for rec, pts in sampled if batch in pts]
    series, rows = [], []
    for rec, pts in sampled:
        m = sampled_seconds(pts[batch])
        if m is None:
            continue
        xs, ys = ecdf([s * 1e3 for s in m[0]])
        series.append(Series(f"{rec.id} {rec.created_at[5:16]}", xs, ys, "step"))
        s = pts[batch].get("summary") or {}
        rows.append([Raw(f'<a href="#run-{esc(rec.id)}">{esc(rec.id)}</a>'), rec.kind, rec.workload,
                     rec.created_at[:19], fmt_ms(s.get("p50_s")), fmt_ms(s.get("p90_s")), fmt_ms(s.get("p99_s")),
                     fmt_rate(s.get("throughput"))])
    from dlperf.compare.runs import config_differences

    first = sampled[0][0]
    # runs of other workloads or settings in one table read as a change of the code (one of them: fp32 vs bf16)
    differ = [f"{rec.id} against {first.id}: {'; '.join(d)}" for rec, _ in sampled[1:]
              if (d := ([f"workload {rec.workload}"] if rec.workload != first.workload else [])
                  + config_differences(first.config or {}, rec.config or {}, first.environment,
                                     rec.environment))]
    # One colour a run: past the palette, two runs' curves share a colour and cannot be told apart.
    shown, cut = series[:len(PALETTE)], len(series) - len(PALETTE)
    return (f"<section><h2>Comparison at batch {batch}</h2>"
            + html_table(("run", "kind", "workload", "when", "p50 ms", "p90 ms", "p99 ms", "items/s"), rows)
            + (f'<p class="warn">Measured differently (A is the first run, B the other): {esc(" | ".join(differ))}'
               "</p>" if differ else "")
            + plot_row(chart(shown, Axis("latency per call (ms)", log=wide_range(shown)), Axis("fraction of calls"),
                             f"Latency CDF, batch {batch}" + (f" (the first {len(shown)} runs)" if cut > 0 else ""),
                             hlines=[(0.5, "p50"), (0.99, "p99")], y_zero=True))
            + (f'<p class="muted">The plot leaves out the last {cut} run(s) of the table: one colour a run.</p>'
               if cut > 0 else "")
            + (f'<p class="muted">Not compared (no batch {esc(batch)}): {esc(", ".join(left_out))}.</p>'
               if left_out else "")
            + '<p class="muted">Runs measured at different times are not interleaved: machine drift between '
              "them looks like a difference. <code>dlperf compare A B</code> tests it; <code>dlperf ab</code> "
              "measures two settings interleaved.</p></section>")


def verdict_section(comparisons: Sequence[RunComparison], uncompared: Sequence[str] = ()) -> str:
    """Each later run against the first at every batch size they share, judged as `dlperf compare` judges it: the
    median ratio with its interval, the Mann-Whitney test and the verdict. A report of two bench runs compared them
    at batch 1 only (0.0150 vs 0.0151 ms) and named no verdict, while the second run's batch 64 was 232x slower.
    `uncompared`: the ids of the runs past the ones compared, named under the table (they were left out silently)."""
    rows, row_classes, notes = [], [], []
    for cmp in comparisons:
        for point in cmp.points:
            median = next((k for k in point.kpis if k.name == MEDIAN_KPI), None)
            lo, hi = point.median_ratio.ci
            smaller = point.below_min_effect
            verdict = NOT_BEYOND_MIN_EFFECT if smaller else point.verdict
            also = "; ".join(point.also_changed)
            rows.append([Raw(f'<a href="#run-{esc(cmp.a.id)}">{esc(cmp.a.id)}</a>'),
                         Raw(f'<a href="#run-{esc(cmp.b.id)}">{esc(cmp.b.id)}</a>'), point.batch_size,
                         fmt_ms(median.a if median else None), fmt_ms(median.b if median else None),
                         f"{point.median_ratio.ratio:.3f}",
                         # on one line: at 1200 px the cell broke at its hyphen, '0.955-' over '0.964'
                         "-" if point.too_few else Raw(f'<span class="nw">{lo:.3f}-{hi:.3f}</span>'),
                         fmt_p_value(point.test.p_value), verdict + (f" (B {smaller}; its interval reaches within "
                                                                     f"{point.min_effect:.0%} of no change)"
                                                                     if smaller else ""),
                         also])
            row_classes.append("bad" if point.verdict == "B slower" else "good" if point.verdict == "B faster" else "")
            if point.tests_disagree:
                notes.append(f"{cmp.b.id}, batch {point.batch_size}: {point.tests_disagree}")
        notes += [f"{cmp.b.id} against {cmp.a.id}: {w}" for w in cmp.warnings]
    if not rows:
        return ""
    if uncompared:
        notes.append(f"{len(uncompared)} later run{'s' if len(uncompared) > 1 else ''} not judged here: only the "
                     f"first {len(comparisons)} after {comparisons[0].a.id} are ({', '.join(uncompared)}); "
                     f"dlperf compare {comparisons[0].a.id} RUN judges one, or report fewer runs")
    return ("<section><h2>Verdict: each run against the first, per batch size</h2>"
            + html_table(("A", "B", "batch", "p50 ms A", "p50 ms B", "median B/A", "95% CI", "Mann-Whitney p",
                          "verdict", "not in that verdict"), rows, row_classes)
            + "".join(f'<p class="warn">{esc(n)}</p>' for n in notes)
            + f'<p class="muted">{esc(TEST_NOTE)} As <code>dlperf compare A B</code> prints it; B is called slower or '
              "faster only where the test and the interval agree and the change passes the 1% minimum effect.</p>"
              "</section>")


# --- ab -------------------------------------------------------------------------------------------


def ab_view(rec: RunRecord) -> str:
    r = rec.result
    if "ratio" not in r and isinstance(r.get("partial"), str):  # interrupted before 2 blocks: no verdict to draw
        return f'<p class="warn">note: {esc(r["partial"])}</p>'
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
                     (r.get("batch_size") or {}).get(side), s.get("n"), fmt_ms(s.get("p50_s")), fmt_ms(s.get("p90_s")),
                     fmt_ms(s.get("p99_s")), fmt_rate(s.get("throughput"))])
    parts.append(html_table(("side", "settings", "batch", "n", "p50 ms", "p90 ms", "p99 ms", "items/s"), rows))
    # other processes' load while the blocks ran, as `dlperf ab` and `runs show` say it (A/Bs recorded since 2026-12-06)
    parts += [f'<p class="warn">warning: {esc(w)}</p>' for w in r.get("warnings") or [] if isinstance(w, str)]
    # an interrupted A/B's verdict is of the blocks it finished, as `runs show` notes (the report did not)
    if isinstance(r.get("partial"), str):
        parts.append(f'<p class="warn">note: {esc(r["partial"])}</p>')
    svgs = []
    blocks = r.get("block_ratios") or []
    if blocks:
        # on a log axis where the ratios span more than 20x: one stalled block at 627x (the trimmed verdict leaves it
        # out) flattened the other twelve, and the interval's lines, onto the 'no change' line
        spread = min(blocks) > 0 and max(blocks) / min(blocks) > 20
        svgs.append(chart([Series("B/A per block", list(range(1, len(blocks) + 1)), blocks, "line+points")],
                          Axis("paired block"), Axis("time ratio B/A", log=spread), "Per-block ratios (ABBA order)",
                          hlines=[(1.0, "no change"), (ci[0], "CI low"), (ci[1], "CI high")]))
    ms_ = r.get("measurements") or {}
    sides = {k: [float(s) / 1e6 for s in v.get("samples_ns", [])] for k, v in ms_.items() if isinstance(v, Mapping)}
    if sides.get("a") and sides.get("b"):
        lo, hi = trimmed_range(sides["a"] + sides["b"])
        log = lo > 0 and hi / lo > 5
        hist = []
        for side in ("a", "b"):
            xs, ys = histogram_bins(sides[side], 40, lo, hi, log=log)
            hist.append(Series(side.upper(), xs, [y * 100 for y in ys], "bars"))
        svgs.append(chart(hist, Axis("latency per call (ms)", log=log), Axis("% of calls"),
                          "A vs B latency (1% tails cut)", y_zero=True))
        cdf = [Series(side.upper(), *ecdf(sides[side]), mode="step") for side in ("a", "b")]
        svgs.append(chart(cdf, Axis("latency per call (ms)", log=wide_range(cdf)), Axis("fraction of calls"),
                          "A vs B latency CDF", hlines=[(0.5, "p50")], y_zero=True))
    parts.append(plot_row(*svgs))
    return "".join(parts)


def _describe_settings(settings: Any) -> str:
    if not isinstance(settings, Mapping):
        return "-"
    parts = [f"{k}={v}" for k, v in settings.items() if v not in (None, False, {}, "fp32", "cpu")]
    opts = settings.get("options")
    if isinstance(opts, Mapping):
        parts = [p for p in parts if not p.startswith("options=")] + [f"option.{k}={v}" for k, v in opts.items()]
    return ",".join(parts) or "defaults"



# --- history --------------------------------------------------------------------------------------


def history_section(records: Sequence[RunRecord], metric: str = "p50", workload: str = "") -> str:
    """Trend of `metric` (p50, p90, p95, p99, mean or throughput) over bench/check runs, oldest first, with each
    run's value per batch size in its table."""
    ordered = sorted(records, key=lambda r: r.created_at)
    # the commit each run was taken at, as `dlperf runs history` shows it: a step in the trend read against git log
    commits = [_commit_text(r.environment) for r in ordered]
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
            label = f"{rec.id} {rec.created_at[:19]}" + (f" at {commits[i]}" if commits[i] != "-" else "")
            per_batch.setdefault(p.get("batch_size"), []).append((i + 1, shown, err, label))
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
        # A log axis where the values span decades: on a linear one from 0, a jump from 0.05 ms to 23 ms (a noisy
        # run's p95) flattened every run before it onto the zero line.
        log = _spans_decades([p[1] for p in pts])
        svgs.append(chart([series], runs_axis, Axis(unit + (", log scale" if log else ""), log=log),
                          f"{head}: {metric} at batch {batch}", y_zero=not log))
    left_out = batches[HISTORY_PLOTS:]
    values = {(batch, index): value for batch in batches for index, value, _, _ in per_batch[batch]}
    from dlperf.report.changes import history_changes

    # a step in the trend that another runner or precision made, said where it happened
    changes = history_changes(ordered)
    with_commits = any(c != "-" for c in commits)
    rows = [[i + 1, r.id, r.kind, r.created_at[:19], *((commits[i],) if with_commits else ()), r.status,
             # a latency to fmt_ms's four digits, as bench's table has it (fmt's three: 0.0205 beside 0.02047)
             *((fmt_rate(values[(b, i + 1)]) if metric == "throughput" else fmt_ms(values[(b, i + 1)] / 1e3))
               if (b, i + 1) in values else "" for b in batches),
             Raw(f'<span class="warn">{esc("; ".join(changes[r.id]))}</span>') if r.id in changes else ""]
            for i, r in enumerate(ordered)]
    short = "items/s" if metric == "throughput" else f"{metric} ms"
    return (f"<section><h2>{esc(title)}</h2>"
            + plot_row(*svgs)
            + (f'<p class="muted">Not plotted (the table has them): batch {esc(", ".join(map(str, left_out)))}.</p>'
               if left_out else "")
            + ('<p class="muted">Whiskers: 95% bootstrap CI of the median.</p>' if metric == "p50" else "")
            + ('<p class="warn">The settings or the machine changed between runs (last column): a step in the trend '
               "there may come from that, not from the code.</p>" if changes else "")
            + html_table(("#", "run", "kind", "when (UTC)", *(("commit",) if with_commits else ()), "status",
                          *(f"{short}, batch {b}" for b in batches), "changed from the run before"), rows)
            + ('<p class="muted">commit+: taken with uncommitted changes in that checkout</p>'
               if any(c.endswith("+") for c in commits) else "")
            + "</section>")


def _commit_text(environment: Mapping[str, Any] | None) -> str:
    """A run's git commit to 12 digits, `+` where its checkout had uncommitted changes, `-` where none was recorded
    (as `dlperf runs history` writes it)."""
    commit = (environment or {}).get("git_commit")
    if not isinstance(commit, str) or not commit:
        return "-"
    return commit[:12] + ("+" if (environment or {}).get("git_dirty") else "")


def _spans_decades(values: Sequence[float]) -> bool:
    """More than 20x between the smallest and the largest value, all positive."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > 20
