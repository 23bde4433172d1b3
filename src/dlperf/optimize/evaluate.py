"""Evaluate one candidate in its own process: build, apply its passes, check, score, time, export.

A crash, a hang (timeout) or running out of memory costs that candidate only: the parent records the
error and the search goes on. Children start with the "forkserver" method (a clean server process with
torch preloaded; "spawn" where forkserver is missing), never "fork" after torch started its threads. The
child rebuilds the workload from its spec string (`workload.source`) and the pipeline from plain dicts;
results come back as plain dicts. The child's stdout/stderr go to a log file next to its artifact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf.errors import OptimizeError
from dlperf.measure.ab import SETTLE_S
from dlperf.passes._engine import HELDOUT_SAMPLES, heldout_rows  # the default calibration rows come after them

PHASES = ("start", "load", "build", "apply", "check", "eval", "time", "paired", "export", "memory", "done")


@dataclass(frozen=True)
class EvalSettings:
    """The same measurement settings for every candidate (plain data: it crosses the process boundary)."""

    source: str
    batch_size: int = 1
    device: str = "cpu"
    threads: int | None = None
    warmup_iters: int = 5
    min_duration_s: float = 1.0
    min_iters: int = 10
    max_duration_s: float = 15.0
    extra_modules: tuple[str, ...] = ()
    export: bool = True
    ab_blocks: int = 16
    ab_iters_per_block: int = 5
    env: dict[str, str] = field(default_factory=dict)
    # Without an eval metric, fidelity is scored on this many held-out inputs (not only the example batch).
    heldout_samples: int = HELDOUT_SAMPLES
    # Paired blocks (ABBA) of the original model against the candidate in the candidate's own process (0: none),
    # per round, up to PAIRED_ROUNDS rounds while the CI is wide: the search's gate and order use that ratio,
    # which the process's own speed cancels out of.
    paired_blocks: int = 6
    # The paired gain the search extends a candidate at (1 - its extend_tolerance): more rounds while the CI
    # contains it.
    paired_gate: float = 0.95
    # Measure the peak RSS a deployment of the exported artifact uses, in a fresh process that loads it alone
    # (`optimize.footprint`), and report that as `peak_rss_bytes` (the memory objective's figure).
    deployed_memory: bool = False


# --- the child side -----------------------------------------------------------------------------


def _child_entry(conn: Any, target: str, payload: dict[str, Any], log_path: str) -> None:
    """Runs in the child process: redirect output, run the target, send the result dict."""
    _redirect_output(log_path)
    for key, value in payload["settings"].get("env", {}).items():
        os.environ[key] = value

    def phase(name: str) -> None:
        with contextlib.suppress(Exception):
            conn.send({"phase": name})

    current = {"phase": "start"}

    def tracked(name: str) -> None:
        current["phase"] = name
        phase(name)

    tracked("start")
    try:
        fn = {"evaluate": evaluate_here, "confirm": confirm_here, "versus": versus_here}[target]
        result = fn(payload, tracked)
    except MemoryError as exc:
        result = _failure(current["phase"], "out of memory", exc)
    except BaseException as exc:
        result = _failure(current["phase"], None, exc)
    try:
        conn.send({"result": result})
    finally:
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()


def _failure(phase: str, what: str | None, exc: BaseException) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    from dlperf.errors import DlperfError, PassNotApplicable

    status = "not_applicable" if isinstance(exc, PassNotApplicable) else "failed"
    # dlperf's own errors say what went wrong in words already ("workload 'w': the model rejected ..."): no class
    message = f"{what}: {exc}" if what else str(exc) if isinstance(exc, DlperfError) else f"{type(exc).__name__}: {exc}"
    return {"status": status, "phase": phase, "error": message, "traceback": tb}


def _redirect_output(log_path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def _settings(payload: dict[str, Any]) -> EvalSettings:
    data = dict(payload["settings"])
    data["extra_modules"] = tuple(data.get("extra_modules", ()))
    return EvalSettings(**data)


def evaluate_here(payload: dict[str, Any], phase: Callable[[str], None]) -> dict[str, Any]:
    """Build the workload, apply the pipeline and measure it, in this process. Returns a plain dict."""
    import torch

    from dlperf.measure.bench import to_device
    from dlperf.measure.clock import clock_for
    from dlperf.measure.env import cpu_flags
    from dlperf.measure.memory import (
        PeakRssSampler,
        cuda_peak,
        cuda_reset_peak,
        lifetime_peak_rss_bytes,
        parameter_bytes,
    )
    from dlperf.measure.timer import TimerConfig, time_callable
    from dlperf.optimize.artifact import artifact_size, export_state, last_training_step
    from dlperf.optimize.space import candidate_from_list, load_pass_modules
    from dlperf.passes.base import ModelState, PassContext, apply_pass
    from dlperf.workload.loader import load_workload

    settings = _settings(payload)
    started = time.perf_counter()
    phase("load")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    load_pass_modules(settings.extra_modules)
    candidate = candidate_from_list(payload["pipeline"])
    workload = load_workload(settings.source)
    out_dir = Path(payload["out_dir"])

    phase("build")
    build_start = time.perf_counter()
    model = workload.build_model().eval().to(settings.device)
    model_build_s = time.perf_counter() - build_start
    inputs = to_device(workload.example_inputs(settings.batch_size), settings.device)
    with torch.no_grad():
        try:
            reference = _flatten(model(*inputs))
        except Exception:
            workload.check(model, inputs)  # again, to raise what bench and profile say (the inputs, a hint)
            raise
    # in their own dtype: fidelity_of scores integer outputs (class indices, token ids) by agreement, not by a cosine
    reference = [t.detach().clone() for t in reference]
    # Kept on the host: they are only saved, and on CUDA a device copy would count in the candidate's peak.
    original_weights = (
        {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()} if settings.export else None
    )
    heldout = _heldout_batches(workload, settings) if workload.eval is None else []
    with torch.no_grad():
        heldout_reference = [[t.detach().clone() for t in _flatten(model(*b))] for b in heldout]
    state = ModelState(workload=workload, model=model, predict=model)
    ctx = PassContext(
        device=settings.device, batch_size=settings.batch_size, threads=settings.threads,
        cpu_flags=tuple(cpu_flags()),
        calibration_inputs=workload.eval.calibration_inputs if workload.eval is not None else None,
        workdir=out_dir,
    )

    phase("apply")
    apply_start = time.perf_counter()
    trained_after = last_training_step(candidate)
    trained_weights = None
    for i, config in enumerate(candidate.configs):
        state = apply_pass(config, state, ctx)
        if i == trained_after and settings.export and state.model is not None:
            trained_weights = {k: v.detach().to("cpu", copy=True) for k, v in state.model.state_dict().items()}
    apply_s = time.perf_counter() - apply_start
    predict = state.predict

    phase("check")
    with torch.no_grad():
        outputs = _flatten(predict(*inputs))
    fidelity = fidelity_of(outputs, reference, settings.batch_size)

    metric: float | None = None
    metric_worst: float | None = None  # the worst single input's fidelity, where there is one (--min-fidelity-worst)
    metric_name = "fidelity (mean cosine vs the original model's outputs on the example inputs)"
    higher_is_better = True
    if workload.eval is not None:
        phase("eval")

        def scored(*args: Any) -> Any:
            with torch.no_grad():
                return predict(*args)

        metric = workload.score(scored, settings.device)
        metric_worst = workload.score_worst(scored, settings.device)
        metric_name = workload.eval.metric_name
        higher_is_better = workload.eval.higher_is_better
    elif heldout:
        phase("eval")
        with torch.no_grad():
            scores = [fidelity_of(_flatten(predict(*b)), ref, settings.batch_size)
                      for b, ref in zip(heldout, heldout_reference, strict=True)]
        rows = len(heldout) * settings.batch_size
        fidelity["heldout_samples"] = rows
        fidelity["heldout_mean_cosine"] = sum(f["mean_cosine"] for f in scores) / len(scores)
        fidelity["heldout_min_cosine"] = min(f["min_cosine"] for f in scores)
        metric = fidelity["heldout_mean_cosine"]
        metric_worst = fidelity["heldout_min_cosine"]
        metric_name = f"fidelity (mean cosine vs the original model's outputs on {rows} held-out inputs)"
    else:
        metric = fidelity["mean_cosine"]
        metric_worst = fidelity.get("min_cosine")

    phase("time")
    timer = TimerConfig(warmup_iters=settings.warmup_iters, min_duration_s=settings.min_duration_s,
                        min_iters=settings.min_iters, max_duration_s=settings.max_duration_s)

    def call() -> Any:
        with torch.no_grad():
            return predict(*inputs)

    if settings.device.startswith("cuda"):
        # The peak of serving the candidate, not of building it (TensorRT's builder, compile's autotuning).
        cuda_reset_peak(settings.device)
    with PeakRssSampler() as rss:
        measurement = time_callable(call, timer, clock_for(settings.device), items_per_call=settings.batch_size,
                                    label=candidate.label)
    cuda_peak_bytes = None
    if settings.device.startswith("cuda"):
        cuda_peak_bytes = cuda_peak(settings.device).max_allocated_bytes
    # before the original model is built beside the candidate for the pairing; ru_maxrss, less what the timing's
    # peak sampler reset of it
    max_rss_bytes = lifetime_peak_rss_bytes()
    one_thread = None
    if candidate.is_baseline and settings.device == "cpu":
        phase("one thread")
        one_thread = _one_thread_check(call, measurement.p50_s)
    paired = None
    if settings.paired_blocks > 0 and not candidate.is_baseline:
        phase("paired")
        paired = _paired_with_original(workload, inputs, call, measurement.p50_s, settings)
        model_build_s += float(paired.get("model_build_s") or 0.0)

    artifact: dict[str, Any] | None = None
    size_bytes = parameter_bytes(state.model) if state.model is not None else 0
    if settings.export:
        phase("export")
        artifact_dir = out_dir / "artifact"
        fields = export_state(state, candidate, settings, original_weights, artifact_dir, trained_weights)
        artifact = {"dir": str(artifact_dir), "fields": fields}
        if state.engine != "torch":
            size_bytes = artifact_size(artifact_dir)
    peak_rss_bytes = int(rss.peak_rss_bytes)
    deployed = None
    if settings.deployed_memory:
        phase("memory")
        deployed = _deployed_memory(artifact, inputs, settings, out_dir)
        if "peak_rss_bytes" in deployed:
            peak_rss_bytes = int(deployed["peak_rss_bytes"])
    gpu_memory_bytes, gpu_memory_of = _gpu_memory(deployed, cuda_peak_bytes, state.engine)
    summary = measurement.summary()
    phase("done")
    return {
        "status": "ok",
        "engine": state.engine,
        "precision": state.precision,
        "notes": list(state.notes),
        "build_s": max(state.build_s, apply_s),
        # of build_s: the passes' compile and conversion, and their training (a distilled student's 30 s read as
        # compile_s, which a torch recipe pays again on load; its training it does not)
        "compile_s": max(0.0, state.build_s - state.train_s),
        "train_s": state.train_s,
        "latency": summary,
        "p50_s": summary["p50_s"],
        "p99_s": summary["p99_s"],
        "throughput": summary["throughput"],
        "noise_warning": summary["noise_warning"],
        "samples_ns": list(measurement.samples_ns),
        "metric": metric,
        "metric_worst": metric_worst,
        "metric_name": metric_name,
        "higher_is_better": higher_is_better,
        "metric_is_fidelity": workload.eval is None,
        "fidelity": fidelity,
        "size_bytes": int(size_bytes),
        "peak_rss_bytes": peak_rss_bytes,
        # the candidate's own process during timing: torch, the original model, the conversion's leftovers included
        "timing_peak_rss_bytes": int(rss.peak_rss_bytes),
        "deployed_memory": deployed,
        "process_max_rss_bytes": max_rss_bytes,
        "cuda_peak_bytes": cuda_peak_bytes,
        # on a GPU, what --objective memory ranks by (`select.objective_key`), and what the figure counts
        "gpu_memory_bytes": gpu_memory_bytes,
        "gpu_memory_of": gpu_memory_of,
        "paired": paired,
        "one_thread": one_thread,
        "artifact": artifact,
        "child_wall_s": time.perf_counter() - started,
        # the workload's make_model, each time this process called it (the candidate, the original it is paired
        # with): a factory that trains or converts its weights can take most of a search's time
        "model_build_s": model_build_s,
        "model_builds": 2 if paired is not None and "model_build_s" in paired else 1,
    }


ONE_THREAD_CALLS = 5
"""The most calls `_one_thread_check` times the baseline with one thread."""


def _one_thread_check(call: Callable[[], Any], p50_s: float) -> dict[str, Any] | None:
    """The baseline timed again with one thread in its process, for `explain.stalled_threads`: where its threads
    stalled on every call (each waiting on the other's preemption on a busy machine: zoo:digits-cnn at p50 292 ms
    against ~0.06 ms quiet, its fastest call stalled too), one thread runs it many times faster, and no candidate's
    pairing need be there to tell. Cheap: it stops once a call after the first (a warm-up) is not STALL_FACTOR
    faster than the p50, so a model threads do speed up pays about two calls of its own. None with one thread."""
    import torch

    from dlperf.optimize.explain import STALL_FACTOR

    threads = torch.get_num_threads()
    if threads <= 1 or p50_s <= 0:
        return None
    times: list[float] = []
    torch.set_num_threads(1)
    try:
        for _ in range(ONE_THREAD_CALLS):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
            if len(times) >= 2 and min(times[1:]) * STALL_FACTOR > p50_s:
                break
    finally:
        torch.set_num_threads(threads)
    return {"threads": threads, "calls": len(times), "min_s": min(times[1:] or times)}


TIMED_GPU_MEMORY = "torch's allocator peak while it was timed, in its own process (no deployed figure)"


def _gpu_memory(deployed: dict[str, Any] | None, cuda_peak_bytes: int | None,
                engine: str) -> tuple[int | None, str | None]:
    """A GPU candidate's memory and what it counts: the deployed process's (`footprint.process_gpu_bytes`), else
    for a torch candidate torch's allocator peak while it was timed; None off the GPU, and for an engine candidate
    without a deployed figure (torch's allocator does not see ONNX Runtime's or TensorRT's memory: 0 would rank it
    first)."""
    if deployed is not None and isinstance(deployed.get("gpu_bytes"), int):
        return int(deployed["gpu_bytes"]), str(deployed.get("gpu_bytes_of") or "")
    if cuda_peak_bytes is not None and engine == "torch":
        return int(cuda_peak_bytes), TIMED_GPU_MEMORY
    return None, None


def _deployed_memory(artifact: dict[str, Any] | None, inputs: Any, settings: EvalSettings,
                     out_dir: Path) -> dict[str, Any]:
    """The deployed artifact's memory (`optimize.footprint.measure_deployed`), or {"error": ...} saying why not."""
    from dlperf.optimize.footprint import INPUTS_FILE, measure_deployed, save_inputs

    if artifact is None:
        return {"error": "no exported artifact to load"}
    inputs_path = out_dir / INPUTS_FILE
    if not save_inputs(inputs, inputs_path):
        return {"error": "the example inputs are not a tuple of tensors"}
    # the warm-up's calls and one more: a model's working memory is allocated by its first calls on these shapes
    return measure_deployed(Path(artifact["dir"]), inputs_path, settings.warmup_iters + 1, settings.threads)


