"""Terminal renderings (rich) of A/B results, run comparisons, gate verdicts and baselines. No computing."""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dlperf.compare.runs import NOT_BEYOND_MIN_EFFECT
from dlperf.compare.stats import change_text, p_text
from dlperf.report.fit import FirstThatFits

if TYPE_CHECKING:
    from dlperf.compare.ab import ABRun
    from dlperf.compare.live import LiveComparison
    from dlperf.compare.runs import KpiDelta, PointComparison, RunComparison


def ms(seconds: float) -> str:
    """Milliseconds for a table cell; '-' for a time of no requests (NaN), where 'nan' was printed."""
    return f"{seconds * 1e3:.4g}" if math.isfinite(seconds) else "-"


def pct(fraction: float) -> str:
    return f"{fraction * 100:+.1f}%"


def _count(value: float) -> str:
    """items/s as bench prints it: 48,041 where '.4g' printed 4.804e+04, and 9,371 (it printed 9371 beside 17,537
    in one column); four significant digits below 1,000 (175.7)."""
    return f"{value:,.0f}" if math.isfinite(value) and value >= 1_000 else f"{value:.4g}"


def _verdict_style(verdict: str) -> str:
    if "faster" in verdict:
        return "bold green"
    if "slower" in verdict or "REGRESSION" in verdict:
        return "bold red"
    return "bold yellow"


def ab_table(run: ABRun) -> RenderableType:
    """The title line, the two sides' table and the ratio's line; the title and the ratio are lines of their own,
    as wide as the console (as the table's title and caption they wrapped at the table's width)."""
    res = run.result
    unit = "per item" if run.per_item else "per call"
    title = Text(f"A/B of {run.workload}: {len(res.block_ratios)} paired blocks of {run.iters_per_block} calls, "
                 "interleaved", style="table.title")
    table = Table()
    for col in ("side", "settings", "batch", "p50 ms", "p90 ms", "p99 ms", "items/s", "n"):
        table.add_column(col, justify="left" if col in ("side", "settings") else "right")
    for side, settings, m, batch in (("A", run.a, res.a, run.batch_size_a), ("B", run.b, res.b, run.batch_size_b)):
        table.add_row(side, settings.describe(), str(batch), ms(m.p50_s), ms(m.p90_s), ms(m.p99_s),
                      _count(m.throughput), str(m.n))
    lo, hi = res.ci
    ratio = Text(f"time B/A {unit}: {res.ratio:.3f} ({res.confidence:.0%} CI {lo:.3f}-{hi:.3f}); "
                 f"speedup {res.speedup:.3f}x", style="table.caption")
    return Group(title, table, ratio)


def ab_verdict(run: ABRun) -> Text:
    lo, hi = run.result.speedup_ci
    verdict = run.result.verdict
    said = verdict if verdict not in ("faster", "slower") else f"B is {verdict}"
    stalled = run.stalled_blocks
    if stalled and stalled.get("disturbed"):  # the warning under it says which blocks, and the figures over all
        return Text.assemble(("verdict: ", "bold"), ("not judged", _verdict_style(verdict)),
                             f": a side stalled in {len(stalled['blocks'])} of {stalled['of']} blocks, too many to "
                             "judge the rest")
    # the blocks where a side stalled are left out (`ABRun.stalled_blocks`); the warning under it says which
    without = (f", without {len(stalled['blocks'])} stalled block{'s' if len(stalled['blocks']) > 1 else ''}"
               if stalled else "")
    detail = f" (B speed {run.result.speedup:.3f}x of A, CI {lo:.3f}-{hi:.3f}x{without})"
    if verdict not in ("faster", "slower") and (lo > 1.0 or hi < 1.0):
        # the interval excludes 1, so the difference is significant, but reaches within --min-effect of no change:
        # "no significant difference (... CI 1.001-1.018x)" contradicted its own interval, and "by less than the
        # --min-effect" misread it (1.018x is past 1%); the words of compare's KPI rows (NOT_BEYOND_MIN_EFFECT)
        said = NOT_BEYOND_MIN_EFFECT
        effect = f" of {run.min_effect * 100:g}%" if run.min_effect is not None else ""
        detail += (f": B is {'faster' if lo > 1.0 else 'slower'}, significantly, but its interval reaches within the "
                   f"--min-effect{effect} of no change")
    return Text.assemble(("verdict: ", "bold"), (said, _verdict_style(verdict)), detail)


