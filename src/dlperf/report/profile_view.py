"""Pure terminal renderer of a profile result (the dict `ProfileReport.to_dict()` returns, as stored):
verdict first, then the ranked findings with evidence, fix and gain, verified fixes, and the analyses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dlperf.profile.diagnose import LOW_OVERHEAD_RATIO, MEMORY_CAPACITY, size_text, times_faster
from dlperf.report.fit import hanging

BOUND_LABEL = {"compute": "compute", "bandwidth": "memory", "cache-resident": "in-cache", "overhead": "dispatch",
               "unknown": "-"}


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms" if ms >= 0.1 else f"{ms * 1e3:.0f} µs"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _mib(n: float | None) -> str:
    if n is None:
        return "-"
    return size_text(n)


def _count(n: int, thing: str) -> str:
    """'1 busy thread', '2 busy threads'."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _speed(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


SPARK = "▁▂▃▄▅▆▇█"
VERIFICATION_LABEL = {"confirmed": "fix measured faster", "contradicted": "estimate not confirmed by --verify",
                      "inconclusive": "--verify inconclusive", "not measured": "an estimate, not measured by --verify"}


def _spark(values: list[float], width: int = 40) -> str:
    if not values:
        return ""
    if len(values) > width:
        values = [max(values[int(i * len(values) / width):int((i + 1) * len(values) / width)] or [0.0])
                  for i in range(width)]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in values)


def _findings(result: dict[str, Any]) -> list[RenderableType]:
    out: list[RenderableType] = []
    for i, f in enumerate(result.get("findings", []), 1):
        head = Text(f"[{f['category']}] ", style="bold magenta")
        head.append(f["title"], style="bold")
        head.append(f"   {share_words(f)} · confidence {f['confidence']}", style="dim")
        if f.get("verification"):
            head.append(f" · {VERIFICATION_LABEL.get(f['verification'], f['verification'])}",
                        style="yellow" if f["verification"] == "contradicted" else "dim")
        out.append(hanging(Text(f"{i}. ", style="bold"), head))
        for line in f["evidence"]:
            out.append(hanging("   • ", Text(line)))
        out.append(hanging("   ", Text.assemble(("fix: ", "green bold"), f["fix"])))
        if f.get("setting"):
            out.append(hanging("   ", Text.assemble(("apply with: ", "green"), f["setting"])))
        if f.get("estimated_gain"):
            out.append(hanging("   ", Text.assemble(("estimated gain: ", "green"), f["estimated_gain"])))
    return out


def share_words(finding: Mapping[str, Any]) -> str:
    """What a finding's share is: of the step, or for memory capacity of the memory it may use ("explains 248%"
    was said of a peak at 248% of the budget)."""
    share = _pct(finding["share"])
    if finding["category"] != MEMORY_CAPACITY:
        return f"explains {share}"
    whose = "the device's memory" if finding["title"].startswith("device") else "the memory budget"
    return f"{share} of {whose} in use"


def _verify(result: dict[str, Any]) -> RenderableType | None:
    table = _verify_table(result)
    if table is None or isinstance(table, Text):
        return table
    # A finding the measurements contradict is said in words, not only by the row's colour: when every fix
    # measured for it contradicts its estimate (one fix short of the estimate, another measured faster, was
    # printed as "the estimate did not hold" under a finding marked "fix measured faster").
    contradicted = {(f.get("category"), f.get("title")) for f in result.get("findings", [])
                    if f.get("verification") == "contradicted"}
    notes: list[RenderableType] = [
        Text(f"the fix was measured {v['speedup']:.2f}x ({v['verdict']}) against an estimated "
             f"{_speed(v.get('estimated_speedup'))}: the estimate did not hold ({v['fix']['label']}, for "
             f"{v['category']})", style="yellow")
        for v in result.get("verify") or []
        if v.get("outcome") == "contradicted" and (v.get("category"), v.get("finding")) in contradicted]
    # A fix that could not be measured: its whole error (the table has room for its start only).
    notes += [hanging(Text(f"{v['fix']['label']} could not be measured: ", style="red"), Text(v["error"]))
              for v in result.get("verify") or [] if v.get("error") and len(v["error"]) > VERDICT_WIDTH]
    return Group(table, *notes) if notes else table


