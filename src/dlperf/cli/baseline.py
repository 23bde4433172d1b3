"""`dlperf baseline set NAME RUN | list | rm NAME`: named baselines for `dlperf check`."""

from __future__ import annotations

import argparse

from dlperf.cli.common import add_json_argument, add_store_argument, open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p_set = sub.add_parser("set", help="name a stored run as a baseline (replaces one of that name)")
    p_set.add_argument("name", help="baseline name, e.g. main or resnet18-cpu")
    p_set.add_argument("run", help="run id or unique prefix (`dlperf runs list`)")
    p_list = sub.add_parser("list", help="list the baselines")
    p_rm = sub.add_parser("rm", help="remove a baseline (the run stays)")
    p_rm.add_argument("name")
    for p in (p_set, p_list, p_rm):
        add_store_argument(p)
    add_json_argument(p_list)


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.common import console, error_console, print_json
    from dlperf.compare.baselines import baseline_caveats, baseline_rows, set_baseline

    store = open_store(args, create=False)  # a baseline names a stored run
    out = console()
    if args.action == "set":
        previous = next((run for name, run, _ in store.list_baselines() if name == args.name), None)
        record = set_baseline(store, args.name, args.run)
        # The run it pointed at before is named, so a replaced baseline can be set back.
        was = f"; it was run {previous}" if previous not in (None, record.id) else ""
        out.print(f"baseline '{args.name}' -> run {record.id} ({record.kind} of {record.workload}, "
                  f"{record.created_at[:19]}){was}", markup=False, soft_wrap=True)
        for caveat in baseline_caveats(record):
            error_console().print(f"warning: {caveat}", markup=False, soft_wrap=True)
        return 0
    if args.action == "rm":
        store.remove_baseline(args.name)
        out.print(f"removed baseline '{args.name}'", markup=False)
        return 0
    rows = baseline_rows(store)
    if getattr(args, "json", False):
        print_json([{"name": n, "run_id": r, "workload": w, "created_at": c} for n, r, w, c in rows])
        return 0
    if not rows:
        out.print("no baselines yet: `dlperf baseline set NAME RUN`")
        return 0
    from rich.markup import escape

    from dlperf.report.compare_text import baselines_table

    # as text, not markup: a baseline named '[bold]x[/]' was listed as a bold 'x'
    out.print(baselines_table([(escape(n), r, "(run deleted)" if w is None else escape(w), c) for n, r, w, c in rows]))
    return 0