def comparison_tables(cmp: RunComparison) -> list[RenderableType]:
    """Per batch size (or load level): a title line naming the runs, the KPI table, and the test's line. The title
    and the test's line are lines of their own, as wide as the console, not a table's title and caption: those
    wrapped at the table's 48 columns, mid-sentence. A title too long for the console puts B under A."""
    parts: list[RenderableType] = []
    a, b = f"A={cmp.a.id} ({cmp.a.created_at[:19]})", f"B={cmp.b.id} ({cmp.b.created_at[:19]})"
    for point in cmp.points:
        head = f"{point.title or f'batch {point.batch_size}'}:"
        title = FirstThatFits([Text(f"{head} {a}  {b}", style="table.title"),
                               Text(f"{head} {a}\n{' ' * len(head)} {b}", style="table.title")])
        table = Table()
        for col in ("KPI", "A", "B", "change"):
            table.add_column(col, justify="left" if col == "KPI" else "right")
        for kpi in point.kpis:
            is_time = kpi.name.endswith("_s")
            fmt = ms if is_time else _count
            label = f"{kpi.label} ms" if is_time else f"{kpi.label} items/s"
            table.add_row(label, fmt(kpi.a), fmt(kpi.b), _change_cell(kpi, point))
        lo, hi = point.median_ratio.ci
        # the verdict first, after what it judges: "...: no significant difference" at the line's end read as the
        # whole comparison's, beside a throughput of -27%
        if point.too_few:  # no interval from so few: bench prints '-', check says the same
            test = Text(f"{point.verdict_on}: {point.verdict} (median B/A {point.median_ratio.ratio:.3f} from "
                        f"{point.samples} sample{'' if point.samples == 1 else 's'} in a run, where a "
                        f"{1 - point.alpha:.0%} interval needs {point.needed}: measure longer, --min-iters, "
                        "--min-duration)", style="table.caption")
        else:
            smaller = point.below_min_effect
            verdict = NOT_BEYOND_MIN_EFFECT if smaller else point.verdict
            why = (f": B is {smaller}, significantly, but its interval reaches within the --min-effect of "
                   f"{point.min_effect:.0%} of no change" if smaller else "")
            test = Text(f"{point.verdict_on}: {verdict} (B/A {point.median_ratio.ratio:.3f}, CI {lo:.3f}-{hi:.3f}; "
                        f"Mann-Whitney U {p_text(point.test.p_value, 3)}){why}"
                        # a p of 1.62e-06 beside "no significant difference", with no word of why
                        + (f": {point.tests_disagree}" if point.tests_disagree else ""), style="table.caption")
        lines: list[RenderableType] = [title, table, test]
        if point.also_changed:  # right under the verdict: "no significant difference" read as the whole story
            lines.append(Text(f"not in that verdict: {'; '.join(point.also_changed)}", style="bold yellow"))
        parts.append(Group(*lines))
    if cmp.other_deltas:
        table = Table()
        for col in ("result", "A", "B", "B/A - 1"):
            table.add_column(col, justify="left" if col == "result" else "right")
        for key, a_value, b_value in cmp.other_deltas[:60]:
            # the change, as a KPI's row gives it (two profiles listed a step of 0.256 s beside 0.186 s, and the reader
            # divided); no better/worse: which way is better is not known of an arbitrary result field
            change = f"{b_value / a_value - 1:+.1%}" if a_value != 0 else "-"
            table.add_row(key, f"{a_value:.6g}", f"{b_value:.6g}", change)
        parts.append(Group(Text(f"A={cmp.a.id} ({cmp.a.kind})  B={cmp.b.id} ({cmp.b.kind})", style="table.title"),
                           table))
    return parts


