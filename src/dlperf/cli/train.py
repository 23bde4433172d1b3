"""`dlperf train WORKLOAD`: measure a training step (breakdown, samples/s, memory, MFU), tune it, or scale it."""

from __future__ import annotations

import argparse
from typing import Any

from dlperf.cli.common import (
    WORKLOAD_HELP,
    add_json_argument,
    add_store_argument,
    console,
    duration_s,
    error_console,
    memory_size,
    note_oversubscribed,
    open_store,
    percent_or_float,
    print_json,
    require_positive,
)
from dlperf.errors import ConfigError, DlperfError

TUNE_OPTIONS = {"--knobs": "knobs", "--skip": "skip", "--memory-budget": "memory_budget", "--margin": "margin",
                "--parity-steps": "parity_steps", "--parity-tolerance": "parity_tolerance", "--ab-blocks": "ab_blocks",
                "--time-budget": "time_budget"}
"""The options that only --tune reads, by their attribute name."""
DDP_TIMEOUT_S = 600.0
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=f"{WORKLOAD_HELP} (with a training spec)")
    parser.add_argument("--steps", type=int, default=20, help="measured optimizer steps (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps before measuring (default 3)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size (default: the workload's training spec)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--precision", default="fp32", help="fp32 (default), bf16 or fp16 (CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers of the baseline (default 0)")
    parser.add_argument("--no-mfu", action="store_true",
                        help="skip FLOP counting and model FLOPs utilization (MFU needs the calibrated ceilings: "
                             "`dlperf calibrate`)")
    tune = parser.add_argument_group("tuning (--tune)")
    tune.add_argument("--tune", action="store_true", help="try every knob, keep what is faster within loss parity")
    tune.add_argument("--knobs", default=None, metavar="LIST",
                      help="comma-separated knobs to try (default all): threads, workers, prefetch, persistent, "
                           "pin_memory, batch, checkpointing, precision, channels_last, optimizer, compile")
    tune.add_argument("--skip", default=None, metavar="LIST", help="comma-separated knobs not to try")
    tune.add_argument("--memory-budget", default=None, metavar="SIZE",
                      help="memory one step may use, e.g. 2GiB (default: half the available RAM on CPU, "
                           "the device's memory on CUDA)")
    tune.add_argument("--margin", default=None, help="safety margin kept free under the budget (default 10%%)")
    tune.add_argument("--parity-steps", type=int, default=None, help="steps of the loss-parity check (default 16)")
    tune.add_argument("--parity-tolerance", default=None,
                      help="allowed relative difference of the late-steps mean loss (default 5%%)")
    tune.add_argument("--ab-blocks", type=int, default=None, help="paired A/B blocks per trial (default 6)")
    tune.add_argument("--time-budget", type=duration_s, default=None,
                      help="wall time for the trials, e.g. 90s, 10m (default none): no trial starts that would "
                           "end past it, and the knobs left untried are listed; the final measurements still run. "
                           "A knob's next trial is expected to last as long as its own earlier ones, its first the "
                           "mean of all so far, so a first much longer (compile: seconds where the others took "
                           "0.1 s) can overrun a small budget: the result (an interrupted tuning's too) says by how "
                           "much, and which trial")
    dist = parser.add_argument_group("distributed (--nproc)")
    dist.add_argument("--nproc", type=int, default=None,
                      help="run under torchrun with DistributedDataParallel on N processes and report scaling "
                           "against 1 process")
    dist.add_argument("--timeout", type=float, default=None,
                      help="seconds allowed per torchrun launch (default 600)")
    add_json_argument(parser)
    add_store_argument(parser)


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()] if text else []