PAIRED_BLOCK_S = 0.025
"""Target length of one side of one paired block (the candidate's p50 sets the calls per block, 2 to 50)."""
PAIRED_ROUNDS = 3
"""The pairing runs up to this many rounds of `paired_blocks` blocks while its CI straddles the search's gate
(`EvalSettings.paired_gate`) and is wider than PAIRED_CI_SPAN. One round of 6 short blocks on a sub-millisecond
model can read an unchanged model as 0.83x (a hygiene candidate in one demo run; 30 blocks: 0.97-1.01x, no
significant difference), which the search's 5% gate takes as slower: such a candidate gets more blocks, one
far from the gate does not."""
PAIRED_CI_SPAN = 1.10
"""Narrow enough whatever the gate: the 95% CI's upper end within 10% of its lower end."""
AB_SETTLE_S = SETTLE_S
"""The paired blocks and the final A/Bs wait, at each switch between the two sides, up to this long for the other
side's threads to go idle (`ABConfig.settle_s`). ONNX Runtime's intra-op workers spin for about 50 ms of CPU after
a call (100-200 ms of wall time on a loaded machine), through the original model's next block: in a demo run on
zoo:digits-cnn (2 cores) the original ran at 0.091 ms a call beside onnxruntime against 0.045 ms in the baseline's
process, and the paired gain read 4.34x for an isolated 2.15x. Each side still runs its calls back to back, as
deployed: onnxruntime keeps its default spinning (turning it off made its own calls 1.15-1.35x slower, a pairing
biased the other way)."""


