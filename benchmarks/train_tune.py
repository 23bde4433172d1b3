"""Tune zoo:digits-cnn's training loop and print the tuned configuration's samples/s against the baseline's.

Both numbers come from one interleaved A/B in this process (dlperf.measure.ab: ABBA blocks of optimizer
steps on fresh loops), so machine drift cancels. Every knob's trial (loss parity first, then its own A/B
against the best so far) is listed. Not a test: it measures this machine.

    python benchmarks/train_tune.py [--knobs workers,threads,...] [--store PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from dlperf.measure.ab import ABConfig
from dlperf.measure.env import usable_cores
from dlperf.report.train_view import UNCONFIRMED_TITLE, settings_confirmed
from dlperf.store import Store
from dlperf.train.knobs import DEFAULT_KNOBS
from dlperf.train.loop import base_config
from dlperf.train.parity import ParityConfig
from dlperf.train.tune import TuneConfig, Tuner, record_trial
from dlperf.workload.loader import load_workload


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="zoo:digits-cnn")
    parser.add_argument("--knobs", default=",".join(DEFAULT_KNOBS))
    parser.add_argument("--store", default=None)
    args = parser.parse_args()

    import torch

    workload = load_workload(args.workload)
    baseline = base_config(workload)
    config = TuneConfig(
        knobs=tuple(k for k in args.knobs.split(",") if k),
        parity=ParityConfig(steps=16),
        ab=ABConfig(blocks=6, iters_per_block=2, warmup_iters=2),
        final_ab=ABConfig(blocks=20, iters_per_block=2, warmup_iters=2),
        measure_steps=12,
    )
    store = Store(args.store)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with store.recording("train", args.workload, {"mode": "tune", "benchmark": "train_tune"}) as run:
        tuner = Tuner(workload, baseline, config,
                      on_event=lambda e: print(f"  [{time.perf_counter() - started:5.0f} s] {e}", file=sys.stderr),
                      on_trial=lambda t: record_trial(store, run.id, args.workload, t))
        result = tuner.run()
        run.result = result.to_dict()
    elapsed = time.perf_counter() - started

    print(f"dlperf train --tune benchmark: {args.workload}")
    print(f"machine: {platform.machine()}, {usable_cores()} usable CPUs, torch {torch.__version__}, "
          f"default threads {torch.get_num_threads()}")
    # other processes on the machine change what the knobs are worth (threads above all): say how busy it was
    print(f"load average (1 min) before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"baseline: {_describe(result.baseline.to_dict())}")
    print(f"tuned:    {_describe(result.best.to_dict())}")
    print("trials (loss parity vs baseline, then interleaved A/B vs the best so far):")
    for t in result.trials:
        change = ", ".join(f"{k}={v}" for k, v in t.change.items()) or "-"
        parity = f"loss {t.parity.relative_difference:+.2%}" if t.parity else ""
        speed = (f"{t.speedup:.2f}x (95% CI {t.speedup_ci[0]:.2f}-{t.speedup_ci[1]:.2f})"
                 if t.speedup is not None and t.speedup_ci else "")
        reason = f" ({t.reason})" if t.reason and t.status != "not faster" else ""
        print(f"  {t.knob:<13} {change:<40} {parity:<14} {speed:<28} {t.status}{reason}")
    if result.final_ab is None:
        print(f"baseline samples/s: {result.baseline_samples_per_s:,.0f} (no knob was kept: nothing to compare)")
    else:
        lo, hi = result.final_ab.speedup_ci
        print(f"interleaved A/B ({len(result.final_ab.block_ratios)} paired blocks of "
              f"{config.final_ab.iters_per_block} x {config.steps_per_call} steps each):")
        print(f"  baseline samples/s: {result.baseline_samples_per_s:,.0f}")
        print(f"  tuned    samples/s: {result.best_samples_per_s:,.0f}")
        print(f"  speedup: {result.speedup:.2f}x (step-time 95% CI {lo:.2f}-{hi:.2f}x): {result.final_ab.verdict}")
    confirmed = settings_confirmed(result.to_dict())
    if result.settings and not confirmed:
        print(f"  {UNCONFIRMED_TITLE} (keep the code as it is):")
    for s in result.settings:
        gain = f" [{s.speedup:.2f}x]" if s.speedup else ""
        print(f"  {'set' if confirmed else '  '} {s.what}: {s.code}{gain}")
    print(f"run {run.id} in {store.url}; {elapsed:.0f} s")
    return 0


def _describe(config: dict[str, object]) -> str:
    from dlperf.report.train_view import config_line

    return config_line(config)


if __name__ == "__main__":
    sys.exit(main())