def _fraction(option: str, text: str) -> float:
    try:
        return percent_or_float(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def _positive(option: str, value: int | None, minimum: int = 1) -> None:
    if value is not None and value < minimum:
        raise ConfigError(f"{option} must be >= {minimum}, got {value}")


def _check_modes(args: argparse.Namespace) -> None:
    """Refuse options that the chosen mode would silently ignore."""
    if args.tune and args.nproc:
        raise ConfigError("--tune and --nproc do not combine: tune on one process first, then measure the "
                          "tuned settings' scaling with --nproc")
    if not args.tune:
        given = [option for option, value in TUNE_OPTIONS.items() if getattr(args, value) is not None]
        if given:
            verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
            raise ConfigError(f"{', '.join(given)} only {verb} with --tune: add --tune, or drop {them}")
    if not args.nproc and args.timeout is not None:
        raise ConfigError("--timeout only applies with --nproc: add --nproc N, or drop it")
    if args.nproc:
        _positive("--steps (with --nproc)", args.steps, 2)
        if args.timeout is not None:
            require_positive("--timeout", args.timeout)


def run(args: argparse.Namespace) -> int:
    from dlperf._device import check_device
    from dlperf.cli.progress import step_progress
    from dlperf.measure.env import capture_environment
    from dlperf.report.train_view import ddp_view, measurement_view, tune_view
    from dlperf.train.loop import base_config
    from dlperf.workload.loader import load_workload

    for option, value, minimum in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0),
                                   ("--batch-size", args.batch_size, 1), ("--threads", args.threads, 1),
                                   ("--num-workers", args.num_workers, 0), ("--nproc", args.nproc, 1),
                                   ("--parity-steps", args.parity_steps, 2), ("--ab-blocks", args.ab_blocks, 4)):
        _positive(option, value, minimum)
    _check_modes(args)
    note_oversubscribed(args.threads)
    workload = load_workload(args.workload)
    baseline = base_config(workload, args.batch_size, args.device, precision=args.precision,
                           threads=args.threads, num_workers=args.num_workers)
    check_device(baseline.device)  # before the run is recorded: a missing GPU is the user's option, not a failure
    if args.nproc:
        from dlperf.train.ddp import check_launch

        check_launch(baseline, args.nproc)  # likewise: --nproc 9 on 2 CPUs is an option refused, not a failed run
    store = open_store(args)
    environment = capture_environment(args.device, args.threads).to_dict()
    config: dict[str, Any] = {"mode": "ddp" if args.nproc else "tune" if args.tune else "measure",
                              "step": baseline.to_dict(), "steps": args.steps, "warmup": args.warmup}
    tune_config = _tune_config(args) if args.tune and not args.nproc else None
    if tune_config is not None:
        config["tune"] = tune_config.to_dict()
    ceilings = None if args.no_mfu or args.nproc else _ceilings(args.device, args.threads)

    with store.recording("train", args.workload, config, environment) as recording:
        if args.nproc:
            from dlperf.train.ddp import DdpConfig, run_ddp

            ddp = DdpConfig(nproc=args.nproc, steps=args.steps, warmup_steps=args.warmup,
                            threads_per_process=args.threads,
                            timeout_s=args.timeout if args.timeout is not None else DDP_TIMEOUT_S)

            def keep(partial: dict[str, Any]) -> None:  # kept if the N-process launch fails or is interrupted
                recording.result = partial
                recording.save()

            with step_progress(2 if args.nproc > 1 else 1, "DDP") as on_launch:
                recording.result = run_ddp(args.workload, baseline, ddp, on_launch, keep).to_dict()
            view = ddp_view(recording.result)
        elif tune_config is not None:
            tuned = _tune(args, tune_config, workload, baseline, ceilings, store, recording, step_progress)
            recording.result = tuned.to_dict()
            view = tune_view(recording.result)
        else:
            from dlperf.train.step import measure_training

            with step_progress(1, "measuring") as on_step:
                on_step(f"{args.steps} steps")
                try:
                    measured = measure_training(workload, baseline, args.steps, args.warmup, ceilings=ceilings,
                                                count_flops=not args.no_mfu)
                except (KeyboardInterrupt, DlperfError) as exc:  # the run keeps the steps measured before it
                    partial = getattr(exc, "dlperf_partial", None)
                    if partial is not None:
                        recording.result = partial.to_dict()
                    raise
            recording.result = measured.to_dict()
            view = measurement_view(recording.result)
    if args.json:
        print_json({"run_id": recording.id, "store": store.shown_url, "workload": args.workload, "config": config,
                    "environment": environment, "result": recording.result})
        return 0
    console().print(view)
    console().print(f"run {recording.id} saved to {store.shown_url}", style="dim")
    return 0