def _paired_with_original(workload: Any, inputs: Any, call: Callable[[], Any], p50_s: float,
                          settings: EvalSettings) -> dict[str, Any]:
    """The candidate's time per call over the original model's, both in this process, interleaved in ABBA
    blocks. Two processes running the same model can differ by more than a pass's effect on this machine
    (a small model's p50 0.14 ms in one, 0.19-0.25 ms in others): a ratio taken in one process does not
    carry that. Each side waits for the other's threads to go idle before its block (AB_SETTLE_S), so neither
    is timed beside the other's spinning thread pool. Never fails the candidate: an error is returned as such."""
    import torch

    from dlperf.measure.ab import ABConfig, ab_test, decide
    from dlperf.measure.clock import clock_for

    built: dict[str, float] = {}  # what building the original took, also where the pairing fails after it
    try:
        build_start = time.perf_counter()
        original = workload.build_model().eval().to(settings.device)
        built["model_build_s"] = time.perf_counter() - build_start

        def base() -> Any:
            with torch.no_grad():
                return original(*inputs)

        iters = max(2, min(50, math.ceil(PAIRED_BLOCK_S / max(p50_s, 1e-6))))
        config = ABConfig(blocks=settings.paired_blocks, iters_per_block=iters, warmup_iters=2, settle_s=AB_SETTLE_S)
        clock = clock_for(settings.device)
        ratios: list[float] = []
        waits: list[float] = []
        for _ in range(PAIRED_ROUNDS):
            result = ab_test(base, call, config, clock)
            ratios += result.block_ratios
            waits += result.settle_waits_s
            ratio, (lo, hi), verdict = decide(ratios, config.confidence, config.min_effect)
            gain_lo, gain_hi = 1.0 / hi, 1.0 / lo
            if hi <= lo * PAIRED_CI_SPAN or not gain_lo < settings.paired_gate < gain_hi:
                break
        return {"ratio": ratio, "ci": [lo, hi], "verdict": verdict, "blocks": len(ratios), "iters_per_block": iters,
                # the untimed waits for the other side's threads to go idle between the sides (AB_SETTLE_S)
                "settle_s": round(sum(waits), 4), "settle_capped": sum(w >= AB_SETTLE_S for w in waits), **built}
    except Exception as exc:  # the candidate is measured; only this cross-check is missing
        return {"error": f"{type(exc).__name__}: {exc}", **built}


