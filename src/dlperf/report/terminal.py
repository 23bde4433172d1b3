"""Pure terminal renderers: rich tables and lines built from results and run records (no computing here)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from dlperf.measure.notes import bench_warnings
from dlperf.measure.stats import (
    NOISE_IQR_RATIO,
    early_stopping_min_count,
    fmt_count,
    percent_beside,
)
from dlperf.report.fit import FirstThatFits
from dlperf.report.html_parts import artifact_precision
from dlperf.store.query import History
from dlperf.store.records import FAILED, INTERRUPTED, RunRecord

SPARK_CHARS = "▁▂▃▄▅▆▇█"
STATUS_STYLE = {"ok": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}


# --- units ---------------------------------------------------------------------------------------


def fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3g}"


def fmt_mib(num_bytes: float | None) -> str:
    """MiB with one decimal; below 0.1 MiB two significant digits (a 12 KiB model read 'model size: 0.0 MiB'), in
    positional notation (a 40-byte model read 'model size: 3.8e-05 MiB')."""
    if num_bytes is None:
        return "-"
    mib = num_bytes / 2**20
    return f"{mib:.1f}" if mib >= 0.1 or mib == 0 else format(Decimal(f"{mib:.2g}"), "f")


def fmt_si(value: float, unit: str) -> str:
    """12.3e9, 'FLOP/s' -> '12.3 GFLOP/s'."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.1f} {unit}"


def fmt_value(value: float, unit: str) -> str:
    """A KPI in its display unit: seconds as ms, items/s as a count."""
    return f"{fmt_ms(value)} ms" if unit == "s" else f"{fmt_count(value)} {unit}"


# --- environment ---------------------------------------------------------------------------------


def environment_line(env: dict[str, Any]) -> str:
    """'torch 2.13.0+cpu · Python 3.11.9 · AMD EPYC (2 cores, 2 threads) · Linux 6.1 · glibc malloc', and where
    recorded the cores a pinned process could use, the CPU governor, the thread variables set and the git commit
    the command ran in ('git 3f2a9c1d0b7e', '... with uncommitted changes')."""
    if not env:
        return "environment: not recorded"
    parts = [f"torch {env.get('torch_version', '?')}", f"Python {env.get('python_version', '?')}"]
    threads = env.get("torch_threads", "?")
    logical, usable = env.get("logical_cores", "?"), env.get("usable_cores")
    pinned = f", {usable} usable" if isinstance(usable, int) and isinstance(logical, int) and usable < logical else ""
    parts.append(f"{env.get('cpu_model', '?')} ({logical} cores{pinned}, {threads} "
                 f"thread{'' if threads == 1 else 's'})")
    if env.get("gpu_name"):
        parts.append(f"{env['gpu_name']} (CUDA {env.get('cuda_version') or '?'})")
    if env.get("os"):
        parts.append(str(env["os"]))
    if env.get("allocator"):
        parts.append(f"{env['allocator']} malloc")
    if env.get("cpu_governor"):
        parts.append(f"governor {env['cpu_governor']}")
    if env.get("thread_env"):  # OMP_NUM_THREADS and the like, where set: they change what was measured
        from dlperf.measure.env import thread_env_text

        parts.append(thread_env_text(env["thread_env"]))
    if env.get("git_commit"):
        parts.append(f"git {str(env['git_commit'])[:12]}{' with uncommitted changes' if env.get('git_dirty') else ''}")
    return "environment: " + " · ".join(parts)


# --- calibrate -----------------------------------------------------------------------------------


def provisional_lines(details: dict[str, Any]) -> list[str]:
    """What a provisional calibration is (`calibrate.lookup_or_measure`), with the load it was measured at: `dlperf
    calibrate` showed a cached one as plainly "cached", and the user could not tell that a later lookup would
    measure it again."""
    if not details.get("provisional"):
        return []
    load = details.get("load_average")
    at = f"at a load average of {load:.1f}" if isinstance(load, (int, float)) else "at a load average not recorded"
    return [f"provisional: measured on the way by profile or train {at}, with the doubts below; a later profile, "
            "train or calibrate measures them again once the load average is below the cores and 0.75x that, or "
            "`dlperf calibrate --force` now"]