VERDICT_WIDTH = 80
"""Characters of a fix's error in the verified-fixes table; a longer one is printed whole under it."""


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


LABEL_WORD_WIDTH = 32
"""The widest a fix label's word is kept whole in the verified-fixes table; a longer one folds onto the next line."""
VERIFY_TITLE = "Verified fixes: interleaved A/B against the profiled step"
VERIFY_COLUMNS = ("fix", "for", "finding's estimate", "measured", "95% CI", "verdict", "setup")
"""The estimate is the finding's (its bottleneck removed), the same for each of its fixes."""
NOTHING_TO_VERIFY = "--verify: no finding has a fix dlperf can apply itself"


def verify_cells(v: Mapping[str, Any]) -> list[str]:
    """One verified fix as the table's cells (VERIFY_COLUMNS), the verdict whole (an error's or the A/B's)."""
    ci = v.get("speedup_ci")
    interval = f"{ci[0]:.2f}-{ci[1]:.2f}x" if isinstance(ci, (list, tuple)) and len(ci) == 2 else "-"
    return [(v.get("fix") or {}).get("label", "-"), v.get("category", "-"), _speed(v.get("estimated_speedup")),
            _speed(v.get("speedup")), interval, v.get("error") or v.get("verdict") or "-",
            f"{float(v.get('setup_s') or 0.0):.1f} s"]


def _verify_table(result: dict[str, Any]) -> RenderableType | None:
    rows = result.get("verify")
    if rows is None:
        return None
    if not rows:
        return Text(NOTHING_TO_VERIFY, style="yellow")
    # two spaces between columns, as the bench table: three left too little for the labels at 105 columns
    t = Table(title=VERIFY_TITLE, box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1), collapse_padding=True,
              pad_edge=False, show_edge=False)
    # A label wraps between its words but keeps each whole: at 105 columns rich squeezed the fix column to 15 and cut
    # 'DataLoader(num_workers=2, persistent_workers=True)' to 'DataLoader(num…' over 'persistent_wor…'.
    labels = [str((v.get("fix") or {}).get("label", "-")) for v in rows]
    word = max((len(w) for label in labels for w in label.split()), default=3)
    # a label up to 26 characters on one line; a longer one wraps between its words (folded only past 32)
    width = min(max(len(label) for label in labels), max(word, 26), LABEL_WORD_WIDTH)
    for col in VERIFY_COLUMNS:
        if col == "fix":
            t.add_column(col, width=width, overflow="fold")
        elif col in ("for", "verdict"):
            t.add_column(col, overflow="fold")  # on a narrower console a long word breaks, not cut to …
        else:  # figures are never cut; the estimate's header on two lines, as wide as its figures
            t.add_column(col.replace(" ", "\n") if col == "finding's estimate" else col, justify="right", no_wrap=True)
    for v in rows:
        cells = verify_cells(v)
        style = "red" if v.get("error") else "green" if v.get("verdict") == "faster" else \
            "yellow" if v.get("verdict") == "slower" else ""
        t.add_row(*cells[:5], Text(_cut(cells[5], VERDICT_WIDTH), style=style), cells[6])
    return t