def _heldout_batches(workload: Any, settings: EvalSettings) -> list[Any]:
    """`settings.heldout_samples` inputs the candidate never saw (not its example batch, not the default
    calibration rows), in batches of the candidate's batch size (no new shapes: compiled or graphed
    candidates do not recompile). Empty when the workload's inputs cannot be split into rows."""
    from dlperf.measure.bench import to_device

    if settings.heldout_samples < 1:
        return []
    b = settings.batch_size
    # Past the first max(batch, 32) rows (heldout_rows): with make_inputs seeding one generator, example_inputs(32)
    # began with the example batch, the calibration rows and the rows keep_fp32="auto" chose on, and the fidelity
    # reported as "on 32 held-out inputs" was scored on them. The default calibration rows now come after these.
    span = heldout_rows(b, settings.heldout_samples)
    try:
        big = workload.example_inputs(span.stop)
        if any(int(x.shape[0]) < span.stop for x in big):
            return []
        held = tuple(x[span.start : span.stop].clone() for x in big)  # a copy: views would keep the skipped rows
        return [to_device(tuple(x[i : i + b] for x in held), settings.device) for i in range(0, len(span), b)]
    except (AttributeError, IndexError, TypeError):  # inputs that are not batch-first tensors
        return []


def confirm_here(payload: dict[str, Any], phase: Callable[[str], None]) -> dict[str, Any]:
    """Load the baseline and the exported winner in this one process and A/B them, interleaved."""
    import torch

    from dlperf.optimize.artifact import load_artifact

    settings, workload, inputs = _ab_setup(payload, phase)
    baseline = workload.build_model().eval().to(settings.device)
    loaded = load_artifact(payload["artifact_dir"])
    phase("check")
    with torch.no_grad():
        reference = _flatten(baseline(*inputs))
        outputs = _flatten(loaded(*inputs))
    fidelity = fidelity_of(outputs, reference, settings.batch_size)
    result = _ab_time(settings, baseline, loaded, inputs, phase)
    return {"status": "ok", **ab_without_stalled_blocks(result, ("baseline", "winner")), "loaded_fidelity": fidelity}


