"""The optimization search: baseline, then pipelines grown pass by pass, each measured in isolation.

Breadth first: every single pass, then pipelines that extend a prefix which met the constraints and was
not slower than the baseline, best prefixes first, until the depth limit or the time budget. Every
result streams into the store (a parent run of kind "optimize", one child of kind "candidate" each);
an interrupted search resumes, skipping candidates already measured. The best candidates that meet the
constraints are confirmed by an interleaved A/B against the baseline, both loaded in one process; the
confirmed one then meets the next-ranked candidate the same way (the runner-up), which replaces it when it
is faster, or equally fast and simpler, and confirmed against the baseline itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf._device import check_device
from dlperf.errors import ConfigError, ExecutorLost, OptimizeError
from dlperf.measure.ab import FASTER, SLOWER
from dlperf.measure.env import check_threads
from dlperf.optimize.constraints import Constraints, latency_violations, metric_drop, violations
from dlperf.optimize.evaluate import EvalSettings
from dlperf.optimize.executor import WORKER_DIED, WORKER_LOST, Executor, Job, LocalExecutor
from dlperf.optimize.explain import (
    median_stalled,
    slower_reasons,
    stalled_process,
    stalled_threads,
    stalled_timing,
)
from dlperf.optimize.pareto import axes_for, pareto_front
from dlperf.optimize.select import (
    GPU_MEMORY,
    OBJECTIVES,
    SPEED_OBJECTIVES,
    check_objective,
    gain,
    objective_key,
    rank,
    settle,
)
from dlperf.optimize.space import (
    Candidate,
    SearchSpace,
    build_space,
    check_pass_names,
    extensions,
    round_budget,
    takes_metric_budget,
    with_metric_budget,
    without_metric_budget,
)
from dlperf.passes.base import PassConfig, PassContext
from dlperf.workload.base import Workload

EventFn = Callable[[str, dict[str, Any]], None]
"""on_event(kind, data): 'start', 'candidate_start', 'phase', 'candidate_done', 'skip', 'confirm', 'versus',
'done'. 'start' carries the `time_budget_s`, 'candidate_start' the `remaining_s` of it."""

CONFIG_VERSION = 1
# A pass not measured yet adds this many baseline wall times per cost class to the candidate's estimate.
PRIOR_COST_FACTOR = 2.0


@dataclass(frozen=True)
class OptimizeConfig:
    """What to optimize for, under which constraints, and how long to search."""

    objective: str = "latency"
    batch_size: int | None = None
    device: str = "cpu"
    threads: int | None = None
    constraints: Constraints = field(default_factory=Constraints)
    time_budget_s: float = 600.0
    passes: tuple[str, ...] | None = None
    candidate_timeout_s: float = 300.0
    memory_limit_bytes: int | None = None
    max_depth: int = 3
    # A prefix up to this much worse than the baseline on the objective is still extended (noise).
    extend_tolerance: float = 0.05
    warmup_iters: int = 5
    min_duration_s: float = 1.0
    min_iters: int = 10
    max_duration_s: float = 15.0
    ab_blocks: int = 16
    ab_iters_per_block: int = 5
    confirm_top: int = 2
    extra_modules: tuple[str, ...] = ()
    workdir: str | None = None

    def __post_init__(self) -> None:
        # each message names the option and the field (`--time-budget (time_budget_s)`): the CLI's spelling alone
        # sent a library caller looking for a `time_budget` argument it never wrote
        check_objective(self.objective)
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"--batch-size (batch_size) must be >= 1, got {self.batch_size}")
        check_threads(self.threads, "--threads (threads)", " (leave it out for torch's default)")
        if isinstance(self.passes, str):  # 'hygiene' was read letter by letter: "unknown passes e, g, h, i, n, y"
            raise ConfigError(f"passes must be a tuple of pass names, got the string {self.passes!r}: write "
                              f"passes={tuple(p.strip() for p in self.passes.split(',') if p.strip())!r}")
        if self.passes is not None and not self.passes:
            raise ConfigError("--passes (passes) names no pass: give pass names separated by commas (a tuple of "
                              "them in Python), or leave it out to search every pass")
        if not isinstance(self.constraints, Constraints):  # a dict failed at the search's end, AttributeError
            raise ConfigError(f"constraints must be a dlperf.optimize.constraints.Constraints, got "
                              f"{type(self.constraints).__name__}: write constraints=Constraints(max_metric_drop=0.01)")
        if not 0 <= self.extend_tolerance < 1:
            raise ConfigError(f"extend_tolerance must be in [0, 1), got {self.extend_tolerance}")
        from dlperf.measure.timer import TimerConfig

        # the measurement settings, checked as the candidates' timer checks them: a negative min_duration_s was
        # refused only once a process had been started for the baseline
        TimerConfig(warmup_iters=self.warmup_iters, min_duration_s=self.min_duration_s, min_iters=self.min_iters,
                    max_duration_s=self.max_duration_s)
        from dlperf.measure.ab import ABConfig

        ABConfig(blocks=self.ab_blocks, iters_per_block=self.ab_iters_per_block)  # as the final A/Bs check them
        if not self.time_budget_s > 0:  # written so that NaN fails: it passed "<= 0", and nothing was ever out of time
            raise ConfigError(f"--time-budget (time_budget_s) must be positive, got {self.time_budget_s}")
        if self.max_depth < 1:
            raise ConfigError(f"--max-depth (max_depth) must be >= 1, got {self.max_depth}")
        if not self.candidate_timeout_s > 0:
            raise ConfigError(f"--candidate-timeout (candidate_timeout_s) must be positive, got "
                              f"{self.candidate_timeout_s}")
        if self.memory_limit_bytes is not None and not self.memory_limit_bytes > 0:
            raise ConfigError("memory_limit_bytes must be positive (or None: 75% of RAM), got "
                              f"{self.memory_limit_bytes}")
        if self.confirm_top < 1:  # 0 confirmed nothing, and the search ended with "no winner" whatever it measured
            raise ConfigError(f"confirm_top must be >= 1, got {self.confirm_top}")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError(f"unknown device '{self.device}': use cpu, cuda or cuda:N")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["constraints"] = self.constraints.to_dict()
        data["version"] = CONFIG_VERSION
        return data

    def search_key(self, batch_size: int, workload_code: str | None = None) -> dict[str, Any]:
        """What must match for an interrupted search to be resumed by this one: the search's settings, how each
        candidate is measured, and the workload's code (`workload.loader.code_fingerprint`)."""
        return {
            "objective": self.objective, "batch_size": batch_size, "device": self.device,
            "threads": self.threads, "constraints": self.constraints.to_dict(),
            # as a set: `--passes hygiene,onnxruntime` and `--passes onnxruntime,hygiene` search the same space
            "passes": sorted(set(self.passes)) if self.passes else None, "max_depth": self.max_depth,
            "extra_modules": list(self.extra_modules),
            "measurement": {"warmup_iters": self.warmup_iters, "min_duration_s": self.min_duration_s,
                            "min_iters": self.min_iters, "max_duration_s": self.max_duration_s},
            "workload_code": workload_code,
            # a memory search's peak RSS comes from a fresh process per artifact: rows of one recorded before, from the
            # candidate's own process (torch and the original model in it), are not comparable
            **({"peak_rss": "deployed artifact, fresh process"} if self.objective == "memory" else {}),
            # and on a GPU it ranks by the GPU memory, which rows recorded before it lack
            **({"gpu_memory": GPU_MEMORY} if self.objective == "memory" and self.device.startswith("cuda") else {}),
        }


