"""Terminal rendering of load results (pure: results in, rich renderables out)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.loadgen.generator import (
    DEFAULT_STABILITY,
    FEW_FOR_P999,
    MISMATCH,
    LevelResult,
    PeakResult,
    Slo,
    verdict,
)
from dlperf.measure.stats import early_stopping_min_count


def _ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * 1e3:.3g}" if value < 0.1 else f"{value * 1e3:.0f}"


LEVEL_COLUMNS = ("req/s", "items/s", "p50", "p90", "p95", "p99", "BOUND", "p99.9", "errors", "queue", "compute",
                 "batch", "stable")
"""The levels table's columns after the level's own ('conc' or 'rate'); BOUND stands for the early-stopping bound's."""
NARROW_DROPS = (("p95", "p99.9"), ("p95", "p99.9", "queue", "compute"))
"""What a console too narrow for every column loses, in turn: the in-between and the extreme percentiles (the
bound is the tail estimate that decides), then the server's own queue and compute means."""


def levels_table(results: list[LevelResult], title: str = "", slo: Slo | None = None) -> Any:
    """One row per level; the bound column is MLPerf's early-stopping estimate at the SLO's percentile
    (p99 without an SLO). Drawn where every column fits, the table has its full box; on a narrower console
    (80 columns) a compact one (two spaces between columns, then one), then without the columns of NARROW_DROPS,
    which its caption names, where rich squeezed every column to '…'."""
    from dlperf.report.fit import FirstThatFits

    return FirstThatFits([_levels_table(results, title, slo, (), compact=False),
                          *(_levels_table(results, title, slo, drop, compact=True, gap=gap)
                            for drop in ((), *NARROW_DROPS) for gap in (2, 1))])


def _levels_table(results: list[LevelResult], title: str, slo: Slo | None, drop: tuple[str, ...],
                  compact: bool, gap: int = 2) -> Any:
    from rich import box
    from rich.table import Table

    q = slo.percentile if slo is not None else 99.0
    bound_name = f"p{q:g} bound"

    mode = results[0].mode if results else "concurrency"
    table = Table(title=(title + " (latencies in ms)") if title else None, title_justify="left",
                  caption_justify="left", padding=(0, 1), pad_edge=False)
    if compact:
        table.box, table.collapse_padding, table.show_edge = box.SIMPLE_HEAD, True, False
        table.padding = (0, 1 if gap == 2 else 0)  # with the box's blank divider: 2 or 1 spaces between columns
    table.add_column("conc" if mode == "concurrency" else "rate", justify="right", no_wrap=True)
    columns = [name for name in LEVEL_COLUMNS if name not in drop]
    for name in columns:
        # errors is the one column that wraps ('timeout: 3003'), should even the narrowest layout not fit
        table.add_column(bound_name if name == "BOUND" else name, justify="right", no_wrap=name != "errors")
    shown = [c for c in ("queue", "compute") if c in columns]
    # a p99.9 of 100-999 replies is their slowest one: it read as a tail figure beside the bound
    few = "p99.9" in columns and any(r.ok < FEW_FOR_P999 for r in results)
    table.caption = (f"{bound_name}: MLPerf's early-stopping p{q:g}, within which {q:g}% of requests stay at 99% "
                     f"confidence (- below {early_stopping_min_count(q)} requests); "
                     + (f"p99.9: - below {FEW_FOR_P999} replies (it is their slowest); " if few else "")
                     + (f"{', '.join(shown)}: the server's own per-request mean{'s' if len(shown) > 1 else ''} "
                        "from its statistics; " if shown else "")
                     + "batch: its mean batch; "
                     + ("latencies count from each request's scheduled time, the generator's own lag behind its "
                        "schedule included (--json: send_lag_p99_s)" if mode == "rate" else
                        "latencies count from each request's send")
                     + (f"; not shown at this width: {', '.join(drop)} (--json has them)" if drop else ""))
    for r in results:
        errors = errors_text(r.statuses)
        server = r.server
        cells = {
            "req/s": f"{r.throughput:.0f}", "items/s": f"{r.item_throughput:.0f}", "p50": _ms(r.percentile_s(50)),
            "p90": _ms(r.percentile_s(90)), "p95": _ms(r.percentile_s(95)), "p99": _ms(r.percentile_s(99)),
            "BOUND": _ms(r.percentile_bound_s(q)), "p99.9": _ms(r.percentile_s(99.9) if r.ok >= FEW_FOR_P999 else None),
            "errors": errors,
            "queue": _ms(server.queue_s if server else None), "compute": _ms(server.compute_s if server else None),
            "batch": f"{server.average_batch_size:.1f}" if server else "-", "stable": "yes" if r.stable else "no",
        }
        table.add_row(level_text(r.level), *(cells[name] for name in columns))
    return table