def versus_here(payload: dict[str, Any], phase: Callable[[str], None]) -> dict[str, Any]:
    """Load two exported candidates (`artifact_dir` the search's pick, `other_dir` the runner-up) in this one
    process and A/B them, interleaved: B is the runner-up, so 'faster' means the runner-up is faster."""
    from dlperf.optimize.artifact import load_artifact

    settings, _, inputs = _ab_setup(payload, phase)
    first = load_artifact(payload["artifact_dir"])
    second = load_artifact(payload["other_dir"])
    result = _ab_time(settings, first, second, inputs, phase)
    names = payload.get("names") or ("A", "B")
    return {"status": "ok", **ab_without_stalled_blocks(result, (names[0], names[1]))}


def _ab_setup(payload: dict[str, Any], phase: Callable[[str], None]) -> tuple[EvalSettings, Any, Any]:
    import torch

    from dlperf.measure.bench import to_device
    from dlperf.workload.loader import load_workload

    settings = _settings(payload)
    phase("load")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    workload = load_workload(settings.source)
    return settings, workload, to_device(workload.example_inputs(settings.batch_size), settings.device)


def _ab_time(settings: EvalSettings, model_a: Any, model_b: Any, inputs: Any, phase: Callable[[str], None]) -> Any:
    """The interleaved A/B (ABBA blocks, `settings.ab_blocks` of `ab_iters_per_block` calls) of two models, each side
    waiting for the other's threads to go idle before its block (AB_SETTLE_S)."""
    import torch

    from dlperf.measure.ab import ABConfig, ab_test
    from dlperf.measure.clock import clock_for

    def call_a() -> Any:
        with torch.no_grad():
            return model_a(*inputs)

    def call_b() -> Any:
        with torch.no_grad():
            return model_b(*inputs)

    phase("time")
    config = ABConfig(blocks=settings.ab_blocks, iters_per_block=settings.ab_iters_per_block, settle_s=AB_SETTLE_S)
    result = ab_test(call_a, call_b, config, clock_for(settings.device), items_per_call=settings.batch_size)
    phase("done")
    return result


