"""`dlperf bench WORKLOAD`: latency percentiles, throughput and memory per batch size, recorded in the store."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from dlperf._device import check_device
from dlperf.cli.common import (
    ALLOCATOR_CHOICES,
    WORKLOAD_HELP,
    add_json_argument,
    add_store_argument,
    console,
    duration_s,
    error_console,
    int_list,
    note_oversubscribed,
    open_store,
    print_json,
    use_allocator,
)
from dlperf.errors import ConfigError

if TYPE_CHECKING:
    from dlperf.measure.bench import BenchConfig

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP + "; or an artifact folder exported by dlperf optimize")
    parser.add_argument("--batch-sizes", default=None, metavar="LIST",
                        help="comma-separated batch sizes for the offline scenario (default 1,8,32)")
    parser.add_argument("--scenario", default="offline", metavar="NAME",
                        help="single-stream (p90, batch 1), multi-stream (p99, batch 8) or offline "
                             "(throughput over batch sizes; default); MLPerf's server scenario is `dlperf serve` "
                             "with `dlperf load --find-peak`")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:N (default cpu; an exported artifact's own device)")
    parser.add_argument("--threads", default=None, metavar="N",
                        help="torch intra-op threads (default: torch's); an engine artifact's own threads")
    parser.add_argument("--precision", default="fp32", metavar="P",
                        help="fp32 (default), bf16 or fp16 (autocast)")
    parser.add_argument("--min-duration", default="1s", metavar="S",
                        help="measure each batch size at least this long, e.g. 1s or 500ms (default 1s)")
    parser.add_argument("--min-iters", default=None, metavar="N",
                        help="and at least this many calls (default 10; single-stream 44, multi-stream 459: the "
                             "fewest with which MLPerf's early stopping bounds its p90 or p99 at 99%% confidence)")
    parser.add_argument("--warmup", default="5", metavar="N", help="warm-up calls before measuring (default 5)")
    parser.add_argument("--allocator", default=None, choices=ALLOCATOR_CHOICES,
                        help="measure under this heap allocator, preloaded by restarting the command with "
                             "LD_PRELOAD (default: the one it started with; auto: tcmalloc where installed); it is "
                             "recorded in the run's environment, so `dlperf compare` of two runs names it")
    add_json_argument(parser)
    add_store_argument(parser)


def _int(option: str, text: str | None, minimum: int) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{option} expects an integer, got '{text}'") from None
    if value < minimum:
        raise ConfigError(f"{option} must be >= {minimum}, got {value}")
    return value


def _parsed(option: str, parse: Callable[[str], T], text: str) -> T:
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def build_config(args: argparse.Namespace) -> BenchConfig:
    """The BenchConfig for the parsed arguments; bad values raise ConfigError (one line, exit code 2)."""
    from dlperf.measure.bench import BenchConfig
    from dlperf.measure.scenarios import scenario
    from dlperf.measure.timer import TimerConfig

    # '' (an unset variable in a script) measured the defaults without a word: int_list refuses it
    batch_sizes = _parsed("--batch-sizes", int_list, args.batch_sizes) if args.batch_sizes is not None else None
    min_duration = _parsed("--min-duration", duration_s, args.min_duration)
    sc = scenario(args.scenario)
    if batch_sizes is not None and sc.name != "offline":
        # it was a note and the run went on at the scenario's own batch; `dlperf.bench(batch_sizes=...)` refuses it
        raise ConfigError(f"--batch-sizes {args.batch_sizes} is for the offline scenario; {sc.name} runs batch "
                          f"{sc.batch_sizes(None)[0]}: leave --batch-sizes out, or use --scenario offline")
    min_iters = _int("--min-iters", args.min_iters, 1) or sc.default_min_iters
    timer = TimerConfig.at_least(min_duration, min_iters, _int("--warmup", args.warmup, 0) or 0)
    from dlperf.optimize.artifact import default_device

    return BenchConfig(batch_sizes=batch_sizes, scenario=args.scenario,
                       device=default_device(args.workload, args.device),
                       threads=_int("--threads", args.threads, 1), precision=args.precision, timer=timer)


def emulated_precision_note(precision: str, device: str) -> str | None:
    """For fp16/bf16 on a CPU without native arithmetic for it (as `dlperf calibrate` finds it): torch converts
    to and from fp32 around each op, so expect it slower than fp32 here. None otherwise."""
    if precision not in ("fp16", "bf16") or not device.startswith("cpu"):
        return None
    from dlperf.calibrate.kernels import supported_dtypes

    _, skipped = supported_dtypes(device)
    if precision not in skipped:
        return None
    return (f"{precision} on this CPU: {skipped[precision]}, so torch computes it through fp32 conversions; "
            "expect it slower than fp32 here (`dlperf calibrate` lists what runs natively)")


def run(args: argparse.Namespace) -> int:
    from dlperf.api import (
        artifact_batch_sizes,
        artifact_settings,
        bench_config_dict,
        bench_environment,
        bench_workload,
    )
    from dlperf.cli.progress import bench_progress
    from dlperf.measure.bench import point_saver, run_bench
    from dlperf.report.terminal import bench_report

    config = build_config(args)
    check_device(config.device)  # before the run is recorded: a missing GPU left a failed run in the store
    use_allocator(args, "bench")
    note_oversubscribed(config.threads)
    note = emulated_precision_note(config.precision, config.device)
    if note is not None:
        error_console().print(f"note: {note}", markup=False)
    workload = bench_workload(args.workload, threads=config.threads, precision=config.precision, device=config.device)
    from dlperf.optimize.artifact import zero_inputs_note

    zeros = zero_inputs_note(workload)
    if zeros is not None:
        error_console().print(f"note: {zeros}", markup=False)
    # an engine built for some batch sizes only (TensorRT) is measured at those, and refused at others
    config = dataclasses.replace(
        config, batch_sizes=artifact_batch_sizes(args.workload, config.batch_sizes, config.scenario))
    store = open_store(args)
    environment = bench_environment(config, args.workload)
    config_dict = bench_config_dict(config, args.workload)
    artifact = artifact_settings(args.workload)
    if artifact is not None:
        config_dict["artifact"] = artifact
        if zeros is not None:
            config_dict["artifact"]["inputs"] = "zeros"
    with store.recording("bench", args.workload, config_dict, environment) as recording:
        on_point = point_saver(recording)

        batch_sizes = config.scenario_obj.batch_sizes(config.batch_sizes)
        with bench_progress(batch_sizes, config.timer.min_duration_s, config.timer.min_iters) as on_progress:
            result = run_bench(workload, config, on_progress=on_progress, on_point=on_point)
        recording.result = result.to_dict()
    if args.json:
        print_json({"run_id": recording.id, "store": store.shown_url, "workload": args.workload, "config": config_dict,
                    "environment": environment, "result": recording.result})
        return 0
    console().print(bench_report(recording.result, environment, recording.id, store.shown_url, config_dict))
    return 0