def level_text(level: float) -> str:
    """A level as it was given ('16', '50', '2.25'), or a rate a peak search computed to 0.1 req/s ('227.7'): the
    levels table, warnings and 'the search stopped at' said 227.713 and 28.4641 beside 'trying 227.7 req/s'."""
    return f"{level:g}" if level == round(level, 2) else f"{level:.1f}"


def errors_text(statuses: Mapping[str, Any]) -> str:
    """The errors cell of a level, by status ('503: 1243', 'dropped: 669': requests the open loop did not send), or
    '0': the load table and the HTML report's (which showed a bare count, the dropped ones among them) say the same."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()) if k != "200") or "0"


def level_line(r: LevelResult, q: float = 99.0) -> str:
    """The line `dlperf load` prints as a level finishes: '  rate 800: 888.0 req/s, p99 1523 ms', the latency as
    the table gives it (it printed 'p99 1523.28 ms' above a table reading 1523, and a 0.0512 ms p99 as 0.05)."""
    figure = f"p{q:g} {_ms(r.percentile_s(q))} ms" if r.ok else "no request succeeded"
    # the failures too, as the table's errors column gives them: with --json this line is all a terminal shows, and
    # 'rate 150: 76.1 req/s, p99 151 ms' hid 284 of 600 requests timed out in the server's queue (the p99 of the
    # answered ones is capped by that timeout); a level that mostly failed also gets a warning
    failed = ", ".join(f"{k}: {v}" for k, v in sorted(r.statuses.items()) if k != "200") if r.ok else ""
    return (f"  {r.mode} {level_text(r.level)}: {r.throughput:.1f} req/s, {figure}"
            + (f", errors {failed}" if failed else ""))


def resource_lines(results: list[LevelResult]) -> list[str]:
    """One line per level that read the server's metrics (--collect-metrics)."""
    from dlperf.loadgen.resources import describe

    return [f"  {r.mode} {level_text(r.level)}: {describe(r.resources)}" for r in results if r.resources is not None]


PERF_ANALYZER_COLUMNS = ("Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
                         "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
                         "p50 latency", "p90 latency", "p95 latency", "p99 latency")