def ab_without_stalled_blocks(result: Any, names: tuple[str, str]) -> dict[str, Any]:
    """The A/B's `ab` dict and `describe` line, judged without the paired blocks where a side stalled
    (`measure.ab.without_stalled_blocks`, which `dlperf ab` uses too: a block STALL_FACTOR times its side's fastest
    block). `measure.ab.decide`'s 20% trim drops 3 blocks an end of 16, and can keep stalled ones: attn_wl.py's
    onnxruntime winner read "11.38x speed (95% CI 1.07-120.58x): faster", recorded as confirmed, its baseline stalled
    about 1000x in 5 of 16 blocks, where its paired gain was 4.78x. The left-out blocks, and the figures over all
    blocks, are kept under `stalled_blocks`; where fewer than half the blocks (or 4) are left, nothing is judged: the
    verdict is "no significant difference" and `disturbed` says why, so a search does not call the candidate faster
    on it."""
    from dlperf.measure.ab import without_stalled_blocks

    a_name, b_name = names
    judged = without_stalled_blocks(result)
    if not judged.stalled:
        return {"ab": result.to_dict(), "describe": result.describe(a_name, b_name)}
    left_out = judged.left_out(names)
    ab = judged.result.to_dict()
    ab["block_ratios"] = result.block_ratios
    ab["stalled_blocks"] = judged.note(names)
    if judged.too_few:
        ab["disturbed"] = f"{left_out}; too few blocks left to judge"
        lo, hi = result.speedup_ci
        return {"ab": ab, "describe": (f"{b_name} vs {a_name}: not judged ({ab['disturbed']}; over all blocks "
                                       f"{result.speedup:.2f}x, {result.confidence:.0%} CI {lo:.2f}-{hi:.2f}x)")}
    return {"ab": ab, "describe": f"{judged.result.describe(a_name, b_name)} ({left_out}; over all blocks "
                                  f"{result.speedup:.2f}x)"}


