"""`dlperf zoo`: list the built-in workloads with their size, FLOPs per sample and metric."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from rich.text import Text

from dlperf.cli.common import add_json_argument, console, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="zoo workloads to describe (default: all); options as in zoo:minilm?seq_len=64")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from dlperf.workload.info import describe_zoo

    out = console()
    status: contextlib.AbstractContextManager[Any] = (
        contextlib.nullcontext() if args.json else out.status("building the models (digits-cnn trains on first use)")
    )
    with status:
        entries = describe_zoo(args.names or None)
    if args.json:
        print_json([entry.to_dict() for entry in entries])
        return 0
    from dlperf.report.fit import FirstThatFits

    out.print(FirstThatFits([_table(entries, summary=True), _table(entries, summary=False)], wrapping=True))
    return 0


SUMMARY_MIN = 30
"""The fewest columns the summary column wraps into; a narrower console gets the summaries under the table."""


def _table(entries: list[Any], summary: bool) -> Any:
    from rich import box
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    from dlperf.report.fit import hanging

    table = Table(title="dlperf zoo: FLOPs are one forward pass at batch 1", box=box.SIMPLE_HEAD)
    for column in ("workload", "kind", "params", "size", "FLOPs/sample", "metric"):
        table.add_column(column, no_wrap=True, justify="left" if column in ("workload", "kind", "metric") else "right")
    if summary:
        table.add_column("summary", ratio=1, min_width=SUMMARY_MIN)
    notes = []
    for entry in entries:
        info = entry.info
        if info is None:
            note = f"{escape(entry.summary)}\n[yellow]unavailable: {escape(entry.unavailable or '')}[/]"
            table.add_row(escape(entry.spec), "-", "-", "-", "-", "-", *([note] if summary else []))
            notes.append(hanging(f"{entry.spec}: ", Text.from_markup(note)))
            continue
        metric = "-" if info.metric_name is None else f"{info.metric_name} {'↑' if info.higher_is_better else '↓'}"
        size = f"{info.parameter_bytes / 2**20:.1f} MiB"
        table.add_row(escape(info.source or info.name), info.kind, _si(info.params), size,
                      _si(info.flops_per_sample), metric, *([escape(info.summary)] if summary else []))
        notes.append(hanging(f"{info.source or info.name}: ", Text(info.summary)))
    # on a narrow console the summaries, the column that matters most, come under the table, one a workload
    return table if summary else Group(table, *notes)


def _si(n: int) -> str:
    """12_345_678 -> '12.3M'."""
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)