def ceilings_table(ceilings: dict[str, Any], cached: bool = False) -> RenderableType:
    """The table `dlperf calibrate` prints, from `Ceilings.to_dict()`."""
    details = ceilings.get("details", {})
    threads = ceilings.get("threads", "?")
    title = f"ceilings on {ceilings.get('device', '?')} ({threads} thread{'' if threads == 1 else 's'})"
    table = Table(title=title, title_justify="left")
    table.add_column("what")
    table.add_column("ceiling", justify="right")
    table.add_column("measured with", overflow="fold")  # a long flag list was cut to ".../i8m…"
    for dtype, flops in ceilings.get("gemm_flops", {}).items():
        how = details.get(f"gemm_{dtype}", {})
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        table.add_row(f"GEMM {dtype}", fmt_si(float(flops), unit),
                      f"{how.get('n', '?')}³ matmul, {how.get('samples', '?')} calls")
    for dtype, why in details.get("skipped", {}).items():
        table.add_row(f"GEMM {dtype}", "not measured", Text(why, style="dim"))
    copy = details.get("copy", {})
    table.add_row("memory bandwidth", fmt_si(float(ceilings.get("memory_bandwidth_bytes_s", 0.0)), "B/s"),
                  f"copy of {fmt_mib(copy.get('bytes'))} MiB (read + write), {copy.get('samples', '?')} calls")
    source = "cached" if cached else "measured"
    quick = " (quick mode: small sizes, not a real ceiling)" if ceilings.get("quick") else ""
    footer = Text(f"{source} at {ceilings.get('measured_at', '?')}{quick}; key {ceilings.get('machine_key', '?')}",
                  style="dim")
    warnings = [Text(line, style="yellow") for line in provisional_lines(details)]
    warnings += [Text(f"warning: {w}", style="yellow") for w in details.get("warnings", [])]
    warnings += [Text(f"warning: {k}: {v['noise_warning']}", style="yellow")
                 for k, v in details.items() if isinstance(v, dict) and v.get("noise_warning")]
    return Group(table, footer, *warnings)


# --- bench ---------------------------------------------------------------------------------------


def fmt_ci(median_s: float, ci: Sequence[float] | None) -> str:
    """A median's CI relative to it: '-1.2/+0.8%'; a side under 0.05% that is not 0 with the decimals that show it
    ('-0.03/+0.02%': a sleep of 5 ms read '-0.0/+0.0%', an interval of no width, until 2026-12-07)."""
    from dlperf.measure.stats import percent_beside

    if not ci or len(ci) != 2 or not median_s:
        return "-"
    lo, hi = ci

    def side(share: float) -> str:
        return f"{share:.0%}" if share >= 0.1 else percent_beside(share, fewest=1)

    return f"-{side((median_s - lo) / median_s)[:-1]}/+{side((hi - median_s) / median_s)}"


def bench_table(result: dict[str, Any]) -> RenderableType:
    """The KPIs per batch size, from `BenchResult.to_dict()` (live or stored): two spaces between columns where that
    fits the console, else one, else one and the wider headers on two lines (at 80 columns a run of 1,350,000
    items/s and 123,456 calls squeezed the last header to 'IQR/p…', and a CUDA run's table is a column wider)."""
    # below 67 columns (60 and 66 cut 'IQR/' to 'IQ…', 60 also 'batch' and the latencies) the least needed columns
    # go, one at a time, and the caption names them
    narrower = [_bench_table(result, gap=1, two_line_headers=True, left_out=NARROW_LEFT_OUT[:k])
                for k in range(1, len(NARROW_LEFT_OUT) + 1)]
    return FirstThatFits([_bench_table(result, gap=2, two_line_headers=False),
                          _bench_table(result, gap=1, two_line_headers=False),
                          _bench_table(result, gap=1, two_line_headers=True), *narrower])


BENCH_COLUMNS = ("batch", "iters", "p50", "p90", "p99", "p50 CI", "items/s", "RSS MiB", "CPU%", "IQR/p50")
TWO_LINE_HEADERS = {"RSS MiB": "RSS\nMiB", "IQR/p50": "IQR/\np50", "CUDA MiB": "CUDA\nMiB", "p50 CI": "p50\nCI"}
NARROW_LEFT_OUT = ("p90", "CPU%", "iters", "RSS MiB", "CUDA MiB")
"""The columns a console too narrow for the whole table leaves out, in this order (`--json` and `report` keep them)."""