def _change_cell(kpi: KpiDelta, point: PointComparison) -> Text:
    """A KPI's change in its own direction, with what it amounts to (`PointComparison.kpi_verdict`): '-25.1% worse'
    (check printed that loss +25.1%) only beyond the run's noise and the minimum effect; else '+2.3% (within noise)',
    '(not shown beyond --min-effect)' or '(no test)', and a plain '+2.3%' with too few samples to judge."""
    text = pct(kpi.change)
    verdict = point.kpi_verdict(kpi)
    if verdict is None or not math.isfinite(kpi.change):
        return Text(text)
    if verdict in ("worse", "better"):
        return Text(change_text(kpi.change, kpi.lower_is_better), style="green" if verdict == "better" else "red")
    return Text(f"{text} ({verdict})")


def gate_lines(result: dict[str, Any]) -> list[Text]:
    """A regression gate's verdict (`GateResult.to_dict()`, also as `dlperf check` records it): each batch
    size's reason, the warnings, PASS or FAIL."""
    from dlperf.compare.gate import verdict_line

    lines = []
    for point, reason in zip(result["points"], result["reasons"], strict=False):
        lines.append(Text(reason, style="red" if point.get("failed") else ""))
    for note in result.get("measured_again", []):
        lines.append(Text(f"note: {note}", style="yellow"))
    for warning in result.get("warnings", []):
        lines.append(Text(f"warning: {warning}", style="yellow"))
    lines.append(Text(verdict_line(bool(result["failed"]), result["metric"], result["max_regression"]),
                      style="bold red" if result["failed"] else "bold green"))
    return lines


def check_lines(result: dict[str, Any], workload: str, baseline: str, store_option: str = "",
                baseline_deleted: bool = False) -> list[Text]:
    """A check's whole verdict, for `dlperf check` and `dlperf.testing`'s PerformanceRegression alike (they worded
    one failure two ways): which runs, `gate_lines`, and after a FAIL how to look closer and how to accept the
    slowdown. `store_option` (' --store PATH', or '') goes into the commands it gives. `baseline_deleted`: the
    baseline's run is no longer in the store (deleted while the check measured), so no command names it."""
    base_run, this_run = result.get("baseline_run_id"), result.get("current_run_id")

    def at(commit: Any, dirty: Any) -> str:  # the commit a run was taken at, where it recorded one
        return f" at {commit[:12]}{'+' if dirty else ''}" if isinstance(commit, str) and commit else ""

    base_at = at(result.get("baseline_git_commit"), result.get("baseline_git_dirty"))
    this_at = at(result.get("git_commit"), result.get("git_dirty"))
    lines = [Text(f"check of {workload} against baseline '{baseline}' (run {base_run}{base_at}); this run: "
                  f"{this_run}{this_at}"), *gate_lines(result)]
    if result["failed"] and base_run and this_run:
        if baseline_deleted:
            lines.append(Text(f"the baseline's run {base_run} was deleted from the store during the check: there is "
                              f"no `dlperf compare` with it; `dlperf runs show {this_run}{store_option}` has this "
                              "run's figures", style="yellow"))
        else:
            lines.append(Text(f"details: `dlperf compare {base_run} {this_run}{store_option}`"))
        lines.append(Text(f"if the slowdown is intended, make this run the baseline: "
                          f"`dlperf baseline set {shlex.quote(baseline)} {this_run}{store_option}`"))
    return lines


def baselines_table(rows: list[tuple[str, ...]]) -> Table:
    """Rows of (name, run id, run workload, set at), each with the run's git commit after them where any has it."""
    table = Table(title="baselines", title_justify="left")
    for col in ("name", "run", "workload", "set at", *(("commit",) if any(len(r) > 4 for r in rows) else ())):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def live_table(result: LiveComparison) -> Table:
    table = Table(title=f"live variants (control first: {result.control_rule})", title_justify="left")
    for col in ("variant", "requests", "error rate", "p50 ms", "p90 ms", "p99 ms", "mean ms", "avg batch"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for v in result.variants:
        table.add_row(v.name, f"{v.requests:.0f}", f"{v.error_rate:.2%}" if v.requests else "-", ms(v.p50_s),
                      ms(v.p90_s), ms(v.p99_s), ms(v.mean_s),
                      f"{v.average_batch_size:.2f}" if math.isfinite(v.average_batch_size) else "-")
    return table
