"""Pure terminal renderers for `dlperf train`: a step measurement, a tuning result, a DDP scaling result.

Each takes the result's `to_dict()` (as stored in the run record) and returns a rich renderable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dlperf.measure.ab import FASTER
from dlperf.report.terminal import fmt_count, fmt_mib, fmt_ms, fmt_si, nothing_tried

SETTINGS_TITLE = "put this into your training code"
UNCONFIRMED_TITLE = "what the trials accepted, unconfirmed by the final A/B"
UNCONFIRMED_ADVICE = ("the gains are each trial's short A/B, which the final one did not confirm: keep your code as it "
                      "is, or tune again on a quieter machine")
"""How a tuning's settings are headed: advice only when the final A/B of baseline against best finds the best
faster (a trial's A/B is short: on a busy machine it can accept a knob the final one then finds no faster)."""


def settings_confirmed(result: Mapping[str, Any]) -> bool:
    """Whether a tuning's settings are advice (SETTINGS_TITLE): the final A/B of baseline against best found the best
    faster. Otherwise they are what the trials accepted (UNCONFIRMED_TITLE, UNCONFIRMED_ADVICE)."""
    ab = result.get("final_ab")
    return ab is not None and ab["verdict"] == FASTER

PHASE_LABELS = {"data": "data wait", "h2d": "host-to-device", "forward": "forward + loss",
                "backward": "backward", "optimizer": "optimizer", "other": "other"}
STATUS_STYLE = {"accepted": "green", "not faster": "yellow", "parity failed": "red", "failed": "red",
                "skipped": "dim"}


def fmt_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def config_line(config: dict[str, Any]) -> str:
    parts = [f"batch {config['batch_size']}"]
    if config.get("accumulation_steps", 1) > 1:
        parts[0] += f" x {config['accumulation_steps']} accumulation"
    parts.append(config.get("precision", "fp32"))
    if config.get("num_workers"):
        parts.append(f"{config['num_workers']} workers")
    for key, label in (("prefetch_factor", "prefetch"), ("threads", "threads")):
        if config.get(key) is not None:
            parts.append(f"{label} {config[key]}")
    for key in ("persistent_workers", "pin_memory", "compile", "channels_last", "checkpointing"):
        if config.get(key):
            parts.append(key.replace("_", " "))
    if config.get("optimizer_impl", "default") != "default":
        parts.append(f"{config['optimizer_impl']} optimizer")
    if config.get("lr_scale", 1.0) != 1.0:
        parts.append(f"lr x{config['lr_scale']:g}")
    return ", ".join(parts)


def breakdown_table(m: dict[str, Any], title: str = "step breakdown") -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("phase")
    table.add_column("mean ms / step", justify="right")  # means: they add up to the step, as medians do not
    table.add_column("share", justify="right")
    for phase, seconds in m["breakdown_s"].items():
        table.add_row(PHASE_LABELS.get(phase, phase), fmt_ms(seconds), f"{m['breakdown_share'][phase]:.0%}")
    return table


def measurement_view(m: dict[str, Any], title: str = "training step") -> RenderableType:
    summary = m["summary"]
    lines = Text()
    lines.append(f"{title}: {m['workload']} ({config_line(m['config'])})\n", style="bold")
    # the median is the typical step; samples/s and the breakdown below are over all the time measured (the mean
    # step), which a few slow steps (a loader's epoch start, another process) pull away from the median: both shown
    mean = f", mean {fmt_ms(summary['mean_s'])} ms" if isinstance(summary.get("mean_s"), (int, float)) else ""
    lines.append(f"  step      {fmt_ms(m['step_s'])} ms median (p90 {fmt_ms(summary['p90_s'])} ms{mean}, "
                 f"{summary['n']} step{'' if summary['n'] == 1 else 's'})\n")
    lines.append(f"  samples/s {fmt_count(m['samples_per_s'])} (samples over the time measured)\n")
    tokens = tokens_text(m)
    if tokens is not None:
        lines.append(f"  tokens/s  {tokens}\n")
    lines.append_text(_memory_and_flops(m))
    return Group(lines, breakdown_table(m), *_findings_and_notes(m))


def tokens_text(m: Mapping[str, Any]) -> str | None:
    """'48,200 (counted by the workload's count_tokens)', or '(guessed: ...)', for a workload whose inputs are token
    ids; None otherwise (and for a run stored before tokens/s was measured)."""
    rate = m.get("tokens_per_s")
    if not isinstance(rate, (int, float)):
        return None
    how = ("guessed from the input's shape, padding included: see the note"
           if m.get("tokens_guessed") else "counted by the workload's count_tokens")
    return f"{fmt_count(rate)} ({how})"


def job_memory_text(m: Mapping[str, Any]) -> str | None:
    """'peak RSS 326.2 MiB main process + 16.5 MiB in its 2 loader workers (their private memory, USS) = 342.7 MiB'
    where the measurement read its loader workers' memory, else None."""
    workers, rss = m.get("workers_peak_uss_bytes"), m.get("peak_rss_bytes")
    if not isinstance(workers, (int, float)) or not isinstance(rss, (int, float)):
        return None
    # the workers' own memory: their RSS counts the main process's pages again
    n = m.get("worker_processes") or 0
    return (f"peak RSS {fmt_mib(rss)} MiB main process + {fmt_mib(workers)} MiB in its {n} loader "
            f"worker{'' if n == 1 else 's'} (their private memory, USS) = {fmt_mib(rss + workers)} MiB")


def _memory_and_flops(m: dict[str, Any]) -> Text:
    """A measurement's peak memory and FLOPs / MFU lines."""
    lines = Text()
    job = job_memory_text(m)
    memory = f"  memory    {job}" if job else f"  memory    peak RSS {fmt_mib(m['peak_rss_bytes'])} MiB"
    if job is None and (m.get("config") or {}).get("num_workers"):
        memory += " (main process only: its loader workers' memory could not be read)"
    if m.get("cuda_max_allocated_bytes") is not None:
        memory += f", CUDA max allocated {fmt_mib(m['cuda_max_allocated_bytes'])} MiB"
    lines.append(memory + "\n")
    flops = flops_text(m)
    if flops is not None:
        lines.append(f"  FLOPs     {flops}\n")
    return lines


def flops_text(m: dict[str, Any]) -> str | None:
    """'30.3 MFLOP / step, 2.4 GFLOP/s, MFU 5.3% of the fp32 GEMM ceiling 45.1 GFLOP/s', as far as the measurement
    knows them; None when it counted no FLOPs (`--no-mfu`, or a model the counter could not trace)."""
    if not m.get("flops_per_step"):
        return None
    flops = f"{fmt_si(m['flops_per_step'], 'FLOP')} / step"
    if m.get("achieved_flops"):
        flops += f", {fmt_si(m['achieved_flops'], 'FLOP/s')}"
    if m.get("mfu") is not None:
        flops += f", MFU {m['mfu']:.1%} of the {m['ceiling_dtype']} GEMM ceiling {fmt_si(m['ceiling_flops'], 'FLOP/s')}"
    return flops


def _findings_and_notes(m: dict[str, Any]) -> list[Text]:
    return ([Text(f"finding: {f}", style="bold yellow") for f in m.get("findings", [])]
            + [Text(f"note: {n}", style="yellow") for n in m.get("notes", [])])


def trials_table(trials: list[dict[str, Any]], title: str = "trials (each A/B against the best so far)") -> Table:
    """One row a trial; a tokens/s column beside samples/s where the workload's inputs are token ids (each trial's
    samples/s times the tokens a sample its loop trained on: another batch or padding trains on other tokens)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    tokens = any(isinstance(t.get("tokens_per_s"), (int, float)) for t in trials)
    guessed = " (guessed)" if any(t.get("tokens_guessed") for t in trials) else ""
    columns = [("knob", "left"), ("change", "left"), ("loss", "right"), ("samples/s", "right"),
               *([(f"tokens/s{guessed}", "right")] if tokens else []), ("speedup (95% CI)", "right"),
               ("result", "left")]
    for column, justify in columns:
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for t in trials:
        if t["status"] == "skipped":
            continue
        change = ", ".join(f"{k}={v}" for k, v in t["change"].items()) or "-"
        parity = t.get("parity")
        ci = t.get("speedup_ci")
        speedup = fmt_speedup(t.get("speedup")) + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        rates = [fmt_count(t.get("samples_per_s")), *([fmt_count(t.get("tokens_per_s"))] if tokens else [])]
        table.add_row(t["knob"], change, "-" if not parity else f"{parity['relative_difference']:+.1%}", *rates,
                      speedup, Text(t["status"], style=STATUS_STYLE.get(t["status"], "")))
    return table


def trial_notes(trials: list[dict[str, Any]]) -> Text:
    """Why each knob was skipped, failed, rejected or kept without a speed-up (required), one line each."""
    text = Text()
    for t in trials:
        if t["status"] != "not faster" and t.get("reason"):
            text.append(f"  {t['knob']}: {t['status']}: {t['reason']}\n",
                        style=STATUS_STYLE.get(t["status"], ""))
        if t.get("disturbed"):
            text.append(f"  {t['knob']}: {t['disturbed']}\n", style="yellow")
    return text


def trial_view(trial: dict[str, Any]) -> RenderableType:
    """`dlperf runs show` of one `train --tune` trial (a child run of the tuning run): its row of the trials table
    and why it was skipped, failed or not kept, the step it measured and its note (code for some knobs, such as
    torch.set_num_threads(1), words for others: it was labelled 'code'), where it printed the whole result, every
    loss of the parity check included, as JSON."""
    parts: list[RenderableType] = []
    if trial["status"] != "skipped":
        parts.append(trials_table([trial], "trial (an A/B against the best so far)"))
    notes = trial_notes([trial])
    notes.rstrip()
    if notes.plain:
        parts.append(notes)
    if isinstance(trial.get("reference_samples_per_s"), (int, float)):
        parts.append(Text(f"  the best so far: {fmt_count(trial['reference_samples_per_s'])} samples/s"))
    if trial.get("config"):
        parts.append(Text(f"  step: {config_line(trial['config'])}"))
    if trial.get("note"):
        parts.append(Text(f"  note: {trial['note']}"))  # code for some knobs, words for others
    return Group(*parts)


def no_gain_text(result: Mapping[str, Any]) -> str:
    """Why a finished tuning without a final A/B has no gain: every knob skipped, or none faster within parity."""
    if nothing_tried(result):
        return "none: every knob was skipped (why below), nothing was tried"
    return "none: no knob was both faster and within loss parity"


def not_tried_text(result: Mapping[str, Any]) -> str | None:
    """'time budget spent: not tried threads, workers (why below)': the best is the best of what was tried, not of
    every knob; None when the time budget left no knob untried (or there was none)."""
    not_tried = result.get("not_tried")
    return f"time budget spent: not tried {', '.join(not_tried)} (why below)" if not_tried else None


def budget_text(result: Mapping[str, Any]) -> str | None:
    """'time budget 20s: the trials took 25.0s, 5.0s over (during slow: ... (started at 15.0s, took 10.0s))': a budget
    bounds when a trial starts, so one can end past it, and the result said nothing of it; None without a budget."""
    use = result.get("time_budget")
    if not isinstance(use, Mapping):
        return None
    text = f"time budget {use['budget_s']:g}s: the loss curves and trials took {use['spent_s']:.1f}s"
    if use.get("overrun_by"):
        text += f", {use['overrun_s']:.1f}s over, during {use['overrun_by']}"
    return text


def _tokens_beside(result: Mapping[str, Any], which: str) -> str:
    """', 1,464 tokens/s' (' (guessed)' where counted from the inputs' shape) beside a tuned result's samples/s;
    '' for inputs that are not token ids, or a run stored before it was given."""
    rate = result.get(f"{which}_tokens_per_s")
    if not isinstance(rate, (int, float)):
        return ""
    guessed = (result.get(f"{which}_measurement") or {}).get("tokens_guessed")
    return f", {fmt_count(rate)} tokens/s{' (guessed)' if guessed else ''}"


def tokens_gain_text(result: Mapping[str, Any]) -> str | None:
    """Where the best trained on other tokens a sample than the baseline (another batch size, another padding), its
    tokens/s gain, which then is not the samples/s one; None where they are the same (the gain is both's)."""
    figures = [result.get(f"{which}_{unit}_per_s") for which in ("baseline", "best") for unit in ("tokens", "samples")]
    positive = [float(x) for x in figures if isinstance(x, (int, float)) and x > 0]
    if len(positive) < len(figures):
        return None
    base, base_rate, best, best_rate = positive
    per_base, per_best = base / base_rate, best / best_rate
    if abs(per_best / per_base - 1) < 0.01:
        return None
    return (f"tokens/s  {best / base:.2f}x: the best trained on {per_best:.1f} tokens a sample, the baseline on "
            f"{per_base:.1f}")


def tune_view(result: dict[str, Any]) -> RenderableType:
    if "best" not in result:  # stopped before the end (Ctrl-C, SIGTERM): only the finished trials
        return partial_tune_view(result)
    head = Text()
    head.append(f"tuned {result['workload']}\n", style="bold")
    head.append(f"  baseline  {config_line(result['baseline'])}: "
                f"{fmt_count(result['baseline_samples_per_s'])} samples/s{_tokens_beside(result, 'baseline')}\n")
    head.append(f"  best      {config_line(result['best'])}: {fmt_count(result['best_samples_per_s'])} samples/s"
                f"{_tokens_beside(result, 'best')}\n")
    ab = result.get("final_ab")
    confirmed = settings_confirmed(result)
    if ab:
        lo, hi = ab["speedup_ci"]
        head.append(f"  gain      {result['speedup']:.2f}x samples/s (interleaved A/B, step-time CI "
                    f"{lo:.2f}-{hi:.2f}x: {ab['verdict']})\n", style="bold green" if confirmed else "bold yellow")
        if result.get("disturbed"):
            head.append(f"  {result['disturbed']}\n", style="yellow")
    else:
        head.append(f"  gain      {no_gain_text(result)}\n", style="yellow")
    tokens_gain = tokens_gain_text(result)
    if tokens_gain:
        head.append(f"  {tokens_gain}\n")
    spent_line = budget_text(result)
    if spent_line:
        head.append(f"  {spent_line}\n", style="yellow" if (result.get("time_budget") or {}).get("overrun_by") else "")
    budget_line = not_tried_text(result)
    if budget_line:
        head.append(f"  {budget_line}\n", style="yellow")
    parts: list[RenderableType] = [head]
    if result["settings"]:
        settings = Table(title=SETTINGS_TITLE if confirmed else UNCONFIRMED_TITLE, box=box.SIMPLE_HEAD,
                         title_justify="left")
        settings.add_column("setting")
        settings.add_column("code")
        settings.add_column("gain", justify="right")
        for s in result["settings"]:
            settings.add_row(s["what"], s["code"], fmt_speedup(s.get("speedup")))
        parts.append(settings)
        if not confirmed:
            accepted = [t for t in result["trials"] if t["status"] == "accepted"]
            required = [_first_clause(str(t["reason"])) for t in accepted
                        if str(t.get("reason") or "").startswith("required")]
            if required:  # "keep your code as it is" contradicted it: the user's batch breaks their own budget
                # "the other gains" only where another trial was accepted: with the required change alone, it
                # spoke of gains that were not there
                others = ("; the other gains are each trial's short A/B, which the final one did not confirm"
                          if len(accepted) > len(required) else "")
                parts.append(Text(f"  {'; '.join(required)}: that change is needed whatever the final A/B "
                                  f"says{others}\n", style="yellow"))
            else:
                parts.append(Text(f"  {UNCONFIRMED_ADVICE}\n", style="yellow"))
    if any(t["status"] != "skipped" for t in result["trials"]):  # an empty table is a header and no rows
        parts.append(trials_table(result["trials"]))
    parts.append(trial_notes(result["trials"]))
    if result.get("parity_blind"):
        parts.append(Text(f"note: loss parity: {result['parity_blind']}\n", style="yellow"))
    # the headline's samples/s are the final A/B's; these tables come from a separate full measurement each, whose
    # own figure can differ by tens of percent on a busy machine: each title says so, with its figure
    # each full measurement with what it said of itself: its memory, MFU, findings and notes (a loss gone nan
    # from step 16, an implausible MFU, an input-bound step) were in the JSON and printed nowhere
    final = bool(ab)
    shown = [("baseline", result["baseline_measurement"])]
    if result["best"] != result["baseline"]:
        shown.append(("best", result["best_measurement"]))
    for which, measured in shown:
        parts.append(breakdown_table(measured, _breakdown_title(which, measured, final)))
        parts.append(_memory_and_flops(measured))
        parts += _findings_and_notes(measured)
    return Group(*parts)


def _first_clause(reason: str) -> str:
    """`reason` up to its first ';', with the parentheses it opened closed: 'required (batch 61 does not fit in
    1.1 MiB: 1 x 61 accumulation steps' was printed with its '(' left open."""
    first = reason.partition(";")[0]
    return first + ")" * max(0, first.count("(") - first.count(")"))


def _breakdown_title(which: str, measured: dict[str, Any], final_ab: bool = True) -> str:
    """The table's own samples/s, and (when a final A/B ran) that the headline's are the A/B's: with nothing
    accepted no final A/B runs, and the title referred to one."""
    rate = measured.get("samples_per_s")
    own = f": {fmt_count(rate)} samples/s" if isinstance(rate, (int, float)) else ""
    return f"{which} step breakdown (its own measurement{own}" + ("; the figures above are the final A/B's)"
                                                                  if final_ab else ")")


def partial_tune_view(result: dict[str, Any]) -> RenderableType:
    trials = result.get("trials", [])
    ran = sum(1 for t in trials if t["status"] != "skipped")  # a skipped knob ran no trial
    base_m, best_m = result.get("baseline_measurement"), result.get("best_measurement")
    stage = ("while the best configuration was measured" if best_m is not None else
             "after the baseline was measured, before the best was" if base_m is not None
             else "before the baseline and the best were measured")
    head = Text()
    head.append(f"tuning {result['workload']} stopped after {ran} trial{'' if ran == 1 else 's'}, {stage}\n",
                style="bold yellow")
    head.append(f"  baseline  {config_line(result['baseline'])}\n")
    if result.get("best_so_far"):
        head.append(f"  best so far {config_line(result['best_so_far'])} (not confirmed by the final A/B)\n")
    spent_line = budget_text(result)
    if spent_line:  # up to the interrupt
        head.append(f"  {spent_line}\n", style="yellow" if (result.get("time_budget") or {}).get("overrun_by") else "")
    parts: list[RenderableType] = [head]
    if ran:
        parts.append(trials_table(trials))
    parts.append(trial_notes(trials))
    for measured, title in ((base_m, "baseline step breakdown"), (best_m, "best step breakdown")):
        if measured is not None:
            parts.append(breakdown_table(measured, title))
            parts += [Text(f"  note: {n}", style="yellow") for n in measured.get("notes", []) if "interrupted" in n]
    return Group(*parts)


def _ddp_rate(result: Mapping[str, Any], which: str) -> str:
    """'1,234 samples/s' of a DDP launch (`which`: 'single_' or ''), with ', 5,678 tokens/s' where the workload's
    inputs are token ids (' (guessed)' where counted from their shape)."""
    text = f"{fmt_count(result[f'{which}samples_per_s'])} samples/s"
    tokens = result.get(f"{which}tokens_per_s")
    if isinstance(tokens, (int, float)):
        text += f", {fmt_count(tokens)} tokens/s{' (guessed)' if result.get('tokens_guessed') else ''}"
    return text


def ddp_view(result: dict[str, Any]) -> RenderableType:
    text = Text()
    if result.get("partial"):  # the N-process launch failed or was interrupted
        text.append(f"DDP {result['workload']}: {result['nproc']} processes ({result['backend']}), "
                    f"batch {result['batch_size']} per process\n", style="bold")
        text.append(f"  1 process   {_ddp_rate(result, 'single_')} (step {fmt_ms(result['single_step_s'])} ms)\n")
        text.append(f"  {result['partial']}\n", style="yellow")
        return text
    if result["nproc"] < 2:
        text.append(f"DDP {result['workload']}: 1 process ({result['backend']}), batch {result['batch_size']}\n",
                    style="bold")
        text.append(f"  1 process   {_ddp_rate(result, 'single_')} (step {fmt_ms(result['single_step_s'])} ms)\n")
        text.append("  one process has nothing to scale against or all-reduce with: pass --nproc 2 or more to "
                    "measure scaling and communication\n", style="yellow")
        return Group(text, *(Text(f"finding: {f}", style="yellow") for f in result.get("findings", [])),
                     *(Text(f"note: {n}", style="yellow") for n in result.get("notes", [])))
    text.append(f"DDP {result['workload']}: {result['nproc']} processes ({result['backend']}), "
                f"batch {result['batch_size']} per process\n", style="bold")
    text.append(f"  1 process   {_ddp_rate(result, 'single_')} (step {fmt_ms(result['single_step_s'])} ms)\n")
    text.append(f"  {result['nproc']} processes {_ddp_rate(result, '')} (step {fmt_ms(result['step_s'])} ms)\n")
    text.append(f"  scaling efficiency {result['scaling_efficiency']:.0%}", style="bold")
    compute, comm = result.get("compute_scaling"), result.get("communication_scaling")
    if compute is not None and comm is not None:  # efficiency = compute x communication (the same per-process batch)
        text.append(f": compute {compute:.0%} (the no-sync step, {fmt_ms(result['nosync_step_s'])} ms per rank, "
                    f"against {fmt_ms(result['single']['nosync_step_s'])} ms on 1 process) x communication "
                    f"{comm:.0%} (the rest: the all-reduce and DDP's work with other ranks, against the 1-process "
                    "DDP step)")
        if result.get("factors_note"):
            text.append(f"; {result['factors_note']}", style="yellow")
    text.append("\n")
    if result.get("communication_note"):  # the DDP step no longer than the no-sync step: an exposed 0% is noise
        text.append(f"  communication: {result['communication_note']}\n", style="yellow")
    else:
        text.append(f"  communication: {result['comm_share']:.0%} of the step is exposed gradient all-reduce "
                    f"({fmt_ms(result['exposed_comm_s'])} ms of {fmt_ms(result['step_s'])} ms; the all-reduce "
                    f"alone takes {fmt_ms(result['allreduce_s'])} ms)\n")
    overlap = result.get("overlap")
    if overlap is not None:
        plural = "" if result["buckets"] == 1 else "s"
        sizes = result.get("bucket_bytes")
        if sizes:  # DDP's own buckets: its first is 1 MiB by default, not bucket_cap_mb
            buckets = (f"{result['buckets']} gradient bucket{plural} ({' + '.join(f'{b / 2**20:.2f}' for b in sizes)}"
                       f" MiB; bucket_cap_mb {result['bucket_cap_mb']:g})")
        else:
            buckets = f"{result['buckets']} gradient bucket{plural} of {result['bucket_cap_mb']} MiB"
        text.append(f"  overlap: {overlap:.0%} of the all-reduce is hidden behind backward; {buckets} for "
                    f"{result['gradient_bytes'] / 2**20:.2f} MiB of gradients\n")
    parts: list[RenderableType] = [text]
    for finding in result.get("findings", []):
        parts.append(Text(f"finding: {finding}", style="yellow"))
    parts += [Text(f"note: {n}", style="yellow") for n in result.get("notes", [])]  # as a 1-process run's notes
    return Group(*parts)