def _bench_table(result: dict[str, Any], gap: int, two_line_headers: bool, left_out: Sequence[str] = ()) -> Table:
    before = result.get("rss_before_model_bytes")
    # the peak is the process's: a 0.3 MiB model read 'RSS MiB 245.9', nearly all of it Python and torch
    rss = f"RSS: the process's peak ({fmt_mib(before)} MiB before the model was built)" if before else "RSS: peak"
    has_cuda = any(p.get("cuda_max_allocated_bytes") is not None for p in result.get("points", []))
    names = [n for n in (*BENCH_COLUMNS, *(("CUDA MiB",) if has_cuda else ())) if n not in left_out]
    if "RSS MiB" not in names:
        rss = ""
    gone = [n for n in left_out if n != "CUDA MiB" or has_cuda]
    caption = f"p50 CI: bootstrap 95% interval of the median; {rss + '; ' if rss else ''}IQR/p50 > 10% = noisy"
    if gone:
        caption += f"; a narrow console: {', '.join(gone)} left out (--json has them)"
    table = Table(title=f"bench {result.get('workload', '?')}: latency in ms", title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, gap - 1), collapse_padding=True, pad_edge=False,
                  show_edge=False, caption_justify="left", caption=caption)
    for name in names:
        table.add_column(TWO_LINE_HEADERS.get(name, name) if two_line_headers else name, justify="right", no_wrap=True)
    for point in result.get("points", []):
        s = point["summary"]
        noisy = bool(s.get("noise_warning"))
        ratio = s.get("noise_ratio")
        row: list[RenderableType] = [
            str(point["batch_size"]), str(s["n"]), fmt_ms(s["p50_s"]), fmt_ms(s["p90_s"]), fmt_ms(s["p99_s"]),
            fmt_ci(s["p50_s"], s.get("median_ci_s")), fmt_count(s["throughput"]),
            fmt_mib(point.get("peak_rss_bytes")), f"{point.get('process_cpu_percent', 0.0):.0f}",
            Text(percent_beside(ratio, NOISE_IQR_RATIO) if ratio is not None else ("noisy" if noisy else "ok"),
                 style="yellow" if noisy else "green"),
        ]
        if has_cuda:
            row.append(fmt_mib(point.get("cuda_max_allocated_bytes")))
        cells = dict(zip((*BENCH_COLUMNS, *(("CUDA MiB",) if has_cuda else ())), row, strict=True))
        table.add_row(*(cells[n] for n in names))
    return table


def bench_headline_line(result: dict[str, Any]) -> str | None:
    """'headline: throughput 9,371 items/s at batch 1', with a latency headline's early-stopping bound; an
    interrupted run's says it is of the batch sizes it measured, and when its batch size is the one the interrupt
    cut short, after how many calls. None for a result without a headline."""
    headline = result.get("headline")
    if not headline:
        return None
    kpi = headline["kpi"]
    value = fmt_value(headline["value"], "items/s" if kpi == "throughput" else "s")
    # a check run's headline is its gated latency, per item as the gate compares it (the table's are per call)
    per_item = " per item" if headline.get("per_item") else ""
    line = f"headline: {kpi.removesuffix('_s')} {value}{per_item} at batch {headline['batch_size']}"
    if "bound_99" in headline:
        q = kpi.removeprefix("p").removesuffix("_s")
        line += (f" (<= {fmt_value(headline['bound_99'], 's')} at 99% confidence, MLPerf's early stopping)"
                 if headline["bound_99"] is not None else
                 f" (too few samples to bound the p{q} at 99% confidence: MLPerf's early stopping needs "
                 f"{early_stopping_min_count(float(q))})")
        if headline.get("bound_note"):  # a short run's MLPerf result (the bound) can be many times its sample p90
            line += f"; {headline['bound_note']}"
    if result.get("partial"):
        points = result.get("points", [])
        measured = ", ".join(str(p["batch_size"]) for p in points)
        line += f" (of the batch sizes measured before the run stopped: {measured})"
        cut = next((p["summary"].get("stop_note") for p in points if p["batch_size"] == headline["batch_size"]), None)
        if cut and cut.startswith("interrupted"):  # a figure from a few calls reads like any other otherwise
            line += f"; batch {headline['batch_size']} was {cut}"
    return line


def bench_setup_line(config: Mapping[str, Any]) -> str:
    """'scenario single-stream · device cpu · precision fp32', with the threads and artifact where set: what a bench
    run measured, from its config."""
    given = config.get("artifact")
    artifact: Mapping[str, Any] = given if isinstance(given, dict) else {}
    # an engine artifact runs in its own precision: an int8 one read 'precision fp32' (bench's autocast setting)
    precision = (artifact_precision(artifact, config.get("precision")) if artifact.get("precision")
                 else config.get("precision", "?"))
    what = artifact.get("label") or artifact.get("engine")
    threads = (config["threads"] if config.get("threads")
               else f"{artifact['threads']} (the artifact's)" if artifact.get("threads") else None)
    return (f"scenario {config.get('scenario', '?')} · device {config.get('device', '?')} · precision {precision}"
            + (f" · threads {threads}" if threads else "") + (f" · artifact {what}" if what else ""))