@dataclass
class OptimizeResult:
    run_id: str | None
    workload: str
    objective: str
    batch_size: int
    device: str
    constraints: Constraints
    metric_name: str
    metric_is_fidelity: bool
    higher_is_better: bool
    baseline: dict[str, Any]
    rows: list[dict[str, Any]]
    front: list[str]
    winner: str | None
    confirmation: dict[str, Any] | None
    not_tried: list[dict[str, Any]]
    skipped_passes: list[str]
    closest: list[str]
    export_dir: str | None
    # from the time budget's start: the `dlperf` command's process start (imports and the workload's loading
    # included), the call for the library
    elapsed_s: float
    time_budget_s: float
    resumed_from: str | None = None
    notes: list[str] = field(default_factory=list)
    # The confirmed pick against the next-ranked candidate: key, label (the runner-up's), pick (the pick's label),
    # ab, describe, switched, reason.
    runner_up: dict[str, Any] | None = None
    # Why the asked-for export was not written (a folder that cannot be written, nothing meeting the constraints);
    # `optimize` raises it as an `ExportFailed` once the run is recorded.
    export_error: str | None = None
    executor: str = "local"
    """Where the trials ran: 'local' (child processes of this one) or 'ray' (Ray tasks; the notes and each row's
    `node` say on which nodes)."""
    workdir: str | None = None
    """This search's work folder, which keeps every candidate's artifact (`dlperf bench`, `dlperf.load`, a resume)."""
    workdir_bytes: int | None = None
    """What its files take on disk: a MiniLM search leaves about 86 MiB a candidate there, and nothing said so."""
    exported_key: str | None = None
    """The key of the candidate written to `export_dir`: the winner, or without one the best-ranked candidate the
    A/B did not call slower (the baseline where that is all that is left; `.notes` says which)."""

    def __repr__(self) -> str:
        # the dataclass's printed every row with its every per-call time: some 300 KB for a 4-candidate search of a
        # 0.05 ms model, as BenchResult's did before it got a one-line repr
        speed = ((self.confirmation or {}).get("ab") or {}).get("speedup")
        if self.winner:
            picked = f"winner {self.row(self.winner)['label']!r}"
            picked += f", {speed:.3g}x in its A/B" if isinstance(speed, (int, float)) else ""
        else:  # it said 'winner None' of a search that exported its best-ranked candidate, as .notes says
            picked = "no confirmed winner"
        if self.export_dir:
            key = self.exported_key
            what = ("it" if key is not None and key == self.winner
                    else "the baseline" if key == self.baseline.get("key")
                    else f"{self.row(key)['label']!r} (not confirmed faster)" if key else "the best-ranked candidate")
            picked += f", exported {what} to {self.export_dir!r}"
        return (f"OptimizeResult({self.workload!r}, {self.objective}, batch {self.batch_size}, {len(self.rows)} "
                f"candidates, {picked}" + (f", run {self.run_id}" if self.run_id else "") + ")")

    def row(self, key: str) -> dict[str, Any]:
        for r in self.rows:
            if r["key"] == key:
                return r
        raise KeyError(key)

    @property
    def winner_row(self) -> dict[str, Any] | None:
        return self.row(self.winner) if self.winner else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "workload": self.workload, "objective": self.objective,
            "batch_size": self.batch_size, "device": self.device, "constraints": self.constraints.to_dict(),
            "metric_name": self.metric_name, "metric_is_fidelity": self.metric_is_fidelity,
            "higher_is_better": self.higher_is_better, "baseline": _public(self.baseline),
            "candidates": [_public(r) for r in self.rows], "pareto_front": self.front, "winner": self.winner,
            "confirmation": self.confirmation, "not_tried": self.not_tried,
            "skipped_passes": self.skipped_passes, "closest": self.closest, "export_dir": self.export_dir,
            "elapsed_s": self.elapsed_s, "time_budget_s": self.time_budget_s,
            "resumed_from": self.resumed_from, "notes": self.notes, "runner_up": self.runner_up,
            "export_error": self.export_error, "executor": self.executor, "workdir": self.workdir,
            "workdir_bytes": self.workdir_bytes,
        }


