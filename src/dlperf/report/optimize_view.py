"""Terminal rendering of an optimize result (the dict of OptimizeResult.to_dict()); computes nothing."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from dlperf.measure.stats import fmt_ratio
from dlperf.optimize.constraints import budget_percent
from dlperf.optimize.footprint import NVML_GPU_MEMORY
from dlperf.report.fit import indented_line


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 1e3:.3f}"


def _mib(value: Any) -> str:
    """MiB as fmt_mib gives them, but two significant digits below 1 MiB: with one decimal, `--objective size` on a
    small CNN showed its baseline (0.147 MiB) as 0.1 and openvino (0.160) as 0.2 beside a size gain of 0.92x, and
    int8 ONNX Runtime (0.044) at 3.33x, which 0.1 / 0.044 does not give."""
    from dlperf.report.terminal import fmt_mib

    if value is not None and 0.1 <= float(value) / 2**20 < 1:
        return f"{float(value) / 2**20:.2f}"
    return fmt_mib(None if value is None else float(value))  # a 40 KiB artifact's size read 0.0


def fmt_metric(value: Any) -> str:
    """4 decimals where they hold 4 significant digits (an accuracy of 0.9723, a fidelity of 1.0000), else 4
    significant digits: a metric of 1.7e-06 showed as 0.0000 in every row."""
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.4f}" if v == 0 or not math.isfinite(v) or 0.1 <= abs(v) < 1e6 else f"{v:.4g}"


def _drop(row: dict[str, Any], absolute: bool = False) -> str:
    """The metric drop: relative, or with `absolute` (the search's constraint was --max-metric-drop-abs) in the
    metric's units, the units the constraint line states."""
    drop = row.get("metric_drop" if absolute else "metric_drop_rel")
    if drop is None or drop != drop:
        return "-"
    if absolute:
        return f"{float(drop):+.4g}"
    shown = f"{float(drop):+.2%}"
    return "+0.00%" if shown == "-0.00%" else shown  # a gain of 0.003% read "-0.00%", a drop to the eye


def absolute_drop(data: dict[str, Any]) -> bool:
    """Whether the result's metric constraint is in the metric's units (--max-metric-drop-abs)."""
    return (data.get("constraints") or {}).get("max_metric_drop_abs") is not None


def status_text(row: dict[str, Any]) -> str:
    """A candidate's status as shown: 'ok', 'failed', 'not applicable', or 'cut short' for one killed when the time
    budget ran out (a row 'failed' read as a pass that fails on this model; a resumed search measures it)."""
    return "cut short" if row.get("budget_cut") else str(row.get("status", "-")).replace("_", " ")


def _why(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        error = str(row.get("error"))
        if row.get("status") == "not_applicable":
            # the pass's error names it and says "not applicable" already: the line read "1 dynamic_int8: not
            # applicable: dynamic_int8: not applicable: ..." (stored runs keep that error); as the progress line
            # shows it, the pass is named only in a pipeline of several (older runs put the class's name in front)
            which, said, reason = error.removeprefix("PassNotApplicable: ").partition(": not applicable: ")
            if said:
                return f"not applicable{f' ({which})' if which != row.get('label') else ''}: {reason}"
            return f"not applicable: {error}"
        prefix = (f"cut short by the time budget in {row.get('phase')}" if row.get("budget_cut") else
                  f"failed in {row.get('phase')}")
        return f"{prefix}: {error}"
    if row.get("violations"):
        return "; ".join(row["violations"])
    if row.get("not_ranked"):  # not "slower": its figures are not the model's
        return f"not ranked: {row['not_ranked']}"
    if row.get("slower_reasons"):
        same = str(row["slower_reasons"][0]).startswith("not measurably different")
        return ("not faster: " if same else "slower: ") + row["slower_reasons"][0]
    if row.get("confirm_error"):
        return f"A/B failed: {row['confirm_error']}"
    return ""


WIDE_COLUMNS = ("#", "passes", "p50 ms", "p99 ms", "items/s", "metric", "drop", "MiB", "peak MiB", "build s",
                "gain", "paired")
NARROW_COLUMNS = ("#", "passes", "p50 ms", "metric", "drop", "build s", "gain", "paired")
NARROW_BELOW = 130
"""Consoles narrower than this (80 columns when piped) get the narrow table, so the labels keep room."""


def candidates_table(data: dict[str, Any], width: int | None = None) -> Table:
    table = Table(title=f"candidates for {data['workload']} (batch {data['batch_size']}, {data['device']})",
                  show_lines=False, expand=False)
    columns: tuple[str, ...] = NARROW_COLUMNS if width is not None and width < NARROW_BELOW else WIDE_COLUMNS
    if ("peak MiB" in columns and data.get("objective") == "memory"
            and any(r.get("gpu_memory_bytes") is not None for r in data.get("candidates") or [])):
        # a memory search on a GPU ranks by it; elsewhere only torch candidates would have one (the allocator's
        # peak) and every engine row a '-', unexplained (the HTML report draws it under the same rule)
        at = columns.index("peak MiB") + 1
        columns = (*columns[:at], "GPU MiB", *columns[at:])
    for name in columns:
        table.add_column(name, justify="left" if name == "passes" else "right",
                         overflow="fold" if name == "passes" else "ellipsis", no_wrap=name != "passes")
    winner = data.get("winner")
    front = set(data.get("pareto_front") or [])
    absolute = absolute_drop(data)
    for i, row in enumerate(data.get("candidates") or []):
        # both marks: a winner the runner-up rule picked may be off the frontier, and the table says so
        ok = row.get("status") == "ok"
        mark = (("✓" if row["key"] == winner else "") + ("*" if row["key"] in front else "")
                + ("!" if ok and row.get("stalled") else ""))
        style = "bold green" if row["key"] == winner else ("dim" if not ok else "")
        cells = {
            "#": f"{i}{mark}", "passes": row["label"],
            "p50 ms": _ms(row.get("p50_s")) if ok else "-", "p99 ms": _ms(row.get("p99_s")) if ok else "-",
            "items/s": f"{row['throughput']:.0f}" if ok and row.get("throughput") else "-",
            "metric": fmt_metric(row.get("metric")) if ok else "-", "drop": _drop(row, absolute) if ok else "-",
            "MiB": _mib(row.get("size_bytes")) if ok else "-",
            "peak MiB": _mib(row.get("peak_rss_bytes")) if ok else "-",
            "GPU MiB": _mib(row.get("gpu_memory_bytes")) if ok and row.get("gpu_memory_bytes") is not None else "-",
            "build s": f"{row['build_s']:.1f}" if ok and row.get("build_s") is not None else "-",
            "gain": fmt_ratio(row["gain"]) if ok and row.get("gain") is not None else status_text(row),
            "paired": fmt_ratio(row["paired_gain"]) if ok and row.get("paired_gain") is not None else "-",
        }
        table.add_row(*(cells[name] for name in columns), style=style)
    return table


class _FittedTable:
    """The candidates table with its columns chosen for the width it is drawn at: `dlperf runs show` builds the
    view without knowing its console, and the wide table on 80 columns cut the passes column to nothing."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield candidates_table(self.data, options.max_width)


def candidate_view(row: dict[str, Any]) -> RenderableType:
    """`dlperf runs show` of one optimize candidate (a child run of the optimize run): its passes, timing, metric,
    gains and why it lost, in lines, where it printed the whole result as JSON. Raises KeyError on a result that
    is not a candidate's."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("passes", Text(row["label"]))
    grid.add_row("engine", f"{row.get('engine', '?')}, {row.get('precision', '?')}")
    if row.get("status") != "ok":
        grid.add_row("result", Text(_why(row), style="red"))
        return grid
    latency = row.get("latency") or {}
    calls = f", {latency['n']:,} calls" if isinstance(latency.get("n"), int) else ""
    items = f", {row['throughput']:,.0f} items/s" if row.get("throughput") else ""
    grid.add_row("latency", f"p50 {_ms(row.get('p50_s'))} ms, p99 {_ms(row.get('p99_s'))} ms{items}{calls}")
    if row.get("noise_warning"):
        grid.add_row("", Text(str(row["noise_warning"]), style="yellow"))
    name = str(row.get("metric_name") or "metric")
    # a candidate's record does not say which constraint its search had: both drops, relative and in the metric's units
    drops = ", ".join(d for d in (_drop(row), _drop(row, absolute=True)) if d != "-")
    grid.add_row("metric", f"{name}: {fmt_metric(row.get('metric'))}" + (f" (drop {drops})" if drops else ""))
    gains = [f"{fmt_ratio(row['gain'])} (the baseline's p50 / this one's, each in its own process)"
             if row.get("gain") is not None else ""]
    paired = row.get("paired") or {}
    if row.get("paired_gain") is not None:
        blocks = f", {paired['blocks']} ABBA blocks" if paired.get("blocks") else ""
        gains.append(f"paired {fmt_ratio(row['paired_gain'])} (against the original model in this process{blocks}: "
                     f"{paired.get('verdict', '?')})")
        if row.get("ranked_by") == "gain":
            gains.append(f"ranked by its gain: the paired one is over {DISAGREEMENT:g}x it")
    grid.add_row("gain", "; ".join(g for g in gains if g) or "-")
    gpu = f"; GPU {_mib(row['gpu_memory_bytes'])} MiB" if row.get("gpu_memory_bytes") is not None else ""
    grid.add_row("size", f"{_mib(row.get('size_bytes'))} MiB; peak RSS {_mib(row.get('peak_rss_bytes'))} MiB{gpu}")
    build = f"{row['build_s']:.1f} s" if row.get("build_s") is not None else "-"
    grid.add_row("build", build + _build_parts(row))
    why = _why(row)
    if why:
        grid.add_row("why", Text(why, style="yellow"))
    for note in row.get("notes") or []:
        grid.add_row("note", Text(str(note)))
    artifact = row.get("artifact") or {}
    if artifact.get("dir"):
        grid.add_row("artifact", Text(str(artifact["dir"])))
    if row.get("log"):
        grid.add_row("log", Text(str(row["log"])))
    return grid


def _build_parts(row: dict[str, Any]) -> str:
    """What the passes' own time of a candidate's build was: compile (and conversion), training. A row stored before
    `train_s` held a pass's training in `compile_s`: a distilled student's 30 s of training read 'compile 30.0 s'."""
    if "train_s" not in row:
        return f" (compile or training {row['compile_s']:.1f} s)" if row.get("compile_s") else ""
    parts = [f"{what} {row[key]:.1f} s" for what, key in (("compile", "compile_s"), ("training", "train_s"))
             if row.get(key)]
    return f" ({', '.join(parts)})" if parts else ""


def why_lines(data: dict[str, Any]) -> list[str]:
    """One line per candidate that failed, broke a constraint or was slower: why. A failure whose error is an
    earlier candidate's but for the pass's label in front (an ONNX export that fails for every onnxruntime variant,
    a compile that recompiles in every compile mode) names that candidate instead of repeating it."""
    lines = []
    first_with: dict[tuple[str, str], tuple[int, str]] = {}
    for i, row in enumerate(data.get("candidates") or []):
        why = _why(row)
        if not why:
            continue
        if row.get("status") != "ok" and row.get("error"):
            key = (str(row.get("status")), _unlabelled(str(row["error"])))
            if key in first_with:
                prefix = why.split(": ", 1)[0]
                j, label = first_with[key]
                # "the same error as 2" read of a pass that was not applicable, not an error
                same = "reason" if row.get("status") == "not_applicable" else "error"
                lines.append(f"  {i} {row['label']}: {prefix}: the same {same} as {j} ({label})")
                continue
            first_with[key] = (i, str(row["label"]))
        lines.append(f"  {i} {row['label']}: {why}")
    return lines


def _unlabelled(error: str) -> str:
    """A pass's error without the label it starts with ('compile(freezing=True): ...', 'onnxruntime(...) failed:
    ...'): what two candidates' failures share when one cause failed both."""
    head, sep, rest = error.partition(": ")
    return rest if sep and " " not in head.replace(" failed", "") else error


DISAGREEMENT = 2.0
"""A gain this many times its paired gain (or its inverse) says one of the two measurements was disturbed; the search
then ranks by the lower (`optimize.search.DISAGREEMENT`, the same factor)."""


LOAD_SHARE = 0.05
"""Loading the workload is said when it took this share of the time budget or more (and at least a second)."""


def load_note(load_s: float, budget_s: float) -> str | None:
    """What `dlperf optimize` says when loading its workload (importing the file, building nothing yet) took a
    noticeable share of the time budget, which counts it; None when it did not."""
    if load_s < 1.0 or load_s < LOAD_SHARE * budget_s:
        return None
    return (f"loading the workload took {load_s:.1f} s, {load_s / budget_s:.0%} of the {budget_s:.0f} s time budget "
            "(the budget counts from the command's start: that time is not left for candidates)")


def memory_line(data: dict[str, Any]) -> str | None:
    """What the `peak MiB` column includes, under --objective memory (a fresh process per artifact) or where a row's
    figure came from there; None otherwise."""
    rows = [r for r in data.get("candidates") or [] if r.get("status") == "ok"]
    deployed = [r for r in rows if isinstance(r.get("deployed_memory"), dict)]
    if data.get("objective") != "memory" and not deployed:
        return None
    failed = [r["label"] for r in deployed if "error" in r["deployed_memory"]]
    line = ("peak MiB: the peak RSS of a fresh process that loads the exported artifact alone and runs the example "
            "inputs (ONNX Runtime, OpenVINO: the engine and numpy, no torch; a torch artifact: torch and the "
            "workload, as dlperf.load)")
    if failed:
        line += f"; not measured so for {', '.join(failed)} (their own process's peak during timing)"
    gpu = [r for r in rows if r.get("gpu_memory_bytes") is not None]
    if gpu and data.get("objective") == "memory":  # the table's GPU MiB column
        line += ("; GPU MiB, which the memory objective ranks by on a GPU: that process's GPU memory after its calls "
                 "(NVML's figure: CUDA context, torch's cache, ONNX Runtime's arena, TensorRT's engine)")
        other = sorted({str(r.get("gpu_memory_of")) for r in gpu if r.get("gpu_memory_of") != NVML_GPU_MEMORY})
        if other:
            line += f"; for some candidates {' / '.join(other)}"
        unread = [r["label"] for r in rows if r.get("gpu_memory_bytes") is None]
        if unread:
            line += f"; not read for {', '.join(unread)} (ranked last)"
    return line


def _disagreement_lines(data: dict[str, Any]) -> list[str]:
    """A note where the gain (two processes) and the paired gain (one process) disagree by more than 2x, and which
    figure ranked those candidates: a baseline measured while the machine was busy gave 'gain 855.52x' beside 'paired
    1.01x', with no word on which to trust; onnxruntime's paired 4.34x (the original model timed beside its spinning
    threads) beside its gain of 2.15x ranked it first."""
    rows = [r for r in data.get("candidates") or [] if r.get("status") == "ok" and r.get("gain")
            and r.get("paired_gain") and not r.get("not_ranked")]
    off = [r for r in rows if max(r["gain"] / r["paired_gain"], r["paired_gain"] / r["gain"]) > DISAGREEMENT]
    if not off:
        return []
    worst = max(off, key=lambda r: max(r["gain"] / r["paired_gain"], r["paired_gain"] / r["gain"]))
    head = (f"gain and paired disagree by more than {DISAGREEMENT:g}x for {len(off)} of {len(rows)} candidates "
            f"(e.g. {worst['label']}: {fmt_ratio(worst['gain'])}, paired {fmt_ratio(worst['paired_gain'])}): ")
    if not any("ranked_by" in r for r in rows):  # a record from before the search said which figure ranked a row
        return [head + "the processes they were measured in ran at different speeds (other load on the machine while "
                "one of them measured?); the paired column, measured in one process, is the one the search ranks by"]
    by_gain = [r["label"] for r in off if r.get("ranked_by") == "gain"]
    ranked = (f"the search ranked {', '.join(by_gain)} by its gain, the lower figure"
              + ("; the others by the paired one, the lower" if len(by_gain) < len(off) else "")
              if by_gain else "the search ranked them by the paired one, the lower figure")
    return [head + "one of the two was disturbed (another load on the machine while one process measured, or the "
            f"original model timed beside the candidate's busy threads); {ranked}"]


def stalled_lines(data: dict[str, Any], marked: bool = True) -> list[str]:
    """The rows marked ! in the table, whose calls stalled while they were timed (`optimize.explain.stalled_timing`),
    and what to do: on a busy machine (load average 9 on 2 cores) hygiene's p50 read 40.3 ms beside the baseline's
    0.068 ms in one search, and the table said nothing of it. `marked`: the table beside it marks them (the
    terminal's; the HTML report's has no mark column)."""
    rows = [r for r in data.get("candidates") or [] if r.get("status") == "ok" and r.get("stalled")]
    if not rows:
        return []
    ok = sum(r.get("status") == "ok" for r in data.get("candidates") or [])
    worst = next((r for r in rows if "p50" in str(r["stalled"])), rows[0])  # a stalled p50 misranks
    head = "! = its calls stalled while it was timed (" if marked else "calls stalled while timed in "
    return [f"{head}{len(rows)} of {ok} measured rows{'; ' if marked else ' ('}e.g. {worst['label']}: "
            f"{worst['stalled']}): on a busy machine a model's threads stall waiting on each other's preemption, and "
            "neither its noise warning nor the paired gain (both sides stalled alike) shows it; re-run on a quieter "
            "machine or with --threads 1, or measure the two settings you care about with `dlperf ab`"]


def goal_lines(data: dict[str, Any]) -> list[str]:
    """What the search judged by: the metric, and the objective with its constraints (without the terminal table's
    legend)."""
    if data.get("metric_is_fidelity"):
        metric = ("metric: the workload has no eval metric, so fidelity is the metric: "
                  f"{data.get('metric_name') or 'mean cosine similarity to the original model outputs'}")
    else:
        metric = f"metric: {data.get('metric_name')} on the workload's eval data"
    constraints = data.get("constraints") or {}
    parts = []
    if constraints.get("max_metric_drop_abs") is not None:
        parts.append(f"metric drop <= {constraints['max_metric_drop_abs']:g}")
    elif constraints.get("max_metric_drop") is not None:
        parts.append(f"metric drop <= {budget_percent(constraints['max_metric_drop'])}")
    if constraints.get("latency_budget_s") is not None:
        parts.append(f"p99 <= {constraints['latency_budget_s'] * 1e3:g} ms")
    if constraints.get("min_fidelity_worst") is not None:
        parts.append(f"worst-case fidelity >= {constraints['min_fidelity_worst']:g}")
    return [metric, f"objective: {data['objective']}; constraints: {', '.join(parts) or 'none'}"]


def extent_lines(data: dict[str, Any]) -> list[str]:
    """How many candidates in how long, and where the winner was exported."""
    # a resumed search's reused candidates were built in the run they come from, not in this one's time
    compile_s = sum(float(r.get("build_s") or 0.0) for r in data.get("candidates") or [] if not r.get("reused"))
    searched = len(data.get("candidates") or [])
    lines = [f"searched {searched} candidate{'' if searched == 1 else 's'} in {data['elapsed_s']:.0f} s of a "
             f"{data['time_budget_s']:.0f} s budget (build/compile time {compile_s:.0f} s included)"
             + (f"; resumed from run {data['resumed_from']}" if data.get("resumed_from") else "")]
    if data.get("export_dir"):
        lines.append(f"exported to {data['export_dir']} (load it with dlperf.load)")
    return lines


def closest_and_not_tried_lines(data: dict[str, Any]) -> list[str]:
    """The candidates closest to winning and why they did not, and those the time budget left untried (the first
    five with their reasons), as the selection's last lines."""
    by_key = {r["key"]: r for r in data.get("candidates") or [] if isinstance(r, dict) and "key" in r}
    lines = [f"closest: {row['label']}: {_why(row) or 'did not beat the baseline'}"
             for row in (by_key.get(key) for key in data.get("closest") or []) if row]
    not_tried = data.get("not_tried") or []
    if not_tried:
        lines.append(f"not tried ({len(not_tried)}): " + "; ".join(f"{n['label']} ({n['reason']})"
                                                                 for n in not_tried[:5])
                     + (" ..." if len(not_tried) > 5 else ""))
    return lines


def summary_lines(data: dict[str, Any]) -> list[str]:
    metric, objective = goal_lines(data)
    lines: list[str] = [metric, f"{objective}; * = Pareto frontier (latency, metric, size, memory), ✓ = winner"]
    memory = memory_line(data)
    if memory:
        lines.append(memory)
    if any(r.get("paired_gain") is not None for r in data.get("candidates") or []):
        # under throughput the gain is of items/s (it read "the baseline's p50 / the candidate's" there too)
        isolated = ("the candidate's items/s / the baseline's" if data.get("objective") == "throughput"
                    else "the baseline's p50 / the candidate's")
        lines.append(f"gain: {isolated}, each measured in its own process; paired: the "
                     "candidate against the original model in the candidate's process (ABBA blocks), which the "
                     f"search extends, orders and ranks by (by the gain where the paired one is over {DISAGREEMENT:g}x "
                     "it)")
    lines.extend(_disagreement_lines(data))
    lines.extend(stalled_lines(data))
    lines.extend(selection_lines(data))
    lines.extend(closest_and_not_tried_lines(data))
    for skipped in data.get("skipped_passes") or []:
        lines.append(f"skipped pass: {skipped}")
    lines.extend(extent_lines(data))
    if data.get("workdir") and data.get("workdir_bytes"):
        # every candidate's artifact stays there (86 MiB a MiniLM candidate), and nothing said where or how much
        lines.append(f"candidates' artifacts: {data['workdir']} ({_mib(data['workdir_bytes'])} MiB; remove it when "
                     "you no longer need them: the export does not use it)")
    if data.get("run_id"):
        lines.append(f"run {data['run_id']} (dlperf runs show {data['run_id']})")
    return lines


def selection_lines(data: dict[str, Any]) -> list[str]:
    """The winner, or why there is none, with the A/Bs that decided it, and the search's notes."""
    lines = []
    by_key = {r["key"]: r for r in data.get("candidates") or []}
    winner = data.get("winner")
    conf = data.get("confirmation") or {}
    if data.get("partial"):  # a search stopped before its end: its record holds what it had measured
        lines.append("no winner: the search stopped before it picked one (the same dlperf optimize command resumes "
                     f"it{', or --resume ' + str(data['run_id']) if data.get('run_id') else ''})")
    elif winner:
        label = by_key[winner]["label"] if winner in by_key else winner
        lines.append(f"winner: {label}")
        # its own notes: 'the eval data ... judges the candidate too: its metric may be optimistic' was in the
        # stored run only, beside a pick made on that metric
        lines.extend(f"  its note: {n}" for n in (by_key.get(winner) or {}).get("notes") or [])
        if conf.get("describe"):
            lines.append(f"  A/B against the baseline, both loaded in one process: {conf['describe']}")
        lines.extend(runner_up_lines(data.get("runner_up") or {}, label))
    elif conf or any(r.get("confirmation") or r.get("confirm_error") for r in by_key.values()):
        lines.append("no winner: no candidate was confirmed better than the baseline")
    elif any(r.get("status") == "ok" for r in by_key.values()) and not any(r.get("feasible") for r in by_key.values()):
        # "no candidate beat the baseline" was said where the baseline itself missed a --latency-budget-ms
        lines.append("no winner: nothing measured meets the constraints, the baseline included (each row's why says "
                     "what it missed)")
    elif _budget_ran_out(data):
        lines.append(f"no winner: {_budget_ran_out(data)}")
    elif _only_unranked(data):
        lines.append("no winner: no candidate could be ranked: the calls of each that met the constraints stalled "
                     "(see the note)")
    else:
        # no A/B was run (the baseline ranked first, or nothing else was measured): the notes say why
        lines.append("no winner: no candidate beat the baseline")
    if not winner and conf.get("describe"):
        # the A/B names its B side 'winner'; here there is none
        lines.append(f"  best candidate's A/B: {conf['describe'].replace('winner vs', 'candidate vs', 1)}")
    for note in data.get("notes") or []:
        lines.append(f"note: {note}")
    return lines


def _only_unranked(data: dict[str, Any]) -> bool:
    """Whether every candidate besides the baseline that met the constraints was left unranked, its calls stalled
    (`optimize.search._Search.measure_again_if_stalled`): 'no candidate beat the baseline' was said of them."""
    base_key = (data.get("baseline") or {}).get("key")
    others = [r for r in data.get("candidates") or [] if r.get("key") != base_key and r.get("feasible")]
    return bool(others) and all(r.get("not_ranked") for r in others)


def _budget_ran_out(data: dict[str, Any]) -> str:
    """Why there is no winner when the time budget ran out before any candidate besides the baseline was measured
    (one cut short by it, the others not tried), or '' when one was measured. It read 'no candidate beat the
    baseline' where none had been measured at all."""
    base_key = (data.get("baseline") or {}).get("key")
    others = [r for r in data.get("candidates") or [] if r.get("key") != base_key and r.get("label") != "baseline"]
    cut = [r for r in others if r.get("budget_cut")]
    not_tried = len(data.get("not_tried") or [])
    if any(r.get("status") == "ok" for r in others) or not (cut or not_tried):
        return ""
    parts = [f"{len(cut)} cut short" if cut else "", f"{not_tried} not tried" if not_tried else "",
             f"{len(others) - len(cut)} failed or not applicable" if len(others) > len(cut) else ""]
    return ("the time budget ran out before any candidate was measured ("
            + ", ".join(p for p in parts if p) + "; a longer --time-budget tries them)")


def runner_up_lines(found: dict[str, Any], winner: str) -> list[str]:
    """How the confirmed pick fared against the next-ranked candidate (`found`: the result's `runner_up`), and
    what was decided; `winner` is the final winner's label."""
    if not found:
        return []
    lines = []
    if found.get("describe"):
        lines.append(f"  A/B against the runner-up, both loaded in one process: {found['describe']}")
    first = found.get("pick") or "the first pick"
    action = f"picked {winner} over {first}" if found.get("switched") else f"kept {winner}"
    lines.append(f"  {action}: {found.get('reason')}")
    return lines


def render(data: dict[str, Any], width: int | None = None) -> RenderableType:
    """The table, why each candidate lost, and the summary; without `width`, the table fits where it is drawn."""
    why = why_lines(data)
    parts: list[RenderableType] = [candidates_table(data, width) if width is not None else _FittedTable(data)]
    if why:
        parts.append(Text("why:"))
    # an indented line's wrapped lines keep its indent: on 80 columns they went to column 0
    parts.extend(indented_line(line) for line in [*why, *summary_lines(data)])
    return Group(*parts)


def print_result(data: dict[str, Any], console: Console) -> None:
    console.print(render(data, console.width))
