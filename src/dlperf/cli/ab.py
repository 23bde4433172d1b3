"""`dlperf ab WORKLOAD --a SETTINGS --b SETTINGS`: interleaved A/B of two settings of one workload."""

from __future__ import annotations

import argparse

from dlperf.cli.common import WORKLOAD_HELP, add_json_argument, add_store_argument, percent_or_float

SETTINGS_HELP = (
    "comma-separated key=value: threads=N, precision=fp32|bf16|fp16, batch_size=N, channels_last=0|1, "
    "device=cpu|cuda[:N], option.NAME=VALUE (a workload option); empty = defaults"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP)
    parser.add_argument("--a", dest="a", default="", metavar="SETTINGS", help="settings of A: " + SETTINGS_HELP)
    parser.add_argument("--b", dest="b", default="", metavar="SETTINGS", help="settings of B (same keys)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size of both sides unless their settings give one (default: the workload's)")
    parser.add_argument("--blocks", type=int, default=20, help="paired blocks, ABBA order (default 20, min 4)")
    parser.add_argument("--iters-per-block", type=int, default=None,
                        help="calls per block (default: enough for ~50 ms)")
    parser.add_argument("--min-effect", type=percent_or_float, default=0.01,
                        help="smallest difference called faster/slower (default 1%%)")
    parser.add_argument("--confidence", type=percent_or_float, default=0.95,
                        help="confidence level, e.g. 95%% or 0.95 (default)")
    add_store_argument(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.bench import emulated_precision_note
    from dlperf.cli.common import console, error_console, open_store, print_json
    from dlperf.compare.ab import run_ab_recorded
    from dlperf.compare.settings import parse_settings
    from dlperf.report.compare_text import ab_table, ab_verdict

    a = parse_settings(args.a, "--a")
    b = parse_settings(args.b, "--b")
    for side, settings in (("--a", a), ("--b", b)):  # as bench says it: an emulated fp16 "slower" is no surprise
        note = emulated_precision_note(settings.precision, settings.device)
        if note is not None:
            error_console().print(f"note: {side}: {note}", markup=False)
    store = open_store(args)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("A/B blocks"), BarColumn(), MofNCompleteColumn(), console=error_console(),
                  transient=True, disable=args.json or not error_console().is_terminal) as progress:
        task = progress.add_task("ab", total=args.blocks)
        outcome, run_id = run_ab_recorded(
            store, args.workload, a, b, batch_size=args.batch_size, blocks=args.blocks,
            iters_per_block=args.iters_per_block, confidence=args.confidence, min_effect=args.min_effect,
            on_block=lambda done, total: progress.update(task, completed=done),
        )
    if args.json:
        data = outcome.to_dict()
        data.pop("measurements", None)
        print_json({"run_id": run_id, **data})
        return 0
    out = console()
    out.print(ab_table(outcome))
    out.print(ab_verdict(outcome))
    for warning in outcome.warnings:
        error_console().print(f"[yellow]warning:[/] {warning}", highlight=False)
    out.print(f"recorded as run {run_id} (`dlperf report {run_id} -o ab.html`)")
    return 0
