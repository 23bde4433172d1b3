"""What running optimize trials on Ray costs: the same search with the local executor and on Ray, side by side.

Both executors run one timing trial at a time here (a local Ray instance offers one `dlperf_timing` slot per
node, and this is one node), so on this 2-core machine Ray cannot be faster: the point is its overhead.
For each executor it prints the search's wall time and, per trial, the time the benchmark waited for it
split into the trial's own work (`child_wall_s`: load, pass, measure, after torch is imported) and the rest
(starting the process or Ray worker, importing torch, scheduling, moving the result). A third executor,
`ray-fresh`, is the Ray executor as it ran trials before 2026-12-05: a fresh Ray worker for every trial
(`max_calls=1`), which imports torch again each time; RayExecutor now lets Ray reuse the worker. Rounds run in
ABCCBA order (local, ray, ray-fresh, ray-fresh, ray, local, ...) so that drift in the machine's load hits all alike.

    python benchmarks/ray_trials.py [--workload zoo:mlp] [--rounds 2] [--address HOST:PORT]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Trial:
    target: str
    waited_s: float
    work_s: float | None


@dataclass
class Round:
    executor: str
    search_s: float
    init_s: float
    winner: str
    trials: list[Trial] = field(default_factory=list)


class Timed:
    """An executor that times every trial it passes on (the search only calls `run`)."""

    def __init__(self, inner: Any, trials: list[Trial]) -> None:
        self.inner = inner
        self.name = inner.name
        self.trials = trials

    @property
    def slots(self) -> int:
        return int(self.inner.slots)

    def run(self, target: str, payload: dict[str, Any], log_path: Path, timeout_s: float,
            memory_limit_bytes: int | None = None, on_phase: Any = None) -> dict[str, Any]:
        started = time.perf_counter()
        result: dict[str, Any] = self.inner.run(target, payload, log_path, timeout_s, memory_limit_bytes,
                                                on_phase=on_phase)
        self.trials.append(Trial(target, time.perf_counter() - started, result.get("child_wall_s")))
        return result

    def map(self, jobs: Any) -> Any:
        return self.inner.map(jobs)

    def notes(self) -> list[str]:
        return list(self.inner.notes())

    def close(self) -> None:
        self.inner.close()


def one_round(kind: str, args: argparse.Namespace, workdir: Path) -> Round:
    from dlperf.optimize.executor import LocalExecutor
    from dlperf.optimize.search import OptimizeConfig, optimize

    config = OptimizeConfig(objective=args.objective, passes=tuple(args.passes.split(",")), max_depth=1,
                            time_budget_s=1800, candidate_timeout_s=300, workdir=str(workdir),
                            warmup_iters=2, min_duration_s=args.min_duration_s, min_iters=5, max_duration_s=2.0,
                            ab_blocks=4, ab_iters_per_block=3)
    started = time.perf_counter()
    if kind in ("ray", "ray-fresh"):
        from dlperf.ray.trials import TIMING_RESOURCE, RayExecutor, probe_node, run_trial

        inner: Any = RayExecutor(args.address)
        if kind == "ray-fresh":  # the reference: a fresh worker per trial (and per node probe), as before
            import ray

            inner._trial = ray.remote(max_calls=1, max_retries=0, num_cpus=inner.trial_cpus,
                                      resources={TIMING_RESOURCE: 1})(run_trial)
            inner._probe = ray.remote(max_calls=1, max_retries=0, num_cpus=0)(probe_node)
    else:
        inner = LocalExecutor()
    init_s = time.perf_counter() - started
    trials: list[Trial] = []
    executor = Timed(inner, trials)
    try:
        started = time.perf_counter()
        result = optimize(args.workload, config, executor=executor)
        search_s = time.perf_counter() - started
    finally:
        executor.close()
    failed = [r["label"] for r in result.rows if r["status"] not in ("ok", "not_applicable")]
    if failed:
        raise SystemExit(f"{kind}: trials failed ({', '.join(failed)}): fix them before timing the executors")
    # no winner: no candidate beat the baseline (zoo:mlp is tiny; its latency leaves little to win)
    winner = result.winner_row["label"] if result.winner_row else "baseline"
    return Round(kind, search_s, init_s, winner, trials)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:mlp")
    parser.add_argument("--passes", default="hygiene,dynamic_int8")
    parser.add_argument("--objective", default="latency")
    parser.add_argument("--min-duration-s", type=float, default=0.2, help="per timing in a trial")
    parser.add_argument("--rounds", type=int, default=2, help="ABCCBA halves: searches of each executor")
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: a local Ray instance)")
    args = parser.parse_args()

    import os

    kinds = ("local", "ray", "ray-fresh")
    order = [k for i in range(args.rounds) for k in (kinds if i % 2 == 0 else kinds[::-1])]
    print(f"dlperf benchmark: optimize {args.workload} (objective {args.objective}, passes {args.passes}, depth 1), "
          f"local executor vs Ray ({args.address or 'a local Ray instance'}); {os.cpu_count()} cores, "
          f"one timing trial at a time on each; order {' '.join(order)}")
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="dlperf-ray-bench-") as tmp:
        for i, kind in enumerate(order):
            r = one_round(kind, args, Path(tmp) / f"{i}-{kind}")
            rounds.append(r)
            print(f"  round {i + 1}: {kind:<9} search {r.search_s:6.1f} s, {len(r.trials)} trials (all ok), executor "
                  f"start {r.init_s:4.1f} s, winner {r.winner}", flush=True)

    print(f"\n{'executor':<9} {'search_s':>9} {'start_s':>8} {'trials':>7} {'per trial_s':>12} "
          f"{'work_s':>7} {'outside_s':>10}")
    summary: dict[str, dict[str, float]] = {}
    for kind in kinds:
        mine = [r for r in rounds if r.executor == kind]
        trials = [t for r in mine for t in r.trials]
        measured = [t for t in trials if t.work_s is not None]
        summary[kind] = {
            "search_s": mean([r.search_s for r in mine]), "init_s": mean([r.init_s for r in mine]),
            "trials": mean([float(len(r.trials)) for r in mine]), "per_trial_s": mean([t.waited_s for t in trials]),
            "work_s": mean([t.work_s for t in measured if t.work_s is not None]),
            "outside_s": mean([t.waited_s - t.work_s for t in measured if t.work_s is not None]),
        }
        s = summary[kind]
        print(f"{kind:<9} {s['search_s']:9.1f} {s['init_s']:8.1f} {s['trials']:7.0f} {s['per_trial_s']:12.2f} "
              f"{s['work_s']:7.2f} {s['outside_s']:10.2f}")
    local, ray = summary["local"], summary["ray"]
    # per trial of each executor's own searches: a search's trial count can differ (a confirmation A/B
    # runs only when a candidate measures better than the baseline)
    per_trial = ray["search_s"] / ray["trials"] - local["search_s"] / local["trials"]
    print(f"\nRay overhead per trial: {per_trial:+.2f} s from the search times (search_s / trials, ray - local), "
          f"{ray['outside_s'] - local['outside_s']:+.2f} s from the time outside each trial's work "
          "(evaluate trials only)")
    fresh = summary["ray-fresh"]
    print(f"reused Ray workers (ray) vs a fresh worker per trial (ray-fresh, as before): search "
          f"{ray['search_s']:.1f} s vs {fresh['search_s']:.1f} s = {ray['search_s'] / fresh['search_s']:.2f}x the "
          f"time; per trial {ray['per_trial_s']:.2f} s vs {fresh['per_trial_s']:.2f} s")
    print(f"Ray start (ray.init of a new local instance): {ray['init_s']:.1f} s once per search, not in search_s")
    winners = {r.winner for r in rounds}
    print(f"same winner in every round: {'yes' if len(winners) == 1 else 'no'} ({', '.join(sorted(winners))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
