"""`dlperf optimize WORKLOAD`: search for the best pipeline of passes within an accuracy budget."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from dlperf.cli.common import (
    WORKLOAD_HELP,
    add_json_argument,
    add_store_argument,
    duration_s,
    error_console,
    percent_or_float,
    print_json,
)

if TYPE_CHECKING:
    from dlperf.optimize.search import OptimizeConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP)
    parser.add_argument("--objective", default="latency", choices=("latency", "throughput", "size", "memory"),
                        help="what the winner is best at (default latency)")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size measured (default: the workload's)")
    drop = parser.add_mutually_exclusive_group()
    drop.add_argument("--max-metric-drop", type=percent_or_float, default=None,
                      help="largest allowed relative drop of the metric, e.g. 1%% (default 1%%)")
    drop.add_argument("--max-metric-drop-abs", type=float, default=None,
                      help="largest allowed drop of the metric in its own units, e.g. 0.005")
    parser.add_argument("--latency-budget-ms", type=float, default=None, help="p99 latency every candidate must meet")
    parser.add_argument("--min-fidelity-worst", type=float, default=None, metavar="COSINE",
                        help="lowest fidelity (cosine to the original's outputs) any single eval input may have, "
                             "e.g. 0.95: the metric constraint is on the mean (workloads with a fidelity metric, or "
                             "none)")
    parser.add_argument("--time-budget", type=duration_s, default=600.0,
                        help="wall time for the whole search, e.g. 90s, 10m (default 10m)")
    parser.add_argument("--candidate-timeout", type=duration_s, default=300.0,
                        help="a candidate running longer is killed and recorded as hung (default 5m)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads in every candidate")
    parser.add_argument("--passes", default=None,
                        help="only these passes, comma-separated (e.g. hygiene,compile,onnxruntime)")
    parser.add_argument("--max-depth", type=int, default=3, help="most passes in one pipeline (default 3)")
    parser.add_argument("--min-duration", type=duration_s, default=1.0,
                        help="minimum measured time per candidate (default 1s)")
    parser.add_argument("--export", default=None, metavar="DIR", help="write the winning artifact here")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", default=None, metavar="RUN_ID",
                        help="continue this interrupted search (same workload, code and options)")
    resume.add_argument("--no-resume", action="store_true",
                        help="do not continue the last interrupted search of this workload automatically")
    parser.add_argument("--workdir", default=None, help="where candidate artifacts go (default next to the store)")
    parser.add_argument("--executor", default="local", metavar="local|ray[:ADDRESS]",
                        help="where candidates run: local child processes (default), or Ray: a local instance, "
                             "or the cluster at ADDRESS (one timing trial per node; see docs/ray.md)")
    add_json_argument(parser)
    add_store_argument(parser)


def budget_start(from_command_line: bool) -> float:
    """The `time.monotonic()` the time budget counts from: the process's start for the `dlperf` command (Python's and
    torch's imports are part of what the user waits for), the call for a caller of `main(argv)` in a process of its
    own, which may have run for hours (it lost up to a minute of its budget to the process's age)."""
    from dlperf.optimize.search import process_started_at

    return process_started_at() if from_command_line else time.monotonic()


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.common import note_oversubscribed, open_store
    from dlperf.optimize.search import ExportFailed, check_options, optimize
    from dlperf.report.optimize_view import load_note
    from dlperf.workload.loader import load_workload

    config = search_config(args)
    from dlperf.optimize.executor import executor_from_spec, parse_executor

    parse_executor(args.executor)  # a typo fails before the store is opened
    if args.executor.startswith("ray"):
        from dlperf._device import check_ray_device

        check_ray_device(config.device, f"--executor {args.executor}", "trial")
    if not args.executor.startswith("ray"):  # a Ray node's CPUs are not this machine's
        note_oversubscribed(args.threads)
    store = open_store(args)
    check_options(config, args.export, store)  # a misspelt --passes, a bad --export: refused before the load
    progress = _Progress(args.objective)
    # The budget counts from the command's start, the workload's loading included: taken after the load, the start
    # was capped at 60 s ago, so an import that took longer was partly left out of it, and nothing said it took any.
    started_at = budget_start(getattr(args, "_from_command_line", False))
    loading = time.monotonic()
    # before `--executor ray` starts Ray (seconds): a misspelt workload or a broken file is refused at once
    workload = load_workload(args.workload)
    note = load_note(time.monotonic() - loading, config.time_budget_s)
    if note is not None:
        error_console().print(note, markup=False)
    made: list[Any] = []

    def make_executor() -> Any:  # once every option is checked: a bad --passes was refused after Ray had started
        made.append(executor_from_spec(args.executor, config.device))
        return made[-1]

    try:
        result = optimize(workload, config, store=store, export_dir=args.export, resume=args.resume,
                          auto_resume=not args.no_resume, on_event=progress, make_executor=make_executor,
                          started_at=started_at)
    except ExportFailed as exc:
        _print(exc.result.to_dict(), args.json)  # the search's results first, then the one-line error
        raise
    except KeyboardInterrupt as exc:
        # the interrupted line named the kept run but not that it resumes: `runs show` alone said so
        exc.dlperf_resume = (  # type: ignore[attr-defined]
            "add --resume {run} (without --no-resume) to resume it" if args.no_resume
            else "the same dlperf optimize command resumes it, or --resume {run}")
        raise
    finally:
        for executor in made:
            executor.close()
    _print(result.to_dict(), args.json)
    return 0


def search_config(args: argparse.Namespace) -> OptimizeConfig:
    """The search's settings from the command line (ConfigError for a bad one, before anything runs)."""
    from dlperf.cli.common import require_positive
    from dlperf.optimize.constraints import DEFAULT_MAX_DROP, Constraints
    from dlperf.optimize.search import OptimizeConfig

    require_positive("--latency-budget-ms", args.latency_budget_ms)
    _check_bare_drop(args.max_metric_drop)
    constraints = Constraints(
        max_metric_drop=None if args.max_metric_drop_abs is not None else (
            args.max_metric_drop if args.max_metric_drop is not None else DEFAULT_MAX_DROP),
        max_metric_drop_abs=args.max_metric_drop_abs,
        latency_budget_s=args.latency_budget_ms / 1e3 if args.latency_budget_ms else None,
        min_fidelity_worst=args.min_fidelity_worst,
    )
    return OptimizeConfig(
        objective=args.objective, batch_size=args.batch_size, device=args.device, threads=args.threads,
        constraints=constraints, time_budget_s=args.time_budget, candidate_timeout_s=args.candidate_timeout,
        # `--passes ""` (an empty variable in a script) names no pass too: refused, not read as "every pass"
        passes=tuple(p.strip() for p in args.passes.split(",") if p.strip()) if args.passes is not None else None,
        max_depth=args.max_depth, min_duration_s=args.min_duration, workdir=args.workdir,
        # the cap raised to a longer minimum, as bench does (`--min-duration 20s` failed the baseline with
        # "max_duration_s (15.0) is below min_duration_s (20.0)", a setting this command does not offer)
        max_duration_s=max(OptimizeConfig.max_duration_s, args.min_duration),
    )


def _check_bare_drop(value: float | None) -> None:
    """`--max-metric-drop 1`, meant as 1%, was refused with "must be in [0, 100%), got 1.0", which does not say how
    to write it: a bare number of 1 or more is a fraction past 100%, so the error says to add the %."""
    from dlperf.errors import ConfigError

    text = getattr(value, "text", None)
    if value is not None and text is not None and not text.endswith("%") and value >= 1.0:
        raise ConfigError(f"--max-metric-drop '{text}' would be {value:.0%} of the baseline's metric (a bare number is "
                          f"a fraction, and must be below 1): write {text}% for {value / 100:g}")


def _print(data: dict[str, Any], as_json: bool) -> None:
    from dlperf.report.optimize_view import print_result

    if as_json:
        print_json(data)
    else:
        from dlperf.cli.common import console

        print_result(data, console())


class _Progress:
    """One line per candidate on stderr, so stdout stays clean for --json."""

    def __init__(self, objective: str = "latency") -> None:
        self.objective = objective
        self.console = error_console()
        self.resumed_from: str | None = None
        self.time_budget_s: float | None = None

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            self.resumed_from = data.get("resumed_from")
            self.time_budget_s = data.get("time_budget_s")
            self.console.print(f"optimizing {data['workload']} at batch {data['batch_size']}: "
                               f"{len(data['space'])} pass configs to combine"
                               + (f", resuming run {self.resumed_from}" if self.resumed_from else ""))
            if data.get("not_resumed"):
                self.console.print(f"  {data['not_resumed']}", style="dim")
        elif kind == "candidate_start":
            # a long search said nothing of its --time-budget until the summary
            left = data.get("remaining_s")
            budget = (f" ({max(left, 0.0):.0f} s of the {self.time_budget_s:.0f} s time budget left)"
                      if left is not None and self.time_budget_s is not None else "")
            self.console.print(f"  measuring {data['label']} ...{budget}", style="dim", markup=False)
        elif kind == "candidate_done":
            from dlperf.measure.stats import fmt_ratio

            row = data["row"]
            if row.get("status") == "ok":
                gain = f" {fmt_ratio(row['gain'])}" if row.get("gain") is not None else ""
                if gain and self.objective not in ("latency", "throughput"):
                    # beside the p50 it read as a speedup: 'dynamic_int8: p50 0.072 ms 2.78x' (2.78x smaller)
                    gain = f", {self.objective}{gain}"
                if row.get("paired_gain") is not None:
                    gain += f" (in its process against the original: {fmt_ratio(row['paired_gain'])})"
                mark = ("" if row.get("feasible") else " (fails constraints)") + \
                    (" (! calls stalled: see the table's note)" if row.get("stalled") else "")
                reused = f" (measured in run {self.resumed_from})" if row.get("reused") else ""
                self.console.print(f"  {row['label']}: p50 {row['p50_s'] * 1e3:.3f} ms{gain}{mark}{reused}")
            else:
                # the pass's error names itself and says "not applicable" already: it read "dynamic_int8:
                # not_applicable: dynamic_int8: not applicable: ..."; and it is printed as written (shapes in [])
                label, error, status = row["label"], str(row.get("error")), str(row["status"]).replace("_", " ")
                which, said, reason = error.partition(f": {status}: ")
                if said:  # the pass that does not apply, when the candidate has others too
                    status += f" ({which})" if which != label else ""
                    error = reason
                if row.get("budget_cut"):  # killed when the budget ran out: 'failed' read as a verdict on the pass
                    status = "cut short"
                self.console.print(f"  {label}: {status}: {error}", style="yellow", markup=False)
        elif kind == "stalled":
            self.console.print(f"  {data['label']}'s calls stalled: measuring it again", style="dim", markup=False)
        elif kind == "skip":
            self.console.print(f"  skipped {data['label']}: {data['reason']}", style="dim")
        elif kind == "confirm":
            self.console.print(f"confirming {data['label']} against the baseline (interleaved A/B) ...")
        elif kind == "versus":
            self.console.print(f"comparing {data['label']} with the runner-up {data['other']} (interleaved A/B) ...")