def _public(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its raw samples (kept in the store's candidate runs)."""
    return {k: v for k, v in row.items() if k != "samples_ns"}


class _Search:
    def __init__(self, source: str, config: OptimizeConfig, store: Any, on_event: EventFn | None) -> None:
        self.source = source
        self.config = config
        self.store = store
        self.on_event = on_event or (lambda kind, data: None)
        self.rows: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.not_tried: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.run: Any = None
        self.workdir: Path = Path()
        self.baseline: dict[str, Any] = {}
        self.settings: EvalSettings | None = None
        self.batch_size = 1
        self.cpu_flags: tuple[str, ...] = ()
        self.single_rows: dict[str, dict[str, Any]] = {}
        self.candidates: dict[str, Candidate] = {}
        self.reused: dict[str, dict[str, Any]] = {}
        self.executor: Executor = LocalExecutor()

    # --- time ---------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return self.config.time_budget_s - self.elapsed()

    def reserve_s(self) -> float:
        """Time kept for the A/Bs at the end (the pick against the baseline and against the runner-up) and the
        export."""
        base = float(self.baseline.get("wall_s", 10.0)) if self.baseline else 10.0
        return min(0.25 * self.config.time_budget_s, 2.0 * base + 8.0)

    def estimate_s(self, candidate: Candidate) -> float:
        """The baseline's wall time plus what each pass added when measured alone; a pass not measured yet
        adds a prior from its cost class (a class-2 pass, a minute or two, adds 4x the baseline's wall time)."""
        base = float(self.baseline.get("wall_s", 10.0)) if self.baseline else 10.0
        extra = 0.0
        for cfg in candidate.configs:
            single = self.single_rows.get(_config_key(cfg))
            if single is not None:
                extra += max(0.0, float(single.get("wall_s", base)) - base)
            else:
                extra += PRIOR_COST_FACTOR * cfg.relative_cost() * base
        return base + extra

    # --- evaluation ---------------------------------------------------------------------------

    def evaluate(self, candidate: Candidate) -> dict[str, Any]:
        return self.evaluate_all([candidate])[0]

    def evaluate_all(self, candidates: list[Candidate]) -> list[dict[str, Any]]:
        """Measure `candidates` (rows in their order); an executor with several slots (Ray: one timing trial per
        node) runs them at once, the local one after each other."""
        rows: dict[str, dict[str, Any]] = {}
        jobs: list[Job] = []
        for candidate in candidates:
            if candidate.key in self.reused:
                row = dict(self.reused[candidate.key])
                row["reused"] = True
                self._record_child(candidate, row)
                self._accept(candidate, row)
                rows[candidate.key] = row
            else:
                jobs.append(self._job(candidate))
        open_children = {id(job): job.tag[1] for job in jobs if job.tag[1] is not None}
        first_new = len(self.order)
        try:
            if len(jobs) == 1:  # one trial: with its phases reported as they come
                job = jobs[0]
                label = job.tag[0].label
                result = self.executor.run(job.target, job.payload, job.log_path, job.timeout_s,
                                           job.memory_limit_bytes,
                                           on_phase=lambda p: self.on_event("phase", {"label": label, "phase": p}))
                finished = iter([(job, result)])
            else:
                finished = self.executor.map(jobs) if jobs else iter(())
            for job, result in finished:
                open_children.pop(id(job), None)
                candidate, child = job.tag
                rows[candidate.key] = self._finish(candidate, child, result, job.timeout_s)
        except BaseException as exc:
            # the trials not yet answered end with the search (Ctrl-C, or the executor failing: a Ray cluster lost)
            # rather than stay "running" in the store
            from dlperf.store.records import FAILED, INTERRUPTED

            for child in open_children.values():
                if isinstance(exc, KeyboardInterrupt):
                    self.store.finish_run(child.id, None, INTERRUPTED, "interrupted by the user (Ctrl-C)")
                else:
                    self.store.finish_run(child.id, None, FAILED,
                                          f"not measured: the search stopped ({type(exc).__name__}: {exc})")
            raise
        # the table lists candidates in the order they were chosen, not the order their trials happened to finish
        place = {c.key: i for i, c in enumerate(candidates)}
        self.order[first_new:] = sorted(self.order[first_new:], key=lambda k: place.get(k, len(place)))
        self._save_progress()
        return [rows[c.key] for c in candidates]

    def _job(self, candidate: Candidate) -> Job:
        """The trial that measures `candidate`, its child run opened; `tag` is (candidate, child run or None)."""
        key = candidate.key
        assert self.settings is not None
        self.on_event("candidate_start", {"label": candidate.label, "key": key, "remaining_s": self.remaining()})
        child = self.store.create_run("candidate", self.source, {"pipeline": candidate.to_list(), "key": key,
                                                                 "label": candidate.label},
                                      parent_id=self.run.id) if self.store else None
        out_dir = self.workdir / key
        budget_left = max(self.remaining() - 0.5 * self.reserve_s(), 5.0)
        timeout = min(self.config.candidate_timeout_s, budget_left) \
            if not candidate.is_baseline else self.config.candidate_timeout_s
        payload = {"settings": dataclasses.asdict(self.settings), "pipeline": candidate.to_list(),
                   "out_dir": str(out_dir)}
        return Job("evaluate", payload, out_dir / "child.log", timeout,
                   self.config.memory_limit_bytes or _default_memory_limit(), tag=(candidate, child))

    def _finish(self, candidate: Candidate, child: Any, result: dict[str, Any], timeout: float) -> dict[str, Any]:
        row = {"key": candidate.key, "label": candidate.label, "pipeline": candidate.to_list(), **result}
        if row.get("timed_out") and timeout < self.config.candidate_timeout_s:
            row["error"] = f"{row['error']}: {BUDGET_CUT} {timeout:.0f} s left for it"
            row["budget_cut"] = True  # not a verdict on the candidate: a resumed search measures it again
        if child is not None:
            row["run_id"] = child.id
        self._accept(candidate, row)
        if child is not None:
            from dlperf.store.records import FAILED, OK

            status = OK if row["status"] in ("ok", "not_applicable") else FAILED
            self.store.finish_run(child.id, row, status, row.get("error"))
        self.on_event("candidate_done", {"row": row, "baseline": self.baseline})
        return row

    def _record_child(self, candidate: Candidate, row: dict[str, Any]) -> None:
        if not self.store:
            return
        from dlperf.store.records import FAILED, OK

        child = self.store.create_run("candidate", self.source, {"pipeline": candidate.to_list(),
                                                                 "key": candidate.key, "label": candidate.label,
                                                                 "reused_from": row.get("run_id")},
                                      parent_id=self.run.id)
        row["run_id"] = child.id
        status = OK if row["status"] in ("ok", "not_applicable") else FAILED
        self.store.finish_run(child.id, row, status, row.get("error"))
        self.on_event("candidate_done", {"row": row, "baseline": self.baseline})

    def _accept(self, candidate: Candidate, row: dict[str, Any]) -> None:
        """Judge a measured row against the baseline and the constraints; keep it."""
        if candidate.is_baseline:
            # its metric is the reference, but a latency budget it misses is missed: it is not "within the constraints"
            row["violations"] = latency_violations(row, self.config.constraints) if row["status"] == "ok" else []
            row["feasible"] = row["status"] == "ok" and not row["violations"]
            row["gain"] = 1.0
        elif row["status"] == "ok" and self.baseline:
            row["violations"] = violations(row, self.baseline, self.config.constraints)
            row["feasible"] = not row["violations"]
            row["gain"] = gain(row, self.baseline, self.config.objective, self.config.device)
            paired = row.get("paired") or {}
            if self.config.objective in SPEED_OBJECTIVES and paired.get("ratio"):
                row["paired_gain"] = 1.0 / float(paired["ratio"])  # original's time / candidate's, one process
                # which figure ranks it: the paired one, or its gain where the paired one is more than DISAGREEMENT
                # times higher (the report says so)
                row["ranked_by"] = "paired" if _ranked_by(row) == "paired_gain" else "gain"
            drop, rel = metric_drop(float(row["metric"]), float(self.baseline["metric"]),
                                    bool(self.baseline.get("higher_is_better", True))) \
                if row.get("metric") is not None and not _isnan(row["metric"]) else (math.nan, math.nan)
            row["metric_drop"] = drop
            row["metric_drop_rel"] = rel
            if self.config.objective in SPEED_OBJECTIVES and search_gain(row) < 1.0:
                # the explanations are of time; a candidate worse on size or memory is not "slower"
                row["slower_reasons"] = slower_reasons(row, self.baseline, self.cpu_flags, self.batch_size,
                                                       self.config.device)
        else:
            row["feasible"] = False
            row.setdefault("violations", [])
        if row["status"] == "ok":
            row["stalled"] = stalled_timing(row.get("latency"))
            # whether the stall reaches the figure the objective ranks by: a stalled tail leaves a p50 the model's
            row["misranked"] = bool(row["stalled"]) and (self.config.objective == "throughput"
                                                         or median_stalled(row.get("latency")))
            if candidate.is_baseline:
                whole = stalled_threads(row)
                row["stalled"] = whole or row["stalled"]
                row["misranked"] = bool(whole) or row["misranked"]
            elif self.baseline:
                whole, of_baseline = stalled_process(row, self.baseline)
                row["stalled"] = whole or row["stalled"]
                row["misranked"] = bool(whole) or row["misranked"]
                if of_baseline and not self.baseline.get("misranked"):
                    self.baseline["stalled"], self.baseline["misranked"] = of_baseline, True
        if len(candidate.configs) == 1:
            self.single_rows[_config_key(candidate.configs[0])] = row
        self.candidates[row["key"]] = candidate
        if row["key"] not in self.rows:
            self.order.append(row["key"])
        self.rows[row["key"]] = row
        self._save_progress()

    def extendable(self, row: dict[str, Any]) -> bool:
        return bool(row.get("feasible")) and not row.get("not_ranked") \
            and search_gain(row) >= 1.0 - self.config.extend_tolerance

    def measure_again_if_stalled(self, candidate: Candidate, row: dict[str, Any]) -> dict[str, Any]:
        """`row`, or where its calls stalled in the figure the objective ranks by (`row["misranked"]`: the p50, or
        for throughput any stall) a second measurement of `candidate` in its place, time
        allowing. A row that stalls again, or that there is no time to measure again, is marked `not_ranked`: the
        search neither extends it nor lets it win. With 3 CPU hogs on 2 cores hygiene's process stalled on every call
        (p50 232 ms against the baseline's 0.058 ms): the search ranked it by that gain, 0.00x, called it slower and
        extended nothing from it. Only under a speed objective: a size or memory search does not rank by the timing."""
        if row.get("status") != "ok" or row.get("reused") or not self.stalled_in_ranking(row):
            return row
        first = str(row["stalled"])
        again = self.measure_again(candidate, first)
        if again is not None:
            if again.get("status") == "ok" and again.get("misranked") and not candidate.is_baseline:
                again["not_ranked"] = f"its calls stalled in two measurements (the second: {again['stalled']})"
        else:
            again = row
            if not candidate.is_baseline:  # the baseline's stalled figures are said in a note (`_finish`)
                again["not_ranked"] = f"its calls stalled ({first}), and the time budget left none to measure it again"
        self._save_progress()
        return again

    def stalled_in_ranking(self, row: dict[str, Any]) -> bool:
        """Whether `row`'s calls stalled in the figure the objective ranks by (a speed objective's)."""
        return bool(row.get("misranked")) and self.config.objective in SPEED_OBJECTIVES

    def measure_again(self, candidate: Candidate, first: str) -> dict[str, Any] | None:
        """A second measurement of `candidate`, whose calls stalled (`first`: how), marked with `first` as
        "stalled_first"; None where the time budget leaves none for it. For a candidate's row
        (`measure_again_if_stalled`) and for the baseline a pairing showed stalled (`_finish`)."""
        if self.remaining() - self.reserve_s() < self.estimate_s(candidate):
            return None
        self.on_event("stalled", {"label": candidate.label, "why": first})
        again = self.evaluate(candidate)
        again["stalled_first"] = first
        return again

    def rejudge(self) -> None:
        """Judge every measured row again, against the baseline measured again."""
        for key in list(self.order):
            if key != self.baseline.get("key") and key in self.candidates:
                self.rows[key].pop("slower_reasons", None)
                self._accept(self.candidates[key], self.rows[key])

    def _save_progress(self) -> None:
        if self.store and self.run is not None:
            # with what the report's table and summary read, so that `dlperf runs show` of a search stopped before
            # its end (Ctrl-C, SIGTERM) prints the candidates it measured, not 700 lines of JSON; no "winner" key,
            # which would mark it finished
            config, base = self.config, self.baseline or {}
            self.run.result = {"partial": True, "run_id": self.run.id, "workload": self.source,
                               "objective": config.objective, "batch_size": self.batch_size, "device": config.device,
                               "constraints": config.constraints.to_dict(), "metric_name": base.get("metric_name"),
                               "metric_is_fidelity": bool(base.get("metric_is_fidelity")),
                               "higher_is_better": bool(base.get("higher_is_better", True)),
                               "time_budget_s": config.time_budget_s,
                               "baseline": _public(self.baseline) if self.baseline else None,
                               "measured": len(self.rows), "candidates": [_public(self.rows[k]) for k in self.order],
                               "not_tried": self.not_tried, "elapsed_s": self.elapsed()}
            self.run.save()

    # --- search -------------------------------------------------------------------------------

    def grow(self, space: SearchSpace) -> None:
        frontier = [Candidate()]
        for depth in range(1, self.config.max_depth + 1):
            candidates = []
            seen: set[str] = set()
            for prefix in frontier:
                for cand in extensions(prefix, space):
                    cand = self.with_remaining_budget(cand)
                    if cand.key in seen or cand.key in self.rows:
                        continue
                    if depth > 1 and not self._worth_extending(cand):
                        continue
                    seen.add(cand.key)
                    candidates.append(cand)
            candidates.sort(key=self._priority)
            next_frontier = []
            slots = max(1, int(getattr(self.executor, "slots", 1)))
            for start in range(0, len(candidates), slots):
                # as many at once as the executor has slots (they run side by side, so each must fit the time
                # left on its own), in priority order; what the first measured tells the budget of the next
                chunk = []
                for cand in candidates[start:start + slots]:
                    estimate = self.estimate_s(cand)
                    if self.remaining() - self.reserve_s() < estimate:
                        # the reserve named: "about 22 s needed, 17 s left" stood beside "searched in 33 s of a 60 s
                        # budget", 27 s left by the user's count
                        left = max(self.remaining() - self.reserve_s(), 0)
                        self.not_tried.append({"label": cand.label, "key": cand.key, "pipeline": cand.to_list(),
                                               "reason": f"time budget: about {estimate:.0f} s needed, {left:.0f} s "
                                                         f"left besides the {self.reserve_s():.0f} s kept for the "
                                                         "final A/Bs"})
                        self.on_event("skip", {"label": cand.label, "reason": "time budget"})
                        continue
                    chunk.append(cand)
                for cand, row in zip(chunk, self.evaluate_all(chunk), strict=True):
                    row = self.measure_again_if_stalled(cand, row)
                    if self.extendable(row):
                        next_frontier.append(cand)
            if not next_frontier:
                break
            frontier = next_frontier

    def with_remaining_budget(self, cand: Candidate) -> Candidate:
        """`cand` with its last pass's metric budget (`keep_fp32="auto"`) less what its prefix already dropped.
        That pass scores its fp32 fallback against the model it is given, the prefix's: with the whole budget,
        `pruning(amount=0.5) + onnxruntime(int8-static,keep_fp32=auto)` on digits-cnn under a 0.5% budget kept no
        layer fp32 ("budget met", 0.28% below the pruned model), and the search then rejected it at 0.57%.
        Exact for an eval metric (the drops add up); for fidelity an approximation."""
        last = cand.configs[-1] if cand.configs else None
        prefix = self.rows.get(cand.prefix.key) if len(cand.configs) > 1 else None
        if last is None or prefix is None or not takes_metric_budget(last):
            return cand
        used = prefix.get("metric_drop")
        if not isinstance(used, (int, float)) or not math.isfinite(used):
            return cand
        budget = round_budget(float(last.max_metric_drop) - float(used))  # type: ignore[attr-defined]
        return Candidate((*cand.configs[:-1], dataclasses.replace(last, max_metric_drop=budget)))  # type: ignore[call-arg]

    def _worth_extending(self, cand: Candidate) -> bool:
        """Skip a pipeline whose added pass, measured alone, crashed or failed the metric, or was not applicable
        where no earlier pass of the pipeline changes the model's layers (`PassConfig.changes_modules`): on
        conv_wl.py `hygiene + dynamic_int8` had a process of its own, and ended not applicable as dynamic_int8 had."""
        single = self.single_rows.get(_config_key(cand.configs[-1]))
        if single is None:
            return True
        if single["status"] == "failed":
            return False
        if single["status"] == "not_applicable":
            return any(c.changes_modules for c in cand.configs[:-1])
        return not any(v.startswith("metric") or v.startswith("its metric") for v in single.get("violations", []))

    def _priority(self, cand: Candidate) -> tuple[float, int, float]:
        """Best-looking first: product of the measured gains of the prefix and of the added pass alone."""
        score = 1.0
        prefix = self.rows.get(cand.prefix.key) if cand.configs[:-1] else None
        if prefix is not None:
            score *= search_gain(prefix, 1.0)
        single = self.single_rows.get(_config_key(cand.configs[-1]))
        if single is not None and single.get("gain"):
            score *= search_gain(single)
        return -score, _cost_rank(cand), 0.0

    # --- selection ----------------------------------------------------------------------------

    def confirm(self, key: str) -> dict[str, Any]:
        row = self.rows[key]
        assert self.settings is not None
        artifact = row.get("artifact") or {}
        if not artifact.get("dir") or not Path(artifact["dir"]).exists():
            return {"status": "failed", "error": "its artifact is missing (was the work folder removed?)"}
        self.on_event("confirm", {"label": row["label"]})
        payload = {"settings": dataclasses.asdict(self.settings), "artifact_dir": artifact["dir"]}
        timeout = max(60.0, min(self.config.candidate_timeout_s, self.remaining() + 30.0))
        return self.executor.run("confirm", payload, self.workdir / key / "confirm.log", timeout,
                            self.config.memory_limit_bytes or _default_memory_limit())

    def versus(self, key: str, other: str) -> dict[str, Any]:
        """The candidate `key` against `other`, both loaded from their artifacts in one process (B = other)."""
        rows = self.rows[key], self.rows[other]
        assert self.settings is not None
        dirs = [(r.get("artifact") or {}).get("dir") for r in rows]
        if not all(d and Path(d).exists() for d in dirs):
            return {"status": "failed", "error": "an artifact is missing (was the work folder removed?)"}
        self.on_event("versus", {"label": rows[0]["label"], "other": rows[1]["label"]})
        payload = {"settings": dataclasses.asdict(self.settings), "artifact_dir": dirs[0], "other_dir": dirs[1],
                   "names": [rows[0]["label"], rows[1]["label"]]}
        timeout = max(60.0, min(self.config.candidate_timeout_s, self.remaining() + 30.0))
        return self.executor.run("versus", payload, self.workdir / key / f"versus-{other}.log", timeout,
                                 self.config.memory_limit_bytes or _default_memory_limit())


def _config_key(config: PassConfig) -> str:
    """The key a config measured alone is known by (`single_rows`), its metric budget left out: a pipeline hands its
    last pass what the prefix left of the budget (`_Search.with_remaining_budget`)."""
    return Candidate((without_metric_budget(config),)).key


def _cost_rank(cand: Candidate) -> int:
    """The candidate's build cost before it is measured (PassConfig.relative_cost: 0 seconds ... 3 minutes)."""
    return sum(c.relative_cost() for c in cand.configs)


def _check_baseline_metric(metric: Any, wl: Workload, source: str) -> None:
    """OptimizeError when the original model scores no finite metric: every candidate would be measured, then
    refused for a drop against NaN ('its metric is NaN or missing'), and the search end with no winner."""
    if metric is not None and math.isfinite(float(metric)):
        return
    if wl.eval is not None:
        raise OptimizeError(f"the baseline of '{source}' scores its metric '{wl.eval.metric_name}' as {metric}: the "
                            "workload's evaluate(predict) must return a finite number for the original model")
    raise OptimizeError(f"the baseline of '{source}' has NaN or infinite outputs on its inputs: the original model "
                        "must compute finite outputs from them (check the inputs factory and the weights)")


def _isnan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _default_memory_limit() -> int:
    import psutil

    return int(psutil.virtual_memory().total * 0.75)


def _find_resumable(store: Any, source: str, search_key: dict[str, Any], resume: str | None) -> tuple[Any, str | None]:
    """The search to resume (the last one of the same settings that was interrupted, or failed because its executor
    lost every node), and why the last such one is not (its workload's code changed), if so. `resume` (a run id)
    must name an unfinished optimize run of this workload and settings: its candidates' figures would otherwise
    stand in a table of another search (another batch size, another model)."""
    from dlperf.compare.records import a_kind
    from dlperf.store.records import FAILED, INTERRUPTED, OK

    if resume:
        record = store.get(resume)
        if record.kind != "optimize":
            raise OptimizeError(f"run {record.id} is {a_kind(record.kind)} run, not an optimize run: nothing to resume")
        if not _same_workload(record.workload, source):
            raise OptimizeError(f"run {record.id} optimized '{record.workload}', not '{source}'")
        if record.status == OK:
            raise OptimizeError(f"run {record.id} finished: only an interrupted or failed search can be resumed "
                                f"(its results: dlperf runs show {record.id}); leave out --resume to search afresh")
        differs = _key_differences(_same_order(record.config.get("search_key") or {}), search_key)
        if differs:
            raise OptimizeError(f"run {record.id} searched with other settings than this search ({'; '.join(differs)})"
                                ": give the options it ran with, or leave out --resume to search afresh")
        return record, None
    changed = None
    spellings = _spellings(source)
    # a search a later one resumed already is that one's to carry on: it was resumed again by every identical search
    # after that one finished, which took over its candidates (measured before the finished search) once more
    taken = {r.config.get("resumed_from") for spelling in spellings
             for r in store.list(kind="optimize", workload=spelling, limit=None)}
    for spelling in spellings:
        # interrupted, or failed because the executor lost every node (nothing about the candidates), newest first;
        # a search failed for another reason (its baseline, an error in the search) starts afresh
        stopped = [*store.list(kind="optimize", workload=spelling, status=INTERRUPTED, limit=20),
                   *(r for r in store.list(kind="optimize", workload=spelling, status=FAILED, limit=20)
                     if (r.result or {}).get(EXECUTOR_LOST))]
        for record in sorted(stopped, key=lambda r: r.created_at, reverse=True):
            if record.id in taken:
                continue
            recorded = _same_order(record.config.get("search_key"))
            if recorded == search_key:
                return record, changed
            if changed is None and isinstance(recorded, dict) and _key_differences(recorded, search_key) == [
                    _CODE_CHANGED]:
                changed = f"not resuming run {record.id}: {_CODE_CHANGED}"
    return None, changed


EXECUTOR_LOST = "executor_lost"
"""Set in the partial result of a search that failed because its executor lost every node (`ExecutorLost`): such a
search is resumed by the next identical one, as an interrupted one is."""


def _same_order(key: Any) -> Any:
    """A recorded search key with its passes sorted, as `OptimizeConfig.search_key` writes them now (they were kept in
    the order given, so `--passes onnxruntime,hygiene` did not resume a search of `--passes hygiene,onnxruntime`)."""
    if isinstance(key, dict) and isinstance(key.get("passes"), list):
        return {**key, "passes": sorted(set(key["passes"]))}
    return key


_CODE_CHANGED = "the workload's code changed since (its files hash differently)"


def _key_differences(recorded: dict[str, Any], key: dict[str, Any]) -> list[str]:
    """How a recorded search key differs from `key`, one phrase per setting ('batch_size 1 there, 16 here')."""
    out = []
    for name in key:
        if recorded.get(name) == key[name]:
            continue
        if name == "workload_code" and recorded.get(name) is not None:
            out.append(_CODE_CHANGED)
        else:
            there = "not recorded" if name not in recorded else json.dumps(recorded[name])
            out.append(f"{name} {there} there, {json.dumps(key[name])} here")
    return out


def _spellings(source: str) -> list[str]:
    """`source` and, for a file workload, the path relative to this folder, which runs recorded before
    workload paths were made absolute carry (`model.py:NAME`)."""
    path, sep, name = source.rpartition(":")
    if not sep or not os.path.isabs(path):
        return [source]
    relative = f"{os.path.relpath(path)}:{name}"
    return [source] if relative == source else [source, relative]


def _same_workload(recorded: str, source: str) -> bool:
    """Whether a recorded workload spec names `source`: equal, or a relative path that resolves to it here."""
    if recorded == source:
        return True
    path, sep, name = recorded.rpartition(":")
    spath, ssep, sname = source.rpartition(":")
    return bool(sep and ssep and name == sname and not recorded.startswith("zoo:")
                and os.path.abspath(path) == os.path.abspath(spath))


BUDGET_CUT = "the time budget had only"
"""How the error of a candidate killed because the search's time budget ran out goes on (rows recorded before the
`budget_cut` flag are known by it)."""


def _previous_rows(store: Any, run_id: str) -> dict[str, dict[str, Any]]:
    from dlperf.store.records import FAILED, OK

    rows = {}
    for child in store.list(kind="candidate", parent_id=run_id, limit=None):
        if child.status in (OK, FAILED) and child.result.get("key"):
            artifact_dir = (child.result.get("artifact") or {}).get("dir")
            if artifact_dir and not Path(artifact_dir).is_dir():
                # its artifact is gone (the work folder was removed, /tmp cleared): measured again, else the resumed
                # search can neither confirm nor export it ("A/B failed: its artifact is missing", no winner)
                continue
            cut = child.result.get("budget_cut") or BUDGET_CUT in str(child.result.get("error"))
            if child.status == FAILED and cut:
                # killed when the earlier search's budget ran out, not because it hangs: a resumed search (with the
                # budget it has now) measures it, where it stayed "failed" and its pipelines were never extended
                continue
            lost = child.result.get(WORKER_LOST) or str(child.result.get("error")).startswith(WORKER_DIED)
            if child.status == FAILED and lost:
                # its Ray node died under it on every attempt (the search then failed as its executor lost every
                # node): not a verdict on the candidate, and the resumed search reused it as failed
                continue
            row = dict(child.result)
            row["run_id"] = child.id
            rows[row["key"]] = row
    return rows


def optimize(
    workload: Any,
    config: OptimizeConfig | None = None,
    *,
    store: Any = None,
    export_dir: str | Path | None = None,
    resume: str | None = None,
    auto_resume: bool = True,
    on_event: EventFn | None = None,
    executor: Executor | None = None,
    started_at: float | None = None,
    make_executor: Callable[[], Executor] | None = None,
) -> OptimizeResult:
    """Search for the best pipeline of passes for `workload` (a spec such as 'zoo:mlp' or 'file.py:name').

    With `store` every candidate is recorded as it is measured; `resume` (a run id) or, with
    `auto_resume`, the last interrupted search of the same workload and settings (or one that failed because its
    executor lost every node: `ExecutorLost`) is continued.
    `started_at` (a `time.monotonic()` value, default now) is when the time budget starts: the CLI passes
    its process's start (`process_started_at()`), so the whole command fits the budget.
    `make_executor`, in place of `executor`, builds it once every option has been checked (the caller closes it):
    `--executor ray` started Ray (5-6 s) before a bad `--passes`, `--export`, `--device` or `--resume` was refused.
    """
    from dlperf.measure.env import capture_environment
    from dlperf.workload.loader import code_fingerprint, is_rebuilt, load_workload

    config = config or OptimizeConfig()
    if not isinstance(config, OptimizeConfig):  # a dict failed as "'dict' object has no attribute 'workdir'"
        raise ConfigError(f"config must be a dlperf.OptimizeConfig, got {type(config).__name__}")
    from dlperf.store.db import Store

    if store is not None and not hasattr(store, "recording"):  # a path or URL, as dlperf.bench takes it
        store = Store(store, create=True)  # the search records; its resume looks first
    elif isinstance(store, Store):
        store.make()  # a Store(path) of a new file, which the resume's look would refuse as missing
    check_options(config, export_dir, store)
    wl = load_workload(workload)
    source = wl.source or (workload if isinstance(workload, str) else "")
    if not source or source == "python":
        raise OptimizeError(
            f"workload '{wl.name}' has no spec a candidate process can rebuild it from: define it in a file and "
            "pass 'file.py:NAME' (or a zoo:NAME)"
        )
    if isinstance(workload, Workload) and not is_rebuilt(workload):
        # dataclasses.replace(load_workload("zoo:mlp"), eval=...) kept zoo:mlp's source: the candidates rebuilt plain
        # zoo:mlp, and the search ranked them by fidelity instead of the user's metric
        raise OptimizeError(
            f"workload '{wl.name}' is not what its source '{source}' builds (a dataclasses.replace of a loaded "
            "workload?), and each candidate runs in a process of its own that rebuilds the workload from its "
            "source: define this workload in a file and pass 'file.py:NAME'"
        )
    batch_size = config.batch_size or wl.default_batch_size
    env = capture_environment(config.device, config.threads)
    cpu_flags = tuple(env.cpu_flags)
    ctx = PassContext(device=config.device, batch_size=batch_size, threads=config.threads, cpu_flags=cpu_flags)
    space = build_space(wl, ctx, config.passes, config.extra_modules)

    search = _Search(source, config, store, on_event)
    if started_at is not None:
        search.started = min(search.started, started_at)
    search.executor = executor or LocalExecutor()
    search.batch_size = batch_size
    search.cpu_flags = cpu_flags
    search.settings = EvalSettings(
        source=source, batch_size=batch_size, device=config.device, threads=config.threads,
        warmup_iters=config.warmup_iters, min_duration_s=config.min_duration_s, min_iters=config.min_iters,
        max_duration_s=config.max_duration_s, extra_modules=tuple(config.extra_modules), export=True,
        ab_blocks=config.ab_blocks, ab_iters_per_block=config.ab_iters_per_block,
        env={"TORCHINDUCTOR_COMPILE_THREADS": "1"}, paired_gate=1.0 - config.extend_tolerance,
        deployed_memory=config.objective == "memory",
    )
    search_key = config.search_key(batch_size, code_fingerprint(source))
    previous, not_resumed = None, None
    if store is not None and (resume or auto_resume):
        previous, not_resumed = _find_resumable(store, source, search_key, resume)
        if previous is not None:
            search.reused = _previous_rows(store, previous.id)
    if executor is None and make_executor is not None:
        search.executor = make_executor()
    run_config = {**config.to_dict(), "search_key": search_key, "workload": source,
                  "resumed_from": previous.id if previous else None, "executor": executor_name(search.executor)}

    def body(run: Any) -> OptimizeResult:
        search.run = run
        run_id = run.id if run is not None else None
        # absolute: a trial on Ray runs in a worker whose working directory is the raylet's (where `ray start`
        # ran), and a relative folder (the default beside a relative --store) was another folder there
        base_dir = (Path(config.workdir) if config.workdir else _default_workdir(store)).absolute()
        search.workdir = base_dir / (run_id or f"adhoc-{int(time.time())}")
        search.workdir.mkdir(parents=True, exist_ok=True)
        on = search.on_event
        on("start", {"workload": source, "batch_size": batch_size, "space": [c.label() for c in space.configs],
                     "skipped": space.skipped, "resumed_from": previous.id if previous else None,
                     "not_resumed": not_resumed, "time_budget_s": config.time_budget_s})
        baseline = search.measure_again_if_stalled(Candidate(), search.evaluate(Candidate()))
        if baseline["status"] != "ok":
            raise OptimizeError(f"the baseline of '{source}' could not be measured: {baseline.get('error')}")
        _check_baseline_metric(baseline.get("metric"), wl, source)
        search.baseline = baseline
        for row in search.rows.values():
            row["gain"] = 1.0
        budget = config.constraints.absolute_drop(baseline.get("metric"))
        grown = with_metric_budget(space, budget) if budget is not None else space
        search.grow(grown)
        result = _finish(search, space, export_dir, env.to_dict(), previous.id if previous else None)
        result.notes.extend(search.executor.notes())
        return result

    if store is None:
        result = body(None)
    else:
        with store.recording("optimize", source, run_config, env.to_dict()) as run:
            try:
                result = body(run)
            except ExecutorLost:
                # what it measured stands (each candidate stored as it finished; those in flight are stored failed
                # without a result, so measured again): the next identical search resumes it
                run.result = {**(run.result or {}), EXECUTOR_LOST: True}
                raise
            run.result = result.to_dict()
    if result.export_error is not None:
        raise ExportFailed(result.export_error, result)
    return result


def check_options(config: OptimizeConfig, export_dir: str | Path | None = None, store: Any = None) -> None:
    """What `optimize` refuses before it loads the workload and spends its budget: an export or work folder it cannot
    write (a bad --export failed at the end), a device this machine lacks, a --passes name that is no pass. The CLI
    calls it before its own load of the workload: these were refused after "loading the workload took 2.0 s"."""
    from dlperf.optimize.artifact import check_apart, check_export_dir, check_folder_path

    if export_dir is not None:
        check_export_dir(export_dir)
        check_apart(export_dir, Path(config.workdir) if config.workdir else _default_workdir(store))
    if config.workdir is not None:
        check_folder_path(config.workdir, "--workdir")
    check_device(config.device)
    check_pass_names(config.passes, config.extra_modules)


optimize_workload = optimize
"""`dlperf.optimize_workload`: `dlperf.optimize` is this package, so the search is public under the name
profile_workload's pattern gives it (`dlperf.optimize(...)` raised "'module' object is not callable")."""


def executor_name(executor: Executor) -> str:
    """'local', 'ray', or the name another executor gives itself (its class's without one)."""
    return str(getattr(executor, "name", None) or type(executor).__name__)


class ExportFailed(OptimizeError):
    """The search ran and was recorded, but the asked-for export was not written; `result` is the search's result
    (the CLI prints it before the error)."""

    def __init__(self, message: str, result: OptimizeResult) -> None:
        super().__init__(message)
        self.result = result


DISAGREEMENT = 2.0
"""A candidate's gain (its process against the baseline's) and its paired gain (one process) this many times apart:
one of the two measurements was disturbed, and the search does not let the higher one rank it (`search_gain`).
The same factor as the report's note (`report.optimize_view.DISAGREEMENT`)."""


def search_gain(row: dict[str, Any], default: float = 0.0) -> float:
    """The gain the search extends, orders and ranks by: the one paired with the original model in the candidate's own
    process where there is one (latency and throughput), else the isolated one against the baseline's process. Where
    the two are more than DISAGREEMENT apart, the lower: onnxruntime's paired 4.34x beside its isolated 2.15x (the
    original timed beside onnxruntime's spinning threads) ranked it over pruning + onnxruntime (paired 3.13x, gain
    3.09x), which was then never put against it."""
    return float(row.get(_ranked_by(row), row.get("gain", default)))


def _ranked_by(row: dict[str, Any]) -> str:
    """'paired_gain' or 'gain': the row's figure `search_gain` takes."""
    paired, isolated = row.get("paired_gain"), row.get("gain")
    if paired is None:
        return "gain"
    # only a paired gain above the isolated one can be passed over: where the paired one is the lower, it is taken
    if isinstance(isolated, (int, float)) and isolated > 0 and isolated * DISAGREEMENT < paired:
        return "gain"
    return "paired_gain"


def process_started_at(max_age_s: float = 60.0) -> float:
    """The `time.monotonic()` value at which this process started (Python and torch imports included), but
    at most `max_age_s` ago (a bound should the process be older than the command: the `dlperf` command reads it
    before loading its workload; a caller of `main(argv)` counts from its call instead, `cli.optimize.budget_start`)."""
    age = max(0.0, _process_age_s())
    return time.monotonic() - min(age, max_age_s)


def _process_age_s() -> float:
    """This process's age, to the kernel's clock tick (10 ms) on Linux: its start in /proc/self/stat against
    CLOCK_BOOTTIME, the clock that start is counted on. psutil's `create_time()` adds that start to the boot time
    /proc/stat gives in whole seconds, and the wall clock moves with NTP: the age read up to a second long (the
    search's `elapsed_s` read 10 s for a 9.5 s command). Elsewhere psutil's."""
    try:
        with open("/proc/self/stat") as stat:
            # the fields after the command's name, which may hold spaces and parentheses; starttime is field 22
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        import psutil

        return time.time() - psutil.Process().create_time()


def _default_workdir(store: Any) -> Path:
    url = getattr(store, "url", "") if store is not None else ""
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):]).parent / "optimize"
    return Path(tempfile.gettempdir()) / "dlperf-optimize"