def bench_report(result: dict[str, Any], environment: dict[str, Any], run_id: str | None = None,
                 store_url: str | None = None, config: dict[str, Any] | None = None) -> RenderableType:
    """Table, headline, model size, noise warnings, environment and where the run was saved."""
    parts: list[RenderableType] = [bench_table(result)]
    headline = bench_headline_line(result)
    if headline:
        parts.append(Text(headline))
    if config:
        parts.append(Text(bench_setup_line(config)))
    if "model_bytes" in result:
        parts.append(Text(f"model size: {fmt_mib(result['model_bytes'])} MiB "
                          f"({result.get('model_bytes_of', 'parameters + buffers')})"))
    parts += [Text(f"warning: {w}", style="yellow") for w in bench_warnings(result.get("points", []))]
    parts.append(Text(environment_line(environment), style="dim"))
    if run_id:
        parts.append(Text(f"run {run_id} saved to {store_url or 'the store'}", no_wrap=True, overflow="ignore"))
    return Group(*parts)


# --- runs ----------------------------------------------------------------------------------------


def kind_headline(kind: str, result: Any) -> str | None:
    """The headline of a run whose kind has its own (load, profile, train, candidate, optimize, ab, check,
    calibrate); None for other kinds (and an optimize run without a winner field or an ab run without its ratio),
    which the caller headlines its own way. `runs list` and the HTML report's summary both use it."""
    if not isinstance(result, dict):
        return None
    if kind == "load":
        from dlperf.loadgen.render import load_headline

        return load_headline(result)
    if kind in ("profile", "train"):
        return profile_train_headline(result)
    if kind == "candidate":
        return candidate_headline(result)
    if kind == "optimize" and "winner" in result:
        return optimize_headline(result)
    if kind == "optimize" and isinstance(result.get("candidates"), list):  # stopped before it picked one
        done = sum(1 for c in result["candidates"] if isinstance(c, dict))
        return f"no winner picked: stopped after {done} candidate{'' if done == 1 else 's'}"
    if kind == "ab" and isinstance(result.get("ratio"), (int, float)):
        return f"B/A {result['ratio']:.3f}: {result.get('verdict')}"
    if kind == "ab" and isinstance(result.get("partial"), str):  # interrupted before it had a verdict
        return result["partial"].split(":")[0]
    if kind == "check" and isinstance(result.get("gate"), dict):
        return check_headline(result["gate"])
    if kind == "check" and isinstance(result.get("judged"), list):  # stopped before the gate gave its verdict
        return stopped_check_headline(result["judged"])
    if kind == "train-trial" and result.get("knob"):
        return trial_headline(result)
    if kind == "calibrate":
        return calibrate_headline(result)
    return None


def calibrate_headline(result: dict[str, Any]) -> str | None:
    """A calibrate run: its fp32 GEMM and memory ceilings ('runs list' had nothing for it)."""
    gemm, bandwidth = result.get("gemm_flops"), result.get("memory_bandwidth_bytes_s")
    if not isinstance(gemm, dict) or not isinstance(bandwidth, (int, float)):
        return None
    flops = gemm.get("fp32")
    head = f"fp32 GEMM {fmt_si(float(flops), 'FLOP/s')}, " if isinstance(flops, (int, float)) else ""
    return f"{head}memory {fmt_si(float(bandwidth), 'B/s')}" + (" (quick)" if result.get("quick") else "")


def trial_headline(result: dict[str, Any]) -> str:
    """A `train --tune` trial: its knob and change, and the measured speedup or why it was not kept."""
    change = result.get("change")
    text = (", ".join(f"{k}={v}" for k, v in change.items()) if isinstance(change, dict) else str(change or "")) or "-"
    what = f"{result['knob']}: {text}"
    speedup = result.get("speedup")
    if isinstance(speedup, (int, float)):
        return f"{what} {speedup:.2f}x ({result.get('verdict') or result.get('status')})"
    return f"{what} ({result.get('status')}{': ' + str(result['reason']) if result.get('reason') else ''})"


def check_headline(gate: dict[str, Any]) -> str | None:
    """A check run: the gate's verdict and each batch size's regression (its throughput hid whether it failed)."""
    if "failed" not in gate:
        return None
    changes = _gate_changes(gate.get("points", []), str(gate.get("metric", "")))
    return None if changes is None else f"{'FAIL' if gate['failed'] else 'PASS'}: {changes}"


