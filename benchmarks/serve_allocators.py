"""dlperf serve under each heap allocator (glibc, jemalloc, tcmalloc), interleaved: speed and memory.

One server per allocator (`dlperf serve --allocator X`) runs at the same time; only the one being measured
runs, the others are stopped (SIGSTOP), and the order rotates every round, so that a slow spell of this
shared machine hits every allocator alike. Each round gives every server, in turn, a concurrency-1 load
(p50) and a saturated load (items/s, p99); its RSS is read every 0.25 s. The summary gives, against the
first allocator in the list (the baseline, glibc by default):
  - items/s and the model call's time per item (server statistics) under saturation, p99 there, and p50 and p99 at
    concurrency 1, as per-round ratios with a bootstrap 95% CI and a verdict (lower / no significant
    difference),
  - memory: each server's RSS at the end of its last saturated slice over that at the end of its first
    (median of the slice's last third: issue 5's "RSS after a bounded 2-minute load within 10% of RSS after
    warm-up" with the first slice as warm-up), its highest reading, and its idle RSS after the idle release.
Not a test: read its output. Takes about (rounds x allocators x (c1-s + slice-s + 4)) seconds.

    python benchmarks/serve_allocators.py [--workload zoo:resnet18] [--rounds 6] [--slice-s 25]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlperf.loadgen.generator import LevelResult

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_vs_offline import RssSampler, free_port, paused, rss_of, stop, wait_ready


def model_s_per_item(result: Any) -> float:
    """The model call's time per item inside the server over a level (its statistics: the mean batch's inference
    time over the mean batch size). Throughput under saturation moves in whole batches per window (one
    ResNet-18 batch of 32 takes 1.5-2 s here); this does not."""
    server = result.server
    if server is None or server.average_batch_size <= 0:
        raise SystemExit("the server's statistics did not come back with the load's result")
    return float(server.compute_infer_s / server.average_batch_size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:resnet18")
    parser.add_argument("--allocators", default="glibc,jemalloc,tcmalloc",
                        help="comma-separated; the first is the baseline the others are compared with")
    parser.add_argument("--jemalloc-conf", default=None,
                        help="MALLOC_CONF for the jemalloc server (e.g. background_thread:true)")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=64, help="the saturated load's concurrency")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per server")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--slice-s", type=float, default=25.0, help="seconds of saturated load per server and round")
    parser.add_argument("--c1-s", type=float, default=8.0, help="seconds of concurrency-1 load per server and round")
    args = parser.parse_args()

    from dlperf.loadgen.generator import LoadConfig, run_level
    from dlperf.loadgen.target import oip_target
    from dlperf.measure.ab import FASTER, SLOWER, decide
    from dlperf.measure.allocator import find_library
    from dlperf.serve.server import IDLE_TRIM_S
    from dlperf.workload.loader import load_workload

    names = [a.strip() for a in args.allocators.split(",") if a.strip()]
    missing = [n for n in names if n != "glibc" and find_library(n) is None]
    if missing:
        raise SystemExit(f"not installed here: {', '.join(missing)} (scripts/setup installs them with apt-get)")
    workload = load_workload(args.workload)
    model_name = workload.name.split("?")[0]
    inputs = workload.example_inputs(1)
    print(f"dlperf serve by allocator: {args.workload}, max batch {args.max_batch_size}, c={args.concurrency}, "
          f"{args.threads} torch threads per server, {args.rounds} rounds of {args.c1_s:g} s at c=1 + "
          f"{args.slice_s:g} s saturated per server (the others stopped), order rotating; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}"
          + (f"; jemalloc MALLOC_CONF={args.jemalloc_conf}" if args.jemalloc_conf else ""), flush=True)

    def load(target: Any, concurrency: int, seconds: float, warm: float) -> Any:
        config = LoadConfig(concurrency=(concurrency,), duration_s=warm + seconds, window_s=seconds,
                            warmup_s=warm, stable_windows=10**9)
        return run_level(target, config, float(concurrency))

    procs: dict[str, subprocess.Popen[bytes]] = {}
    samplers: dict[str, RssSampler] = {}
    try:
        for name in names:
            env = dict(os.environ)
            if name == "jemalloc" and args.jemalloc_conf:
                env["MALLOC_CONF"] = args.jemalloc_conf
            port = free_port()
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port", str(port),
                 "--max-batch-size", str(args.max_batch_size), "--threads", str(args.threads),
                 "--allocator", name], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", procs[name])
            procs[name].port = port  # type: ignore[attr-defined]
        targets = {n: oip_target(f"127.0.0.1:{p.port}", model_name, inputs=inputs)  # type: ignore[attr-defined]
                   for n, p in procs.items()}
        ready = {n: rss_of(p.pid) for n, p in procs.items()}
        samplers = {n: RssSampler(p.pid) for n, p in procs.items()}
        c1: dict[str, list[LevelResult]] = {n: [] for n in names}
        sat: dict[str, list[LevelResult]] = {n: [] for n in names}
        slice_rss: dict[str, list[float]] = {n: [] for n in names}
        for k in range(args.rounds):
            shift = k % len(names)
            order = names[shift:] + names[:shift]
            if k % 2:
                order.reverse()
            for name in order:
                others = [p for n, p in procs.items() if n != name]
                with paused(*others):
                    c1[name].append(load(targets[name], 1, args.c1_s, 1.0))
                    start = time.monotonic()
                    sat[name].append(load(targets[name], args.concurrency, args.slice_s, 3.0))
                    end = time.monotonic()
                    slice_rss[name].append(samplers[name].median_between(end - (end - start) / 3, end))
            print(f"round {k + 1}: " + "; ".join(
                f"{n} {sat[n][-1].item_throughput:.1f} items/s p99 {sat[n][-1].percentile_s(99) * 1e3:.0f} ms, "
                f"c=1 p50 {c1[n][-1].percentile_s(50) * 1e3:.2f} ms p99 {c1[n][-1].percentile_s(99) * 1e3:.1f} ms, "
                f"RSS {slice_rss[n][-1] / 2**20:.0f} MiB"
                for n in names), flush=True)
        time.sleep(IDLE_TRIM_S + 3)  # every server idle: each gives its free pages back
        idle = {n: rss_of(p.pid) for n, p in procs.items()}
    finally:
        for sampler in samplers.values():
            sampler.stop()
        for proc in procs.values():
            stop(proc)

    base = names[0]
    print(f"\nsummary against {base} (per-round ratios, geometric mean, bootstrap 95% CI)")
    for name in names:
        rss = [r for _, r in samplers[name].samples]
        errors = sum(r.failed for r in sat[name] + c1[name])
        items = statistics.median(r.item_throughput for r in sat[name])
        model_ms = statistics.median(model_s_per_item(r) for r in sat[name]) * 1e3
        p50 = statistics.median(r.percentile_s(50) for r in c1[name]) * 1e3
        line = (f"  {name:<9} items/s {items:6.1f} (median), model {model_ms:.2f} ms per item, c=1 p50 {p50:6.2f} ms; "
                f"RSS ready {ready[name] / 2**20:.0f} MiB, end of first slice {slice_rss[name][0] / 2**20:.0f} -> last "
                f"{slice_rss[name][-1] / 2**20:.0f} MiB = {slice_rss[name][-1] / slice_rss[name][0]:.3f} after "
                f"{(args.rounds - 1) * args.slice_s:g} s more load; max {max(rss) / 2**20:.0f} MiB, idle "
                f"{idle[name] / 2**20:.0f} MiB; errors {errors}")
        print(line)
        if name == base:
            continue
        # decide() reads B/A times (below 1 = B faster): the baseline's items/s over this one's is this one's
        # time per item over the baseline's
        for label, ratios in (
                ("saturated time per item", [b.item_throughput / x.item_throughput
                                             for b, x in zip(sat[base], sat[name], strict=True)]),
                ("saturated model time per item (server statistics)",
                 [model_s_per_item(x) / model_s_per_item(b) for b, x in zip(sat[base], sat[name], strict=True)]),
                ("c=1 p50", [x.percentile_s(50) / b.percentile_s(50) for b, x in zip(c1[base], c1[name], strict=True)]),
                ("c=1 p99", [x.percentile_s(99) / b.percentile_s(99) for b, x in zip(c1[base], c1[name], strict=True)]),
                ("saturated p99", [x.percentile_s(99) / b.percentile_s(99)
                                   for b, x in zip(sat[base], sat[name], strict=True)])):
            r, (lo, hi), verdict = decide(ratios)
            word = {FASTER: f"{name} lower", SLOWER: f"{base} lower"}.get(verdict, "no significant difference")
            print(f"      {label} {name}/{base} {r:.3f} (95% CI {lo:.3f}-{hi:.3f}): {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