def _finish(search: _Search, space: SearchSpace, export_dir: str | Path | None, environment: dict[str, Any],
            resumed_from: str | None) -> OptimizeResult:
    config = search.config
    baseline_notes = _measure_stalled_baseline_again(search)
    baseline = search.baseline
    rows = [search.rows[k] for k in search.order]
    measured = [r for r in rows if r["status"] == "ok"]
    feasible = [r for r in measured if r.get("feasible")]
    # a row whose calls stalled twice has no figure that is the model's: off the frontier and out of the ranking
    rankable = [r for r in feasible if not r.get("not_ranked")]
    hib = bool(baseline.get("higher_is_better", True))
    for r in measured:
        r["paired_p50_s"] = paired_p50_s(r, baseline)
    front_idx = pareto_front(rankable, axes_for(config.device, config.objective), higher_is_better_metric=hib)
    front = [rankable[i]["key"] for i in front_idx]
    for r in rows:
        r["pareto"] = r["key"] in front
    # By the paired gain where there is one, as the search extended and ordered by it: the winner's pick then
    # does not hang on which process measured a fast p50 (a run picked onnxruntime, isolated 0.088 ms, paired
    # 2.92x, over pruning + onnxruntime, isolated 0.091 ms, paired 3.79x); by the gain where the paired one is more
    # than DISAGREEMENT times higher (`search_gain`).
    ranked = [rankable[i] for i in rank(rankable, config.objective, hib, speed_gain=lambda r: search_gain(r, 1.0),
                                        device=config.device)]
    if config.objective == "memory":
        ranked = _memory_noise_gate(ranked, baseline, objective_key("memory", config.device)[0])
    winner: str | None = None
    confirmation: dict[str, Any] | None = None
    notes: list[str] = baseline_notes
    unranked = [r for r in feasible if r.get("not_ranked")]
    if unranked:
        many = len(unranked) > 1
        notes.append(f"not ranked: {', '.join(r['label'] for r in unranked)}"
                     f"{f' ({len(unranked)} candidates; the first of them:' if many else ':'} "
                     f"{unranked[0]['not_ranked']}{')' if many else ''}; its figures are not the model's, so the "
                     "search neither extended nor picked it: re-run on a quieter machine or with --threads 1")
    speed_objective = config.objective in SPEED_OBJECTIVES
    tried = 0
    others = [r for r in rows if r["key"] != baseline["key"]]
    if not others:
        notes.append("no candidate besides the baseline was measured: " + (
            "none fit in the time budget" if search.not_tried else
            "no pass offered a configuration for this workload (see the skipped passes)"))
    elif not any(r["status"] == "ok" for r in others) and any(r.get("budget_cut") for r in others):
        # it said "every one failed or was not applicable" of a candidate the budget had cut short
        notes.append("no candidate besides the baseline could be measured: the time budget cut short "
                     f"{sum(bool(r.get('budget_cut')) for r in others)}"
                     + (f" and left {len(search.not_tried)} untried" if search.not_tried else "")
                     + (", the others failed or were not applicable" if not all(r.get("budget_cut") for r in others)
                        else "") + " (the reasons are listed above)")
    elif not any(r["status"] == "ok" for r in others):
        notes.append("no candidate besides the baseline could be measured: every one failed or was not applicable "
                     "(the reasons are listed above)")
    elif not any(r["key"] != baseline["key"] for r in feasible):
        notes.append(f"no candidate meets the constraints ({config.constraints.describe()})")
    for row in ranked:
        if row["key"] == baseline["key"]:
            if speed_objective and len(ranked) > 1:
                notes.append("the other candidates that meet the constraints measured no better than the baseline")
            elif len(ranked) > 1:
                # no A/B is run here: the baseline ranked first on its own figure
                notes.append(_not_better_note(config.objective, baseline, ranked[1], config.device))
            break
        if tried >= config.confirm_top:
            break
        if search.remaining() < 5 and tried > 0:
            notes.append("time budget spent: no further A/B confirmation")
            break
        tried += 1
        conf = search.confirm(row["key"])
        row["confirmation"] = _public(conf)
        if conf.get("status") != "ok":
            row["confirm_error"] = conf.get("error")
            continue
        verdict = conf["ab"]["verdict"]
        disagreement = _disagreement(row, conf) if speed_objective else _speed_disagreement(row, baseline, conf)
        if disagreement:
            notes.append(disagreement)
        if verdict == FASTER or not speed_objective:
            winner, confirmation = row["key"], conf
            break
        notes.append(f"{row['label']}: the A/B against the baseline says '{verdict}', so it is not called faster")
        if confirmation is None:
            confirmation = conf
    runner_up: dict[str, Any] | None = None
    if winner is not None and speed_objective:
        winner, confirmation, runner_up = _meet_runner_up(search, ranked, winner, confirmation, notes)
    closest = []
    if not feasible or (len(feasible) == 1 and feasible[0]["key"] == baseline["key"]):
        failing = [r for r in measured if not r.get("feasible") and r["key"] != baseline["key"]]
        budget = search.config.constraints.latency_budget_s

        def distance(r: dict[str, Any]) -> tuple[float, float, float]:
            """How far from meeting the constraints: first how far its p99 is over a latency budget (the metric drop
            alone listed a candidate 22.66 ms over a 0.001 ms budget before one 12.40 ms over it), then its metric
            drop (one that improved is no drop: abs() ranked it as one), then the better gain."""
            over = max(float(r.get("p99_s") or 0.0) / budget - 1.0, 0.0) if budget else 0.0
            drop = r.get("metric_drop_rel")
            drop = math.inf if _isnan(drop) else max(float(drop or 0.0), 0.0)
            return over, drop, -float(r.get("gain") or 0.0)

        failing.sort(key=distance)
        closest = [r["key"] for r in failing[:3]]
    exported: str | None = None
    export_error: str | None = None
    # without a confirmed winner, the best-ranked candidate whose A/B did not call it slower (the baseline where
    # that is all that is left): a refuted one was exported with "not confirmed faster" and its A/B left out
    export_key = winner or next((r["key"] for r in ranked if _ab_verdict(r) != SLOWER), None)
    if export_dir is not None and export_key is None:
        # the baseline too misses the constraints (a latency budget): exporting it "as the best within the
        # constraints" would be false, and an older artifact left in the folder would be taken for this search's
        export_error = (f"nothing measured meets the constraints ({config.constraints.describe()}), the baseline "
                        f"included: nothing exported to '{export_dir}'")
        notes.append(export_error)
    elif export_dir is not None and export_key is not None:
        row = search.rows[export_key]
        kept = _confirmed_there(Path(export_dir)) if export_key != winner else None
        if kept is not None:
            # a search that confirmed nothing (one given 5 s measured the baseline alone) replaced a confirmed, faster
            # artifact with the baseline, and the earlier result was gone without a word
            export_error = (f"'{export_dir}' holds {kept}, and this search confirmed no winner: it is kept; nothing "
                            f"exported (give another --export folder for this search's pick, {row['label']}, or "
                            "remove that one)")
            notes.append(export_error)
        elif row.get("artifact") and row["artifact"].get("dir"):
            try:
                exported = str(_export(search, row, winner, confirmation, Path(export_dir), environment))
            except OptimizeError as exc:
                export_error = str(exc)
            if exported and export_key == baseline["key"]:
                notes.append("no candidate beat the baseline within the constraints: exported the baseline")
            elif exported and export_key != winner:
                notes.append(f"exported {row['label']}, which was not confirmed faster by the A/B")
            recipe_note = _recipe_size_note(config.objective, row, exported, baseline["key"], feasible)
            if recipe_note:
                notes.append(recipe_note)
        else:
            export_error = f"{row['label']} left no artifact to export to '{export_dir}'"
    build_note = _model_build_note(rows, search.elapsed())
    if build_note:
        notes.append(build_note)
    result = OptimizeResult(
        run_id=search.run.id if search.run is not None else None, workload=search.source,
        objective=config.objective, batch_size=search.batch_size, device=config.device,
        constraints=config.constraints, metric_name=str(baseline.get("metric_name")),
        metric_is_fidelity=bool(baseline.get("metric_is_fidelity")), higher_is_better=hib,
        baseline=baseline, rows=rows, front=front, winner=winner, confirmation=confirmation,
        not_tried=search.not_tried, skipped_passes=space.skipped, closest=closest, export_dir=exported,
        elapsed_s=search.elapsed(), time_budget_s=config.time_budget_s, resumed_from=resumed_from, notes=notes,
        runner_up=runner_up, export_error=export_error, executor=executor_name(search.executor),
        exported_key=export_key if exported else None,
        workdir=str(search.workdir), workdir_bytes=_folder_bytes(search.workdir),
    )
    search.on_event("done", {"result": result})
    return result


