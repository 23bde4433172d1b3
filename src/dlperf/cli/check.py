"""`dlperf check WORKLOAD --baseline NAME`: re-measure; exit 1 only on a significant regression above the threshold."""

from __future__ import annotations

import argparse

from dlperf.cli.common import (
    WORKLOAD_HELP,
    add_json_argument,
    add_store_argument,
    duration_s,
    int_list,
    open_store,
    percent_or_float,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP)
    parser.add_argument("--baseline", required=True, help="baseline name (`dlperf baseline list`)")
    parser.add_argument("--max-regression", type=percent_or_float, default=0.05,
                        help="largest tolerated regression, e.g. 5%% (default) or 0.05")
    parser.add_argument("--metric", default="p50", choices=("p50", "p90", "p95", "p99", "mean", "throughput"),
                        help="what is compared (default p50 latency)")
    parser.add_argument("--confidence", type=float, default=0.95, help="confidence level (default 0.95)")
    parser.add_argument("--duration", type=duration_s, default=None,
                        help="minimum measuring time per batch size (default: the baseline's)")
    parser.add_argument("--batch-size", type=int_list, default=None,
                        help="batch sizes to re-measure (default: the baseline's)")
    add_store_argument(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.common import console, error_console, print_json
    from dlperf.compare.check import check_against_baseline
    from dlperf.compare.gate import GateConfig
    from dlperf.report.compare_text import gate_lines

    config = GateConfig(metric=args.metric, max_regression=args.max_regression, confidence=args.confidence)
    store = open_store(args, create=False)  # the baseline is in it
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=error_console(),
                  transient=True, disable=args.json) as progress:
        task = progress.add_task("measuring")
        outcome = check_against_baseline(
            args.workload, args.baseline, store, config, min_duration_s=args.duration,
            batch_sizes=args.batch_size,
            on_progress=lambda b, n, s: progress.update(task, description=f"batch {b}: {n} calls, {s:.1f} s"),
        )
    if args.json:
        print_json(outcome.to_dict())
    else:
        out = console()
        out.print(f"check of {args.workload} against baseline '{args.baseline}' (run {outcome.baseline.id}); "
                  f"this run: {outcome.run_id}")
        for line in gate_lines(outcome.gate.to_dict()):
            out.print(line)
    return outcome.exit_code