def perf_analyzer_csv(results: list[LevelResult]) -> str:
    """The levels as perf_analyzer's `-f` CSV writes them, for the spreadsheets and scripts that read it:
    the same columns, times in whole microseconds, rows in increasing Inferences/Second (items/s).
    Network+Server Send/Recv is the mean latency less the client's send and receive time and the server's
    queue and compute time (floored at 0, as perf_analyzer does); without the server's statistics its
    four columns are 0 and that one takes the rest. Levels that read the server's metrics (--collect-metrics)
    add perf_analyzer's four GPU columns, `UUID:value;` per GPU (utilization 0-1, watts, bytes), empty
    where the server has no GPU."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    mode = results[0].mode if results else "concurrency"
    gpu_columns = any(r.resources is not None for r in results)
    writer.writerow(("Concurrency" if mode == "concurrency" else "Request Rate", *PERF_ANALYZER_COLUMNS,
                     *(GPU_CSV_COLUMNS if gpu_columns else ())))

    def us(seconds: float) -> int:
        return int(seconds * 1e6) if math.isfinite(seconds) else 0

    for r in sorted((r for r in results if r.ok), key=lambda r: r.item_throughput):
        server = r.server
        queue, c_in, c_infer, c_out = ((server.queue_s, server.compute_input_s, server.compute_infer_s,
                                        server.compute_output_s) if server else (0.0, 0.0, 0.0, 0.0))
        mean = sum(r.latencies_ns) / len(r.latencies_ns) / 1e9
        wait = mean - r.client_send_s - r.client_recv_s
        network = max(0.0, wait - (queue + c_in + c_infer + c_out))
        writer.writerow((f"{r.level:g}", f"{r.item_throughput:g}", us(r.client_send_s), us(network), us(queue),
                         us(c_in), us(c_infer), us(c_out), us(r.client_recv_s),
                         *(us(r.percentile_s(q)) for q in (50, 90, 95, 99)),
                         *(_gpu_cells(r) if gpu_columns else ())))
    return out.getvalue()


GPU_CSV_COLUMNS = ("Avg GPU Utilization", "Avg GPU Power Usage", "Max GPU Memory Usage", "Total GPU Memory")


def _gpu_cells(r: LevelResult) -> list[str]:
    gpus = r.resources.gpus if r.resources is not None else {}
    cells = []
    for key in ("utilization", "power_w", "memory_used_max_bytes", "memory_total_bytes"):
        values = [(uuid, getattr(g, key)) for uuid, g in gpus.items()]
        cells.append("".join(f"{uuid}:{int(value) if key.endswith('bytes') else format(round(value, 4), 'g')};"
                             for uuid, value in values if value is not None))
    return cells


def load_headline(result: Any) -> str:
    """One line for a stored load run (run lists): a peak search's peak, else its busiest level."""
    if not isinstance(result, dict):
        return ""
    peak = result.get("peak")
    slo = Slo.from_record(peak)
    if isinstance(peak, dict) and slo is not None:
        found = peak.get("peak_rate")
        return (f"peak {float(found):.1f} req/s" if isinstance(found, (int, float)) else "no passing rate") + \
            f" at {slo}"
    levels = [lv for lv in result.get("levels") or [] if isinstance(lv, dict)
              and isinstance(lv.get("throughput_rps"), (int, float)) and isinstance(lv.get("p99_s"), (int, float))]
    if not levels:
        return ""
    best = max(levels, key=lambda lv: lv["throughput_rps"])
    where = "concurrency" if best.get("mode") == "concurrency" else "rate"
    # its SLO verdict where it had one (an interrupted peak search's busiest step may have failed it)
    judged = f" ({best['verdict']})" if isinstance(best.get("verdict"), str) else ""
    # a level where every request failed has no p99 (NaN): 'p99 - ms' read as a number left out
    p99 = f"p99 {_ms(best['p99_s'])} ms" if math.isfinite(best["p99_s"]) else "no request succeeded"
    at = level_text(best.get("level", 0))
    return f"{best['throughput_rps']:.1f} req/s, {p99} at {where} {at}{judged}{_failed(best)}"


def _failed(level: dict[str, Any]) -> str:
    """', 95% of 1310 requests failed' where some of a stored level's sent requests failed (not 'dropped', which the
    open loop did not send): '24.8 req/s, p99 528 ms at concurrency 64' read as a healthy level while 1243 of its
    1310 requests got 503 (and `dlperf load` exited 1)."""
    statuses = level.get("statuses")
    if not isinstance(statuses, dict):
        return ""
    failed = sum(int(n) for s, n in statuses.items() if s not in ("200", "dropped"))
    sent = failed + int(statuses.get("200", 0))
    if not failed or not sent or not math.isfinite(level["p99_s"]):  # 'no request succeeded' says it already
        return ""
    return f", {100 * failed / sent:.3g}% of {sent} requests failed"


def _size(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:.1f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:.1f} KiB"