def _measure_stalled_baseline_again(search: _Search) -> list[str]:
    """Measure the baseline again where a candidate's pairing showed its process stalled (`stalled_process`: every
    gain is taken against its p50), time allowing, and judge every row again against the new one; the notes to say.
    Its own timing was checked, and measured again, before any candidate (`optimize`): "stalled_first"."""
    stalled = search.baseline.get("stalled")
    if not search.stalled_in_ranking(search.baseline):
        return []
    against = ("every gain is taken against its stalled figures; the paired gains, each measured in its candidate's "
               "own process, are not")
    if search.baseline.get("stalled_first"):
        return [f"the baseline's calls stalled in two measurements (the second: {stalled}): {against}"]
    again = search.measure_again(search.candidates.get(search.baseline["key"], Candidate()), str(stalled))
    if again is None:
        return [f"the baseline's calls stalled ({stalled}), and the time budget left none to measure it again: "
                f"{against}"]
    if again.get("status") != "ok":
        return [f"the baseline's calls stalled ({stalled}), and measuring it again failed: {again.get('error')}"]
    search.baseline = again
    search.rejudge()
    if again.get("misranked"):
        return [f"the baseline's calls stalled in two measurements (the second: {again['stalled']}): {against}"]
    return []


MODEL_BUILD_SHARE = 0.25
"""A search whose candidates spent this share of its time in the workload's make_model says so."""