def _flatten(value: Any) -> list[Any]:
    """Every tensor in a (nested) model output, in a stable order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for k in value for t in _flatten(value[k])]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flatten(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in _flatten(getattr(value, f.name))]
    return []


def fidelity_of(outputs: list[Any], reference: list[Any], batch_size: int) -> dict[str, Any]:
    """Mean / min cosine per sample and relative error of `outputs` against the original's `reference`. An integer or
    boolean output (class indices, token ids) scores each sample by the share of its elements equal to the
    original's instead: a cosine of indices says nothing (0 -> 1 scored 0, 1 -> 2 scored 1), and the check meant to
    leave such outputs out ran after they were made float, so it never did."""
    import torch

    if len(outputs) != len(reference):
        raise OptimizeError(
            f"the candidate returned {len(outputs)} output tensors, the original model {len(reference)}"
        )
    cosines: list[float] = []
    rel_errors: list[float] = []
    max_abs = 0.0
    for out, ref in zip(outputs, reference, strict=False):
        out = out.detach().cpu()
        ref = ref.detach().cpu()
        if out.shape != ref.shape:
            raise OptimizeError(f"output shape {list(out.shape)} differs from the original's {list(ref.shape)}")
        if ref.numel() == 0:
            continue
        rows = batch_size if ref.dim() > 0 and ref.shape[0] == batch_size else 1
        if not ref.is_floating_point():
            same = (out.reshape(rows, -1) == ref.reshape(rows, -1)).float().mean(dim=1)
            cosines.extend(float(v) for v in same)
            continue
        a = out.float().reshape(rows, -1)
        b = ref.float().reshape(rows, -1)
        cos = torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12)
        # Two all-zero rows agree perfectly; cosine_similarity would give 0.
        both_zero = (a.abs().sum(dim=1) == 0) & (b.abs().sum(dim=1) == 0)
        cos = torch.where(both_zero, torch.ones_like(cos), cos)
        cosines.extend(float(c) for c in cos)
        denom = float(b.norm()) or 1.0
        rel_errors.append(float((a - b).norm()) / denom)
        max_abs = max(max_abs, float((a - b).abs().max()))
    clean = [c for c in cosines if not math.isnan(c)]
    if len(clean) != len(cosines):
        return {"mean_cosine": float("nan"), "min_cosine": float("nan"), "rel_error": float("nan"),
                "max_abs_error": float("nan"), "nan_outputs": True}
    return {
        "mean_cosine": sum(clean) / len(clean) if clean else 1.0,
        "min_cosine": min(clean) if clean else 1.0,
        "rel_error": max(rel_errors) if rel_errors else 0.0,
        "max_abs_error": max_abs,
    }


# --- the parent side ----------------------------------------------------------------------------


TRACKER_WARNING = "ignore::UserWarning:multiprocessing.resource_tracker"
"""A -W filter for multiprocessing's resource tracker process, which the children share (its UserWarnings only): a
candidate killed at its timeout (or memory limit) while holding a named semaphore (a multiprocessing lock its
libraries made) cannot unlink it, and the tracker, which unlinks it at exit, said so in a 'leaked semaphore objects'
UserWarning after the search's last line. The kill is reported with the candidate; the tracker still cleans up."""


def mp_context() -> Any:
    """forkserver (torch preloaded in the server) where available, else spawn; never fork."""
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        with contextlib.suppress(Exception):
            ctx.set_forkserver_preload(["torch"])
        return ctx
    return mp.get_context("spawn")


def stop_process_server() -> None:
    """Stop this process's forkserver if one runs; the next child starts a new one from the environment then. (It
    keeps the environment it started with, which a child inherits, not this process's.)"""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:  # CPython's forkserver (3.8+)
        stop()


STARTUP_TIMEOUT_S = 180.0
"""How long a child may take to start (the forkserver imports torch once); not charged to the candidate."""


