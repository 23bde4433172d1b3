"""dlperf serve against the model's own offline throughput, the raw call's latency, and LitServe.

One run prints, for one workload (default zoo:resnet18, batch 1 per request):
  1. offline throughput at the max batch size (measured before and after the servers; their mean),
  2. dlperf serve's saturated throughput under `dlperf load` (target >= 85% of offline),
  3. at concurrency 1, the server's p50 minus the raw model call's p50 (target < 1 ms),
  4. LitServe serving the same model with its own batching, at the same concurrencies (target: dlperf
     at least as fast at equal or lower p99),
  5. memory: the server's RSS after a bounded load within 10% of its RSS after warm-up.
Servers run as subprocesses on 127.0.0.1; the load generator runs here. Not a test: speed goals are
checked by reading this output.

    python benchmarks/serve_vs_offline.py [--workload zoo:resnet18] [--rss-duration 120] [--no-litserve]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready ({url})")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server at {url} not ready after {timeout_s:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (LitServe's workers are child processes), then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
        time.sleep(1.0)  # children exit with their leader
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def offline(workload: Any, batch: int, seconds: float) -> tuple[float, float]:
    """(items/s at `batch`, p50 seconds of one call at batch 1), timed with dlperf's timer."""
    import torch

    from dlperf.measure.timer import TimerConfig, time_callable

    model = workload.build_model().eval()
    results = []
    for b in (batch, 1):
        inputs = workload.example_inputs(b)

        def call(inputs: Any = inputs) -> None:
            with torch.inference_mode():
                model(*inputs)

        m = time_callable(call, TimerConfig(warmup_iters=2, min_duration_s=seconds, min_iters=5,
                                            max_duration_s=max(seconds * 4, 30)), items_per_call=b)
        results.append(m)
    return results[0].throughput, results[1].p50_s


def rss_of(pid: int) -> int:
    import psutil

    proc = psutil.Process(pid)
    return int(proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True)))


def litserve_target(port: int, arrays: list[np.ndarray]) -> Any:
    from dlperf.load.client import build_request, parse_url
    from dlperf.load.generator import Target

    endpoint = parse_url(f"127.0.0.1:{port}")
    body = json.dumps({"inputs": [{"b64": base64.b64encode(a.tobytes()).decode(), "dtype": str(a.dtype),
                                   "shape": list(a.shape)} for a in arrays]}).encode()
    raw = build_request(endpoint, "POST", "/predict", body, {"Content-Type": "application/json"})
    return Target(endpoint, "litserve", raw, int(arrays[0].shape[0]))


def level(target: Any, concurrency: int, args: argparse.Namespace, duration_s: float | None = None) -> Any:
    """One closed-loop level: until stable (or the level bound), or for exactly `duration_s`."""
    from dlperf.load.generator import LoadConfig, run_level

    config = LoadConfig(concurrency=(concurrency,), duration_s=duration_s or args.level_duration,
                        window_s=args.window_s, warmup_s=args.warmup_s,
                        stable_windows=10**9 if duration_s else 3)
    return run_level(target, config, float(concurrency))


