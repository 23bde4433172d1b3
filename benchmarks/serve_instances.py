"""Why model instances are threads: the GIL share of a forward pass, and what a process boundary would cost.

Prints, for one workload and batch size:
  1. a Python counting loop's speed alone, and while another thread runs the model: the loop keeps most of
     its speed only if torch releases the GIL inside its kernels (it does), so instance threads overlap;
  2. the model's batch time, and the time to move that batch's inputs and outputs through a
     multiprocessing pipe (what process instances would add per batch).

    python benchmarks/serve_instances.py [--workload zoo:resnet18] [--batch 8] [--seconds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
from typing import Any


def count_for(seconds: float) -> float:
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        n += 1
    return n / seconds


def echo(conn: Any) -> None:
    """A stand-in process instance: takes a batch's inputs, answers with outputs of the model's size."""
    outputs = conn.recv()
    while True:
        item = conn.recv()
        if item is None:
            return
        conn.send(outputs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="zoo:resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    import torch

    from dlperf.workload.loader import load_workload

    torch.set_num_threads(1)  # one core for the model, one for the counting thread
    workload = load_workload(args.workload)
    model = workload.build_model().eval()
    inputs = workload.example_inputs(args.batch)
    with torch.inference_mode():
        outputs = model(*inputs)

    alone = count_for(args.seconds)
    stop = threading.Event()
    batches = 0

    def run_model() -> None:
        nonlocal batches
        with torch.inference_mode():
            while not stop.is_set():
                model(*inputs)
                batches += 1

    t = threading.Thread(target=run_model)
    t.start()
    together = count_for(args.seconds)
    stop.set()
    t.join()
    batch_s = args.seconds / max(1, batches)
    print(f"{args.workload} batch {args.batch}: Python loop {together / alone:.0%} of its speed alone while "
          f"another thread runs the model ({batches} batches, {batch_s * 1e3:.1f} ms each)")

    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=echo, args=(child,))
    proc.start()
    arrays = [x.numpy() for x in inputs]
    out_arrays = [outputs.numpy() if hasattr(outputs, "numpy") else outputs]
    parent.send(out_arrays)
    parent.send(arrays)
    parent.recv()
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        parent.send(arrays)
        parent.recv()
        n += 1
    ipc_s = (time.perf_counter() - start) / n
    parent.send(None)
    proc.join()
    size = sum(a.nbytes for a in arrays) + sum(getattr(a, "nbytes", 0) for a in out_arrays)
    print(f"moving one batch's inputs to a process and its outputs back ({size / 2**20:.1f} MiB): "
          f"{ipc_s * 1e3:.1f} ms = {ipc_s / batch_s:.0%} of the batch's compute time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
