"""dlperf serve against the model's own offline throughput, the raw call's latency, and LitServe.

One run prints, for one workload (default zoo:resnet18, batch 1 per request), in paired rounds (this
machine's speed drifts, so only measurements taken close together are compared; each round measures
offline and served back to back, and the summary gives the medians of the per-round ratios):
  1. dlperf serve's saturated throughput under the dlperf load generator over the model's offline
     throughput at the max batch size (target >= 85%),
  2. at concurrency 1, the server's p50 minus the raw model call's p50 at batch 1 (target < 1 ms), from
     blocks of raw calls and of requests alternating in ABBA order (median of the per-block differences);
     also split, from the server's statistics per block, into the server's own part (round trip - its own
     model call) and its model call - the raw call here (two processes running the same model differ by
     up to about +-1 ms on this machine, and the difference moves over a process's life),
  3. LitServe serving the same model with its own batching (same max batch and delay), at the same
     concurrencies (target: dlperf at least as fast at equal or lower p99); at each level the two servers'
     loads alternate in slices (ABBA), so that both see the same machine; the slice pairs of all rounds give
     each level's throughput ratio and p99 ratio (dlperf's over LitServe's), each with a 95% CI and a verdict
     (faster or lower / no significant difference); the target holds at a level when dlperf's throughput is
     not significantly lower and its p99 not significantly higher. Printed beside: the p99 over all rounds'
     requests with a bootstrap over requests (not the verdict's: it takes a closed loop's requests as
     independent, so its CI is far too narrow), and the strict count (items/s and p99 both at least as good
     per level and round, which counts a tie within noise as a loss),
  4. memory: after a warm-up load and an idle spell, one unbroken saturated load: the server's RSS
     `--rss-duration` s (default 120) after the end of its warm-up part within 10% of its RSS then (medians of
     readings every 0.25 s over equal windows ending at each point); also the idle RSS after the warm-up load
     and after the long one, once the server has trimmed its heap on going idle.
Servers run as subprocesses on 127.0.0.1; the load generator and the offline model run here, one at a
time. Every process runs one heap allocator (`--allocator`, default the one dlperf serve picks by default:
tcmalloc where installed), which each one's memory map confirms in the output. Not a test: speed goals are
checked by reading this output.

    python benchmarks/serve_vs_offline.py [--workload zoo:resnet18] [--threads 1] [--rss-duration 120]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # typed, so mypy sees the attributes read (a removed .errors went unseen through Any)
    from dlperf.loadgen.generator import LevelResult

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


@contextlib.contextmanager
def paused(*procs: subprocess.Popen[Any] | None) -> Any:
    """SIGSTOP the process groups of the servers not being measured, SIGCONT them after: an idle server
    is not idle (LitServe's worker polls its queue, about 15% of a core here), and on 2 cores that is
    enough to make torch's OpenMP threads wait on each other."""
    groups = [p.pid for p in procs if p is not None]
    for pid in groups:
        os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in groups:
            os.killpg(pid, signal.SIGCONT)


def allocator_of(pid: int) -> str:
    """The heap allocator process `pid` runs (read from its memory map, as `active_allocator` reads its own)."""
    from dlperf.measure.allocator import active_allocator

    return active_allocator(Path(f"/proc/{pid}/maps").read_text())


def rss_of(pid: int) -> int:
    import psutil

    proc = psutil.Process(pid)
    return int(proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True)))