def row(name: str, r: Any) -> str:
    server = f"  server queue {r.server.queue_s * 1e3:.2f} ms compute {r.server.compute_s * 1e3:.2f} ms " \
             f"batch {r.server.average_batch_size:.1f}" if r.server else ""
    return (f"  {name:<8} c={r.level:<3g} {r.item_throughput:8.1f} items/s  p50 {r.percentile_s(50) * 1e3:8.2f} ms  "
            f"p99 {r.percentile_s(99) * 1e3:8.2f} ms  errors {r.errors}  stable {'yes' if r.stable else 'no'}{server}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:resnet18")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--queue-delay-ms", type=float, default=5.0)
    parser.add_argument("--saturation-concurrency", type=int, default=None,
                        help="closed-loop concurrency that saturates the server (default 2x max batch)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads, same for all (default torch's)")
    parser.add_argument("--level-duration", type=float, default=40.0, help="max seconds per load level")
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--offline-s", type=float, default=5.0, help="seconds per offline measurement")
    parser.add_argument("--rss-duration", type=float, default=120.0, help="seconds of load for the RSS check")
    parser.add_argument("--no-litserve", action="store_true")
    args = parser.parse_args()

    import torch

    from dlperf.load.generator import oip_target
    from dlperf.workload.loader import load_workload

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = args.threads or torch.get_num_threads()
    sat = args.saturation_concurrency or 2 * args.max_batch_size
    workload = load_workload(args.workload)
    name = workload.name.split("?")[0]
    print(f"dlperf serve vs offline: {args.workload}, max batch {args.max_batch_size}, queue delay "
          f"{args.queue_delay_ms:g} ms, {threads} torch threads, saturation concurrency {sat}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)

    off_before, raw_p50_before = offline(workload, args.max_batch_size, args.offline_s)
    print(f"offline (before): {off_before:.1f} items/s at batch {args.max_batch_size}; raw call p50 at batch 1 "
          f"{raw_p50_before * 1e3:.2f} ms", flush=True)

    env = dict(os.environ)
    port = free_port()
    cmd = [sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port", str(port),
           "--max-batch-size", str(args.max_batch_size), "--max-queue-delay-ms", str(args.queue_delay_ms),
           "--threads", str(threads)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", proc)
        target = oip_target(f"127.0.0.1:{port}", name, inputs=workload.example_inputs(1))
        ours_c1 = level(target, 1, args)
        print(row("dlperf", ours_c1), flush=True)
        ours_sat = level(target, sat, args)
        print(row("dlperf", ours_sat), flush=True)
        # memory: a quarter of the soak warms up (every batch size, allocator caches), then the rest
        warm = level(target, sat, args, duration_s=max(args.window_s * 2, args.rss_duration / 4))
        rss_warm = rss_of(proc.pid)
        soak = level(target, sat, args, duration_s=args.rss_duration)
        soak_note = f"{soak.item_throughput:.1f} items/s, {soak.ok} requests, errors {soak.errors + warm.errors}"
        rss_after = rss_of(proc.pid)
        print(f"  RSS after warm-up load {rss_warm / 2**20:.1f} MiB, after {args.rss_duration:g} s more load "
              f"({soak_note}) {rss_after / 2**20:.1f} MiB", flush=True)
    finally:
        stop(proc)

    lit_c1 = lit_sat = None
    if not args.no_litserve:
        port = free_port()
        lcmd = [sys.executable, str(HERE / "litserve_server.py"), args.workload, str(port), str(args.max_batch_size),
                str(args.queue_delay_ms / 1000.0), str(threads)]
        lproc = subprocess.Popen(lcmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            wait_ready(f"http://127.0.0.1:{port}/health", lproc)
            arrays = [t.numpy() for t in workload.example_inputs(1)]
            lt = litserve_target(port, arrays)
            lit_c1 = level(lt, 1, args)
            print(row("litserve", lit_c1), flush=True)
            lit_sat = level(lt, sat, args)
            print(row("litserve", lit_sat), flush=True)
        finally:
            stop(lproc)

    off_after, raw_p50_after = offline(workload, args.max_batch_size, args.offline_s)
    print(f"offline (after): {off_after:.1f} items/s at batch {args.max_batch_size}; raw call p50 at batch 1 "
          f"{raw_p50_after * 1e3:.2f} ms", flush=True)
    off = (off_before + off_after) / 2
    raw_p50 = (raw_p50_before + raw_p50_after) / 2

    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"

    ratio = ours_sat.item_throughput / off
    added_ms = (ours_c1.percentile_s(50) - raw_p50) * 1e3
    rss_ratio = rss_after / rss_warm
    print("\nsummary")
    print(f"  offline throughput at batch {args.max_batch_size}: {off:.1f} items/s (mean of before/after)")
    print(f"  dlperf saturated throughput (c={sat}): {ours_sat.item_throughput:.1f} items/s = {ratio:.0%} of "
          f"offline  [target >= 85%: {verdict(ratio >= 0.85)}]")
    print(f"  concurrency 1: server p50 {ours_c1.percentile_s(50) * 1e3:.2f} ms - raw call p50 {raw_p50 * 1e3:.2f} ms"
          f" = {added_ms:+.2f} ms added  [target < 1 ms: {verdict(added_ms < 1.0)}]")
    if lit_c1 is not None and lit_sat is not None:
        for ours, theirs in ((ours_c1, lit_c1), (ours_sat, lit_sat)):
            faster = ours.item_throughput >= theirs.item_throughput
            lower = ours.percentile_s(99) <= theirs.percentile_s(99)
            print(f"  vs LitServe at c={ours.level:g}: dlperf {ours.item_throughput:.1f} items/s p99 "
                  f"{ours.percentile_s(99) * 1e3:.1f} ms, LitServe {theirs.item_throughput:.1f} items/s p99 "
                  f"{theirs.percentile_s(99) * 1e3:.1f} ms  [dlperf at least as fast at <= p99: "
                  f"{verdict(faster and lower)}]")
        print(f"  LitServe saturated / offline: {lit_sat.item_throughput / off:.0%}")
    print(f"  RSS after load / after warm-up: {rss_ratio:.3f}  [target within 10%: "
          f"{verdict(abs(rss_ratio - 1) <= 0.10)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