def stopped_check_headline(judged: Sequence[Any]) -> str | None:
    """A check run interrupted before its gate's verdict: each batch size's change as far as it was measured."""
    metric = next((str(p.get("metric", "")) for p in judged if isinstance(p, dict)), "")
    changes = _gate_changes(judged, metric, verdict_said=False)
    return None if changes is None else f"no verdict (stopped): {changes}"


def _gate_changes(recorded: Sequence[Any], metric: str, verdict_said: bool = True) -> str | None:
    """'p50 +1.2% worse @ bs1, ...': the recorded points' changes (`PointVerdict.to_dict()`); None without any.
    `verdict_said`: a FAIL before them says that the one batch size regressed."""
    from dlperf.compare.gate import recorded_change
    from dlperf.compare.stats import change_text

    points = [(p, change) for p in recorded
              if isinstance(p, dict) and (change := recorded_change(p)) is not None]
    if not points:
        return None

    def mark(p: dict[str, Any]) -> str:
        """A batch size's own verdict where the run's does not say it: 'PASS: p50 +96.3% worse' was a pass from 3
        samples, and 'FAIL: ... @ bs1, ... @ bs4' failed at bs4 only."""
        if p.get("failed"):
            return " (regression)" if len(points) > 1 or not verdict_said else ""
        if p.get("too_few_samples"):
            return " (too few samples)"
        return " (inconclusive)" if p.get("inconclusive") else ""

    # the metric's own change and which way it is, as `dlperf check` words it (a throughput loss read +25.1%)
    changes = ", ".join(f"{change_text(change, lower)} @ bs{p.get('batch_size')}{mark(p)}"
                        for p, (change, _, lower) in points[:3])
    more = ", ..." if len(points) > 3 else ""
    return f"{metric} {changes}{more}"


def headline_text(record: RunRecord) -> str:
    return _result_headline(record) or error_headline(record)


def error_headline(record: RunRecord) -> str:
    """The first line of a failed run's error, cut at 70 characters: the headline of a run that failed before it
    measured anything (`runs list` and the HTML report's summary had an empty one); '' for any other run."""
    if record.status == FAILED and record.error:
        return _cut(record.error.splitlines()[0])
    return ""


def _cut(line: str, width: int = 70) -> str:
    """`line` cut to `width` characters at a word, with a mark."""
    return line if len(line) <= width else line[:width].rsplit(" ", 1)[0] + " …"


def _result_headline(record: RunRecord) -> str:
    own = kind_headline(record.kind, record.result)
    if own is not None:
        return own
    headline = record.result.get("headline") if isinstance(record.result, dict) else None
    if not isinstance(headline, dict) or "value" not in headline:
        return ""
    kpi = str(headline.get("kpi", ""))
    batch = f" @ bs{headline['batch_size']}" if "batch_size" in headline else ""
    if kpi == "throughput":
        return f"{fmt_value(float(headline['value']), 'items/s')}{batch}"
    return f"{kpi.removesuffix('_s')} {fmt_value(float(headline['value']), 's')}{batch}"


def optimize_headline(result: dict[str, Any]) -> str:
    """An optimize run: its winner's passes, or that there was none."""
    winner = next((c for c in result.get("candidates", []) if isinstance(c, dict) and c.get("key") == result["winner"]),
                  None)
    return f"winner: {winner.get('label') or result['winner']}" if winner else "no winner"


def candidate_headline(result: Any) -> str:
    """An optimize candidate: its passes, p50, and metric (or why it failed)."""
    if not isinstance(result, dict) or not isinstance(result.get("label"), str):
        return ""
    if isinstance(result.get("p50_s"), (int, float)):
        metric = result.get("metric")
        # the metric's name without its explanation ('fidelity (mean cosine vs the original model's outputs on 32
        # held-out inputs)' took most of the line), its value as optimize prints it (.4g showed 0.9996 as 1)
        name = str(result.get("metric_name") or "metric").split(" (")[0]
        return f"{result['label']}: p50 {fmt_ms(result['p50_s'])} ms" + (
            f", {name} {metric:.4f}" if isinstance(metric, (int, float)) else "")
    return f"{result['label']}: {result.get('status', '')}"


def nothing_tried(result: Mapping[str, Any]) -> bool:
    """A tuning in which every knob was skipped (not applicable, or past its time budget): its best is its baseline."""
    return all(t.get("status") == "skipped" for t in result.get("trials") or [])