def _ceilings(device: str, threads: int | None) -> Any:
    """The ceilings of the thread count the step runs with: `--threads 1` held against the 2-thread peak showed
    half its MFU."""
    from dlperf.calibrate import get_ceilings

    error_console().print("reading this machine's ceilings for MFU (measured once if not cached)", style="dim")
    return get_ceilings(device, measure_if_missing=True, threads=threads)


def _tune_config(args: argparse.Namespace) -> Any:
    from dlperf.measure.ab import ABConfig
    from dlperf.train.knobs import DEFAULT_KNOBS
    from dlperf.train.parity import ParityConfig
    from dlperf.train.tune import TuneConfig, unknown_knobs

    if args.knobs is not None and not _names(args.knobs):  # '' (an unset variable in a script) meant every knob
        raise ConfigError(f"--knobs {args.knobs!r} names no knob: give some of {', '.join(DEFAULT_KNOBS)}, or leave "
                          "--knobs out for all of them")
    chosen = _names(args.knobs) or list(DEFAULT_KNOBS)
    defaults = TuneConfig()
    margin = _fraction("--margin", args.margin) if args.margin is not None else defaults.safety_margin
    if not 0 <= margin < 1:
        raise ConfigError(f"--margin must be at least 0% and below 100%, got {args.margin}")
    tolerance = (_fraction("--parity-tolerance", args.parity_tolerance) if args.parity_tolerance is not None
                 else defaults.parity.rtol)
    if args.time_budget is not None:
        require_positive("--time-budget", args.time_budget)
    if not tolerance >= 0:  # NaN too: no loss would ever be within it
        raise ConfigError(f"--parity-tolerance must be >= 0, got {args.parity_tolerance}")
    budget = memory_size(args.memory_budget) if args.memory_budget is not None else None
    skipped = set(_names(args.skip))
    unknown = sorted((set(chosen) | skipped) - set(DEFAULT_KNOBS))
    if unknown:
        raise unknown_knobs(unknown)
    knobs = tuple(k for k in DEFAULT_KNOBS if k in chosen and k not in skipped)
    if not knobs:
        raise ConfigError(f"--skip {args.skip} leaves no knob to try: skip fewer, or drop --tune")
    return TuneConfig(
        knobs=knobs,
        parity=ParityConfig(steps=args.parity_steps or defaults.parity.steps, rtol=tolerance),
        ab=ABConfig(blocks=args.ab_blocks or defaults.ab.blocks, iters_per_block=2, warmup_iters=2),
        measure_steps=args.steps,
        measure_warmup=args.warmup,
        memory_budget_bytes=budget,
        safety_margin=margin,
        count_flops=not args.no_mfu,
        time_budget_s=args.time_budget,
    )


def _tune(args: argparse.Namespace, tune_config: Any, workload: Any, baseline: Any, ceilings: Any, store: Any,
          recording: Any, step_progress: Any) -> Any:
    from dlperf.train.tune import Tuner, partial_result, record_trial

    def on_trial(trial: Any) -> None:
        record_trial(store, recording.id, args.workload, trial)
        recording.result = partial_result(workload.name, baseline, tuner.trials)  # what an interrupt keeps

    with step_progress(len(tune_config.knobs) + 3, "tuning") as on_step:
        tuner = Tuner(workload, baseline, tune_config, ceilings=ceilings, on_event=on_step, on_trial=on_trial)
        try:
            return tuner.run()
        except KeyboardInterrupt:  # stopped in the final measurements: they are kept too
            recording.result = partial_result(workload.name, baseline, tuner.trials, tuner.best,
                                              tuner.baseline_measurement, tuner.best_measurement, tuner.time_budget)
            raise
