"""`dlperf compare RUN_A RUN_B`: KPI deltas and significance; `dlperf compare --live URL`: server variants."""

from __future__ import annotations

import argparse

from dlperf.cli.common import (
    TOKEN_FILE_HELP,
    add_json_argument,
    add_store_argument,
    duration_s,
    open_store,
    percent_or_float,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN", help="two run ids (or unique prefixes): A then B")
    # 5% as check's --confidence 95% takes it (it was "invalid float value: '5%'")
    parser.add_argument("--alpha", type=percent_or_float, default=0.05,
                        help="significance level of the test: 0.05 or 5%% (default 0.05)")
    parser.add_argument("--min-effect", type=percent_or_float, default=None,
                        help="two runs: smallest change of the median latency called B slower/faster, and of each "
                             "other KPI called worse/better (default 1%%, as `dlperf ab`)")
    parser.add_argument("--live", metavar="URL", default=None,
                        help="compare the variants of a running `dlperf serve --variant ...` "
                             "(its base URL, its /metrics URL, or HOST:PORT)")
    parser.add_argument("--model", default=None, help="with --live: only this model's metrics")
    parser.add_argument("--window", type=duration_s, default=None,
                        help="with --live: compare only the requests of this window, e.g. 60s, scraped in 6-20 "
                             "slices; the latency verdict is a sign test over the slices (requests close in time "
                             "are not independent); default: everything since the server started")
    parser.add_argument("--control", metavar="VARIANT", default=None,
                        help="with --live: the variant the others are compared against (default: the one with most "
                             "requests, which can change between runs when the split is even)")
    parser.add_argument("--token", default=None,
                        help="with --live: the bearer token of a server started with --token or --token-file (it "
                             "protects /metrics); a command line is visible to every user of the host (ps): prefer "
                             "--token-file")
    parser.add_argument("--token-file", default=None, metavar="FILE", help=f"with --live: {TOKEN_FILE_HELP}")
    add_store_argument(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.common import console, print_json
    from dlperf.errors import ConfigError

    if not 0 < args.alpha < 0.5:  # for --live too (it took --alpha 5 and found differences everywhere)
        raise ConfigError(f"--alpha must be in (0, 0.5), got {args.alpha}")
    if args.live and args.min_effect is not None:
        raise ConfigError("--min-effect goes with two stored runs, not --live")
    min_effect = 0.01 if args.min_effect is None else args.min_effect
    if not 0 <= min_effect < 1:
        raise ConfigError(f"--min-effect must be a fraction in [0, 1), e.g. 1% or 0.01; got {min_effect:g}")
    for option, value in (("--control", args.control), ("--window", args.window), ("--model", args.model),
                          ("--token", args.token), ("--token-file", args.token_file)):
        if value is not None and not args.live:  # --window and --model were ignored without a word
            raise ConfigError(f"{option} goes with --live URL; two stored runs are compared as A then B")
    if args.live:
        if args.runs:
            raise ConfigError("give either two runs or --live URL, not both")
        return _live(args)
    if len(args.runs) != 2:
        raise ConfigError(f"compare needs two runs (A then B), got {len(args.runs)}: `dlperf runs list` shows ids")
    from dlperf.compare.runs import compare_records

    store = open_store(args, create=False)  # the runs are in it
    result = compare_records(store.get(args.runs[0]), store.get(args.runs[1]), alpha=args.alpha,
                             min_effect=min_effect)
    if args.json:
        print_json(result.to_dict())
        return 0
    from rich.markup import escape

    from dlperf.report.compare_text import comparison_tables

    out = console()
    # runs of two workloads: said before the tables that read as a change (it came last, after the notes)
    for warning in result.warnings:
        out.print(f"[bold yellow]warning:[/] {escape(warning)}")
    for table in comparison_tables(result):
        out.print(table)
    for note in result.notes:
        out.print(f"[yellow]note:[/] {escape(note)}")
    if result.environment_differences:
        out.print("[bold yellow]warning: the environments differ, so timings are not directly comparable:[/]")
        for diff in result.environment_differences:
            out.print(f"  {diff}")
    if result.points:
        out.print(f"[dim]{result.test_note}[/]")
    return 0


def _live(args: argparse.Namespace) -> int:
    from dlperf.cli.common import bearer_token, console, print_json
    from dlperf.compare.live import compare_live_url

    token = bearer_token(args.token, args.token_file)
    result = compare_live_url(args.live, model=args.model, alpha=args.alpha, window_s=args.window,
                             control=args.control, token=token)
    if args.json:
        print_json(result.to_dict())
    else:
        from dlperf.report.compare_text import live_table

        out = console()
        out.print(live_table(result))
        for line in result.findings:
            out.print(line)
    if result.interrupted is not None:  # compared up to the interrupt, and still ended by it
        from dlperf.cli.common import SIGTERM_EXIT, Terminated

        return SIGTERM_EXIT if isinstance(result.interrupted, Terminated) else 130
    return 0