def setup_lines(config: dict[str, Any]) -> list[str]:
    """What a load run sent and when, where not the defaults (random tensors, evenly spaced or closed loop),
    from its recorded settings: the --input-data or --workload inputs, the SLO, the shared-memory transport
    and the --request-intervals schedule."""
    lines = []
    data = [v for v in config.get("input_data") or [] if v != "random"]
    if data:
        n = int(config.get("distinct_requests") or 1)
        checked = ""
        if config.get("validated"):
            tolerance = config.get("tolerance")
            within = (f" within rtol {tolerance[0]:g}, atol {tolerance[1]:g}"
                      if isinstance(tolerance, list) and len(tolerance) == 2 else "")
            checked = f", every reply checked against its validation data{within}"
        size = config.get("request_bytes")
        held = f", {_size(size)} in memory" if isinstance(size, int) else ""
        lines.append(f"inputs: {', '.join(data)} ({n} distinct request{'s' if n != 1 else ''} of batch "
                     f"{config.get('batch_size', 1)}{held}{checked})")
    elif config.get("workload"):
        lines.append(f"inputs: {config['workload']}'s example inputs")
    elif config.get("string_data") is not None:
        lines.append(f"inputs: random, every BYTES element {config['string_data']!r}")
    elif config.get("string_length") is not None:
        lines.append(f"inputs: random, BYTES elements of {config['string_length']} random characters")
    slo = Slo.from_record(config)
    if slo is not None:
        lines.append(f"SLO: {slo} at 99% confidence, by MLPerf's early-stopping test (at least {slo.min_requests} "
                     "requests per level to pass)")
    q, share = config.get("stability_percentile"), config.get("stability")
    if q is not None or (isinstance(share, (int, float)) and share != DEFAULT_STABILITY):
        share = share if isinstance(share, (int, float)) else DEFAULT_STABILITY
        latency = "mean" if q is None else f"p{q:g}"
        lines.append(f"stability: a level ends when {config.get('stable_windows', 3)} windows of "
                     f"{config.get('window_s', 2.0):g} s agree within {share:.0%} on throughput and {latency} latency")
    if config.get("protocol") == "grpc":
        where = "described, in shared memory" if config.get("shared_memory") == "system" else "in raw_input_contents"
        if config.get("streaming"):
            lines.append(f"transport: gRPC streams (inference.GRPCInferenceService/ModelStreamInfer, one stream per "
                         f"connection, tensors {where}; a stream's error_message carries no code: counted by its "
                         "words, 503 for a full queue, a timeout or a draining server, 404 for an unknown model, "
                         "else 500)")
        else:
            lines.append(f"transport: gRPC (inference.GRPCInferenceService/ModelInfer, tensors {where}; "
                         "a failed call counted under the HTTP status of its code)")
    if config.get("shared_memory") == "system":
        # replies checked against validation data come back in the reply (`outputs_in_reply`)
        outputs = ("the outputs in the reply, to check them against the validation data" if config.get("validated")
                   else "the outputs written to regions of their own")
        lines.append("transport: system shared memory (the inputs placed once in a region registered with the "
                     f"server, {outputs}; requests carry descriptions of what is in shared memory)")
    if config.get("request_intervals"):
        rate = config.get("trace_rate")
        recorded = f"{rate:.4g} req/s as recorded, " if isinstance(rate, (int, float)) else ""
        lines.append(f"schedule: {config['request_intervals']} ({config.get('intervals', '?')} gaps, looped; "
                     f"{recorded}scaled to each level's rate)")
    return lines


