"""`dlperf zoo`: list the built-in workloads with their size, FLOPs per sample and metric."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

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
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="dlperf zoo: FLOPs are one forward pass at batch 1", box=box.SIMPLE_HEAD)
    for column in ("workload", "kind", "params", "size", "FLOPs/sample", "metric"):
        table.add_column(column, no_wrap=True, justify="left" if column in ("workload", "kind", "metric") else "right")
    table.add_column("summary", ratio=1)
    for entry in entries:
        info = entry.info
        if info is None:
            note = f"{escape(entry.summary)}\n[yellow]unavailable: {escape(entry.unavailable or '')}[/]"
            table.add_row(escape(entry.spec), "-", "-", "-", "-", "-", note)
            continue
        metric = "-" if info.metric_name is None else f"{info.metric_name} {'↑' if info.higher_is_better else '↓'}"
        size = f"{info.parameter_bytes / 2**20:.1f} MiB"
        table.add_row(escape(info.source or info.name), info.kind, _si(info.params), size,
                      _si(info.flops_per_sample), metric, escape(info.summary))
    out.print(table)
    return 0


def _si(n: int) -> str:
    """12_345_678 -> '12.3M'."""
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)

