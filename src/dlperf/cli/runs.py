"""`dlperf runs list|show|delete|export|history`: browse the run store, delete or export a run, a KPI's history."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dlperf.cli.common import add_json_argument, add_store_argument, console, open_store, print_json
from dlperf.errors import ConfigError, StoreError
from dlperf.store.records import OK, SAMPLED_KINDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="runs_command", metavar="SUBCOMMAND")
    p = sub.add_parser("list", help="the newest runs first", description="the newest runs first")
    p.add_argument("--kind", default=None, help="only runs of this kind (bench, calibrate, optimize, ...)")
    p.add_argument("--workload", default=None,
                   help="only runs of this workload (a file workload however it was typed, from any folder)")
    p.add_argument("--limit", default="20", metavar="N", help="at most N runs (default 20)")
    p.add_argument("--children", action="store_true",
                   help="also the runs that belong to another run (an optimize run's candidates, a train --tune's "
                        "trials), which are left out unless --kind names their kind")
    add_json_argument(p)
    add_store_argument(p)

    p = sub.add_parser("show", help="one run: config, result, environment", description="one run in full")
    p.add_argument("id", help="run id or a unique prefix of it")
    add_json_argument(p)
    add_store_argument(p)

    p = sub.add_parser("delete", help="delete a run (and an optimize run's candidates)",
                       description="delete a run from the store, with its child runs (an optimize run's candidates)")
    p.add_argument("id", help="run id or a unique prefix of it")
    p.add_argument("--force", action="store_true",
                   help="also when a baseline names the run (the baseline is removed with it), or when it is still "
                        "marked running (its process killed)")
    add_store_argument(p)

    p = sub.add_parser("export", help="write one run as JSON", description="write one run as JSON")
    p.add_argument("id", help="run id or a unique prefix of it")
    p.add_argument("--json", action="store_true", default=True, help="JSON (the only format; the default)")
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    add_store_argument(p)

    p = sub.add_parser("history", help="a KPI of one workload over its runs, as a sparkline",
                       description="a KPI of one workload over its stored runs, oldest first, with the git commit "
                                   "each was taken in where recorded")
    p.add_argument("workload", help="the workload as it was given to the command, e.g. zoo:mlp")
    p.add_argument("--metric", default="p50", help="p50 (default), p90, p95, p99, mean or throughput")
    p.add_argument("--kind", default="bench", choices=SAMPLED_KINDS,
                   help="runs of this kind (default bench; check runs re-measure per batch size too)")
    p.add_argument("--batch-size", default=None, metavar="N",
                   help="the batch size to follow (default: the newest run's first batch size)")
    p.add_argument("--limit", default="50", metavar="N", help="the newest N runs (default 50)")
    add_json_argument(p)
    add_store_argument(p)


def _positive_int(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{option} expects a positive integer, got '{text}'") from None
    if value < 1:
        raise ConfigError(f"{option} expects a positive integer, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    command = getattr(args, "runs_command", None)
    if command is None:
        raise ConfigError("`dlperf runs` needs a subcommand: list, show ID, delete ID, export ID or history WORKLOAD")
    return {"list": _list, "show": _show, "delete": _delete, "export": _export, "history": _history}[command](args)


def _list(args: argparse.Namespace) -> int:
    from dlperf.report.terminal import runs_table

    store = open_store(args, create=False)
    limit = _positive_int("--limit", args.limit)
    # one optimize run records a candidate run each: 19 of the 20 listed after one search, the bench and profile
    # runs pushed out of view (and `runs list --limit 2 --json` in CI picked two candidates)
    top_level = not args.children and not args.kind
    if args.kind and not store.has_kind(args.kind):  # Store.list refuses it; the line below names the store's kinds
        records, hidden = [], 0
    elif args.workload:  # by the spec's meaning: profile and optimize record a file workload by its absolute path
        from dlperf.store.query import runs_of_workload

        matching = runs_of_workload(store, args.workload, args.kind)
        hidden = sum(1 for r in matching if r.parent_id) if top_level else 0
        records = [r for r in matching if not (top_level and r.parent_id)][:limit]
    else:
        records = store.list(kind=args.kind, limit=limit, top_level=top_level)
        hidden = store.count_children() if top_level else 0
    if args.json:
        from dlperf.report.terminal import headline_text

        if not records and not hidden and (args.kind or args.workload):  # '[]' alone, where the text says why
            print(_no_match(store, args.kind, args.workload), file=sys.stderr)
        # headline_text: the table's line. 'headline' is the result's KPI record, which only bench-like runs have:
        # a check run's was its throughput, not its FAIL, and ab, optimize, profile and train runs had null.
        print_json([{k: v for k, v in r.to_dict().items() if k not in ("result", "environment")}
                    | {"headline": r.result.get("headline"), "headline_text": headline_text(r)} for r in records])
        return 0
    if not records and not hidden and (args.kind or args.workload):
        # "no runs in the store" for a filter that matches nothing reads as if the store had lost them.
        console().print(_no_match(store, args.kind, args.workload), markup=False, soft_wrap=True)
        return 0
    console().print(runs_table(records, store.shown_url))
    if hidden:
        runs = "1 run that belongs" if hidden == 1 else f"{hidden} runs that belong"
        console().print(f"{runs} to another run (optimize candidates, tune trials) not listed: --children lists "
                        "them; `dlperf runs show ID` of an optimize or tune run shows its own",
                        markup=False, soft_wrap=True, style="dim")
    return 0


def _no_match(store: Any, kind: str | None, workload: str | None) -> str:
    filters = " and ".join(f"{name} '{value}'" for name, value in (("kind", kind), ("workload", workload)) if value)
    have = []
    if kind:
        have.append(f"kinds: {', '.join(store.distinct('kind')) or 'none'}")
    if workload:
        have.append(f"workloads: {', '.join(store.distinct('workload')) or 'none'}")
    return f"no runs of {filters} in {store.shown_url}; the store has {'; '.join(have)}"


def _show(args: argparse.Namespace) -> int:
    from dlperf.report.terminal import record_view

    record = open_store(args, create=False).get(args.id)
    if args.json:
        print_json(record.to_dict())
        return 0
    console().print(record_view(record))
    return 0


def _delete(args: argparse.Namespace) -> int:
    store = open_store(args, create=False)
    before = store.list_baselines()
    deleted = store.delete(args.id, force=args.force)
    run = deleted[0]
    children = f" and its {len(deleted) - 1} child runs" if len(deleted) > 1 else ""
    gone = sorted({name for name, *_ in before} - {name for name, *_ in store.list_baselines()})
    # --force removes the baselines that named it: said, not left to be found by the next `dlperf check`
    removed = f"; removed the baseline{'s' if len(gone) > 1 else ''} {', '.join(gone)}" if gone else ""
    console().print(f"deleted run {run.id} ({run.kind} of {run.workload}, {run.created_at[:19]}){children}{removed}",
                    markup=False, soft_wrap=True)
    return 0


def _export(args: argparse.Namespace) -> int:
    from dlperf._stdio import json_stream
    from dlperf.cli.common import _finite

    record = open_store(args, create=False).get(args.id)
    # NaN and Infinity (a percentile of no requests) as null, as `runs show --json` prints them: they are not
    # JSON, and jq or a strict parser refuses the whole file.
    text = json.dumps(_finite(record.to_dict()), indent=2, default=str, allow_nan=False) + "\n"
    out = json_stream()  # stdout: `main` sends everything else to stderr under --json, which export always is
    if args.output is None:
        out.write(text)
        return 0
    path = Path(args.output)
    # as `dlperf report -o` says: the OS's "[Errno 2] No such file or directory" named neither the folder nor the fix
    if path.is_dir():
        raise ConfigError(f"'{path}' is a folder: give the export a file name, e.g. -o {path / f'{record.id}.json'}")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write '{path}': the folder '{path.parent}' does not exist; create it or give "
                          "another -o")
    try:
        path.write_text(text)
    except OSError as exc:
        raise ConfigError(f"cannot write '{path}': {exc}") from exc
    out.write(f"run {record.id} written to {path}\n")
    return 0


def _history(args: argparse.Namespace) -> int:
    from dlperf.report.terminal import history_view
    from dlperf.store.query import kpi_history, metric_spec, workload_runs

    metric_spec(args.metric)
    store = open_store(args, create=False)
    records = workload_runs(store, args.kind, args.workload, limit=_positive_int("--limit", args.limit))
    try:
        history = kpi_history(records, args.metric, _positive_int("--batch-size", args.batch_size), args.workload,
                              args.kind)
    except StoreError as exc:
        # a CI job that only checks has its history in check runs (`report --history` draws them): "run `dlperf
        # bench wl.py` first" sent it to record what it had
        other = "check" if args.kind == "bench" else "bench"
        if not any(r.status == OK for r in records) and workload_runs(store, other, args.workload, status=OK):
            raise StoreError(f"{exc}; the store has {other} runs of it: `dlperf runs history {args.workload} --kind "
                             f"{other}`") from exc
        raise
    from dlperf.report.changes import history_changes

    by_id = {r.id: r for r in records}
    changes = history_changes([by_id[p.run_id] for p in history.points])
    if args.json:
        # what the text marks `changed` (other settings or machine than the run before): a CI script reading the
        # trend saw a step and not that the settings made it
        data = history.to_dict()
        for point in data["points"]:
            point["changed"] = changes.get(point["run_id"], [])
        print_json(data)
        return 0
    console().print(history_view(history, changes))
    return 0