def stored_view(result: dict[str, Any], config: dict[str, Any], interrupted: bool = False) -> list[Any]:
    """`dlperf runs show` of a load run: its levels table, the verdicts as recorded (a run from before they
    were recorded shows only pass/FAIL from its peak search), the peak, and the warnings; not the
    every-latency JSON. `interrupted`: the run was stopped, and the title says so with the levels it finished, as
    `dlperf load` said it. Raises KeyError/TypeError/ValueError on a result that is not a `dlperf load` one."""
    from rich.text import Text

    levels = [LevelResult.from_dict(d) for d in result["levels"]]
    peak = result.get("peak")
    slo = Slo.from_record(peak) or Slo.from_record(config)
    from dlperf.report.fit import indented_line

    parts: list[Any] = [Text(line) for line in setup_lines(config)]
    # as `dlperf load` titled it: a peak search's steps are not a sweep's levels
    search = ": rate search" if config.get("find_peak") else ""
    cut = f" (interrupted, {len(levels)} level{'s' if len(levels) != 1 else ''} finished)" if interrupted else ""
    parts.append(levels_table(levels, f"{config.get('model', '?')} at {config.get('url', '?')}{search}{cut}", slo))
    steps = peak.get("steps", []) if isinstance(peak, dict) else []
    for i, (level, data) in enumerate(zip(levels, result["levels"], strict=True)):
        where = f"  {level.mode} {level_text(level.level)}: "
        if isinstance(data.get("verdict"), str):
            parts.append(indented_line(where + verdict_text(data["verdict"], data.get("verdict_reason", ""))))
        elif i < len(steps) and isinstance(steps[i], dict) and "passed" in steps[i]:
            parts.append(indented_line(where + ("pass" if steps[i]["passed"] else "FAIL")))
    if isinstance(peak, dict) and slo is not None:
        found = peak.get("peak_rate")
        stopped = peak.get("undecided_at")
        failed = any(isinstance(d, dict) and d.get("verdict") == "fail" for d in steps)
        found_rate, stopped_rate = (None if v is None else float(v) for v in (found, stopped))
        statuses = [(float(d["level"]), str(d["verdict"])) for d in steps
                    if isinstance(d, dict) and isinstance(d.get("level"), (int, float)) and "verdict" in d]
        parts += [Text(line) for line in peak_outcome(found_rate, slo, stopped_rate, failed,
                                                      *_undecided_edge(found_rate, stopped_rate, statuses))]
    parts += [indented_line(line) for line in resource_lines(levels)]
    parts += [Text(f"warning ({r.mode} {level_text(r.level)}): {w}", style="yellow")
              for r in levels for w in r.warnings]
    parts += [Text(line, style="red") for line in stored_gate_lines(levels, result, config)]
    return parts