def _model_build_note(rows: list[dict[str, Any]], elapsed_s: float) -> str | None:
    """A note when building the model (the workload's factory, in every candidate's process and again for the
    original it is paired with) took MODEL_BUILD_SHARE of the search's time or more: a factory that trained its
    model for 26 s let a 4-minute search measure 2 candidates, and the output said only 'time budget'."""
    fresh = [r for r in rows if not r.get("reused") and r.get("model_builds")]
    builds = sum(int(r["model_builds"]) for r in fresh)
    spent = sum(float(r.get("model_build_s") or 0.0) for r in fresh)
    if not builds or elapsed_s <= 0 or spent < MODEL_BUILD_SHARE * elapsed_s:
        return None
    plural = "" if builds == 1 else "s"
    return (f"building the model (the workload's make_model) took {spent:.0f} s of the search's {elapsed_s:.0f} s: "
            f"{builds} build{plural} of {spent / builds:.1f} s (each candidate builds it, and once more for the "
            "original model it is timed against); a make_model that loads saved weights, rather than training or "
            "converting them, leaves the time budget to more candidates")


IMPLAUSIBLE_DISAGREEMENT = 3.0
"""A confirming A/B and the figure that ranked the candidate this many times apart: one of them was disturbed."""


def _disagreement(row: dict[str, Any], conf: dict[str, Any]) -> str | None:
    """A note when a candidate's confirming A/B and the figure that ranked it (its paired gain, both the candidate
    against the original in one process; its gain where the paired one was doubted: `search_gain`) are far apart:
    a confirmation measured 1425x (its baseline calls taking 19-44 ms against 0.025 ms, another process busy) for a
    candidate whose paired gain was 1.8x, and was printed as confirmed; one of 38.5x (the baseline's calls at 92 ms in
    7 of 16 blocks) for onnxruntime ranked by its gain of 2.38x (paired 67.4x), without a note."""
    measured = (conf.get("ab") or {}).get("speedup")
    if row.get("paired_gain") is None or not isinstance(measured, (int, float)) or measured <= 0:
        return None
    ranked = search_gain(row)
    if ranked <= 0 or max(measured / ranked, ranked / measured) < IMPLAUSIBLE_DISAGREEMENT:
        return None
    figure = "paired measurement" if _ranked_by(row) == "paired_gain" else "gain, which ranked it,"
    return (f"{row['label']}: its confirming A/B measured {measured:.3g}x where its {figure} gave "
            f"{ranked:.3g}x: one of the two was disturbed (another process, a stall); re-run before trusting either")


