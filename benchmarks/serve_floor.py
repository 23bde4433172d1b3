"""What any server must add at concurrency 1 on this machine, and how far above that `dlperf serve` is.

The floor server (`--floor-server PORT`, started by this script) is a server stripped to what every
server does: one thread, blocking sockets, an OIP binary request read into a preallocated buffer, its JSON
header parsed, the model run in that same thread (no hand-off to a batching thread), a binary reply that
carries its model time in `x-model-ns`. It speaks just enough HTTP/1.1 for this one client.

Against it and a dlperf server, requests go in alternating blocks of 10 (ABBA, the other server
SIGSTOPped), and per block this prints the round trip minus that server's own model call (the floor's
from its header, dlperf's from its statistics endpoint), so that the model running at a different
speed in each process drops out. Not a test: read the output.

    python benchmarks/serve_floor.py [--workload zoo:resnet18] [--blocks 30]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
from serve_vs_offline import free_port, paused, stop, wait_ready

DTYPES = {"FP32": np.float32, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32}


def floor_server(workload: str, port: int, threads: int) -> None:
    import torch

    from dlperf.workload.loader import load_workload

    torch.set_num_threads(threads)
    w = load_workload(workload)
    model = w.build_model().eval()
    with torch.inference_mode():
        for _ in range(3):
            model(*w.example_inputs(1))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    print("ready", flush=True)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pending = b""
    while True:
        while b"\r\n\r\n" not in pending:
            data = conn.recv(65536)
            if not data:
                return
            pending += data
        head, _, rest = pending.partition(b"\r\n\r\n")
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers[b"content-length"])
        header_length = int(headers.get(b"inference-header-content-length", length))
        body = np.empty(length + 64, np.uint8)[:length]
        view = memoryview(body)  # type: ignore[arg-type]
        got = min(len(rest), length)
        view[:got] = rest[:got]
        pending = rest[got:]
        while got < length:
            got += conn.recv_into(view[got:])
        request = json.loads(bytes(body[:header_length]))
        arrays, offset = [], header_length
        for spec in request["inputs"]:
            dtype = np.dtype(DTYPES[spec["datatype"]])
            size = int(np.prod(spec["shape"])) * dtype.itemsize
            arrays.append(torch.from_numpy(body[offset:offset + size].view(dtype).reshape(spec["shape"])))
            offset += size
        start = time.perf_counter_ns()
        with torch.inference_mode():
            out = model(*arrays)
        model_ns = time.perf_counter_ns() - start
        out = out[0] if isinstance(out, (tuple, list)) else out
        data = out.numpy().tobytes()
        reply_header = json.dumps({"model_name": "floor", "outputs": [
            {"name": "y", "datatype": "FP32", "shape": list(out.shape),
             "parameters": {"binary_data_size": len(data)}}]}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                     b"inference-header-content-length: %d\r\nx-model-ns: %d\r\ncontent-length: %d\r\n\r\n"
                     % (len(reply_header), model_ns, len(reply_header) + len(data)) + reply_header + data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="zoo:resnet18")
    parser.add_argument("--blocks", type=int, default=30, help="block pairs of 10 requests each")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in both servers")
    parser.add_argument("--floor-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server is not None:
        floor_server(args.workload, args.floor_server, args.threads)
        return 0

    from dlperf.measure.allocator import active_allocator, resolve, run_under

    # the allocator dlperf serve picks by default, in this process and so in the floor server it starts
    run_under(resolve("auto"))
    print(f"heap allocator in both servers: {active_allocator()}", flush=True)

    from dlperf.loadgen.client import Connection, parse_url
    from dlperf.loadgen.generator import _server_stats, run_sync
    from dlperf.loadgen.target import oip_target
    from dlperf.workload.loader import load_workload

    name = load_workload(args.workload).name.split("?")[0]
    floor_port, dlperf_port = free_port(), free_port()
    procs: list[subprocess.Popen[Any]] = []
    try:
        floor = subprocess.Popen([sys.executable, __file__, "--workload", args.workload, "--threads", str(args.threads),
                                  "--floor-server", str(floor_port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, start_new_session=True)
        procs.append(floor)
        if floor.stdout is None or floor.stdout.readline().strip() != "ready":
            raise SystemExit("the floor server did not start")
        ours = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port",
                                 str(dlperf_port), "--threads", str(args.threads)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(ours)
        wait_ready(f"http://127.0.0.1:{dlperf_port}/v2/health/ready", ours)
        workload = load_workload(args.workload)
        target = oip_target(f"127.0.0.1:{dlperf_port}", name, inputs=workload.example_inputs(1))

        async def compute_infer() -> tuple[int, int]:
            model_stats = await _server_stats(target)
            if model_stats is None:
                raise SystemExit(f"cannot read dlperf's statistics at {target.stats_path}")
            st = model_stats["inference_stats"]["compute_infer"]
            return int(st["ns"]), int(st["count"])

        async def run() -> tuple[list[float], list[float]]:
            floor_conn = Connection(parse_url(f"127.0.0.1:{floor_port}"))
            ours_conn = Connection(target.endpoint)

            async def floor_block(n: int = 10) -> float:
                own = []
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    reply = await floor_conn.send(target.raw_request)
                    own.append(time.perf_counter_ns() - t0 - int(reply.headers["x-model-ns"]))
                    assert reply.status == 200, reply.body
                return statistics.mean(own)

            async def ours_block(n: int = 10) -> float:
                ns0, count0 = await compute_infer()
                trips = []
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    reply = await ours_conn.send(target.raw_request)
                    trips.append(time.perf_counter_ns() - t0)
                    assert reply.status == 200, reply.body
                ns1, count1 = await compute_infer()
                return statistics.mean(trips) - (ns1 - ns0) / (count1 - count0)

            await floor_block(20)
            await ours_block(20)
            floor_own, ours_own = [], []
            for k in range(args.blocks):
                for side in ((0, 1) if k % 2 == 0 else (1, 0)):
                    if side == 0:
                        with paused(ours):
                            floor_own.append(await floor_block())
                    else:
                        with paused(floor):
                            ours_own.append(await ours_block())
            await floor_conn.close()
            await ours_conn.close()
            return floor_own, ours_own

        floor_own, ours_own = run_sync(run())
    finally:
        for p in procs:
            stop(p)
    diffs = [o - f for o, f in zip(ours_own, floor_own, strict=True)]
    print(f"{args.workload} at concurrency 1, round trip - the server's own model call, medians of {args.blocks} "
          f"block means (10 requests each, alternating):\n"
          f"  floor server (one thread, blocking sockets, no hand-off): {statistics.median(floor_own) / 1e3:.0f} us\n"
          f"  dlperf serve:                                             {statistics.median(ours_own) / 1e3:.0f} us\n"
          f"  dlperf - floor, per block pair: median {statistics.median(diffs) / 1e3:+.0f} us "
          f"(quartiles {np.percentile(diffs, 25) / 1e3:+.0f} .. {np.percentile(diffs, 75) / 1e3:+.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
