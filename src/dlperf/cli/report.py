"""`dlperf report RUN... -o report.html [--history WORKLOAD]`: one self-contained HTML file."""

from __future__ import annotations

import argparse

from dlperf.cli.common import add_store_argument, open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run ids or unique prefixes (`dlperf runs list`)")
    parser.add_argument("-o", "--output", default="report.html",
                        help="the HTML file to write (default report.html; - for stdout)")
    parser.add_argument("--history", metavar="WORKLOAD", default=None,
                        help="add the trend of a workload's bench and check runs (as recorded, e.g. zoo:mlp)")
    parser.add_argument("--metric", default=None, choices=("p50", "p90", "p95", "p99", "mean", "throughput"),
                        help="with --history: the metric of the trend (default p50)")
    parser.add_argument("--title", default=None, help="title of the report")
    add_store_argument(parser)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dlperf.cli.common import console
    from dlperf.report.build import build_report, check_output, write_report

    if args.metric is not None and args.history is None:  # it was ignored without a word
        from dlperf.errors import ConfigError

        raise ConfigError("--metric sets the metric of the --history trend: add --history WORKLOAD, or drop it")
    path = Path(args.output)
    if args.output != "-":  # '-' wrote a file named '-'
        check_output(path)
    store = open_store(args, create=False)  # the runs are in it
    text = build_report(store, args.runs, history_workload=args.history, history_metric=args.metric or "p50",
                        title=args.title)
    if args.output == "-":
        import sys

        sys.stdout.write(text)
        return 0
    write_report(path, text)
    console().print(f"wrote {path} ({len(text) / 1024:.0f} KiB); open it in a browser")
    return 0