def profile_train_headline(result: Any) -> str:
    """A profile's verdict; a training run's samples/s (measured, tuned with its gain, or DDP with its
    scaling efficiency)."""
    if not isinstance(result, dict):
        return ""
    if isinstance(result.get("verdict"), str) and "trace" in result:
        return _cut(result["verdict"])  # cut with a mark, at a word: 'dominated by its fixed per-call' read as whole
    if isinstance(result.get("best_samples_per_s"), (int, float)):
        gain = result.get("speedup") if result.get("final_ab") else None
        if gain is None and nothing_tried(result):  # '(no gain)' read as if knobs were tried and none was faster
            return f"nothing tried: {fmt_count(result['best_samples_per_s'])} samples/s (the baseline)"
        return f"tuned {fmt_count(result['best_samples_per_s'])} samples/s" + (
            f" ({gain:.2f}x)" if isinstance(gain, (int, float)) else " (no gain)")
    if isinstance(result.get("scaling_efficiency"), (int, float)):
        return (f"{result.get('nproc')} processes {fmt_count(result['samples_per_s'])} samples/s, "
                f"{result['scaling_efficiency']:.0%} scaling")
    if isinstance(result.get("samples_per_s"), (int, float)):
        tokens = result.get("tokens_per_s")
        return f"{fmt_count(result['samples_per_s'])} samples/s" + (
            f", {fmt_count(tokens)} tokens/s{' (guessed)' if result.get('tokens_guessed') else ''}"
            if isinstance(tokens, (int, float)) else "")
    return ""


RUNS_HEADLINE_MIN = 32
"""The fewest columns `runs list` leaves a run's headline where the console is narrower than the whole table."""
RUNS_WORKLOAD_MIN = 10
RUNS_DROPPED_NOTE = "created (UTC) not shown at this width: `dlperf runs show ID` has it"


def runs_table(records: Sequence[RunRecord], store_url: str = "") -> RenderableType:
    if not records:
        return Text(f"no runs in {store_url or 'the store'}")
    return _RunsTable(records, store_url)


class _RunsTable:
    """`runs list`'s table laid out for the width it is drawn at. Where the headline would get fewer than
    RUNS_HEADLINE_MIN columns (on 80 columns it got 11, and a row wrapped over up to 8 lines), the created
    column goes (the list is newest first; `runs show` has the time), and then a long workload folds to leave
    the headline that many."""

    def __init__(self, records: Sequence[RunRecord], store_url: str) -> None:
        self.store_url = store_url
        self.rows = [{"id": r.id, "kind": r.kind, "workload": r.workload, "status": r.status,
                      "created (UTC)": r.created_at[:16].replace("T", " "), "headline": headline_text(r)}
                     for r in records]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # the title and the note are lines of their own: a table's title and caption wrap at the table's width
        table = self.table(options.max_width)
        if self.store_url:
            yield Text(f"runs in {self.store_url}", style="table.title")
        yield table
        if "created (UTC)" not in [column.header for column in table.columns]:
            yield Text(RUNS_DROPPED_NOTE, style="table.caption")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table(options.max_width))

    def table(self, width: int) -> Table:
        natural = {name: max(cell_len(name), *(cell_len(row[name]) for row in self.rows)) for name in self.rows[0]}
        wanted = min(natural["headline"], RUNS_HEADLINE_MIN)

        def room(names: Sequence[str]) -> int:  # what is left for the headline, with 2 spaces between columns
            return width - sum(natural[n] for n in names if n != "headline") - 2 * (len(names) - 1)

        names = list(natural)
        if room(names) < wanted:
            names.remove("created (UTC)")
        workload_width = None
        if room(names) < wanted:
            workload_width = max(RUNS_WORKLOAD_MIN, natural["workload"] - (wanted - room(names)))
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
        for name in names:
            table.add_column(name, no_wrap=name not in ("workload", "headline"),
                             overflow="fold" if name == "workload" else "ellipsis",
                             max_width=workload_width if name == "workload" else None)
        for row in self.rows:
            table.add_row(*(Text(row[n], style=STATUS_STYLE.get(row[n], "")) if n == "status" else Text(row[n])
                            for n in names))
        return table


