"""Shared by optimize_minilm.py, optimize_resnet18.py and optimize_minilm_defaults.py (not a benchmark itself).

`run_search` runs the real search (dlperf.optimize.search.optimize, what `dlperf optimize` runs) with an
export folder, printing one line per candidate as it is measured, and samples the peak memory of this
process and every candidate process meanwhile. `search_and_load` adds loading the exported winner with
`dlperf.load`; `measure_exported` measures it against eager fp32 in this one process, interleaved
(dlperf.measure.ab).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


@dataclass
class TreeMemory:
    """Peak memory of a process and all its descendants (the search's candidate processes), sampled.

    `peak_rss_bytes` sums each process's RSS: shared pages (torch's libraries, mapped by the parent, the
    process server and the candidate) count once per process, so it is an upper bound. `peak_pss_bytes`
    sums PSS, which splits shared pages between the processes that map them: the memory really used.
    """

    pid: int
    interval_s: float = 0.25
    # PSS reads every page table (~15 ms per torch process): only near an RSS peak, at most this often,
    # so the sampler does not slow the candidates it watches on a 2-core machine.
    pss_interval_s: float = 1.0
    peak_rss_bytes: int = 0
    peak_pss_bytes: int = 0
    peak_processes: int = 0
    _last_pss: float = 0.0

    def sample(self, force_pss: bool = False) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += int(p.memory_info().rss)
        near_peak = rss >= 0.9 * self.peak_rss_bytes
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        self.peak_processes = max(self.peak_processes, len(procs))
        now = time.monotonic()
        if force_pss or (near_peak and now - self._last_pss >= self.pss_interval_s):
            self._last_pss = now
            pss = 0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    info = p.memory_full_info()
                    pss += int(getattr(info, "pss", info.rss))
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)

    @contextlib.contextmanager
    def sampling(self) -> Iterator[TreeMemory]:
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                self.sample()
                stop.wait(self.interval_s)

        thread = threading.Thread(target=loop, name="tree-memory", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.sample(force_pss=True)

    def describe(self) -> str:
        return (f"peak memory of the search and its candidate processes: {self.peak_pss_bytes / 2**30:.2f} GiB "
                f"PSS (sum of RSS, shared pages counted per process: {self.peak_rss_bytes / 2**30:.2f} GiB; "
                f"up to {self.peak_processes} processes)")


def progress(kind: str, data: dict[str, Any]) -> None:
    """One line per candidate, as the search measures it (on_event of dlperf.optimize.search.optimize)."""
    if kind == "start":
        print(f"search space: {len(data['space'])} pass configs: {', '.join(data['space'])}", flush=True)
        for skipped in data.get("skipped") or []:
            print(f"  skipped pass: {skipped}", flush=True)
    elif kind == "candidate_done":
        row = data["row"]
        wall = f"{row.get('wall_s', 0.0):5.0f} s"
        if row.get("status") == "ok":
            gain = f"{row['gain']:.2f}x" if row.get("gain") is not None else "-"
            ok = "within budget" if row.get("feasible") else "; ".join(row.get("violations") or []) or "-"
            # the worst single input's fidelity beside the mean, as --min-fidelity-worst constrains it
            worst = f" (worst {row['metric_worst']:.4f})" if isinstance(row.get("metric_worst"), float) else ""
            print(f"  [{wall}] {row['label']}: p50 {row['p50_s'] * 1e3:.1f} ms, gain {gain} (isolated), "
                  f"metric {row['metric']:.4f}{worst}, build {row.get('build_s', 0.0):.0f} s: {ok}", flush=True)
            for note in row.get("notes") or []:
                if note.startswith(("int8 sensitivity", "mixed precision", "kept fp32", "fallback")):
                    print(f"      {note}", flush=True)
        else:
            print(f"  [{wall}] {row['label']}: {row.get('status')} in {row.get('phase')}: "
                  f"{str(row.get('error'))[:200]}", flush=True)
    elif kind == "skip":
        print(f"  not tried: {data['label']}: {data['reason']}", flush=True)
    elif kind == "confirm":
        print(f"confirming {data['label']} against the baseline (interleaved A/B in a fresh process) ...",
              flush=True)


def run_search(source: str, config: Any, export_dir: Path) -> tuple[Any, TreeMemory, float]:
    """The real search, exporting its winner to `export_dir`; (result, peak memory, wall seconds)."""
    import os

    from dlperf.optimize.search import optimize

    memory = TreeMemory(os.getpid())
    start = time.perf_counter()
    with memory.sampling():
        result = optimize(source, config, export_dir=export_dir, on_event=progress)
    return result, memory, time.perf_counter() - start


def print_search_summary(result: Any, memory: TreeMemory, wall_s: float) -> None:
    data = result.to_dict()
    print(f"\nsearch: {len(data['candidates'])} candidates measured, {len(data['not_tried'])} not tried, "
          f"{wall_s:.0f} s wall of a {data['time_budget_s']:.0f} s budget; {memory.describe()}")
    winner = result.winner_row
    if winner is not None:
        print(f"search's winner: {winner['label']}")
        if result.confirmation and result.confirmation.get("describe"):
            print(f"  its A/B in the search (fresh process): {result.confirmation['describe']}")
    else:
        print("search's winner: none confirmed faster than the baseline")
    for note in data.get("notes") or []:
        print(f"  note: {note}")


@dataclass
class Exported:
    label: str
    confirmed: bool
    engine: str
    files: list[str]
    loaded: Callable[..., Any]


def load_exported(export_dir: Path) -> Exported:
    import json

    import dlperf

    manifest = json.loads((export_dir / "manifest.json").read_text())
    return Exported(label=str(manifest.get("label")), confirmed=bool(manifest.get("confirmed")),
                    engine=str(manifest.get("engine")), files=sorted(p.name for p in export_dir.iterdir()),
                    loaded=dlperf.load(export_dir))


def search_and_load(source: str, args: Any, passes: tuple[str, ...] | None, max_drop: float,
                    tmp: str) -> Exported | None:
    """The real search on `source` (latency at batch 1, the benchmark's threads, budget and passes) with
    its winner exported under `tmp`, then loaded back; None (and says so) when nothing was exported."""
    from dlperf.optimize.constraints import Constraints
    from dlperf.optimize.search import OptimizeConfig

    config = OptimizeConfig(
        objective="latency", batch_size=1, threads=args.threads,
        constraints=Constraints(max_metric_drop=None, max_metric_drop_abs=max_drop,
                                min_fidelity_worst=getattr(args, "min_fidelity_worst", None)),
        time_budget_s=args.time_budget, passes=passes, workdir=args.workdir or str(Path(tmp) / "work"),
    )
    export_dir = Path(tmp) / "export"
    result, memory, wall_s = run_search(source, config, export_dir)
    print_search_summary(result, memory, wall_s)
    if result.export_dir is None:
        print("nothing was exported")
        return None
    exported = load_exported(export_dir)
    print(f"\nexported ({'confirmed winner' if exported.confirmed else 'not confirmed faster'}): "
          f"{exported.label}; engine {exported.engine}; files {', '.join(exported.files)}")
    return exported


def measure_exported(model: Any, loaded: Callable[..., Any], x: tuple[Any, ...], blocks: int) -> Any:
    """Eager fp32 `model` under inference_mode (A) against the loaded winner (B) on inputs `x`, interleaved
    in this process."""
    import torch

    from dlperf.measure.ab import ABConfig, ab_test

    def eager() -> None:
        with torch.inference_mode():
            model(*x)

    return ab_test(eager, lambda: loaded(*x), ABConfig(blocks=blocks, iters_per_block=5))


def print_side_by_side(result: Any, target_speedup: float, fidelity: float, worst: float, target_fidelity: float,
                       fidelity_what: str, target_worst: float | None = None) -> bool:
    """The MET / NOT MET table of the exported winner. `target_worst` (the benchmark's --min-fidelity-worst, which
    the search then held every candidate to): the worst single input's fidelity gets a row of its own, judged."""
    lo, hi = result.speedup_ci
    a_ms = result.a.summary()["p50_s"] * 1e3
    b_ms = result.b.summary()["p50_s"] * 1e3
    speed_met = result.speedup >= target_speedup
    fid_met = fidelity >= target_fidelity
    worst_met = target_worst is None or worst >= target_worst
    print(f"exported winner vs eager fp32 (interleaved A/B in one process, {len(result.block_ratios)} paired blocks):"
          f" median {a_ms:.1f} ms -> {b_ms:.1f} ms, verdict: {result.verdict}")
    print(f"{'':<22}{'measured':<34}{'target':<12}")
    print(f"{'speedup':<22}{f'{result.speedup:.2f}x (95% CI {lo:.2f}-{hi:.2f}x)':<34}"
          f"{f'>= {target_speedup:.1f}x':<12}{'MET' if speed_met else 'NOT MET'}")
    print(f"{'fidelity (mean)':<22}{f'{fidelity:.4f}':<34}{f'>= {target_fidelity}':<12}"
          f"{'MET' if fid_met else 'NOT MET'}")
    judged = ("-", "") if target_worst is None else (f">= {target_worst}", "MET" if worst_met else "NOT MET")
    print(f"{'fidelity (worst)':<22}{f'{worst:.4f}':<34}{judged[0]:<12}{judged[1]}".rstrip())
    print(f"  fidelity: {fidelity_what}")
    met = speed_met and fid_met and worst_met
    at = f"fidelity >= {target_fidelity}" + ("" if target_worst is None else f", worst >= {target_worst}")
    print(f"target {target_speedup:.1f}x at {at}: {'MET' if met else 'NOT MET'}")
    return met