def _speed_disagreement(row: dict[str, Any], baseline: dict[str, Any], conf: dict[str, Any]) -> str | None:
    """Under --objective size or memory, a note when the winner's A/B speed and the two isolated p50s are
    IMPLAUSIBLE_DISAGREEMENT apart: there is no paired gain to hold it against, and a memory search printed 'winner vs
    baseline: 72.25x speed (95% CI 4.64-1125.82x): faster' for onnxruntime at 0.030 ms against the baseline's 0.081
    (2.7x), its baseline calls stalled by other processes, without a word."""
    measured = (conf.get("ab") or {}).get("speedup")
    base, own = baseline.get("p50_s"), row.get("p50_s")
    if not isinstance(measured, (int, float)) or measured <= 0 or not base or not own:
        return None
    isolated = float(base) / float(own)
    if max(measured / isolated, isolated / measured) < IMPLAUSIBLE_DISAGREEMENT:
        return None
    return (f"{row['label']}: its A/B against the baseline measured {measured:.3g}x speed where the two p50s, each "
            f"from its own process, give {isolated:.3g}x: one of the two was disturbed (another process, a stall); "
            "re-run before quoting either")


MEMORY_NOISE = 0.02
"""A candidate's peak RSS must be this much below the baseline's to beat it on memory: the same model's peak RSS
differs by about 1% between the processes that measure it (zoo:digits-cnn's baseline: 271.4-273.3 MiB in four
searches), and `--objective memory` named hygiene the winner for 270.9 MiB against 273.3."""


def _memory_noise_gate(ranked: list[dict[str, Any]], baseline: dict[str, Any],
                       key: str = "peak_rss_bytes") -> list[dict[str, Any]]:
    """`ranked` with the candidates whose memory (`key`: the peak RSS, or on a GPU its memory) is not MEMORY_NOISE
    below the baseline's moved behind the baseline (unchanged when the baseline misses the constraints: then any
    candidate that meets them is better)."""
    base = baseline.get(key)
    if not base or not any(r["key"] == baseline["key"] for r in ranked):
        return ranked
    limit = float(base) * (1.0 - MEMORY_NOISE)
    better = [r for r in ranked if r["key"] != baseline["key"] and r.get(key) is not None and float(r[key]) < limit]
    chosen = {id(r) for r in better}
    rest = [r for r in ranked if r["key"] != baseline["key"] and id(r) not in chosen]
    return [*better, *(r for r in ranked if r["key"] == baseline["key"]), *rest]


def _not_better_note(objective: str, baseline: dict[str, Any], best: dict[str, Any], device: str = "cpu") -> str:
    """Why there is no winner on size or memory: the baseline measured no more than the best other candidate (on
    memory: not MEMORY_NOISE less)."""
    key, _ = objective_key(objective, device)
    what = {"size_bytes": "size", "peak_rss_bytes": "peak RSS", GPU_MEMORY: "GPU memory"}.get(key, key)
    margin = (f" by more than {MEMORY_NOISE:.0%}, about what the same model's {what} varies between processes"
              if objective == "memory" else "")
    return (f"no candidate that meets the constraints beats the baseline on {objective}{margin}: the baseline's "
            f"{what} is {_size_text(baseline.get(key))}, the best other candidate's ({best['label']}) "
            f"{_size_text(best.get(key))}")


def _size_text(value: Any) -> str:
    if value is None:
        return "unknown"
    n = float(value)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _confirmed_there(folder: Path) -> str | None:
    """'the artifact X that run R confirmed 1.78x faster' when `folder` holds an artifact whose search confirmed it
    (its manifest's `confirmed`), else None (no folder, not an artifact, or not a confirmed one)."""
    from dlperf.optimize.artifact import not_an_artifact, read_manifest

    if not folder.is_dir() or not_an_artifact(folder) is not None:
        return None
    try:
        manifest = read_manifest(folder)
    except OptimizeError:
        return None
    if manifest.get("confirmed") is not True:
        return None
    metrics: dict[str, Any] = m if isinstance(m := manifest.get("metrics"), dict) else {}
    ab: dict[str, Any] = a if isinstance(a := metrics.get("ab"), dict) else {}
    speedup = ab.get("speedup")
    faster = f" {float(speedup):.2f}x faster" if isinstance(speedup, (int, float)) else ""
    run = f" run {manifest['run_id']}" if manifest.get("run_id") else " its search"
    of = f" of {manifest['workload']}" if manifest.get("workload") else ""
    return (f"the artifact {manifest.get('label', '?')}{of} that{run} confirmed{faster or ' faster'} than its "
            "baseline")