class RssSampler:
    """The server's RSS every `interval_s` in a background thread. One reading under load depends on whether a
    batch's activations happen to be allocated at that instant (ResNet-18's first conv output alone is 100 MiB
    at batch 32), so phases are compared by the median of their readings over equally long windows."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        import threading

        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.samples.append((time.monotonic(), rss_of(self.pid)))

    def median_between(self, t0: float, t1: float) -> float:
        import statistics

        return float(statistics.median(r for t, r in self.samples if t0 <= t <= t1))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def litserve_target(port: int, arrays: list[np.ndarray]) -> Any:
    from dlperf.loadgen.client import build_request, parse_url
    from dlperf.loadgen.target import Target

    endpoint = parse_url(f"127.0.0.1:{port}")
    body = json.dumps({"inputs": [{"b64": base64.b64encode(a.tobytes()).decode(), "dtype": str(a.dtype),
                                   "shape": list(a.shape)} for a in arrays]}).encode()
    raw = build_request(endpoint, "POST", "/predict", body, {"Content-Type": "application/json"})
    return Target(endpoint, "litserve", raw, int(arrays[0].shape[0]))


def interleaved_added_s(call: Any, target: Any, blocks: int, per_block: int) -> tuple[float, float, float, Any]:
    """At concurrency 1: blocks of `per_block` raw model calls alternating with blocks of as many sequential
    requests to the server (one keep-alive connection), so that both see the same machine state; returns the
    median over blocks of (server block p50 - raw block p50), the medians of the raw and served p50s, and
    where the difference goes (`Split`, from block means and the server's own statistics)."""
    import statistics

    from dlperf.loadgen.client import Connection
    from dlperf.loadgen.generator import _server_stats, run_sync

    def p50_of(times: list[float]) -> float:
        return float(statistics.median(times))

    async def server_ns() -> tuple[int, int, int]:
        """(compute_infer ns, success ns, success count) so far, from the server's statistics."""
        model_stats = await _server_stats(target)
        if model_stats is None:
            raise SystemExit(f"cannot read the server's statistics at {target.stats_path}")
        stats = model_stats["inference_stats"]
        return stats["compute_infer"]["ns"], stats["success"]["ns"], stats["success"]["count"]

    async def served(conn: Connection) -> tuple[float, float, tuple[float, float]]:
        """(p50, mean) of the block, and the server's (model call, request) means for it."""
        before = await server_ns()
        times = []
        for _ in range(per_block):
            t0 = time.perf_counter()
            reply = await conn.send(target.raw_request)
            times.append(time.perf_counter() - t0)
            if reply.status != 200:
                raise SystemExit(f"the server answered {reply.status}: {reply.body[:200]!r}")
        after = await server_ns()
        n = max(1, after[2] - before[2])
        return p50_of(times), statistics.fmean(times), ((after[0] - before[0]) / n / 1e9,
                                                        (after[1] - before[1]) / n / 1e9)

    def raw() -> tuple[float, float]:
        times = []
        for _ in range(per_block):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return p50_of(times), statistics.fmean(times)

    async def run() -> tuple[float, float, float, Any]:
        conn = Connection(target.endpoint)
        try:
            await served(conn)  # connect and warm up
            raw()
            pairs = []
            for b in range(blocks):
                # ABBA order, so a drift within a pair of blocks favours neither side
                if b % 2 == 0:
                    r = raw()
                    s = await served(conn)
                else:
                    s = await served(conn)
                    r = raw()
                pairs.append((r, s))
        finally:
            await conn.close()
        split = Split(model_s=p50_of([s[2][0] - r[1] for r, s in pairs]),
                      server_s=p50_of([s[2][1] - s[2][0] for _, s in pairs]),
                      http_s=p50_of([s[1] - s[2][1] for _, s in pairs]),
                      own_s=p50_of([s[1] - s[2][0] for _, s in pairs]))
        return (p50_of([s[0] - r[0] for r, s in pairs]), p50_of([r[0] for r, _ in pairs]),
                p50_of([s[0] for _, s in pairs]), split)

    return run_sync(run())  # the load generator's event loop (uvloop where installed), as in the loads


@dataclasses.dataclass
class Split:
    """Where a served request's time beyond the raw call goes, medians over blocks of block means:
    model_s: the server's own model call (its statistics' compute_infer) - the raw call here; two processes
        running the same model differ by up to about +-1 ms on this machine, and the difference moves
        between rounds of one run, so this part is not the server's doing;
    server_s: the server's request time (handler entered -> reply built) - its model call: decode, queue,
        the hand-offs to and from the instance thread, split, encode;
    http_s: the client's round trip - the server's request time: HTTP in and out, both event loops;
    own_s: server_s + http_s measured directly, the client's round trip - the server's own model call:
        what the server adds independent of how fast the model runs in which process."""

    model_s: float
    server_s: float
    http_s: float
    own_s: float

    def text(self) -> str:
        return (f"served - server's own model call {self.own_s * 1e3:+.2f} ms (server {self.server_s * 1e3:.2f}, "
                f"HTTP and client {self.http_s * 1e3:.2f}); its model call - the raw call here "
                f"{self.model_s * 1e3:+.2f} ms")


def merged(parts: list[Any]) -> Any:
    """One LevelResult from several slices of the same level: all latencies, summed time and statuses, and
    the server-side averages weighted by requests."""
    from dlperf.loadgen.generator import ServerSide

    statuses: dict[str, int] = {}
    for r in parts:
        for k, n in r.statuses.items():
            statuses[k] = statuses.get(k, 0) + n
    sides = [r.server for r in parts if r.server is not None and r.server.requests > 0]
    server = None
    if sides:
        total = sum(x.requests for x in sides)

        def avg(name: str) -> float:
            return sum(getattr(x, name) * x.requests for x in sides) / total

        server = ServerSide(total, avg("queue_s"), avg("compute_input_s"), avg("compute_infer_s"),
                            avg("compute_output_s"), avg("average_batch_size"))
    return dataclasses.replace(parts[0], latencies_ns=[v for r in parts for v in r.latencies_ns],
                               statuses=statuses, measured_s=sum(r.measured_s for r in parts),
                               window_throughputs=[w for r in parts for w in r.window_throughputs],
                               server=server)


def pooled_p99_ratio(ours: list[list[int]], theirs: list[list[int]], resamples: int = 2000
                     ) -> tuple[float, float, tuple[float, float]]:
    """p99 of each server's latencies pooled over rounds (ms), and a bootstrap 95% CI of their ratio (each side
    resampled on its own: the requests are not paired)."""
    a = np.concatenate([np.asarray(x, dtype=np.float64) for x in ours]) / 1e6
    b = np.concatenate([np.asarray(x, dtype=np.float64) for x in theirs]) / 1e6
    rng = np.random.default_rng(0)
    ratios = [np.percentile(rng.choice(a, a.size), 99) / np.percentile(rng.choice(b, b.size), 99)
              for _ in range(resamples)]
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(np.percentile(a, 99)), float(np.percentile(b, 99)), (float(lo), float(hi))


def batch_sizes_seen(port: int, stats_path: str | None) -> list[int]:
    """The batch sizes the server has executed so far (its statistics' batch_stats)."""
    if stats_path is None:
        return []
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{stats_path}", timeout=10) as r:
        stats = json.loads(r.read())["model_stats"][0]
    return sorted(int(b["batch_size"]) for b in stats["batch_stats"])


def row(name: str, r: LevelResult) -> str:
    server = f"  server queue {r.server.queue_s * 1e3:.2f} ms compute {r.server.compute_s * 1e3:.2f} ms " \
             f"batch {r.server.average_batch_size:.1f}" if r.server else ""
    return (f"  {name:<8} c={r.level:<3g} {r.item_throughput:8.1f} items/s  p50 {r.percentile_s(50) * 1e3:8.2f} ms  "
            f"p99 {r.percentile_s(99) * 1e3:8.2f} ms  n {r.ok:4d}  errors {r.failed}{server}")


def main() -> int:
    from dlperf.measure.allocator import CHOICES as ALLOCATOR_CHOICES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:resnet18")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--queue-delay-ms", type=float, default=5.0)
    parser.add_argument("--saturation-concurrency", type=int, default=None,
                        help="closed-loop concurrency that saturates the server (default 2x max batch)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads, same for all (default torch's)")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds (offline, dlperf, LitServe)")
    parser.add_argument("--c1-s", type=float, default=30.0,
                        help="seconds of concurrency-1 load per server and round: at about 20 requests/s, 30 s give "
                             "some 600 requests, so a round's p99 rests on its 6 slowest (8 s gave 160: a p99 "
                             "that was the second-slowest request, which decided the strict comparison)")
    parser.add_argument("--slices", type=int, default=4,
                        help="the concurrency-1 load is split into this many slices per server, run alternately "
                             "(ABBA) between dlperf and LitServe, so that a slow spell of the machine hits both "
                             "alike; the saturated load into 2 (A B B A): a window there holds only a few batches "
                             "(one batch of 32 ResNet-18 items takes over a second), so its throughput is coarse "
                             "to +-1 batch per window, and short windows would make that worse")
    parser.add_argument("--c1-blocks", type=int, default=30,
                        help="interleaved blocks of 10 raw calls / 10 requests per round for the added latency")
    parser.add_argument("--saturated-s", type=float, default=60.0,
                        help="seconds of saturated load per server and round: a batch of 32 ResNet-18 items takes "
                             "1.5-2 s here, so 60 s give some 35 batches and a round's p99 is not its one slowest "
                             "batch (30 s gave about 18)")
    parser.add_argument("--warmup-s", type=float, default=4.0, help="unmeasured seconds before each load")
    parser.add_argument("--offline-s", type=float, default=3.0, help="seconds per offline measurement")
    parser.add_argument("--rss-duration", type=float, default=120.0, help="seconds of load for the RSS check")
    parser.add_argument("--no-litserve", action="store_true")
    parser.add_argument("--allocator", default="auto", choices=ALLOCATOR_CHOICES,
                        help="heap allocator for everything measured: this process restarts under it (the offline "
                             "and raw calls), the servers inherit it and dlperf serve gets it as --allocator; each "
                             "process's is read back from its memory map and printed. Default auto: the one dlperf "
                             "serve picks by default (tcmalloc where installed), so the server runs as shipped and "
                             "the raw call and LitServe under the same allocator")
    parser.add_argument("--no-shm", action="store_true",
                        help="skip the extra c=1 blocks with the inputs in system shared memory (not a target: "
                             "what the HTTP body costs)")
    args = parser.parse_args()

    from dlperf.measure.allocator import active_allocator, resolve, run_under

    run_under(resolve(args.allocator))  # restarts this script with it preloaded, before torch is imported
    allocator = active_allocator()

    import statistics

    import torch

    from dlperf.loadgen.generator import LoadConfig, run_level
    from dlperf.loadgen.target import oip_target
    from dlperf.measure.timer import TimerConfig, time_callable
    from dlperf.workload.loader import load_workload

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = args.threads or torch.get_num_threads()
    sat = args.saturation_concurrency or 2 * args.max_batch_size
    workload = load_workload(args.workload)
    name = workload.name.split("?")[0]
    print(f"dlperf serve vs offline: {args.workload}, max batch {args.max_batch_size}, queue delay "
          f"{args.queue_delay_ms:g} ms, {threads} torch threads (everywhere), saturation concurrency {sat}, "
          f"{args.rounds} paired rounds, {allocator} malloc here (offline and raw calls), "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)

    model = workload.build_model().eval()

    def offline_call(batch: int) -> Any:
        inputs = workload.example_inputs(batch)

        def call() -> None:
            with torch.inference_mode():
                model(*inputs)

        return call

    def timed(batch: int) -> Any:
        return time_callable(offline_call(batch), TimerConfig(warmup_iters=1, min_duration_s=args.offline_s,
                                                              min_iters=2, max_duration_s=max(60.0, args.offline_s)),
                             items_per_call=batch)

    def load(target: Any, concurrency: int, seconds: float, warmup_s: float | None = None) -> Any:
        # one fixed window per level, not perf_analyzer's stop-when-stable: paired levels need equal durations
        warm = args.warmup_s if warmup_s is None else warmup_s
        config = LoadConfig(concurrency=(concurrency,), duration_s=warm + seconds, window_s=seconds,
                            warmup_s=warm, stable_windows=10**9)
        return run_level(target, config, float(concurrency))

    slice_ratios: dict[str, list[float]] = {}
    """Per concurrency label: dlperf's items/s over LitServe's, one per pair of slices (the k-th of each)."""
    slice_p99_ratios: dict[str, list[float]] = {}
    """Per concurrency label: dlperf's p99 over LitServe's, one per pair of slices."""

    def paired(ours: tuple[Any, Any], theirs: tuple[Any, Any] | None, concurrency: int,
               seconds: float, slices: int) -> tuple[Any, Any]:
        """dlperf's and LitServe's (target, process) at one concurrency: `seconds` of load each, in `slices`
        slices alternating ABBA (each after a warm-up of its own, the first a full one), the other server
        stopped meanwhile; returns the merged (ours, theirs) results and keeps each slice pair's ratio."""
        if theirs is None:
            with paused(lproc):
                return load(ours[0], concurrency, seconds), None
        parts: dict[int, list[Any]] = {0: [], 1: []}
        sides = (ours, theirs)
        for k in range(slices):
            order = (0, 1) if k % 2 == 0 else (1, 0)
            for side in order:
                target_i = sides[side][0]
                other = sides[1 - side][1]
                warm = args.warmup_s if k == 0 else min(1.0, args.warmup_s)
                with paused(other):
                    parts[side].append(load(target_i, concurrency, seconds / slices, warm))
        label = "c=1" if concurrency == 1 else "saturated"
        slice_ratios.setdefault(label, []).extend(
            o.item_throughput / t.item_throughput for o, t in zip(parts[0], parts[1], strict=True)
            if o.item_throughput > 0 and t.item_throughput > 0)
        slice_p99_ratios.setdefault(label, []).extend(
            o.percentile_s(99) / t.percentile_s(99) for o, t in zip(parts[0], parts[1], strict=True)
            if o.ok and t.ok)
        return merged(parts[0]), merged(parts[1])

    procs: list[subprocess.Popen[bytes]] = []
    shm_target: Any = None
    try:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "dlperf.cli.main", "serve", args.workload, "--port", str(port),
             "--max-batch-size", str(args.max_batch_size), "--max-queue-delay-ms", str(args.queue_delay_ms),
             "--threads", str(threads), *([] if args.no_shm else ["--allow-client-shm"]),
             "--allocator", allocator],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(proc)
        lit_target = None
        lproc: subprocess.Popen[bytes] | None = None
        if not args.no_litserve:
            lport = free_port()
            lproc = subprocess.Popen(
                [sys.executable, str(HERE / "litserve_server.py"), args.workload, str(lport),
                 str(args.max_batch_size), str(args.queue_delay_ms / 1000.0), str(threads)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            procs.append(lproc)
            wait_ready(f"http://127.0.0.1:{lport}/health", lproc)
            lit_target = litserve_target(lport, [t.numpy() for t in workload.example_inputs(1)])
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", proc)
        servers = [("dlperf serve", proc), ("LitServe", lproc)]
        print("allocators, from each process's memory map: this process " + allocator + "".join(
            f", {who} {allocator_of(p.pid)}" for who, p in servers if p is not None), flush=True)
        target = oip_target(f"127.0.0.1:{port}", name, inputs=workload.example_inputs(1))
        shm_target = None if args.no_shm else oip_target(f"127.0.0.1:{port}", name, inputs=workload.example_inputs(1),
                                                         shared_memory="system", output_shm_size=1 << 20)
        shm_added: list[float] = []
        shm_own: list[float] = []

        ratios, added, lit_ratios = [], [], []
        splits: list[Split] = []
        pairs: list[tuple[Any, Any]] = []
        theirs = (lit_target, lproc) if lit_target else None
        for i in range(args.rounds):
            # only what is measured runs: the other server(s) are stopped meanwhile
            with paused(proc, lproc):
                raw = timed(1)
            with paused(lproc):
                added_s, raw_p50_s, served_p50_s, split = interleaved_added_s(offline_call(1), target,
                                                                              args.c1_blocks, 10)
            splits.append(split)
            shm_line = ""
            if shm_target is not None:
                with paused(lproc):
                    shm_s, _, _, shm_split = interleaved_added_s(offline_call(1), shm_target, args.c1_blocks, 10)
                shm_added.append(shm_s)
                shm_own.append(shm_split.own_s)
                shm_line = (f"\n  c=1 with the inputs in system shared memory (not a target): added {shm_s * 1e3:+.2f} "
                            f"ms; {shm_split.text()}")
            ours_c1, lit_c1 = paired((target, proc), theirs, 1, args.c1_s, args.slices)
            with paused(proc, lproc):
                off = timed(args.max_batch_size)
            ours_sat, lit_sat = paired((target, proc), theirs, sat, args.saturated_s, 2)
            ratios.append(ours_sat.item_throughput / off.throughput)
            added.append(added_s)
            print(f"round {i + 1}: offline {off.throughput:.1f} items/s at batch {args.max_batch_size}, raw call p50 "
                  f"{raw.p50_s * 1e3:.2f} ms at batch 1; interleaved at c=1 ({args.c1_blocks} blocks of 10): raw "
                  f"{raw_p50_s * 1e3:.2f} ms, served {served_p50_s * 1e3:.2f} ms, added {added_s * 1e3:+.2f} ms\n"
                  f"  c=1 means: {split.text()}{shm_line}", flush=True)
            print(row("dlperf", ours_c1), flush=True)
            print(row("dlperf", ours_sat), flush=True)
            if lit_c1 is not None and lit_sat is not None:
                print(row("litserve", lit_c1), flush=True)
                print(row("litserve", lit_sat), flush=True)
                lit_ratios.append(lit_sat.item_throughput / off.throughput)
                pairs += [(ours_c1, lit_c1), (ours_sat, lit_sat)]
            print(f"  -> dlperf saturated / offline {ratios[-1]:.0%}; added at c=1 {added[-1] * 1e3:+.2f} ms",
                  flush=True)
        if lproc is not None:
            stop(procs.pop())  # LitServe is done; it would only take CPU from the memory check

        # memory: a quarter of the soak warms up (every batch size, allocator caches), then the soak itself
        from dlperf.serve.server import IDLE_TRIM_S
        from dlperf.serve.service import warmup_sizes

        warmed = list(warmup_sizes(args.max_batch_size))

        # A warm-up load, an idle spell (the server trims its heap), then one unbroken load: its RSS at the end
        # of its first warm_s against its end, `rss_duration` later. Both readings under load come from one load
        # that started from the same trimmed heap: under load glibc keeps what the load's history left in its
        # arenas (1300 or 1950 MiB for the same server in two starts, flat within each), so readings on either
        # side of a trim compare two histories, not growth (0.49-1.20 with that design until 2026-12-02).
        warm_s = max(4.0, args.rss_duration / 4)
        window_s = warm_s / 2  # the same length at the end of the warm-up part and at the end of the soak
        sampler = RssSampler(proc.pid)
        try:
            warm = load(target, sat, warm_s)
            time.sleep(IDLE_TRIM_S + 2)  # idle, after the server's malloc_trim once idle (polled every second)
            idle_warm = rss_of(proc.pid)
            t0 = time.monotonic() + args.warmup_s  # when the load's measured part starts
            soak = load(target, sat, warm_s + args.rss_duration)
            rss_warm = sampler.median_between(t0 + warm_s - window_s, t0 + warm_s)
            rss_after = sampler.median_between(time.monotonic() - window_s, time.monotonic())
            sizes_after = batch_sizes_seen(port, target.stats_path)
            time.sleep(IDLE_TRIM_S + 2)
            idle_after = rss_of(proc.pid)
        finally:
            sampler.stop()
        rss_all = [r for _, r in sampler.samples]
        print(f"memory: after a {warm_s:g} s warm-up load and an idle spell, one load of "
              f"{warm_s + args.rss_duration:g} s at c={sat}: RSS (median of {window_s:g} s of readings) "
              f"{rss_warm / 2**20:.1f} MiB at {warm_s:g} s, "
              f"{rss_after / 2**20:.1f} MiB {args.rss_duration:g} s later "
              f"({soak.item_throughput:.1f} items/s, {soak.ok} requests, errors {soak.failed + warm.failed}); "
              f"idle after each {idle_warm / 2**20:.1f} -> {idle_after / 2**20:.1f} MiB; min-max of "
              f"{len(rss_all)} readings {min(rss_all) / 2**20:.0f}-{max(rss_all) / 2**20:.0f} MiB; batch sizes "
              f"served that the server's warm-up {warmed} did not run: {len(set(sizes_after) - set(warmed))}",
              flush=True)
    finally:
        if shm_target is not None:
            shm_target.close()
        for p in procs:
            stop(p)

    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"

    ratio = statistics.median(ratios)
    added_ms = statistics.median(added) * 1e3
    rss_ratio = rss_after / rss_warm
    print("\nsummary (medians over the paired rounds)")
    print(f"  dlperf saturated throughput (c={sat}) / offline throughput at batch {args.max_batch_size}: {ratio:.0%} "
          f"(rounds: {', '.join(f'{r:.0%}' for r in ratios)})  [target >= 85%: {verdict(ratio >= 0.85)}]")
    print(f"  concurrency 1: server p50 - raw call p50, interleaved blocks = {added_ms:+.2f} ms (rounds: "
          f"{', '.join(f'{a * 1e3:+.2f}' for a in added)})  [target < 1 ms: {verdict(added_ms < 1.0)}]")
    own = [x.own_s * 1e3 for x in splits]
    print(f"    of which the server's own part (round trip - its own model call, block means): "
          f"{statistics.median(own):+.2f} ms (rounds: {', '.join(f'{a:+.2f}' for a in own)}); its model call - the "
          f"raw call here: {statistics.median([x.model_s * 1e3 for x in splits]):+.2f} ms")
    if shm_added:
        print(f"    the same with the inputs in system shared memory (--shared-memory system; not the target's "
              f"figure): {statistics.median(shm_added) * 1e3:+.2f} ms (rounds: "
              f"{', '.join(f'{a * 1e3:+.2f}' for a in shm_added)}), own part "
              f"{statistics.median(shm_own) * 1e3:+.2f} ms")
    if pairs:
        from dlperf.measure.ab import FASTER, SLOWER, decide

        print(f"  LitServe saturated / offline: {statistics.median(lit_ratios):.0%} "
              f"(rounds: {', '.join(f'{r:.0%}' for r in lit_ratios)})")
        # the target, per level: dlperf's throughput not significantly below LitServe's and its p99 not
        # significantly above, both from the slice pairs' ratios (the slices are the design's unit: each pair saw
        # the same machine). The p99 over all rounds' requests is printed beside, with a bootstrap over requests
        # that takes them as independent, which they are not (a closed loop's requests queue behind each other,
        # and one slow spell moves a whole slice): its CI was 1.074-1.078 on 2026-12-07 where dlperf's own p99
        # ranged 505-594 ms over the rounds. The strict per-round count below counts a tie within noise
        # (19.2 against 19.2 items/s) as a loss
        lines: list[str] = []
        held: list[bool] = []

        def by_slice_pairs(label: str, what: str, values: list[float], words: dict[str, str], against: str,
                           per_pair: bool = False) -> bool:
            """A level's verdict line from its slice pairs' ratios (under two, none); False where the ratio is
            significantly `against` dlperf."""
            if len(values) < 2:
                return True
            r, (lo, hi), v = decide(values)
            listed = f"; per pair {', '.join(f'{x:.3f}' for x in values)}" if per_pair else ""
            lines.append(f"    {label}: {what}, 20%-trimmed geometric mean of {len(values)} slice pairs {r:.3f} "
                         f"(95% CI {lo:.3f}-{hi:.3f}{listed}): {words.get(v, 'no significant difference')}")
            return v != against

        for label, level_pairs in (("c=1", pairs[0::2]), ("saturated", pairs[1::2])):
            # decide() reads ratios as B/A times, "faster" (FASTER) when below 1: for items/s (dlperf's over
            # LitServe's) below 1 means LitServe faster; for p99 it means dlperf's lower
            throughput_ok = by_slice_pairs(label, "dlperf items/s over LitServe's", slice_ratios.get(label, []),
                                           {FASTER: "LitServe faster", SLOWER: "dlperf faster"}, FASTER)
            p99_ok = by_slice_pairs(label, "dlperf p99 over LitServe's", slice_p99_ratios.get(label, []),
                                    {FASTER: "dlperf lower", SLOWER: "LitServe lower"}, SLOWER, per_pair=True)
            ours_ms, theirs_ms, (lo, hi) = pooled_p99_ratio([o.latencies_ns for o, _ in level_pairs],
                                                            [t.latencies_ns for _, t in level_pairs])
            word = ("dlperf lower" if hi < 1 else "LitServe lower" if lo > 1 else "no significant difference")
            lines.append(f"    {label}: p99 over all rounds' requests (not the verdict's figure), dlperf "
                         f"{ours_ms:.2f} ms / LitServe {theirs_ms:.2f} ms = {ours_ms / theirs_ms:.3f} (95% CI over "
                         f"requests {lo:.3f}-{hi:.3f}): {word}")
            held.append(throughput_ok and p99_ok)
        print(f"  dlperf at least as fast as LitServe at no higher p99 (per level: throughput not significantly "
              f"lower, p99 not significantly higher): {sum(held)} of {len(held)} levels  [target: "
              f"{verdict(all(held))}]")
        for line in lines:
            print(line)
        wins = [o.item_throughput >= t.item_throughput and o.percentile_s(99) <= t.percentile_s(99) for o, t in pairs]
        print(f"    strict count, per round and level (items/s and p99 both at least as good, ties within noise "
              f"included): {sum(wins)} of {len(wins)}")
    print(f"  RSS after {args.rss_duration:g} s of load / after warm-up: {rss_ratio:.3f} under load, "
          f"{idle_after / idle_warm:.3f} idle  [target within 10%: {verdict(abs(rss_ratio - 1) <= 0.10)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