def record_view(record: RunRecord) -> RenderableType:
    """`dlperf runs show`: the header, config, and the result as its command printed it (bench, check with its
    gate verdict, ab, load, profile, train, calibrate, optimize; an optimize candidate and a tuning trial in a few
    lines), else as JSON with long lists of numbers summarized."""
    parts: list[RenderableType] = []
    header = Table.grid(padding=(0, 2))
    header.add_column(style="bold")
    header.add_column()
    header.add_row("run", record.id)
    header.add_row("kind", record.kind)
    header.add_row("workload", Text(record.workload))
    header.add_row("status", Text(record.status, style=STATUS_STYLE.get(record.status, "")))
    header.add_row("created", record.created_at)
    header.add_row("finished", record.finished_at or "-")
    if record.parent_id:
        header.add_row("parent", record.parent_id)
    if record.error:
        header.add_row("error", Text(record.error, style="red"))
    if record.config:
        header.add_row("config", Text(json.dumps(record.config, default=str, sort_keys=True)))
    parts.append(header)
    view = _kind_view(record)
    # a bench run's scenario, device and precision line, as `dlperf bench` printed it under the headline
    measured = _points_view(record.result, record.config if record.kind == "bench" else None)
    if measured is not None:
        parts.append(measured)
        if view is not None:  # a check run's gate verdict below its measurements
            parts.append(view)
    elif view is not None:
        parts.append(view)
    elif record.result:
        parts.append(Text(json.dumps(_summarize_lists(record.result), indent=2, default=str)))
    else:
        parts.append(Text("no result recorded", style="dim"))
    parts.append(Text(environment_line(record.environment), style="dim"))
    return Group(*parts)


def _points_view(result: Any, config: Mapping[str, Any] | None = None) -> RenderableType | None:
    """A bench or check run's measurements as bench printed them: the table, the model's size, and what makes the
    numbers less trustworthy (noise, a cap, other load); None for a result without points, or whose points lack a
    field (an older run: it falls back to JSON, where `runs show` raised a KeyError). A check's gate verdict, printed
    below, says each batch size's noise and contention itself: those are left out here (they were printed twice)."""
    if not isinstance(result, dict) or not result.get("points"):
        return None
    gate = result.get("gate")
    said = set(gate.get("warnings") or []) if isinstance(gate, dict) else set()
    try:
        parts: list[RenderableType] = [bench_table(result)]
        headline = bench_headline_line(result)  # as bench printed it
        if headline:
            parts.append(Text(headline))
        if config:
            parts.append(Text(bench_setup_line(config)))
        if "model_bytes" in result:
            parts.append(Text(f"model size: {fmt_mib(result['model_bytes'])} MiB "
                          f"({result.get('model_bytes_of', 'parameters + buffers')})"))
        points = [_unsaid(p, said) for p in result["points"]] if said else result["points"]
        parts += [Text(f"warning: {w}", style="yellow") for w in bench_warnings(points)]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return Group(*parts)


def _unsaid(point: dict[str, Any], said: set[str]) -> dict[str, Any]:
    """`point` without the noise and contention warnings that the gate's warnings repeat ('batch 8: noisy: ...')."""
    batch, noise = point["batch_size"], point["summary"].get("noise_warning")
    out = dict(point)
    if noise and f"batch {batch}: {noise}" in said:
        out["summary"] = {**point["summary"], "noise_warning": None}
    if point.get("contention_warning") and f"batch {batch}: {point['contention_warning']}" in said:
        out["contention_warning"] = None
    return out


def _kind_view(record: RunRecord) -> RenderableType | None:
    """The view its command printed, rebuilt from the stored result; None for other kinds, or a result
    that does not have that kind's shape (an older or a failed run: it falls back to JSON)."""
    result, config = record.result, record.config or {}
    if not isinstance(result, dict) or not result:
        return None
    try:
        if record.kind == "load" and result.get("levels"):
            from dlperf.loadgen.render import stored_view

            return Group(*stored_view(result, config, interrupted=record.status == INTERRUPTED))
        if record.kind == "profile":
            from dlperf.report.profile_view import profile_report

            return profile_report(result)
        if record.kind == "train":
            from dlperf.report.train_view import ddp_view, measurement_view, tune_view

            return {"ddp": ddp_view, "tune": tune_view}.get(config.get("mode", ""), measurement_view)(result)
        if record.kind == "train-trial" and result.get("knob"):
            from dlperf.report.train_view import trial_view

            return trial_view(result)
        if record.kind == "candidate" and isinstance(result.get("label"), str):
            from dlperf.report.optimize_view import candidate_view

            return candidate_view(result)
        if record.kind == "calibrate":
            return ceilings_table(result, cached=bool(result.get("cached")))
        if record.kind == "optimize" and "candidates" in result:
            from dlperf.report.optimize_view import render

            return render(result)
        if record.kind == "check" and isinstance(result.get("gate"), dict):
            from dlperf.report.compare_text import gate_lines

            return Group(*gate_lines(result["gate"]))
        if record.kind == "check" and isinstance(result.get("judged"), list):  # stopped before the gate's verdict
            said = stopped_check_headline(result["judged"])
            return Text(said) if said else None
        if record.kind == "ab" and "measurements" in result:
            from dlperf.compare.ab import ABRun
            from dlperf.report.compare_text import ab_table, ab_verdict

            run = ABRun.from_dict(result)
            partial = [Text(f"note: {result['partial']}")] if isinstance(result.get("partial"), str) else []
            warned = [Text.assemble(("warning: ", "yellow"), w) for w in run.warnings]
            return Group(ab_table(run), ab_verdict(run), *warned, *partial)
        if record.kind == "ab" and isinstance(result.get("partial"), str):  # stopped before 2 blocks: no verdict
            return Text(f"note: {result['partial']}")
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None