def _recipe_size_note(objective: str, row: dict[str, Any], exported: str | None, baseline_key: str,
                      feasible: list[dict[str, Any]]) -> str | None:
    """Under --objective size, where the exported pick is a torch recipe larger on disk than the model it rebuilds:
    its size is the loaded model's, and the recipe's files are the original fp32 weights (and a training pass's).
    `pruning + torchao(method=int8-dynamic)` on a digits MLP won at 0.052 MiB, and its export held 0.53 MiB
    (`weights.pt`, `trained.pt`), while `pruning + onnxruntime(precision=int8-dynamic)` was 0.055 MiB on disk and
    loads without dlperf. The engines' sizes are their files', so the note names the smallest of those."""
    from dlperf.optimize.artifact import artifact_size

    if objective != "size" or not exported or row.get("engine") != "torch" or row["key"] == baseline_key:
        return None
    on_disk = artifact_size(Path(exported))
    if on_disk <= int(row.get("size_bytes") or 0):
        return None
    note = (f"{row['label']} is a torch recipe: its size, {_mib(row['size_bytes'])}, is the model dlperf.load "
            f"rebuilds (with dlperf and the workload's code); the files exported hold {_mib(on_disk)}, the original "
            "weights and any a training pass left")
    engines = [r for r in feasible if r.get("engine") not in (None, "torch") and r.get("size_bytes")]
    if engines:
        small = min(engines, key=lambda r: int(r["size_bytes"]))
        note += (f"; the smallest engine artifact within the constraints, {_mib(small['size_bytes'])} on disk and "
                 f"loaded without dlperf, is {small['label']}")
    return note


def _mib(n: Any) -> str:
    return f"{int(n) / 2**20:.3g} MiB"


def _export(search: _Search, row: dict[str, Any], winner: str | None, confirmation: dict[str, Any] | None,
            export_dir: Path, environment: dict[str, Any]) -> Path:
    """Copy `row`'s artifact to `export_dir` with what the search found about it in the manifest."""
    from dlperf.optimize.artifact import copy_artifact

    config, baseline, key = search.config, search.baseline, row["key"]
    extra = {
        "passes": [c["pass"] for c in row["pipeline"]],
        "configs": row["pipeline"],
        "label": row["label"],
        "objective": config.objective,
        "confirmed": key == winner,
        # the stored runs it came from (`dlperf runs show ID`): the search and this candidate's own run
        "run_id": search.run.id if search.run is not None else None,
        "candidate_run_id": row.get("run_id"),
        "metrics": {
            "p50_s": row.get("p50_s"), "p99_s": row.get("p99_s"), "throughput": row.get("throughput"),
            "metric": row.get("metric"), "metric_worst": row.get("metric_worst"), "metric_name": row.get("metric_name"),
            "metric_drop_rel": row.get("metric_drop_rel"), "size_bytes": row.get("size_bytes"),
            "peak_rss_bytes": row.get("peak_rss_bytes"), "gpu_memory_bytes": row.get("gpu_memory_bytes"),
            # what building it took in the search: a torch recipe with torch.compile pays its compile again on load
            "build_s": row.get("build_s"), "compile_s": row.get("compile_s"), "train_s": row.get("train_s"),
            "baseline_p50_s": baseline.get("p50_s"), "baseline_metric": baseline.get("metric"),
            # the A/B against the baseline that was run for this candidate, confirming it or not
            "ab": (confirmation or {}).get("ab") if key == winner else (row.get("confirmation") or {}).get("ab"),
            # why the search's own figures above are not the model's (its table's `!`, or a noise warning), None where
            # it flagged nothing: zoo:minilm's manifest gave p99 2.03 s and 4.0 items/s beside a p50 of 13.3 ms bare
            "disturbed": row.get("stalled") or row.get("noise_warning") or None,
        },
        "environment": environment,
        "dlperf_version": environment.get("dlperf_version"),
    }
    if extra["metrics"]["ab"]:
        extra["metrics"]["ab"] = {k: v for k, v in extra["metrics"]["ab"].items() if k not in ("a", "b")}
    return copy_artifact(Path(row["artifact"]["dir"]), export_dir, extra)


def _folder_bytes(folder: Path) -> int | None:
    """The bytes of the files under `folder` (None where it cannot be read: a Ray search's folder may be elsewhere)."""
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:
        return None


def _ab_verdict(row: dict[str, Any]) -> str | None:
    """The verdict of the row's A/B against the baseline, None where none was run."""
    ab = (row.get("confirmation") or {}).get("ab")
    return ab.get("verdict") if isinstance(ab, dict) else None


def paired_p50_s(row: dict[str, Any], baseline: dict[str, Any]) -> float:
    """The row's p50 on the baseline's scale: the baseline's p50 times the candidate/original time ratio the candidate
    measured in its own process (its paired gain, which the search ranks by), else its own p50 (no paired ratio, or a
    row ranked by its gain: `search_gain`). The Pareto frontier's latency axis, so that the frontier and the ranking
    agree (isolated p50s from different processes differ by more than many passes' effects: compile showed 50x
    isolated and 0.28x paired in one run). A size or memory search ranks no row by speed (no `ranked_by`): there the
    paired gain is held to the isolated one, the two p50s, by the same rule (`_ranked_by`): `pruning + qat` on a
    digits MLP paired at 0.0033 (the original stalled in its blocks on a busy machine), and its 0.086 us pushed as
    accurate and faster candidates off the frontier."""
    ratio = (row.get("paired") or {}).get("ratio")
    base = baseline.get("p50_s")
    if not (ratio and base and row["key"] != baseline["key"]):
        return float(row["p50_s"])
    ranked_by = row.get("ranked_by")
    if ranked_by is None:
        speed = {"paired_gain": 1.0 / float(ratio), "gain": float(base) / float(row["p50_s"])}
        ranked_by = "paired" if _ranked_by(speed) == "paired_gain" else "gain"
    return float(base) * float(ratio) if ranked_by == "paired" else float(row["p50_s"])


def _meet_runner_up(search: _Search, ranked: list[dict[str, Any]], winner: str, confirmation: dict[str, Any] | None,
                    notes: list[str]) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """The confirmed pick against the next-ranked candidate that may still be faster than the baseline, both
    loaded in one process. The ranking's paired gains come from different processes, and two candidates a few
    percent apart there are often within each other's noise (pruning + onnxruntime 2.91x against onnxruntime
    3.15x in one demo, the other way round in another). The runner-up replaces the pick when it is
    significantly faster, or equally fast and simpler (`select.settle`), and its own A/B against the baseline
    calls it faster. Returns the winner, its confirmation and what was found (None when there was no
    runner-up to meet)."""
    baseline_key = search.baseline["key"]
    keys = [r["key"] for r in ranked]
    pick = search.rows[winner]
    runner: dict[str, Any] | None = None
    for row in ranked[keys.index(winner) + 1:]:
        if row["key"] == baseline_key:
            break
        conf = row.get("confirmation") or {}
        if row.get("confirm_error") or (conf and conf.get("ab", {}).get("verdict") != FASTER):
            continue  # already found no faster than the baseline
        runner = row
        break
    if runner is None:
        return winner, confirmation, None
    if search.remaining() < 5:
        notes.append(f"time budget spent: {pick['label']} was not compared with the runner-up {runner['label']}")
        return winner, confirmation, None
    duel = search.versus(winner, runner["key"])
    found: dict[str, Any] = {"key": runner["key"], "label": runner["label"], "pick": pick["label"], "switched": False}
    if duel.get("status") != "ok":
        found["reason"] = f"the A/B failed: {duel.get('error')}"
        return winner, confirmation, found
    found["ab"] = {k: v for k, v in duel["ab"].items() if k not in ("a", "b")}
    found["describe"] = duel["describe"]
    switch, reason = settle(duel["ab"]["verdict"], pick, runner,
                            absolute=search.config.constraints.max_metric_drop_abs is not None)
    found["reason"] = reason
    if not switch:
        return winner, confirmation, found
    conf = runner.get("confirmation")
    if not conf:
        if search.remaining() < 5:
            found["reason"] = f"{reason}, but no time was left to confirm it against the baseline"
            return winner, confirmation, found
        conf = search.confirm(runner["key"])
        runner["confirmation"] = _public(conf)
        # doubted as the pick's own confirmation is: a switched-to winner's 8.72x against its paired 2.85x got no note
        disagreement = _disagreement(runner, conf) if conf.get("status") == "ok" else None
        if disagreement:
            notes.append(disagreement)
    if conf.get("status") != "ok":
        runner["confirm_error"] = conf.get("error")
        found["reason"] = f"{reason}, but its A/B against the baseline failed"
        return winner, confirmation, found
    if conf["ab"]["verdict"] != FASTER:
        found["reason"] = f"{reason}, but its A/B against the baseline says '{conf['ab']['verdict']}'"
        return winner, confirmation, found
    found["switched"] = True
    return runner["key"], conf, found


__all__ = ["OBJECTIVES", "ExportFailed", "OptimizeConfig", "OptimizeResult", "optimize", "process_started_at"]