def _breakdown(b: dict[str, Any]) -> RenderableType:
    which = ("mean profiled step: loader workers make steps bimodal" if b.get("mean_step") else
             "median profiled step")
    t = Table(title=f"Where a step's time goes ({which})", box=box.SIMPLE_HEAD, title_justify="left")
    t.add_column("part")
    t.add_column("time", justify="right")
    t.add_column("share", justify="right")
    step = b["step_s"] or 1e-12
    # The phases add up to the step; the "of which" rows cut the same step (outside the data wait) another way,
    # so they come under the step's row: under "other" they read as parts of it, 59 ms of an 82 µs row.
    phases = [("waiting for data", "data_wait_s"), ("host-to-device copies", "h2d_s"), ("forward", "forward_s"),
              ("backward", "backward_s"), ("optimizer", "optimizer_s"), ("other (outside phases)", "other_s")]
    activities = [("  of which operators", "operator_s"),
                  ("  of which operator calls stalled (descheduled)", "stalled_op_s"),
                  ("  of which framework overhead", "framework_overhead_s"),
                  ("  of which waiting for the device", "device_sync_s"), ("device idle", "device_idle_s")]

    def add(rows: list[tuple[str, str]]) -> None:
        for label, key in rows:
            value = b.get(key)
            if value is None or (value == 0 and key in ("data_wait_s", "h2d_s", "backward_s", "optimizer_s",
                                                        "stalled_op_s")):
                continue
            t.add_row(label, _ms(value), _pct(value / step))

    add(phases)
    t.add_row(Text("step", style="bold"), Text(_ms(b["step_s"]), style="bold"), "")
    add(activities)
    return t