def stored_gate_lines(levels: list[LevelResult], result: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Why a recorded `dlperf load` exited 1, as it said last (a peak search's outcome is said apart): the run is
    'ok' in the store, and its view, a level with most of its requests failed or an SLO missed, read as a sweep that
    passed. `levels` are the recorded `result['levels']` read back."""
    wrong = mismatch_line(levels)
    if wrong:
        return [wrong]
    if config.get("find_peak"):
        return []
    slo = Slo.from_record(config)
    return gate_lines(levels, result["levels"], float(config.get("max_error_ratio") or 0.0), slo)


def mismatch_line(results: list[LevelResult]) -> str | None:
    """The levels whose replies did not match --input-data's validation data (a failed `dlperf load`), or None."""
    wrong = [f"{r.mode} {level_text(r.level)} ({r.statuses[MISMATCH]})" for r in results if r.statuses.get(MISMATCH)]
    return f"replies did not match the validation data at: {', '.join(wrong)}" if wrong else None


def gate_lines(results: list[LevelResult], levels: list[dict[str, Any]], max_error_ratio: float,
               slo: Slo | None) -> list[str]:
    """Why a sweep (not a peak search) failed, one line each: levels where no request succeeded, levels with more
    failed requests than `max_error_ratio` allows, levels that missed the SLO; empty when it passed. `levels` are
    the recorded levels, with each one's SLO verdict (`passed`)."""
    lines = []
    empty = [f"{r.mode} {level_text(r.level)}" for r in results if r.ok == 0]
    if empty:  # a sweep measured nothing there
        lines.append(f"no request succeeded at: {', '.join(empty)} (the warnings say what came back)")
    over = [r for r in results if r.ok > 0 and r.error_ratio > max_error_ratio]
    if over:
        said = ", ".join(f"{r.mode} {level_text(r.level)} ({_share(r.error_ratio)} failed, {r.failed} of "
                         f"{r.ok + r.failed} requests)" for r in over)
        lines.append(f"more requests failed than --max-error-ratio {max_error_ratio:g} allows at: {said}; the errors "
                     "column says which statuses (--max-error-ratio R lets a share R of a level's requests fail)")
    if slo is not None:
        missed = [f"{d['mode']} {d['level']:g} ({d['verdict']})" for d in levels if d.get("passed") is False]
        if missed:
            lines.append(f"SLO {slo} not met at: {', '.join(missed)}")
    return lines


def _share(ratio: float) -> str:
    """A failed share as a percentage that never reads 0% or 100% when it is not."""
    text = f"{ratio * 100:.1f}%"
    return f"{ratio * 100:.4g}%" if text in ("0.0%", "100.0%") and 0 < ratio < 1 else text


def verdict_text(status: str, reason: str) -> str:
    """'pass: ...', 'FAIL: ...' or 'undecided: ...'."""
    return f"{status.upper() if status == 'fail' else status}: {reason}"


def verdict_line(step: LevelResult, slo: Slo) -> str:
    return verdict_text(*verdict(step, slo))


def peak_lines(peak: PeakResult) -> list[str]:
    lines = []
    for step in peak.steps:
        lines.append(f"  {step.level:8.1f} req/s  sent {step.send_rate or 0:.1f} req/s  "
                     f"{verdict_line(step, peak.slo)}")
    statuses = [(step.level, verdict(step, peak.slo).status) for step in peak.steps]
    failed = any(status == "fail" for _, status in statuses)
    stopped = None if peak.undecided_at is None else peak.undecided_at.level
    return lines + peak_outcome(peak.peak_rate, peak.slo, stopped, failed, *_undecided_edge(peak.peak_rate, stopped,
                                                                                           statuses))


def _undecided_edge(peak_rate: float | None, stopped: float | None,
                    statuses: Sequence[tuple[float, str]]) -> tuple[list[float], float | None]:
    """The tried rates above the peak that no trial decided, below the lowest shown to miss the SLO (the edge may lie
    among them; the one the search stopped at has its own line), and that lowest rate; from each step's (rate,
    verdict status)."""
    if peak_rate is None:
        return [], None
    edge = min((rate for rate, status in statuses if status == "fail" and rate > peak_rate), default=None)
    above = sorted(rate for rate, status in statuses if status == "undecided" and rate > peak_rate
                   and (edge is None or rate < edge) and rate != stopped)
    return above, edge


def peak_outcome(peak_rate: float | None, slo: Slo, undecided_at: float | None, failed: bool,
                 undecided_above: Sequence[float] = (), missed_at: float | None = None) -> list[str]:
    """What a peak search found: its peak, or that no rate passed (failed: one was shown to miss the SLO; else
    none was decided), and where it stopped on an undecided trial it could not lengthen. `undecided_above`: the
    tried rates above the peak that were undecided (an undecided trial counts as not passing, so the bisection went
    below them), `missed_at`: the lowest rate shown to miss the SLO; the edge lies between the peak and it."""
    lines = []
    if undecided_at is not None:
        lines.append(f"the search stopped at {level_text(undecided_at)} req/s: undecided, and a lower rate would "
                     "measure fewer requests in the same --duration/--requests; give a longer --duration or more "
                     "--requests, or neither (the search then sizes each trial for the early-stopping test)")
    if peak_rate is not None:
        peak = f"peak: {'at least ' if undecided_at is not None else ''}{peak_rate:.1f} req/s with {slo}"
        if undecided_above:
            rates = [f"{r:.1f}" for r in undecided_above]
            listed = rates[0] if len(rates) == 1 else ", ".join(rates[:-1]) + " and " + rates[-1]
            where = (f"between {peak_rate:.1f} and {missed_at:.1f} req/s, the lowest rate shown to miss it"
                     if missed_at is not None else f"above {peak_rate:.1f} req/s")
            peak += (f"; {listed} req/s above it were undecided (too few requests to show either way, counted as not "
                     f"passing): the edge lies {where}")
        lines.append(peak)
    elif failed:
        lines.append(f"no tried rate kept {slo}")
    else:
        lines.append(f"no tried rate was shown to keep {slo} (none was shown to miss it either: undecided)")
    return lines
