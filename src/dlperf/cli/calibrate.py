"""`dlperf calibrate`: measure (or show the cached) ceilings of this machine: GEMM FLOP/s per dtype, bandwidth."""

from __future__ import annotations

import argparse

from dlperf.cli.common import (
    add_json_argument,
    add_store_argument,
    console,
    error_console,
    note_oversubscribed,
    open_store,
    print_json,
)
from dlperf.measure.env import check_threads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--force", action="store_true", help="measure again even if cached")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch intra-op threads to measure with (default: torch's); `profile --threads N` "
                             "uses the ceilings of N threads")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, a second or two; a rough figure, for tests and smoke checks")
    add_json_argument(parser)
    add_store_argument(parser)


def run(args: argparse.Namespace) -> int:
    from dlperf.calibrate import cache_path, lookup_or_measure
    from dlperf.calibrate.ceilings import machine_key
    from dlperf.cli.progress import step_progress
    from dlperf.measure.bench import torch_threads
    from dlperf.measure.env import capture_environment
    from dlperf.report.terminal import ceilings_table

    check_threads(args.threads, "--threads")
    # as bench, profile and train say it: ceilings of more threads than CPUs measure their contention, and
    # `profile --threads N` holds a step to them
    note_oversubscribed(args.threads)
    store = open_store(args)
    config = {"device": args.device, "force": args.force, "quick": args.quick, "threads": args.threads, "version": 1}
    environment = capture_environment(args.device, args.threads).to_dict()
    with torch_threads(args.threads):
        key = machine_key(args.device)
    if not args.force:
        for note in _cache_notes(key, args.quick):
            error_console().print(f"note: {note}", markup=False)
    with store.recording("calibrate", args.device, config, environment) as run_handle:
        with step_progress(5, "calibrate") as on_step, torch_threads(args.threads):
            ceilings, cached = lookup_or_measure(args.device, force=args.force, quick=args.quick, explicit=True,
                                                 on_progress=on_step)
        kept = cache_path(ceilings.machine_key, ceilings.quick)  # not there where the cache could not be written
        run_handle.result = {**ceilings.to_dict(), "cached": cached, "cache_file": str(kept) if kept.exists() else None}
    if args.json:
        print_json({"run_id": run_handle.id, **run_handle.result})
        return 0
    out = console()
    out.print(ceilings_table(ceilings.to_dict(), cached=cached))
    out.print(f"run {run_handle.id} saved to {store.shown_url}", markup=False, soft_wrap=True)
    return 0


def _cache_notes(key: str, quick: bool) -> list[str]:
    """What the user should hear of unusable cache files before the lookup: the full measurement's file (read
    first), and with --quick the quick one's, which serves when the full one cannot (`lookup_or_measure`)."""
    from dlperf.calibrate.ceilings import cache_problem, read_cache

    full = cache_problem(key)
    if not quick:
        return [] if full is None else [f"{full}; measuring again and replacing it"]
    if full is None and read_cache(key, quick=False) is not None:
        return []
    quick_problem = cache_problem(key, quick=True)
    if quick_problem is None and read_cache(key, quick=True) is not None:
        return [] if full is None else [f"{full}; using the quick measurement cached beside it"]
    notes = [n for n in (full, quick_problem) if n is not None]
    if notes:
        notes[-1] += "; measuring again"
    return notes
