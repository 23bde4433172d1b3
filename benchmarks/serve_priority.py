"""What `--priority-levels` gives a high-priority client while a flood keeps the server's queue full.

One `dlperf serve --priority-levels 2` server; a flood of closed-loop clients at the default level (a
`dlperf load` subprocess, enough of them to keep several batches queued); beside it, in one process, a
concurrency-1 probe that alternates between sending at priority 1 and at the default level, in slices of
equal length (A B B A ...), so both classes see the same flood. Prints each class's latency, the ratio
of their medians with a bootstrap interval, and the flood's throughput. Not a test: read the output.

    python benchmarks/serve_priority.py [--workload zoo:minilm] [--flood 128] [--slices 6] [--slice-s 15]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from serve_vs_offline import free_port, stop, wait_ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="zoo:minilm")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--flood", type=int, default=128, help="closed-loop clients at the default level")
    parser.add_argument("--slices", type=int, default=6, help="probe slices, half at each level")
    parser.add_argument("--slice-s", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from dlperf.loadgen.generator import LoadConfig, run_level
    from dlperf.loadgen.target import oip_target
    from dlperf.workload.loader import load_workload

    workload = load_workload(args.workload)
    name = workload.name.split("?")[0]
    port = free_port()
    url = f"127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port", str(port),
                               "--threads", str(args.threads), "--max-batch-size", str(args.max_batch_size),
                               "--priority-levels", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    flood = None
    try:
        wait_ready(f"http://{url}/v2/health/ready", server)
        total_s = args.slices * args.slice_s + 30
        flood = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "load", url, "--model", name,
                                  "--workload", args.workload, "--concurrency", str(args.flood),
                                  "--duration", f"{total_s:.0f}s", "--window-s", str(total_s), "--json",
                                  "--store", str(Path(tempfile.mkdtemp()) / "flood.db")],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        time.sleep(15)  # the flood's connections up and its queue built
        inputs = workload.example_inputs(1)
        targets = {level: oip_target(url, name, inputs=inputs, parameters={"priority": level} if level else None)
                   for level in (1, 0)}
        config = LoadConfig(concurrency=(1,), duration_s=args.slice_s, window_s=args.slice_s, warmup_s=0.0)
        samples: dict[int, list[int]] = {1: [], 0: []}
        for k in range(args.slices):
            level = (1, 0)[(k + k // 2) % 2]  # 1 0 0 1 1 0 ...
            result = run_level(targets[level], config, 1.0)
            samples[level] += result.latencies_ns
            print(f"  slice {k + 1}: priority {level or 'default'}: {result.ok} requests, "
                  f"p50 {result.percentile_s(50) * 1e3:.0f} ms", flush=True)
        flood_out = flood.communicate(timeout=total_s + 120)[0]
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
        stop(server)
    flood_level = json.loads(flood_out)["levels"][0]
    high, low = (np.array(samples[lv]) / 1e6 for lv in (1, 0))
    rng = np.random.default_rng(0)
    ratios = [np.median(rng.choice(high, high.size)) / np.median(rng.choice(low, low.size)) for _ in range(2000)]
    print(f"{args.workload}, max batch {args.max_batch_size}, flood of {args.flood} clients at the default level "
          f"({flood_level['throughput_items_per_s']:.1f} items/s, p50 {flood_level['p50_s'] * 1e3:.0f} ms), "
          f"probe at concurrency 1 in {args.slices} alternating slices of {args.slice_s:g} s:")
    for label, lat in (("priority 1      ", high), ("default level   ", low)):
        print(f"  {label} n {lat.size:4d}  p50 {np.median(lat):7.0f} ms  p90 {np.percentile(lat, 90):7.0f} ms  "
              f"p99 {np.percentile(lat, 99):7.0f} ms")
    print(f"  priority 1 p50 / default p50: {np.median(high) / np.median(low):.2f} "
          f"(95% CI {np.percentile(ratios, 2.5):.2f}-{np.percentile(ratios, 97.5):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
