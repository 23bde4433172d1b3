"""`dlperf baseline set NAME RUN | list | rm NAME`: named baselines for `dlperf check`."""

from __future__ import annotations

import argparse

from dlperf.cli.common import add_json_argument, add_store_argument, open_store
from dlperf.errors import StoreError


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
    from dlperf.compare.baselines import baseline_caveats, baseline_rows, commit_text, run_commit, set_baseline

    store = open_store(args, create=False)  # a baseline names a stored run
    out = console()
    if args.action == "set":
        previous = next((run for name, run, _ in store.list_baselines() if name == args.name), None)
        record = set_baseline(store, args.name, args.run)

        # the commit each run was taken at, where it recorded one: which code the checks are judged against
        def at_commit(run_id: str) -> str:
            try:
                commit, dirty = run_commit(store.get(run_id))
            except StoreError:
                return ""
            return (f" at commit {commit_text(commit, dirty)}{' (uncommitted changes)' if dirty else ''}"
                    if commit else "")

        # The run it pointed at before is named, so a replaced baseline can be set back.
        was = f"; it was run {previous}{at_commit(previous)}" if previous not in (None, record.id) else ""
        out.print(f"baseline '{args.name}' -> run {record.id} ({record.kind} of {record.workload}, "
                  f"{record.created_at[:19]}){at_commit(record.id)}{was}", markup=False, soft_wrap=True)
        for caveat in baseline_caveats(record):
            error_console().print(f"warning: {caveat}", markup=False, soft_wrap=True)
        return 0
    if args.action == "rm":
        store.remove_baseline(args.name)
        out.print(f"removed baseline '{args.name}'", markup=False)
        return 0
    rows = baseline_rows(store)
    if getattr(args, "json", False):
        print_json([{"name": n, "run_id": r, "workload": w, "created_at": c, "git_commit": g, "git_dirty": d}
                    for n, r, w, c, g, d in rows])
        return 0
    if not rows:
        out.print("no baselines yet: `dlperf baseline set NAME RUN`")
        return 0
    from rich.markup import escape

    from dlperf.report.compare_text import baselines_table

    # as text, not markup: a baseline named '[bold]x[/]' was listed as a bold 'x'
    commits = any(g for *_, g, _ in rows)  # a column only where a run recorded its commit
    out.print(baselines_table([(escape(n), r, "(run deleted)" if w is None else escape(w), c,
                                *((commit_text(g, d),) if commits else ())) for n, r, w, c, g, d in rows]))
    return 0
