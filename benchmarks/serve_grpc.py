"""The same dlperf server measured over HTTP, over unary gRPC and over gRPC streams by `dlperf load`: per
concurrency level, slices of load rotating between the three (the order shifts every round; same server,
same request), then each one's p50 and throughput over all its slices, and each gRPC form's over HTTP's with
the spread of the per-round ratios.

Both paths share everything after decoding (batcher, instances), so the difference is the transport and
its codec, on the server and in the load generator (its HTTP client is a raw-socket one, its gRPC client
grpcio's). Not a test: read the output.

    python benchmarks/serve_grpc.py [--workload zoo:mlp] [--concurrency 1,16] [--slices 6] [--slice-s 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlperf.loadgen.generator import LevelResult

from serve_vs_offline import free_port, stop, wait_ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:mlp")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--slices", type=int, default=6, help="slices per protocol and level (rounds)")
    parser.add_argument("--slice-s", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads (default 1)")
    args = parser.parse_args()

    from dlperf.loadgen.generator import LoadConfig, run_level
    from dlperf.loadgen.target import oip_target
    from dlperf.workload.loader import load_workload

    workload = load_workload(args.workload)
    name = workload.name.split("?")[0]
    port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port", str(port),
                             "--grpc-port", str(grpc_port), "--threads", str(args.threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", proc)
        inputs = workload.example_inputs(1)
        targets = {"http": oip_target(f"127.0.0.1:{port}", name, inputs=inputs),
                   "grpc": oip_target(f"127.0.0.1:{grpc_port}", name, inputs=inputs, protocol="grpc"),
                   "stream": oip_target(f"127.0.0.1:{grpc_port}", name, inputs=inputs, protocol="grpc",
                                        streaming=True)}
        order = list(targets)
        print(f"{args.workload} on one dlperf server ({args.threads} torch thread(s)), HTTP, unary gRPC and gRPC "
              f"streams rotating in {args.slices} slices of {args.slice_s:g} s per protocol and level; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            config = LoadConfig(concurrency=(concurrency,), duration_s=args.slice_s + 0.5, window_s=args.slice_s,
                                warmup_s=0.5, stable_windows=10**9)
            parts: dict[str, list[LevelResult]] = {protocol: [] for protocol in order}
            for k in range(args.slices):
                for protocol in order[k % len(order):] + order[:k % len(order)]:
                    parts[protocol].append(run_level(targets[protocol], config, float(concurrency)))
            for protocol, results in parts.items():
                errors = sum(r.failed for r in results)
                latencies = sorted(ns for r in results for ns in r.latencies_ns)
                p50_ms = statistics.median(latencies) / 1e6
                rps = statistics.fmean(r.throughput for r in results)
                print(f"  c={concurrency:<3} {protocol:6}: p50 {p50_ms:8.3f} ms, {rps:8.1f} req/s, {len(latencies)} "
                      f"requests, errors {errors}", flush=True)
            for protocol in ("grpc", "stream"):
                pairs = list(zip(parts[protocol], parts["http"], strict=True))
                ratios = sorted(g.throughput / h.throughput for g, h in pairs)
                p50s = sorted(g.percentile_s(50) / h.percentile_s(50) for g, h in pairs)
                print(f"  c={concurrency:<3} {protocol} / http per round: throughput median "
                      f"{statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f}); p50 median "
                      f"{statistics.median(p50s):.3f} (min {p50s[0]:.3f}, max {p50s[-1]:.3f})", flush=True)
    finally:
        stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