def _summarize_lists(data: Any, longest: int = 16) -> Any:
    """`data` with every list of more than `longest` numbers (raw samples) replaced by a one-line summary."""
    if isinstance(data, dict):
        return {k: _summarize_lists(v, longest) for k, v in data.items()}
    if isinstance(data, list):
        numbers = [v for v in data if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(data) > longest and len(numbers) == len(data):
            return f"[{len(data)} numbers from {min(numbers):g} to {max(numbers):g}; `dlperf runs export` has them]"
        return [_summarize_lists(v, longest) for v in data]
    return data


def sparkline(values: Sequence[float]) -> str:
    """One block character per value, scaled between the series' min and max."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARK_CHARS[len(SPARK_CHARS) // 2] * len(values)
    top = len(SPARK_CHARS) - 1
    return "".join(SPARK_CHARS[round((v - lo) / (hi - lo) * top)] for v in values)


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def history_view(history: History, changes: Mapping[str, Sequence[str]] | None = None) -> RenderableType:
    """`dlperf runs history`: a sparkline of the KPI over runs, then each value; `changes` (run id -> what differs
    from the run before it, `report.changes.history_changes`) marks the runs measured differently."""
    title = (f"{history.metric} of {history.workload} at batch {history.batch_size} over {_runs(len(history.points))} "
             f"({'higher' if history.higher_is_better else 'lower'} is better)")
    if not history.points:
        return Text(f"{title}: no finished runs with that batch size")
    parts: list[RenderableType] = [Text(title, style="bold")]
    values = history.values
    lo, hi = min(values), max(values)
    parts.append(Text(f"{sparkline(values)}   min {fmt_value(lo, history.unit)} · max {fmt_value(hi, history.unit)}"))
    if history.change is not None:
        better = (history.change > 0) == history.higher_is_better
        style = "green" if better else "red"
        if history.change == 0:
            style = ""
        parts.append(Text(f"last vs first: {history.change:+.1%}", style=style))
    table = Table(box=None, padding=(0, 2))
    # the commit each run was taken in, where any recorded one: the code a step in the trend came with
    commits = any(p.git_commit for p in history.points)
    for name in ("", "run", "created (UTC)", *(("commit",) if commits else ()), history.metric, "note"):
        table.add_column(name, justify="right" if name == history.metric else "left")
    spark = sparkline(values)
    best = history.best
    for char, p in zip(spark, history.points, strict=True):
        note = "best" if best is not None and p.run_id == best.run_id else ""
        if p.noise_warning:
            note = (note + ", noisy").lstrip(", ")
        if changes and p.run_id in changes:
            note = (note + ", changed").lstrip(", ")
        commit = (f"{p.git_commit[:12]}{'+' if p.git_dirty else ''}" if p.git_commit else "-",) if commits else ()
        table.add_row(char, p.run_id, p.created_at[:19].replace("T", " "), *commit, fmt_value(p.value, history.unit),
                      note)
    parts.append(table)
    if commits and any(p.git_dirty for p in history.points):
        parts.append(Text("commit+: taken with uncommitted changes in that checkout", style="dim"))
    changed = [(p.run_id, changes[p.run_id]) for p in history.points if changes and p.run_id in changes]
    if changed:
        parts.append(Text("changed: measured with other settings or on another machine than the run before it, so a "
                          "step there may come from that, not from the code:", style="yellow"))
        parts += [Text(f"  {run_id}: {'; '.join(what)}", style="yellow") for run_id, what in changed]
    if history.skipped:
        parts.append(Text(f"{_runs(history.skipped)} skipped: not ok, or no point at batch {history.batch_size}",
                          style="dim"))
    return Group(*parts)
