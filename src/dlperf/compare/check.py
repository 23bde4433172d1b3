"""`dlperf check`: re-measure a workload the way its baseline was measured, then apply the gate."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlperf.compare.baselines import contended_points, run_commit
from dlperf.compare.gate import GateConfig, GateResult, PointVerdict, gate, gate_point
from dlperf.compare.records import point_measurements
from dlperf.errors import ConfigError
from dlperf.measure.bench import BenchConfig
from dlperf.measure.timer import TimerConfig
from dlperf.store.db import Store
from dlperf.store.records import RunRecord


@dataclass
class CheckOutcome:
    gate: GateResult
    baseline: RunRecord
    run_id: str
    bench: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return self.gate.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "baseline_run_id": self.baseline.id, **self.gate.to_dict()}


def bench_config_from_dict(data: dict[str, Any]) -> BenchConfig:
    """Rebuild the BenchConfig a run recorded (api.bench_config_dict); unknown keys are ignored."""
    fields = {f.name for f in dataclasses.fields(BenchConfig)}
    kwargs = {k: v for k, v in data.items() if k in fields and k != "timer" and v is not None}
    if "batch_sizes" in kwargs:
        kwargs["batch_sizes"] = tuple(int(b) for b in kwargs["batch_sizes"])
    timer = data.get("timer")
    if isinstance(timer, dict):
        timer_fields = {f.name for f in dataclasses.fields(TimerConfig)}
        kwargs["timer"] = TimerConfig(**{k: v for k, v in timer.items() if k in timer_fields})
    return BenchConfig(**kwargs)


def check_against_baseline(
    workload_spec: Any,
    baseline_name: str,
    store: Store,
    config: GateConfig | None = None,
    *,
    min_duration_s: float | None = None,
    batch_sizes: tuple[int, ...] | None = None,
    on_progress: Callable[[int, int, float], None] | None = None,
    example_inputs: Any = None,
) -> CheckOutcome:
    """Measure `workload_spec` with the baseline run's bench settings, record a 'check' run, and gate it.

    `min_duration_s` / `batch_sizes` override the baseline's (the comparison is per batch size present in
    both). `example_inputs`: an nn.Module's, as `dlperf.bench(model, example_inputs)` takes them.
    """
    from dlperf.api import bench_config_dict, bench_environment, bench_workload, recorded_name
    from dlperf.measure.bench import point_saver, run_bench
    from dlperf.measure.env import environment_differences, usable_cores
    from dlperf.workload.loader import canonical_spec

    config = config or GateConfig()
    baseline = store.get_baseline(baseline_name)
    base_points = point_measurements(baseline)
    if batch_sizes is not None:
        # Checked before measuring: a batch size the baseline lacks was measured, then the check failed with
        # "nothing to compare" (or it was silently left out), and a failed check run was recorded.
        extra = sorted(set(batch_sizes) - set(base_points))
        if extra:
            raise ConfigError(
                f"batch size{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))} not in baseline "
                f"'{baseline_name}' (run {baseline.id} measured {', '.join(map(str, sorted(base_points)))}): "
                "--batch-size (batch_sizes) picks among those"
            )
    bench_config = bench_config_from_dict(baseline.config)
    recorded_threads = (baseline.environment or {}).get("torch_threads")
    if (bench_config.threads is None and isinstance(recorded_threads, int)
            and 1 <= recorded_threads <= usable_cores()):
        # a baseline taken at torch's default is re-measured at the threads it had, not the runner's default:
        # under OMP_NUM_THREADS=1 unchanged code failed at +20.6% (the environment warning said why, after FAIL).
        # Not above this machine's cores: a baseline from a larger machine is another machine's (warned below).
        bench_config = dataclasses.replace(bench_config, threads=recorded_threads)
    if bench_config.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"baseline '{baseline_name}' (run {baseline.id}) was measured on {bench_config.device}, "
                              "and this machine has no CUDA device (torch.cuda.is_available() is False): check on "
                              "a machine like the baseline's, or set a baseline measured here")
    if bench_config.batch_sizes is None or batch_sizes is not None:
        bench_config = dataclasses.replace(bench_config, batch_sizes=batch_sizes or tuple(sorted(base_points)))
    if min_duration_s is not None:
        if min_duration_s <= 0:
            raise ConfigError(f"--duration (min_duration_s) must be positive, got {min_duration_s:g} s")
        timer = dataclasses.replace(bench_config.timer, min_duration_s=min_duration_s,
                                    max_duration_s=max(bench_config.timer.max_duration_s, min_duration_s))
        bench_config = dataclasses.replace(bench_config, timer=timer)
    # a workload, or an artifact folder (`dlperf bench DIR`'s baseline), measured as bench measured it
    # an nn.Module with its inputs too: one benched from Python (`python:CLASSNAME`) could not be checked at all
    workload = bench_workload(workload_spec, example_inputs, threads=bench_config.threads,
                              precision=bench_config.precision, device=bench_config.device)
    # Recorded under the name the user gave, as `dlperf bench` (and `dlperf.bench(..., store=)`) records it, so
    # histories line up: a Workload built in code was checked as 'NAME' against its bench baseline's 'python:NAME'
    name = workload_spec if isinstance(workload_spec, str) else recorded_name(workload)
    environment = bench_environment(bench_config, workload.source)  # at the baseline's --threads, as bench records it
    warnings = []
    key = canonical_spec(name)
    recorded_key = baseline.config.get("workload_key")
    # by the spec's meaning, not its spelling: 'wl.py' from its folder is the 'p/wl.py' of a baseline taken above it
    # (a false warning), and 'wl.py' of another folder is not (no warning)
    if (recorded_key != key) if recorded_key else baseline.workload not in (name, workload.source, workload.name):
        warnings.append(f"the baseline measured workload '{recorded_key or baseline.workload}', this check '{key}'")
    differences = environment_differences(baseline.environment, environment)
    if differences:
        warnings.append("environment differs from the baseline's: " + "; ".join(differences))
    run_config = {**bench_config_dict(bench_config, name), "gate": dataclasses.asdict(config),
                  "baseline": baseline_name, "baseline_run_id": baseline.id}
    with store.recording("check", name, run_config, environment) as run:
        # the batch sizes measured are kept if a later one fails or the check is interrupted, with the headline of
        # the gate on them (it was bench's throughput, whatever the check gated)
        save_points = point_saver(run)
        judged: list[PointVerdict] = []

        def on_point(point: Any, so_far: Any) -> None:
            save_points(point, so_far)
            if point.batch_size in base_points:
                judged.append(gate_point(base_points[point.batch_size], point.measurement, config, point.batch_size))
                # each batch size's change so far: an interrupted check's `runs list` row had a latency, no change
                run.result = {**run.result, "headline": GateResult(config, judged).headline(),
                              "judged": [p.to_dict() for p in judged]}
                run.save()

        result = run_bench(workload, bench_config, on_progress=on_progress, on_point=on_point)
        bench = result.to_dict()
        run.result = bench
        run.save()
        current = {p.batch_size: p.measurement for p in result.points}
        verdict = gate(base_points, current, config, judged={p.batch_size: p for p in judged},
                       left_out=set(base_points) - set(batch_sizes) if batch_sizes is not None else ())
        # a batch size that failed while the machine was busy, or whose calls stalled, is measured again once and
        # judged on that: unchanged code failed at +58680% (p50 31 ms against ~0.05 ms) where the runner's two torch
        # threads stalled beside other work, and the check only warned "re-run" before exiting 1
        doubted = {v.batch_size: why for v in verdict.points if v.failed
                   and (why := stall_evidence(next(p for p in result.points if p.batch_size == v.batch_size)))}
        if doubted:
            again = run_bench(workload, dataclasses.replace(bench_config, batch_sizes=tuple(sorted(doubted))),
                              on_progress=on_progress)
            redone = {p.batch_size: p for p in again.points}
            firsts = {v.batch_size: v for v in verdict.points}
            verdict.points = [gate_point(base_points[v.batch_size], redone[v.batch_size].measurement, config,
                                         v.batch_size) if v.batch_size in redone else v for v in verdict.points]
            for v in verdict.points:
                if v.batch_size in redone:
                    verdict.measured_again.append(_measured_again_note(
                        firsts[v.batch_size], doubted[v.batch_size], v, redone[v.batch_size].measurement, config))
            result = dataclasses.replace(result, points=[redone.get(p.batch_size, p) for p in result.points])
            bench = result.to_dict()
        verdict.warnings = [*warnings, *verdict.warnings, *_measurement_warnings(result.points, base_points,
                                                                                 verdict, contended_points(baseline),
                                                                                 set(doubted))]
        verdict.baseline_run_id = baseline.id
        verdict.current_run_id = run.id
        # the code each side ran: a CI log names the commit the pull request was judged against
        verdict.baseline_git_commit, verdict.baseline_git_dirty = run_commit(baseline)
        commit, dirty = environment.get("git_commit"), environment.get("git_dirty")
        verdict.git_commit = commit if isinstance(commit, str) and commit else None
        verdict.git_dirty = dirty if verdict.git_commit and isinstance(dirty, bool) else None
        # the headline is the gated metric's (bench's was throughput, whatever the gate judged)
        run.result = {**bench, "headline": verdict.headline(), "gate": verdict.to_dict()}
    return CheckOutcome(verdict, baseline, run.id, bench)


def stall_evidence(point: Any) -> str | None:
    """Why a batch size's measurement may say more about the machine than the code, None where nothing does: other
    processes kept cores busy (bench's contention figures) or its calls have the stall shape, a median call
    `STALL_FACTOR` times the fastest (a model's intra-op threads descheduled beside other work)."""
    from dlperf.measure.ab import STALL_FACTOR

    said = []
    if point.contention_warning:
        said.append(f"{point.other_load_percent / 100:.1f} cores were busy elsewhere")
    m = point.measurement
    if m.n and m.min_s > 0 and m.p50_s >= STALL_FACTOR * m.min_s:
        said.append(f"its median call took {m.p50_s / m.min_s:,.0f}x its fastest (stalled calls)")
    return " and ".join(said) or None


def _measured_again_note(first: PointVerdict, why: str, again: PointVerdict, measurement: Any,
                         config: GateConfig) -> str:
    """'batch 8 failed while 1.4 cores were busy elsewhere (p50 ...); measured again (N calls, S s): ...'."""
    def said(v: PointVerdict) -> str:
        return v.reason(config.max_regression, config.confidence).split(": ", 1)[1]

    took = f"{total:.1f} s" if (total := measurement.total_s) >= 1 else f"{total * 1e3:.0f} ms"
    outcome = ("failed again: judged on this measurement" if again.failed
               else "judged on this measurement, not the first")
    return (f"batch {first.batch_size} failed while {why} ({said(first)}); measured again "
            f"({measurement.n} calls, {took}): {said(again)}; {outcome}")


def _measurement_warnings(points: list[Any], base_points: dict[int, Any], verdict: GateResult,
                          base_contention: dict[int, str] | None = None,
                          measured_again: set[int] | None = None) -> list[str]:
    """What the bench recorded about its own measurements (noise, other processes busy) and the baseline's noise,
    for the check's output: `runs show` printed them, the check's verdict and JSON did not, and a FAIL measured on
    a busy runner (p50 0.026 -> 4.0 ms) read as a regression of the code."""
    out: list[str] = []
    doubtful: set[int] = set()
    for p in points:
        for said in (p.measurement.noise_warning, p.contention_warning):
            if said:
                out.append(f"batch {p.batch_size}: {said}")
                doubtful.add(p.batch_size)
    # only the batch sizes judged: `check --batch-size 8` warned of the baseline's noisy batch 1 and 32 too,
    # which it neither measured nor compared
    judged = {v.batch_size for v in verdict.points}
    for batch, m in sorted(base_points.items()):
        if m.noise_warning and batch in judged:
            out.append(f"the baseline's batch {batch}: {m.noise_warning}")
            doubtful.add(batch)
        # a baseline taken beside busy processes said only "noisy: IQR is 12%" where its p50 was 500x a quiet run's
        if (base_contention or {}).get(batch) and batch in judged:
            out.append(f"the baseline's batch {batch}: {(base_contention or {})[batch]}")
            doubtful.add(batch)
    again = measured_again or set()
    failed = sorted(v.batch_size for v in verdict.points if v.failed and v.batch_size in doubtful - again)
    if failed:
        out.append(f"the failing batch size{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} "
                   f"{'were' if len(failed) > 1 else 'was'} measured noisily or beside other busy processes (above): "
                   "re-run the check before reading this FAIL as a regression of the code")
    # measured twice already (the note above): "re-run the check" asked for what the check had done
    twice = sorted(v.batch_size for v in verdict.points if v.failed and v.batch_size in doubtful & again)
    if twice:
        out.append(f"the failing batch size{'s' if len(twice) > 1 else ''} {', '.join(map(str, twice))} failed when "
                   "measured again too, and what is said above of the measurements (noise, other busy processes) "
                   "still holds: confirm with "
                   "`dlperf ab`, which measures both sides in one process, before reading it as a regression of the "
                   "code")
    return out
