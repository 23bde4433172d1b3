"""`dlperf check WORKLOAD --baseline NAME`: re-measure; exit 1 only on a significant regression above the threshold."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from dlperf.cli.common import (
    ALLOCATOR_CHOICES,
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
    parser.add_argument("--confidence", type=percent_or_float, default=0.95,
                        help="confidence level, e.g. 95%% or 0.95 (default)")
    parser.add_argument("--duration", type=duration_s, default=None,
                        help="minimum measuring time per batch size (default: the baseline's); a batch size that "
                             "fails beside other busy processes or with stalled calls is measured once more, for as "
                             "long, and judged on that")
    parser.add_argument("--batch-size", type=int_list, default=None,
                        help="batch sizes to re-measure (default: the baseline's)")
    parser.add_argument("--allocator", default="baseline", choices=("baseline", *ALLOCATOR_CHOICES),
                        help="measure under this heap allocator (default: the one the baseline was measured under, "
                             "preloaded by restarting the command as `dlperf bench --allocator` does)")
    add_store_argument(parser)
    add_json_argument(parser)


def _use_baseline_allocator(args: argparse.Namespace, store: object) -> None:
    """Measure under the allocator the baseline ran (or the one asked for): a baseline taken under tcmalloc and
    checked under glibc failed the gate on the allocator's 8%, not the code's."""
    from dlperf.cli.common import error_console, use_allocator
    from dlperf.errors import ConfigError
    from dlperf.measure.allocator import ALLOCATORS, active_allocator

    if args.allocator != "baseline":
        use_allocator(args, "check")
        return
    name = (store.get_baseline(args.baseline).environment or {}).get("allocator")  # type: ignore[attr-defined]
    current = active_allocator()
    if name not in ALLOCATORS or name == current:
        return
    if not getattr(args, "_from_command_line", False):
        error_console().print(f"note: the baseline ran under {name}, this process runs {current} and cannot "
                              "restart itself (not started as a command): the figures include that difference",
                              markup=False)
        return
    try:
        use_allocator(argparse.Namespace(**{**vars(args), "allocator": name}), "check")
    except ConfigError as exc:
        error_console().print(f"note: the baseline ran under {name}, which cannot be used here ({exc}); measuring "
                              f"under {current}", markup=False)


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.common import bare_above_one, console, error_console, print_json
    from dlperf.compare.check import check_against_baseline
    from dlperf.compare.gate import GateConfig
    from dlperf.errors import ConfigError
    from dlperf.report.compare_text import check_lines

    # named as the options are (GateConfig names its fields: "max_regression must be a fraction >= 0")
    bare_above_one("--max-regression", args.max_regression)
    if not 0.0 <= args.max_regression < 10.0:
        raise ConfigError(f"--max-regression must be a fraction >= 0, e.g. 5% or 0.05; got {args.max_regression:g}")
    if not 0.5 < args.confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0.5, 1), e.g. 0.95 or 95%; got {args.confidence:g}")
    config = GateConfig(metric=args.metric, max_regression=args.max_regression, confidence=args.confidence)
    store = open_store(args, create=False)  # the baseline is in it
    _use_baseline_allocator(args, store)
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=error_console(),
                  transient=True, disable=args.json or not error_console().is_terminal) as progress:
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
        store_option = f" --store {shlex.quote(store.shown_url)}" if args.store else ""
        gate = outcome.gate.to_dict()
        for line in check_lines(gate, args.workload, args.baseline, store_option,
                                baseline_deleted=_deleted(store, gate.get("baseline_run_id"))):
            out.print(line)
    return outcome.exit_code


def _deleted(store: Any, run_id: str | None) -> bool:
    """Whether the run `run_id` is gone from the store (`dlperf runs delete` while the check measured)."""
    return bool(run_id) and not store.exists(run_id)
