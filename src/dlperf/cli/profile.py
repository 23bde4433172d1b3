"""`dlperf profile WORKLOAD`: capture a step under torch.profiler, diagnose the bottleneck, optionally verify
the fixes with an interleaved A/B, and record the run in the store."""

from __future__ import annotations

import argparse
import os

from dlperf.cli.common import (
    WORKLOAD_HELP,
    add_json_argument,
    add_store_argument,
    console,
    memory_size,
    note_oversubscribed,
    open_store,
    print_json,
)
from dlperf.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP)
    parser.add_argument("--train", action="store_true",
                        help="profile a training step (data loading, forward, backward, optimizer) "
                             "instead of inference")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="batch size (default: the workload's; its training batch with --train)")
    parser.add_argument("--steps", type=int, default=3, metavar="N", help="steps to profile (default 3)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch intra-op threads (default: torch's)")
    parser.add_argument("--trace", default=None, metavar="FILE",
                        help="write the raw Chrome/Perfetto trace (JSON) to FILE")
    parser.add_argument("--memory-budget", default=None, metavar="SIZE",
                        help="host memory the process may use, e.g. 4GiB (default: RSS at start + available RAM)")
    parser.add_argument("--verify", action="store_true",
                        help="apply the top fixes dlperf can apply and measure each in an interleaved A/B")
    parser.add_argument("--max-fixes", type=int, default=None, metavar="N",
                        help="fixes --verify measures (default 2); unused without --verify, and a warning says so")
    add_json_argument(parser)
    add_store_argument(parser)


def _check_trace_path(path: str) -> None:
    """--trace FILE must be a file that can be written, checked before profiling: the profiler's own export
    fails silently (a trace into /proc or a missing folder was reported as written)."""
    if not path.strip():  # an unset variable in a script: no trace was written, and nothing said so
        raise ConfigError(f"--trace {path!r} names no file: give a file name, or leave --trace out")
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise ConfigError(f"--trace {path} is a folder: give a file name, e.g. {os.path.join(path, 'trace.json')}")
    if os.path.isfile(folder):
        raise ConfigError(f"--trace {path}: {folder} is a file, not a folder")
    if not os.path.isdir(folder):
        raise ConfigError(f"--trace {path}: its folder {folder} does not exist")
    # tried, not asked: os.access says yes to root everywhere, and a trace into /proc failed after the whole profile
    # (which was then stored as failed, its analysis lost)
    existed = os.path.exists(path)
    try:
        with open(path, "r+b" if existed else "xb"):
            pass
    except OSError as exc:
        raise ConfigError(f"--trace {path}: cannot write there ({exc.strerror}); give another path") from None
    if not existed:
        os.remove(path)


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.progress import step_progress
    from dlperf.measure.env import capture_environment
    from dlperf.profile.capture import CaptureConfig, StepOptions, require_train_spec
    from dlperf.profile.session import ProfileConfig, ProfileReport, profile_workload, progress_steps
    from dlperf.report.profile_view import profile_report
    from dlperf.workload.loader import load_workload

    if args.max_fixes is not None and args.max_fixes < 1:
        raise ConfigError(f"--max-fixes must be >= 1, got {args.max_fixes}")
    if args.max_fixes is not None and not args.verify:  # it was ignored without a word
        import warnings

        from dlperf.errors import DlperfWarning

        warnings.warn(f"--max-fixes {args.max_fixes} is used only with --verify: no fix is measured; add --verify "
                      "or drop --max-fixes", DlperfWarning, stacklevel=1)
    if args.trace is not None:
        _check_trace_path(args.trace)
    from dlperf._device import check_device
    from dlperf.measure.env import check_threads

    check_threads(args.threads, "--threads")  # in the option's name: StepOptions said "threads must be >= 1"
    if args.batch_size is not None and args.batch_size < 1:  # StepOptions said "batch size must be >= 1"
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    note_oversubscribed(args.threads)
    check_device(args.device)  # else the first word came from the calibration: "calibration on 'cuda:0' asked for"
    capture_config = CaptureConfig(
        mode="train" if args.train else "inference", device=args.device, steps=args.steps,
        options=StepOptions(batch_size=args.batch_size, threads=args.threads), trace_path=args.trace,
        memory_budget_bytes=memory_size(args.memory_budget) if args.memory_budget is not None else None,
    )
    # given to the library only with --verify, where it is used (it would warn again)
    config = ProfileConfig(capture=capture_config, verify=args.verify,
                           max_fixes=args.max_fixes if args.verify else None)
    workload = load_workload(args.workload)
    if args.train:
        require_train_spec(workload)  # refused before a run is recorded, as a spec that does not load is
    store = open_store(args)
    environment = capture_environment(args.device, args.threads).to_dict()
    config_dict = {
        "mode": capture_config.mode, "device": args.device, "batch_size": args.batch_size, "steps": args.steps,
        "threads": args.threads, "trace": args.trace, "memory_budget_bytes": capture_config.memory_budget_bytes,
        "verify": args.verify, "max_fixes": config.fixes_to_verify if args.verify else None,
    }
    stages = progress_steps(config)  # a first calibration's steps counted only when it will run
    with store.recording("profile", workload.source or args.workload, config_dict, environment) as recording, \
            step_progress(stages, "profile") as on_step:
        def keep(diagnosed: ProfileReport) -> None:  # an interrupt during --verify keeps capture and diagnosis
            recording.result = {**diagnosed.to_dict(), "partial": "interrupted before --verify finished"}
            recording.save()

        report = profile_workload(workload, config, on_progress=on_step, on_diagnosis=keep)
        recording.result = report.to_dict()
    if args.json:
        print_json({"run_id": recording.id, "store": store.shown_url, "workload": args.workload, "config": config_dict,
                    "environment": environment, "result": recording.result})
        return 0
    console().print(profile_report(recording.result, recording.id, store.shown_url))
    return 0