def run_isolated(target: str, payload: dict[str, Any], log_path: Path, timeout_s: float,
                 memory_limit_bytes: int | None = None,
                 on_phase: Callable[[str], None] | None = None,
                 on_start: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run `target` ('evaluate', 'confirm' or 'versus') in a child process; always returns a result dict.
    `on_start` gets the child's pid once it runs, `on_phase` each phase it reaches.

    A child that exceeds `timeout_s` (counted from its first message, so starting the process server is
    not charged to it), or whose process tree exceeds `memory_limit_bytes` of RSS, is killed with its
    children; a child that dies is reported with its exit signal and its log's tail.
    """
    import psutil

    log_path.parent.mkdir(parents=True, exist_ok=True)
    ctx = mp_context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_entry, args=(writer, target, payload, str(log_path)), daemon=False,
                       name=f"dlperf-candidate-{target}")
    start = time.monotonic()
    with _main_not_reimported(), _tracker_warning_ignored():
        proc.start()
    writer.close()
    phase = "start"
    started: float | None = None
    result: dict[str, Any] | None = None
    peak_tree_rss = 0
    try:
        ps = psutil.Process(proc.pid)
    except psutil.Error:
        ps = None
    try:
        if on_start is not None and proc.pid is not None:
            on_start(proc.pid)
        while True:
            try:
                if reader.poll(0.05):
                    message = reader.recv()
                    if "phase" in message:
                        if started is None:
                            started = time.monotonic()
                        phase = message["phase"]
                        if on_phase is not None:
                            on_phase(phase)
                        continue
                    result = message["result"]
                    break
            except (EOFError, OSError):
                proc.join(timeout=5)
                break
            if not proc.is_alive() and not reader.poll(0):
                break
            elapsed = time.monotonic() - (started if started is not None else start)
            limit = timeout_s if started is not None else STARTUP_TIMEOUT_S
            tree_rss = _tree_rss(ps)
            peak_tree_rss = max(peak_tree_rss, tree_rss)
            if memory_limit_bytes is not None and tree_rss > memory_limit_bytes:
                _kill_tree(proc, ps)
                result = {"status": "failed", "phase": phase,
                          "error": f"out of memory: the candidate's processes used {tree_rss / 2**30:.2f} GiB, "
                                   f"over the limit of {memory_limit_bytes / 2**30:.2f} GiB (killed)"}
                break
            if elapsed > limit:
                _kill_tree(proc, ps)
                what = f"timed out after {timeout_s:.0f} s" if started is not None else \
                    f"did not start within {STARTUP_TIMEOUT_S:.0f} s"
                result = {"status": "failed", "phase": phase, "timed_out": True,
                          "error": f"{what} during '{phase}' (killed)"}
                break
    except BaseException:
        _kill_tree(proc, ps)
        raise
    finally:
        reader.close()
    proc.join(timeout=10)
    if proc.is_alive():
        _kill_tree(proc, ps)
        proc.join(timeout=5)
    if result is None:
        code = proc.exitcode
        if code is not None and code < 0:
            sig = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            hint = " (likely out of memory: the kernel's OOM killer)" if sig == "SIGKILL" else ""
            error = f"the candidate's process died with {sig} during '{phase}'{hint}"
        else:
            error = f"the candidate's process exited with code {code} during '{phase}' without a result"
        tail = _tail(log_path)
        result = {"status": "failed", "phase": phase, "error": error + (f"; log: {tail}" if tail else "")}
    result["wall_s"] = time.monotonic() - start
    result["tree_peak_rss_bytes"] = peak_tree_rss
    result["log"] = str(log_path)
    return result


@contextlib.contextmanager
def _main_not_reimported() -> Any:
    """Hide the caller's __main__ while a child starts, so spawn/forkserver do not re-run the user's script.

    The child needs nothing from __main__ (its target and payload are dlperf functions and plain data), and
    re-running a script without an `if __name__ == "__main__"` guard would start the search again.

    The caller's unset default start method is left unset: CPython's spawn/forkserver start reads it with
    `get_start_method()`, which fixes it for the process, so after `dlperf.optimize_workload` a notebook's
    `multiprocessing.set_start_method("spawn")` raised "context has already been set".
    """
    main = sys.modules.get("__main__")
    unset = mp.get_start_method(allow_none=True) is None
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        if unset:
            mp.set_start_method(None, force=True)  # None with force: unset again


@contextlib.contextmanager
def _tracker_warning_ignored() -> Any:
    """`TRACKER_WARNING` in `sys.warnoptions` while a child starts: the resource tracker (and the forkserver), started
    with the first child, take this process's -W options then. Put back after, since the list is the caller's: until
    2026-12-07 it stayed appended, and a caller's own subprocesses started with `-W ignore::...` afterwards."""
    added = TRACKER_WARNING not in sys.warnoptions
    if added:
        sys.warnoptions.append(TRACKER_WARNING)
    try:
        yield
    finally:
        if added and TRACKER_WARNING in sys.warnoptions:
            sys.warnoptions.remove(TRACKER_WARNING)


def _tree_rss(ps: Any) -> int:
    import psutil

    if ps is None:
        return 0
    total = 0
    try:
        procs = [ps, *ps.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += int(p.memory_info().rss)
    return total


def _kill_tree(proc: Any, ps: Any) -> None:
    import psutil

    children = []
    if ps is not None:
        with contextlib.suppress(psutil.Error):
            children = ps.children(recursive=True)
    with contextlib.suppress(Exception):
        proc.kill()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[-400:]
