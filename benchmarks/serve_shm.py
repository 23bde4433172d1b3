"""What system shared memory saves at concurrency 1: one `dlperf serve --allow-client-shm` process, one
client connection, the same request sent as binary tensor data in the HTTP body and as shared-memory
descriptions (`dlperf load --shared-memory system`'s requests: inputs in a registered region, outputs
written to one), in alternating blocks of 10 (ABBA). Per block: the round trip, and the round trip minus
the server's own model call (from its statistics), which drops the model's speed from the comparison.
Both transports hit the same server process, so no per-process difference enters. Not a test: read the
output.

    python benchmarks/serve_shm.py [--workload zoo:resnet18] [--blocks 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np
from serve_vs_offline import free_port, stop, wait_ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="zoo:resnet18")
    parser.add_argument("--blocks", type=int, default=30, help="block pairs of 10 requests each")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in the server")
    args = parser.parse_args()

    from dlperf.loadgen.client import Connection
    from dlperf.loadgen.generator import _server_stats, run_sync
    from dlperf.loadgen.target import oip_target
    from dlperf.workload.loader import load_workload

    workload = load_workload(args.workload)
    name = workload.name.split("?")[0]
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port", str(port),
                               "--threads", str(args.threads), "--allow-client-shm"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    http = shm = None
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", server)
        inputs = workload.example_inputs(1)
        http = oip_target(f"127.0.0.1:{port}", name, inputs=inputs)
        shm = oip_target(f"127.0.0.1:{port}", name, inputs=inputs, shared_memory="system",
                         output_shm_size=1 << 20)
        body_kb = len(http.raw_request) / 1024, len(shm.raw_request) / 1024

        async def model_ns() -> tuple[int, int]:
            stats = await _server_stats(http)
            if stats is None:
                raise SystemExit(f"cannot read the server's statistics at {http.stats_path}")
            st = stats["inference_stats"]["compute_infer"]
            return int(st["ns"]), int(st["count"])

        async def run() -> dict[str, tuple[list[float], list[float]]]:
            conn = Connection(http.endpoint)
            results: dict[str, tuple[list[float], list[float]]] = {"http": ([], []), "shm": ([], [])}

            async def block(raw: bytes, n: int = 10) -> tuple[float, float]:
                ns0, count0 = await model_ns()
                trips = []
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    reply = await conn.send(raw)
                    trips.append(time.perf_counter_ns() - t0)
                    assert reply.status == 200, reply.body[:300]
                ns1, count1 = await model_ns()
                return statistics.mean(trips), statistics.mean(trips) - (ns1 - ns0) / (count1 - count0)

            await block(http.raw_request, 20)
            await block(shm.raw_request, 20)
            for k in range(args.blocks):
                for side in (("http", "shm") if k % 2 == 0 else ("shm", "http")):
                    trip, own = await block((http if side == "http" else shm).raw_request)
                    results[side][0].append(trip)
                    results[side][1].append(own)
            await conn.close()
            return results

        results = run_sync(run())
    finally:
        for target in (http, shm):
            if target is not None:
                target.close()
        stop(server)

    def line(label: str, values: list[float]) -> str:
        return f"{label:<34} {statistics.median(values) / 1e3:9.0f} us"

    print(f"{args.workload} at concurrency 1, one server, request body {body_kb[0]:.1f} KiB over HTTP against "
          f"{body_kb[1]:.1f} KiB with shared memory; medians of {args.blocks} block means (10 requests each, "
          "alternating):")
    for i, what in ((0, "round trip"), (1, "round trip - the server's model call")):
        http_v, shm_v = results["http"][i], results["shm"][i]
        diffs = [s - h for s, h in zip(shm_v, http_v, strict=True)]
        print(f"  {what}:")
        print("    " + line("binary tensor data in the body:", http_v))
        print("    " + line("system shared memory:", shm_v))
        print(f"    shared memory - body, per block pair: median {statistics.median(diffs) / 1e3:+.0f} us "
              f"(quartiles {np.percentile(diffs, 25) / 1e3:+.0f} .. {np.percentile(diffs, 75) / 1e3:+.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
