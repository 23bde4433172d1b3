"""`dlperf calibrate`: measure (or show the cached) ceilings of this machine: GEMM FLOP/s per dtype, bandwidth."""

from __future__ import annotations

import argparse

from dlperf.cli.common import (
    add_json_argument,
    add_store_argument,
    console,
    error_console,
    open_store,
    print_json,
)
from dlperf.errors import ConfigError


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
    from dlperf.calibrate.ceilings import cache_problem, machine_key
    from dlperf.cli.progress import step_progress
    from dlperf.measure.bench import torch_threads
    from dlperf.measure.env import capture_environment
    from dlperf.report.terminal import ceilings_table

    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    store = open_store(args)
    config = {"device": args.device, "force": args.force, "quick": args.quick, "threads": args.threads, "version": 1}
    environment = capture_environment(args.device, args.threads).to_dict()
    with torch_threads(args.threads):
        key = machine_key(args.device)
    problem = None if args.force else cache_problem(key)
    if problem is not None:
        error_console().print(f"note: {problem}; measuring again{'' if args.quick else ' and replacing it'}",
                              markup=False)
    with store.recording("calibrate", args.device, config, environment) as run_handle:
        with step_progress(5, "calibrate") as on_step, torch_threads(args.threads):
            ceilings, cached = lookup_or_measure(args.device, force=args.force, quick=args.quick,
                                                 on_progress=on_step)
        run_handle.result = {**ceilings.to_dict(), "cached": cached,
                             "cache_file": str(cache_path(ceilings.machine_key, ceilings.quick))}
    if args.json:
        print_json({"run_id": run_handle.id, **run_handle.result})
        return 0
    out = console()
    out.print(ceilings_table(ceilings.to_dict(), cached=cached))
    out.print(f"run {run_handle.id} saved to {store.url}", markup=False, soft_wrap=True)
    return 0