def _operators(op: dict[str, Any], n: int = 8) -> RenderableType:
    timed_by = op.get("timed_by", "self time")
    # the title is a line of its own, as wide as the console: as the table's title it wrapped at the table's width
    title = Text(f"Top operators by {timed_by}, on this machine's roofline: fp32 peak "
                 f"{op['peak_flops'].get('fp32', 0) / 1e9:.0f} GFLOP/s, {op['bandwidth_bytes_s'] / 1e9:.1f} GB/s, "
                 f"ridge {op['ridge_intensity']:.1f} FLOP/B"
                 + (" (recorded with a warning: see the caveat above)" if op.get("ceilings_caveat") else ""),
                 style="table.title")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    t.add_column("operator", no_wrap=True, max_width=26)
    for col in ("kernels" if timed_by == "kernel time" else "self", "share", "FLOP/B", "achieved"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("bound", no_wrap=True)
    t.add_column("%peak", justify="right", no_wrap=True)
    for o in op["operators"][:n]:
        if o["bound"] == "compute" and o.get("achieved_flops_s"):
            # GFLOP/s; integer operations for an int8 product, as calibrate's table gives int8's peak in TOP/s
            achieved = f"{o['achieved_flops_s'] / 1e9:.1f} {'GOP/s' if o.get('dtype') == 'int8' else 'GF/s'}"
        elif o.get("achieved_bytes_s"):
            achieved = f"{o['achieved_bytes_s'] / 1e9:.2f} GB/s"
        else:
            achieved = "-"
        t.add_row(o["name"].removeprefix("aten::"), _ms(o["self_s"]), _pct(o["share"]),
                  f"{o['intensity']:.1f}" if o.get("intensity") is not None else "-",
                  achieved, BOUND_LABEL.get(o["bound"], o["bound"]), _pct(o.get("pct_of_peak")))
    return Group(title, t)


def _op_time(us: float) -> str:
    """A median operator's time: '6.9 µs' to a tenth where dispatch lives, else as the rest of the view says it
    ('22.9 ms', where a busy machine's GEMMs read 'median 22876.7 µs')."""
    return f"{us:.1f} µs" if us < 100 else _ms(us * 1e-6)


def _facts(result: dict[str, Any]) -> list[RenderableType]:
    a = result["analyses"]
    la, m, th = a["launch"], a["memory"], a["threads"]
    lines: list[RenderableType] = [
        Text(f"dispatch: {la['ops_per_step']:.0f} top-level operators per step ({la['all_ops_per_step']:.0f} with "
             f"nested), median {_op_time(la['median_op_us'])}; tiny ops + gaps = {_pct(la['overhead_share'])} of "
             "the step"),
        Text(f"memory: peak RSS {_mib(m['peak_rss_bytes'])} of a {_mib(m['budget_bytes'])} budget "
             f"({m['budget_source']}; {_pct(m['used_fraction'])} used, headroom {_mib(m['headroom_bytes'])}); "
             f"model {_mib(m['model_bytes'])}; operators hold up to {_mib(m['step_allocated_peak_bytes'])} "
             "within a step"),
        Text(f"threads: {th['intra_op_threads']} intra-op / {th['inter_op_threads']} inter-op on "
             f"{_count(th['usable_cores'], 'usable core')}; {_count(th['busy_threads'], 'busy thread')} kept "
             f"{th['process_busy_cores']:.1f} cores busy"
             # the workers' own, which other processes' load leaves out (older records have no such field)
             + (f", its {_count(th['loader_workers'], 'loader worker')} {th['loader_workers_busy_cores']:.1f}"
                if th.get("loader_workers") else "")
             + f", the machine {th['machine_busy_cores']:.1f}"),
    ]
    timeline = [float(b) for _, b in m.get("timeline", [])]
    if len(timeline) >= 2:
        biggest = m["largest_allocations"][0] if m.get("largest_allocations") else None
        lines.append(Text(f"memory held (allocated minus freed) over the profiled steps: {_spark(timeline)}"
                          + (f"  largest allocation: {biggest['op']} {_mib(biggest['bytes'])}" if biggest else "")))
    if m.get("device_total_bytes"):
        lines.append(Text(f"device memory: peak reserved {_mib(m['device_peak_reserved_bytes'])} of "
                          f"{_mib(m['device_total_bytes'])}"))
    ld = a.get("loader")
    if ld:
        lines.append(Text(f"data loader: waits {_ms(ld['data_wait_s'])} per step ({_pct(ld['wait_share'])}); "
                          f"num_workers={ld['num_workers']}, pin_memory={ld['pin_memory']}, "
                          f"prefetch_factor={ld['prefetch_factor']}, persistent_workers={ld['persistent_workers']}"))
        if ld.get("too_many_workers"):  # torch's warning, once (it printed at each DataLoader() and iter())
            lines.append(Text(f"  {ld['too_many_workers']}", style="dim"))
    o = result["overhead"]
    ratio = o.get("ratio")
    # a profiled step far faster than the unprofiled one read '(0.00x)': the caveat above says why it happens
    shown = (f"profiled {times_faster(ratio)} faster: the unprofiled timing was disturbed"
             if isinstance(ratio, (int, float)) and 0 < ratio < LOW_OVERHEAD_RATIO else _speed(ratio))
    lines.append(Text(f"profiling overhead: profiled step {_ms(o['profiled_step_s'])} vs unprofiled "
                      f"{_ms(o['unprofiled_step_s'])} ({shown}); the analyses describe the "
                      "profiled steps", style="dim"))
    return lines


def profile_report(result: dict[str, Any], run_id: str | None = None, store_url: str | None = None
                   ) -> RenderableType:
    tr = result["trace"]
    head = Text(f"dlperf profile {result['workload']}", style="bold")
    head.append(f"  ({tr['mode']}, {tr['device']}, batch {tr['batch_size']}, {_count(tr['steps'], 'profiled step')})",
                style="dim")
    parts: list[RenderableType] = [head, Text.assemble(("verdict: ", "bold"), (result["verdict"], "bold cyan"))]
    parts += [Text.assemble(("caveat: ", "bold yellow"), c) for c in result.get("caveats", [])]
    parts.append("")
    parts += _findings(result)
    verify = _verify(result)
    if verify is not None:
        parts += ["", verify]
    parts += ["", _breakdown(result["analyses"]["breakdown"]), _operators(result["analyses"]["operators"])]
    parts += _facts(result)
    if result.get("trace_path"):
        parts.append(Text(f"trace: {result['trace_path']} (open in https://ui.perfetto.dev or chrome://tracing)"))
    if run_id:
        parts.append(Text(f"run {run_id} in {store_url} · took {result.get('elapsed_s', 0):.1f} s", style="dim"))
    return Group(*parts)
