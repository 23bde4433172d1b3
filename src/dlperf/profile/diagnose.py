"""Diagnosis: turn the analyses into a ranked list of findings, each with its evidence in numbers, the fix in
plain words, the dlperf setting or pass that applies it, an estimated gain and a confidence.

A finding's `share` is the part of the step time its bottleneck explains (or, for memory capacity, the
share of the budget in use). Settings that distort every other measurement (threads oversubscribed,
memory nearly exhausted, cores taken by other processes when the stall is measured) are root causes and
rank first; the rest rank by share x confidence. A finding below MIN_SHARE is not reported: "no clear
bottleneck" is a valid verdict.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from dlperf.calibrate.ceilings import ABOVE_CEILING
from dlperf.profile.analyzers import breakdown, dataloader, launch, memory, operators, threads
from dlperf.profile.analyzers.breakdown import TimeBreakdown
from dlperf.profile.analyzers.dataloader import LoaderAnalysis
from dlperf.profile.analyzers.launch import LaunchAnalysis
from dlperf.profile.analyzers.memory import MemoryAnalysis
from dlperf.profile.analyzers.operators import (
    BANDWIDTH,
    CACHE_RESIDENT,
    COMPUTE,
    OVERHEAD,
    CeilingsLike,
    OperatorAnalysis,
    OperatorStat,
)
from dlperf.profile.analyzers.threads import ThreadAnalysis
from dlperf.profile.fixes import (
    Fix,
    batch_fix,
    bf16_fix,
    channels_last_fix,
    compile_fix,
    loader_fix,
    optimizer_fix,
    threads_fix,
)
from dlperf.profile.trace import TRAIN, ProfileTrace

INPUT_PIPELINE = "input pipeline"
COMPUTE_BOUND = "compute"
MEMORY_BANDWIDTH = "memory bandwidth"
LAUNCH_OVERHEAD = "framework/launch overhead"
MEMORY_CAPACITY = "memory capacity"
HOST_THREADS = "host threads/CPU contention"
SHARED_MACHINE = "the CPU is shared with other busy processes"
"""Title of the finding about other processes on the machine (not about the workload itself)."""
COMMUNICATION = "communication"
CATEGORIES = (INPUT_PIPELINE, COMPUTE_BOUND, MEMORY_BANDWIDTH, LAUNCH_OVERHEAD, MEMORY_CAPACITY, HOST_THREADS,
              COMMUNICATION)

MIN_SHARE = 0.2
"""A bottleneck explaining less than this share of the step is not reported."""
CAPACITY_WARN = 0.85
CAPACITY_ROOT = 0.9
CONFIDENCE_WEIGHT = {"high": 1.0, "medium": 0.8, "low": 0.5}
FAR_BELOW_PEAK = 0.05
"""Compute-bound operators below this share of their ceiling are not limited by the arithmetic: a 20x gap
to the machine's own measured peak points at something else (stalled threads, too little work per call)."""
STALL_CALL_S = 1e-3
"""A bandwidth-bound or cache-resident operator counts as stalled on a shared machine only when a call of it
takes at least this long (as well as running below FAR_BELOW_PEAK of its roofline): a waiting thread costs a
scheduler time slice, while a short call far below its roofline is more likely its own fixed cost."""
FEW_OPS_PER_STEP = 100
"""Below this many top-level operators a step's overhead is a fixed per-call cost (Python, module calls),
not per-operator dispatch: fusing operators wins little, a larger batch amortizes it."""
LOW_OVERHEAD_RATIO = 0.5
"""A profiled step faster than half the unprofiled one: the profiler cannot speed a step up, so the
unprofiled timing was disturbed."""
PLAUSIBLE_PROFILER_COST = 30.0
"""torch.profiler adds some microseconds per operator: even a step of nothing but the tiniest operators is not
slowed much past this; a larger ratio means the profiled steps were disturbed."""
PROFILER_COST_PER_OP_S = 50e-6
"""A generous bound on what torch.profiler adds per operator call (shapes and memory recorded): a profiled step
longer than the unprofiled one by much more than its operators can cost was disturbed."""
DISTURBED_RATIO = 1.3
"""Below this ratio a profiled step is not called disturbed, whatever its operator count."""
COMM_MARKERS = ("nccl", "c10d::", "gloo", "allreduce", "all_reduce", "allgather", "broadcast_")


@dataclass
class Finding:
    category: str
    title: str
    evidence: list[str]
    fix: str
    share: float
    confidence: str
    setting: str | None = None
    estimated_speedup: float | None = None
    """Step speedup expected from the fix (1.5 = 1.5x faster); None when the fix is about risk, not speed."""
    estimated_gain: str = ""
    root_cause: bool = False
    fixes: list[Fix] = field(default_factory=list)
    """The fixes dlperf can apply and measure itself (--verify), best first."""
    verification: str | None = None
    """After --verify: 'confirmed' (a fix measured faster), 'contradicted' (measured slower or no different,
    the estimate outside the measured CI), 'inconclusive', 'not measured' (another finding's fix was, not one of
    its: its share is an estimate ranked beside measured ones); None without --verify or where no fix was measured."""

    @property
    def score(self) -> float:
        return (1.0 if self.root_cause else 0.0) + self.share * CONFIDENCE_WEIGHT[self.confidence]

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in dataclasses.asdict(self).items() if k != "fixes"}
        data["fixes"] = [f.to_dict() for f in self.fixes]
        data["score"] = self.score
        return data


@dataclass
class Analyses:
    breakdown: TimeBreakdown
    operators: OperatorAnalysis
    launch: LaunchAnalysis
    memory: MemoryAnalysis
    threads: ThreadAnalysis
    loader: LoaderAnalysis | None
    mode: str
    device: str
    batch_size: int
    has_conv: bool = False
    comm_share: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Each analysis by its field's name (None where it did not run), as `--json` and the store keep them: every
        field whose type has `to_dict`, so a new analysis is written without a word here; the context fields (mode,
        device, batch size, has_conv, comm_share) are not analyses and stay out."""
        return {name: (value.to_dict() if value is not None else None)
                for name in analysis_fields(type(self)) for value in (getattr(self, name),)}


def analysis_fields(cls: type[Analyses]) -> tuple[str, ...]:
    """The fields of `cls` that hold an analysis (their type, or its non-None member, has `to_dict`), in order."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls)
                 if any(hasattr(t, "to_dict") for t in (typing.get_args(hints[f.name]) or (hints[f.name],))))


@dataclass
class Diagnosis:
    findings: list[Finding]
    verdict: str
    caveats: list[str] = field(default_factory=list)
    """Conditions that distort the measurements themselves (a busy machine, heavy profiling overhead)."""

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "caveats": self.caveats, "findings": [f.to_dict() for f in self.findings]}


def analyze_all(trace: ProfileTrace, ceilings: CeilingsLike) -> Analyses:
    """Run every analysis over one trace."""
    trace.validate()
    ops_in_steps = [o for o in trace.ops if o.step >= 0]
    comm_us = sum(o.self_us for o in ops_in_steps if any(m in o.name.lower() for m in COMM_MARKERS))
    # On CUDA the collectives are kernels (ncclDevKernel_AllReduce...) that the host only enqueues.
    comm_us = max(comm_us, sum(k.dur_us for k in trace.kernels
                               if k.step >= 0 and any(m in k.name.lower() for m in COMM_MARKERS)))
    step_us = sum(s.dur_us for s in trace.steps)
    return Analyses(
        breakdown=breakdown.analyze(trace),
        operators=operators.analyze(trace, ceilings),
        launch=launch.analyze(trace),
        memory=memory.analyze(trace),
        threads=threads.analyze(trace),
        loader=dataloader.analyze(trace) if trace.mode == TRAIN else None,
        mode=trace.mode,
        device=trace.device,
        batch_size=trace.batch_size,
        has_conv=any("conv" in o.name for o in ops_in_steps),
        comm_share=comm_us / step_us if step_us else 0.0,
    )


def _speedup(share: float, factor: float) -> float:
    """Amdahl: a part taking `share` of the step made `factor` times faster."""
    factor = max(factor, 1.0)
    return 1.0 / max(1e-6, (1.0 - share) + share / factor)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


IO_BOUND = 0.5
"""Loading that runs on a core less than this share of its time waits mostly on I/O (said in the evidence)."""
UNPROFILED_GAP = 0.1
"""The unprofiled steps' wait share this far above the profiled steps' is said in the input-pipeline evidence."""


def _overhead(a: Analyses) -> str:
    ratio = a.breakdown.profiling_overhead
    return f"profiled step {ratio:.2f}x the unprofiled one" if ratio is not None else "profiled"


def _input_pipeline(a: Analyses) -> Finding | None:
    ld = a.loader
    if ld is None:
        return None
    # The profiled steps' compute is inflated by the profiler (and by a busy machine during those steps), which
    # understates the wait: a step that waited 87 of its 93 ms unprofiled read "52% of the step (86.92 ms of
    # 168.24 ms), the step computes for 81.31 ms". The unprofiled steps' wait, when well above, is the share.
    unprofiled = ld.unprofiled_wait_share
    unprofiled_step = a.breakdown.unprofiled_step_s
    use_unprofiled = (unprofiled is not None and unprofiled_step is not None
                      and unprofiled - ld.wait_share >= UNPROFILED_GAP)
    share = unprofiled if use_unprofiled and unprofiled is not None else ld.wait_share
    if share < MIN_SHARE:
        return None
    step_s = unprofiled_step if use_unprofiled and unprofiled_step is not None else ld.step_s
    wait_s = share * step_s
    compute_s = step_s - wait_s
    workers = ld.suggested.get("num_workers") or dataloader.suggested_workers(a.threads.usable_cores, ld.num_workers)
    # With w workers a batch is ready every load/w seconds, overlapped with the compute of the step: a step that
    # waits is load/w long, so w workers take w steps to load a batch (not w waits: a loader of 2 workers waiting
    # 30 of a 40 ms step was taken to load a batch in 60 ms, and 4 workers promised 2.67x instead of 2x).
    current = ld.num_workers or 0
    load_s = step_s * current if current else wait_s
    # workers load in parallel only on cores other processes leave free: with 1.2 of 2 cores busy elsewhere, 2
    # workers were estimated 2.20x and measured 0.84x (CI 0.57-1.22)
    free = a.threads.usable_cores - a.threads.other_busy_cores
    on_cores = None if workers is None else max(1.0, min(float(workers), free))
    # only the part of loading that runs on a core (or waits for one) needs a free core: a worker blocked on I/O (disk,
    # a sleep) uses none, so w workers overlap that part w-fold on any machine. Capped by the free cores as a whole, a
    # loader sleeping 2 ms a sample with 1.0 core free was estimated 1.14x and measured 1.91x with 2 workers. Not
    # measured (core_share None), loading is taken to be CPU-bound: the estimate stays low rather than high.
    core_share = 1.0 if ld.core_share is None else ld.core_share
    parallel = (None if workers is None or on_cores is None
                else max(1.0, 1.0 / max(1.0 / workers, core_share / on_cores)))
    # without more workers to propose (the loader runs the most dlperf proposes), only cheaper loading helps: at
    # best the wait goes
    new_step = max(compute_s, load_s / parallel) if parallel is not None else compute_s
    evidence = [
        f"{ld.wait_share:.0%} of each training step waits for the next batch "
        f"({_ms(ld.data_wait_s)} of {_ms(ld.step_s)})",
        f"the step computes for {_ms(ld.compute_s)}; loading overlaps none of it" if not current else
        f"the step computes for {_ms(ld.compute_s)} while its {_cores(current, 'worker')} load the next batches; "
        f"a batch takes about {_ms(step_s * current)} to load ({current} x the step), more than they can hide",
    ]
    # to the tenth it prints: 0.02 cores busy elsewhere read "kept 0.0 of 2 cores busy: 2 workers would load on
    # about 2.0 free cores, which the estimate counts"
    capped = workers is not None and on_cores is not None and round(on_cores, 1) < workers
    if capped and on_cores is not None and core_share >= IO_BOUND:
        evidence.append(f"{a.threads.others} kept {a.threads.other_busy_cores:.1f} of {a.threads.usable_cores} "
                        f"cores busy: {workers} workers would load on about {on_cores:.1f} free cores, which the "
                        "estimate counts")
    if use_unprofiled:
        evidence.append(f"without the profiler it waits {_ms(wait_s)} of a {_ms(step_s)} step ({share:.0%}): the "
                        f"profiled steps' compute is inflated ({_overhead(a)}), so the figures above understate "
                        "the wait; the share and the estimate are the unprofiled steps'")
    if workers is not None and ld.core_share is not None and ld.core_share < IO_BOUND:
        evidence.append(f"loading ran on a core (or waited for one) {ld.core_share:.0%} of its time and was blocked "
                        "the rest, on I/O (disk, network, a sleep): blocked workers need no free core, so the estimate "
                        f"counts {workers} workers overlapping it whatever the other processes take")
    elif capped and ld.core_share is None:
        evidence.append("the loader's use of the CPU was not measured, so the estimate takes loading to be CPU-bound "
                        "(only free cores help): for loading that waits on I/O it is low")
    if ld.is_dataloader:
        evidence.append(f"DataLoader(num_workers={ld.num_workers}, pin_memory={ld.pin_memory}, "
                        f"prefetch_factor={ld.prefetch_factor}, persistent_workers={ld.persistent_workers})")
    suggested = ld.suggested or ({"num_workers": workers, "persistent_workers": True} if workers is not None else {})
    fixes = [loader_fix(suggested)] if ld.is_dataloader and suggested else []
    if workers is not None:
        fix = (f"load batches in {workers} background worker processes that stay alive between epochs "
               "(DataLoader num_workers, persistent_workers"
               + (", pin_memory" if a.device.startswith("cuda") else "") + "); make __getitem__ cheaper")
    else:  # proposing the loader's own 16 workers was no fix
        fix = (f"make __getitem__ cheaper (decode or transform once and cache, read fewer bytes): the loader already "
               f"runs {current} workers, the most dlperf proposes"
               + ("; " + ", ".join(f"{k}={v}" for k, v in suggested.items()) if suggested else ""))
    return Finding(
        category=INPUT_PIPELINE,
        title="the training step waits for its data",
        evidence=evidence + ld.notes,
        fix=fix,
        setting=(fixes[0].setting if fixes else "DataLoader(num_workers=N, persistent_workers=True)"
                 if workers is not None else "the dataset's __getitem__ (make_loader's dataset)"),
        share=share,
        confidence="high" if share >= 0.4 else "medium",
        estimated_speedup=step_s / max(new_step, 1e-9),
        # Compute that waits for data is idle: fix the feeding first, then judge the operators.
        root_cause=share >= 0.3,
        fixes=fixes,
    )


def _nested_dispatch(a: Analyses) -> tuple[float, float, list[OperatorStat]] | None:
    """On the CPU, the share of the step in operators of any depth whose calls are shorter than the tiny threshold
    (the operators analysis's OVERHEAD bound, by self time) plus the gaps between top-level operators, the gaps'
    share, and the largest such operators; None where the step's operators, nested ones included, are too few for
    per-operator dispatch to be the cost, or on CUDA (an operator's time there is its kernels', beside the host's
    gaps, not after them).

    The launch analysis counts only top-level operators: nn.TransformerEncoder's fast path (a padding mask, eval
    mode) is one top-level operator a layer holding some 800 nested ones of 1-2 µs, and a step of 21 top-level
    operators, 1729 in all, 55% of its time in operators under 20 µs a call, read 'no clear bottleneck'."""
    la = a.launch
    if a.device.startswith("cuda") or la.all_ops_per_step < FEW_OPS_PER_STEP:
        return None
    small = [o for o in a.operators.operators if o.bound == OVERHEAD]
    counted = la.tiny_op_time_s + la.gap_time_s
    gap_share = la.overhead_share * la.gap_time_s / counted if counted > 0 else 0.0
    return min(1.0, gap_share + sum(o.share for o in small)), gap_share, small


def _launch(a: Analyses) -> Finding | None:
    la = a.launch
    nested = _nested_dispatch(a)
    # where the nested operators tell more than the top-level ones: per-operator dispatch inside larger operators
    inner = nested is not None and nested[0] > la.overhead_share
    share = nested[0] if inner and nested is not None else la.overhead_share
    # a single-tensor optimizer step's dispatch is a finding of its own (fused/foreach), which torch.compile of the
    # model does not touch: counted here too, a training step read 97-100% and a compile estimate of 3.99x
    optimizer = la.optimizer_overhead_share if _optimizer_step(a) is not None else 0.0
    # the time between a run's elementwise operators (freeing its intermediates, dispatch) is the bandwidth finding's,
    # which fusing removes: counted here too, 5 operators on 64 MiB whose gaps were 24% of the step were told "a cost
    # per call ... a larger batch amortizes it" for the same time the fusion estimate took away
    fused = min(_fused_gap_share(a), max(0.0, share - optimizer))
    share = max(0.0, share - optimizer - fused)
    if share < MIN_SHARE:
        return None
    if la.ops_per_step < FEW_OPS_PER_STEP and not inner:
        return _per_call_overhead(a, share, fused)
    if inner and nested is not None:
        _, gap_share, small = nested
        named = ", ".join(f"{o.name} x{o.calls_per_step:.0f}" for o in sorted(small, key=lambda o: -o.self_s)[:3])
        # "a few large ones, such as a fused layer" was said of a Python loop of nn.Linear calls too (321 called from
        # Python, 1539 in all): said where few are called from Python, else how many each runs on average
        inside = ("a few large ones, such as a fused layer, run many small ones inside"
                  if la.ops_per_step < FEW_OPS_PER_STEP else
                  f"each runs {la.all_ops_per_step / max(la.ops_per_step, 1.0):.1f} on average, itself included")
        evidence = [
            f"{la.all_ops_per_step:.0f} operators per step counting those nested in others ({la.ops_per_step:.0f} "
            f"called from Python: {inside})",
            f"{share - gap_share:.0%} of the step is in operators shorter than {la.tiny_threshold_us:.0f} µs a call "
            f"({named}) and {gap_share:.0%} in gaps between operators: dispatch cost, not arithmetic",
        ]
    else:
        evidence = [
            f"{la.ops_per_step:.0f} operators per step (median {la.median_op_us:.1f} µs each); "
            f"{la.tiny_op_fraction:.0%} are shorter than {la.tiny_threshold_us:.0f} µs",
            f"{la.overhead_share:.0%} of the step goes to tiny operators ({_ms(la.tiny_op_time_s)}) and gaps between "
            f"operators ({_ms(la.gap_time_s)}): dispatch and Python cost, not arithmetic",
        ]
    if optimizer:
        evidence.append(f"not counted here: the optimizer step's {optimizer:.0%} of the step in tiny operators and "
                        "gaps, the finding \"the optimizer step updates its parameters one at a time\"")
    if fused:
        evidence.append(_fused_gap_evidence(fused))
    if la.kernels_per_step is not None and la.median_kernel_us is not None:
        evidence.append(f"{la.kernels_per_step:.0f} kernels per step, median {la.median_kernel_us:.1f} µs")
    if a.breakdown.device_idle_s is not None:
        evidence.append(f"the device is idle {a.breakdown.share(a.breakdown.device_idle_s):.0%} of the step")
    syncs = _reads_to_python(a)
    # per row: at batch 1 any loop reading values (a decoding loop over tokens) would pass for one over the batch
    rows = a.batch_size >= 2 and syncs >= max(8.0, a.batch_size / 2)
    # the rows' loop is code to rewrite, which no setting measures: a larger batch adds as many operators, and
    # torch.compile breaks its graph at each read into Python (1.07x measured), so neither is offered to --verify
    fixes = [] if rows else [*([batch_fix(a.batch_size)] if a.mode != TRAIN else []), compile_fix()]
    fix = ("fuse the small operators with torch.compile"
           + (" or CUDA graphs" if a.device.startswith("cuda") else "")
           + "; give each operator more work with a larger batch; move Python loops over tensors into "
           "vectorised operations")
    if rows:
        # a Python loop over the batch's rows (.item() per row): its operators grow with the batch, so a larger
        # batch amortizes nothing (measured 0.95x, and the right diagnosis was demoted); vectorising gave 34.9x
        evidence.append(f"{syncs:.0f} reads of a tensor's value into Python per step (aten::item: .item(), float(), "
                        f"int() of a tensor) at batch {a.batch_size}: a Python loop over the batch's rows, whose "
                        "operators grow with the batch, so a larger batch does not amortize them")
        fix = ("vectorise the Python loop over the batch's rows into whole-tensor operations (no .item() or "
               ".tolist() per row): a code change, which --verify cannot make; torch.compile cannot fuse across the "
               "reads into Python")
    return Finding(
        category=LAUNCH_OVERHEAD,
        title="the step is dominated by per-operator dispatch overhead",
        evidence=evidence,
        fix=fix,
        setting="the model's code" if rows else "pass compile, --batch-size",
        share=share,
        confidence="high" if share >= 0.5 and (inner or la.tiny_op_fraction >= 0.5) else "medium",
        estimated_speedup=_speedup(share, 4.0),
        fixes=fixes,
    )


def _reads_to_python(a: Analyses) -> float:
    """Per step, the reads of a tensor's value into Python (`aten::item`: .item(), float(), int(), bool() of a
    tensor; `_local_scalar_dense` where item is not recorded), top-level only: those inside other operators are not
    a Python loop's (nn.TransformerEncoder's fast path made 19 a step at batch 8 'a Python loop over the batch's
    rows', and was told to vectorise it)."""
    return a.launch.python_reads_per_step


def _fused_gap_share(a: Analyses) -> float:
    """The share of the step between the operators of runs of elementwise operators that the bandwidth finding counts
    as removed by fusing them; 0 where it makes no such finding."""
    case = _bandwidth_case(a)
    if case is None or case[1] is not None:
        return 0.0
    return _fused_shares(a.operators, case[0])[1]


def _fused_gap_evidence(fused: float) -> str:
    return (f"not counted here: {fused:.0%} of the step between the operators of runs of elementwise operators "
            "(freeing their intermediates, dispatch), which fusing the runs removes: the finding \"the step is "
            "memory-bandwidth-bound\"")


def _per_call_overhead(a: Analyses, share: float, fused: float = 0.0) -> Finding:
    """Overhead in a step of few operators: the fixed cost of one call (Python, module calls, dispatch); `share` is
    the overhead's share less what other findings claim (`fused`: the time between runs of elementwise operators)."""
    la = a.launch
    fixes = [batch_fix(a.batch_size)] if a.mode != TRAIN else []
    fixes.append(compile_fix())
    # --verify never measures a larger training batch (it changes the training, not only its speed): in training the
    # evidence promised "--verify measures a 4x batch" and --verify measured torch.compile alone.
    tell = ("--verify measures a 4x batch" if a.mode != TRAIN else
            "--verify does not change a training batch, which changes the training itself: measure one with "
            "`dlperf train --batch-size N`")
    evidence = [
        f"{share:.0%} of the step is outside the operators' work: tiny operators "
        f"({_ms(la.tiny_op_time_s)}) and gaps between operators "
        f"({_ms(max(0.0, la.gap_time_s - fused * a.operators.step_s))})",
        f"but only {la.ops_per_step:.0f} operators per step (median {la.median_op_us:.1f} µs each): the overhead "
        "is not many small operators but a cost per call (Python, module calls, dispatch, freeing large "
        "tensors); where it stays flat as the batch grows, a larger batch amortizes it (one profile at one "
        f"batch cannot tell: {tell})",
    ]
    if fused:
        evidence.append(_fused_gap_evidence(fused))
    starved = _starved(a)
    if starved:
        # Measured under load (the compute-bound example, 8 addmm a step, at load 5 on 2 cores): the thread waited
        # for a core between its few operators, and "58% fixed per-call cost" outranked the GEMMs that were 70%
        # of the same step profiled alone.
        t = a.threads
        evidence.append(f"but this process got only {t.process_busy_cores:.1f} of the {_cores(t.wanted_cores)} its "
                        f"step could use while {t.others} kept {t.other_busy_cores:.1f} busy: up to "
                        f"{starved:.0%} of the step was waiting for a core, which a profile counts as gaps between "
                        "operators; profile on an idle machine to tell the two apart")
    return Finding(
        category=LAUNCH_OVERHEAD,
        title="the step is dominated by its fixed per-call cost",
        evidence=evidence,
        fix=("process more items per call (a larger batch) so the fixed cost is shared; torch.compile removes "
             "some of the Python cost"
             + ("; CUDA graphs remove the launch cost" if a.device.startswith("cuda") else "")),
        setting="--batch-size, pass compile",
        share=share,
        # The per-item gain of a larger batch is certain only when the operators' own time grows slower than it.
        confidence="low" if starved else "medium",
        estimated_speedup=_speedup(share, 4.0),
        fixes=fixes,
    )


def _optimizer_step(a: Analyses) -> Finding | None:
    """A training step whose optimizer step, in its single-tensor implementation (a few operators for each
    parameter, called from Python), takes MIN_SHARE of the step or more. Before, it was folded into per-operator
    dispatch (fix: torch.compile, which compiles the model, not the optimizer) or, with Adam's .item() per
    parameter, into "a Python loop over the batch's rows"; its fused Adam took 1.5 ms where foreach=False took 19."""
    b, la = a.breakdown, a.launch
    share = b.share(b.optimizer_s)
    if a.mode != TRAIN or share < MIN_SHARE or la.optimizer_multi_tensor or la.optimizer_ops_per_step < 10:
        return None
    return Finding(
        category=LAUNCH_OVERHEAD,
        title="the optimizer step updates its parameters one at a time",
        evidence=[f"the optimizer step takes {_ms(b.optimizer_s)} of the {_ms(b.step_s)} step ({share:.0%})",
                  f"it runs {la.optimizer_ops_per_step:.0f} operators a step from Python and none of them "
                  "multi-tensor (_foreach_*, _fused_*): its single-tensor implementation, a few small operators "
                  "for each parameter"],
        fix=("build the optimizer with fused=True (one kernel for all parameters: Adam, AdamW, SGD, Adagrad on the "
             "CPU and CUDA) or foreach=True (one operator a stage for all parameters)"),
        setting="make_optimizer: e.g. torch.optim.Adam(params, lr=..., fused=True); `dlperf train --tune` tunes it",
        share=share,
        confidence="high" if share >= 0.5 else "medium",
        # rule of thumb, as for a fused step: 3/4 of the optimizer's time goes
        estimated_speedup=_speedup(share, 4.0),
        fixes=[optimizer_fix("fused"), optimizer_fix("foreach")],
    )


def _top_ops_evidence(op: OperatorAnalysis, bound: str, n: int = 3) -> list[str]:
    lines = []
    # an operator under 1% of the step is no evidence ('aten::sum: 0% of the step ... 280% of its roofline ceiling',
    # a small tensor read from cache)
    for o in [o for o in op.operators if o.bound == bound and o.share >= 0.01
              and (bound != BANDWIDTH or o.in_gemm_s < 0.5 * o.self_s)][:n]:
        pct = f"{o.pct_of_peak:.0%} of its roofline ceiling" if o.pct_of_peak is not None else "no ceiling"
        if bound == BANDWIDTH and o.pct_of_peak is not None and o.pct_of_peak > 1.0:
            pct += " (above the memory bandwidth: its data came from the cache)"
        ai = f"{o.intensity:.1f} FLOP/B" if o.intensity is not None else "no byte count"
        # the ridge of the operator's own dtype, which placed it (a bf16 GEMM read "above the ridge 4.6", fp32's)
        peak = op.peak_flops.get(o.dtype)
        ridge = peak / op.bandwidth_bytes_s if peak and op.bandwidth_bytes_s > 0 else op.ridge_intensity
        ridge_words = f"the ridge {ridge:.1f}" if ridge == op.ridge_intensity else f"the {o.dtype} ridge {ridge:.1f}"
        lines.append(f"{o.name}: {o.share:.0%} of the step, {ai} ({'above' if bound == COMPUTE else 'below'} "
                     f"{ridge_words}), {pct}")
    return lines


def _compute(a: Analyses) -> Finding | None:
    op = a.operators
    share = op.share_by_bound.get(COMPUTE, 0.0)
    if share < MIN_SHARE:
        return None
    eff = op.efficiency(COMPUTE) or 0.0
    # % of peak is of each operator's own dtype's peak: a bf16 model's read "36% of the 69 GFLOP/s fp32 GEMM peak"
    # for 36% of bf16's 108 (57% of fp32's), and was offered bf16 autocast, estimated by bf16's ceiling over fp32's
    time_by_dtype: dict[str, float] = {}
    for o in op.operators:
        if o.bound == COMPUTE:
            kind = o.dtype if o.dtype in op.peak_flops else "fp32"
            time_by_dtype[kind] = time_by_dtype.get(kind, 0.0) + o.self_s
    dtype = max(time_by_dtype, key=time_by_dtype.__getitem__) if time_by_dtype else "fp32"
    base = op.peak_flops.get(dtype, 0.0)
    int8 = op.peak_flops.get("int8") if dtype != "int8" else None
    # int8's is of integer operations ("the 2124 GFLOP/s int8 GEMM peak" beside calibrate's "4.4 TOP/s")
    peak_words = (f"the {base / 1e9:.0f} {_giga_ops(dtype)} {dtype} GEMM peak" if len(time_by_dtype) <= 1 else
                  "the GEMM peaks of their dtypes (" + ", ".join(
                      f"{k} {op.peak_flops[k] / 1e9:.0f} {_giga_ops(k)}" for k in sorted(time_by_dtype)) + ")")
    evidence = [f"{share:.0%} of the step is in compute-bound operators, running at {eff:.0%} of {peak_words}",
                *_top_ops_evidence(op, COMPUTE)]
    bf16 = op.peak_flops.get("bf16") if dtype == "fp32" else None  # autocast to bf16 changes an fp32 model only
    fixes: list[Fix] = []
    title = "the step is compute-bound"
    confidence = "high" if share >= 0.5 else "medium"
    if eff < FAR_BELOW_PEAK:
        # Above the ridge by arithmetic intensity, yet 20x or more below the machine's measured peak: the
        # arithmetic is not what limits them, so "compute-bound" is a label, not a diagnosis.
        title = "the step's time is in compute-heavy operators that run far below the machine's peak"
        confidence = "low"
        evidence.append(f"at {eff:.0%} of the peak these operators are not limited by the arithmetic: look at "
                        "what keeps them from running (threads waiting for cores other processes hold, too "
                        "little work per call at this batch size, memory) before making the arithmetic cheaper")
    elif eff > ABOVE_CEILING:
        # above the ceilings themselves: they understate this machine (MiniLM's addmm read 403% of the fp32 peak a
        # busy calibration cached), so "near the peak", which it read with confidence high, is not known
        confidence = "low"
        evidence.append(f"at {eff:.0%} of the cached peak the ceilings, not these operators, are off (see the caveat):"
                        " how near the machine's real peak they run, and so what cheaper arithmetic would gain, is not"
                        " known until `dlperf calibrate --force` on an idle machine")
    speedup: float | None
    if eff < 0.5:
        passes = ["channels_last"] * a.has_conv + ["compile"] + ["precision"] * (dtype != "int8")
        fixes = (([channels_last_fix()] if a.has_conv else []) + [compile_fix()]
                 + ([bf16_fix()] if dtype == "fp32" else []))
        fix = ("the operators reach only a fraction of the peak: try torch.compile"
               + (", channels_last for the convolutions" if a.has_conv else "")
               + ", a larger batch" + ("; then lower precision" if dtype != "int8" else ""))
        speedup = _speedup(share, min(4.0, 0.7 / max(eff, 0.05)))
    else:
        # Near the peak only cheaper arithmetic helps: the fix dlperf measures is bf16 where this machine runs it
        # faster, and the estimate is that fix's (its ceiling over fp32's). A step at 67% of peak was estimated by
        # int8's ceiling, 2.94x, then measured with channels_last (1.10x) and torch.compile (0.98x), which do not make
        # the arithmetic cheaper, and was marked 'the estimate did not hold'.
        bf16_ratio = bf16 / base if bf16 and base else 0.0
        int8_ratio = int8 / base if int8 and base else 0.0
        fixes = [bf16_fix()] if bf16_ratio > 1.0 else []
        passes = list(INT8_PASSES) + ["precision"] * (dtype == "fp32")
        if dtype == "int8":
            # already int8 (an int8-weight Linear, torch._int_mm): "do it cheaper, with int8 quantization" and
            # `--passes dynamic_int8,...` offered what it runs
            passes = []
            fix = ("the arithmetic runs near the machine's peak in int8, the cheapest arithmetic it has here: do less "
                   "of it, with a smaller model")
        else:
            fix = ("the arithmetic runs near the machine's peak: do less of it or do it cheaper, with int8 "
                   "quantization (dlperf optimize, within an accuracy budget"
                   + (f"; int8's ceiling is {int8_ratio:.1f}x {dtype}'s here" if int8_ratio > 1.0 else "") + ")"
                   + (", bf16/fp16 " + (f"(bf16's ceiling is {bf16_ratio:.1f}x fp32's here)" if bf16_ratio > 1.0 else
                                        "where the hardware runs them faster") if dtype == "fp32" else "")
                   + ", or a smaller model")
        ratio = bf16_ratio if fixes else int8_ratio
        speedup = _speedup(share, ratio) if ratio > 1.0 else None
    return Finding(
        category=COMPUTE_BOUND, title=title, evidence=evidence, fix=fix,
        setting=optimize_command(passes) if passes else None, share=share,
        confidence=confidence, estimated_speedup=speedup, fixes=fixes,
    )


def _giga_ops(dtype: str) -> str:
    """The unit of a GEMM peak of `dtype` in billions: integer operations for int8, FLOPs for the rest."""
    return "GOP/s" if dtype == "int8" else "GFLOP/s"


INT8_PASSES = ("dynamic_int8", "onnxruntime", "openvino")
"""The passes whose int8 configurations a default CPU search tries (each tries its fp32 configuration too)."""


def optimize_command(passes: list[str], options: str = "") -> str:
    """The `dlperf optimize` command line that searches `passes`, for a finding's "apply with". It said
    "dlperf optimize (int8 / precision / compile passes)", and `--passes int8,precision,compile` is refused: int8 is
    no pass's name."""
    return (f"dlperf optimize WORKLOAD {options}--passes {','.join(passes)} "
            "(within an accuracy budget: --max-metric-drop)")


GEMM_OPS = frozenset({"addmm", "mm", "matmul", "linear", "bmm", "baddbmm", "addmv", "mv", "_int_mm",
                      "linear_dynamic", "linear_relu_dynamic"})
"""Matrix products: below the ridge, they are bound by reading their weights at a small batch. With int8 ones
(`quantized::linear_dynamic`, the dynamic_int8 pass): a quantized Linear at batch 1 was told to fuse elementwise
operators with torch.compile."""


def _nested_bandwidth_s(op: OperatorAnalysis) -> float:
    """Per step, the memory-bound operators' time nested in a matrix product or convolution (Linear's bias copied into
    addmm's output): part of that call, which no fusion of elementwise operators removes (an MLP at batch 512 was
    told to fuse its copy_)."""
    return sum(o.in_gemm_s for o in op.operators if o.bound == BANDWIDTH)


def _bandwidth_share(a: Analyses) -> float:
    """The step's share in memory-bound operators, less those nested in a matrix product or convolution."""
    op = a.operators
    return op.share_by_bound.get(BANDWIDTH, 0.0) - (_nested_bandwidth_s(op) / op.step_s if op.step_s else 0.0)


def _weights_bound_s(a: Analyses) -> tuple[float, float] | None:
    """(memory-bound time, of it the matrix products') where the products are half of it or more in inference: their
    weights' reads are the traffic, which a larger batch shares; None otherwise."""
    op = a.operators
    bound_s = sum(o.self_s - o.in_gemm_s for o in op.operators if o.bound == BANDWIDTH)
    gemm_s = sum(o.self_s for o in op.operators if o.bound == BANDWIDTH and o.name.split("::")[-1] in GEMM_OPS)
    return (bound_s, gemm_s) if bound_s > 0 and gemm_s >= 0.5 * bound_s and a.mode != TRAIN else None


def _bandwidth_case(a: Analyses) -> tuple[float, tuple[float, float] | None] | None:
    """Which bandwidth finding `_bandwidth` makes: None for none (under MIN_SHARE), else (its share,
    `_weights_bound_s`): the weights-bound matrix products' finding where that is not None, else the fusion one, which
    counts the time between a run's elementwise operators. One place for `_bandwidth` and `_fused_gap_share` (the
    dispatch finding leaves that time out only where the fusion finding counts it)."""
    share = _bandwidth_share(a)
    return None if share < MIN_SHARE else (share, _weights_bound_s(a))


def _fused_shares(op: OperatorAnalysis, share: float) -> tuple[float, float]:
    """Of the step, the runs of elementwise operators' own share (at most `share`) and the share between their
    operators, outside every operator (at most what `share` leaves)."""
    chains = op.elementwise_chains
    chain_share = min(share, chains.time_s / op.step_s) if chains and chains.eager_bytes > 0 and op.step_s else 0.0
    gap_share = min(chains.gap_s / op.step_s, 1.0 - share) if chains and chain_share > 0 else 0.0
    return chain_share, gap_share


def _bandwidth(a: Analyses) -> Finding | None:
    op = a.operators
    case = _bandwidth_case(a)
    if case is None:
        return None
    share, weights = case
    eff = op.efficiency(BANDWIDTH) or 0.0
    evidence = [f"{share:.0%} of the step is in memory-bandwidth-bound operators (below the ridge), moving "
                f"data at {eff:.0%} of the measured {op.bandwidth_bytes_s / 1e9:.1f} GB/s",
                *_top_ops_evidence(op, BANDWIDTH)]
    nested_s = _nested_bandwidth_s(op)
    # Under half a percent prints as "0%": a line that says nothing was left out while claiming a bias copy was (a
    # repeat's copy_ beside one small Linear read "not counted: 0% of the step ... (Linear's bias ...)").
    if op.step_s and nested_s / op.step_s >= 0.005:
        evidence.append(f"not counted: {nested_s / op.step_s:.0%} of the step in memory-bound operators nested inside "
                        "matrix products or convolutions (Linear's bias copied into addmm's output), part of those "
                        "calls")
    title = "the step is memory-bandwidth-bound"
    confidence = "high" if share >= 0.5 else "medium"
    if eff < FAR_BELOW_PEAK:
        # As for compute: below the ridge by intensity, yet 20x or more below the bandwidth this machine measured,
        # so the bandwidth is not what limits them (an add at 0.27 of 22.4 GB/s on a busy machine read
        # "memory-bandwidth-bound" with confidence medium, and fusing was promised the gain).
        title = "the step's time is in memory-bound operators that move data far below the machine's bandwidth"
        confidence = "low"
        evidence.append(f"at {eff:.0%} of the bandwidth these operators are not limited by it: look at what keeps "
                        "them from running (threads waiting for cores other processes hold, page faults on freshly "
                        "allocated outputs, strided access) before cutting the traffic")
    if weights is not None:
        bound_s, gemm_s = weights
        # matrix products below the ridge: each call reads the whole weight matrix for a few rows (batch 1 of a
        # 2048-wide MLP: 0.5 FLOP/B), so a larger batch shares each read among more items; fusing elementwise
        # operators and bf16 autocast (which converts the weights on every call: 0.14x) were proposed instead
        evidence.append(f"matrix products are {gemm_s / bound_s:.0%} of that time: at batch {a.batch_size} each "
                        "call reads the whole weight matrix for a few rows, so the weights' traffic is per batch, "
                        "not per item")
        return Finding(
            category=MEMORY_BANDWIDTH, title=title, evidence=evidence,
            fix=("batch more items per call (each weight read then serves all of them): dynamic batching when "
                 "serving, a larger batch offline"
                 # not for weights already int8 (a quantized Linear at batch 1 was offered int8 weights)
                 + ("" if all(o.dtype == "int8" for o in op.operators if o.bound == BANDWIDTH
                              and o.name.split("::")[-1] in GEMM_OPS)
                    else "; a smaller weight dtype (int8 weights) cuts the traffic itself")),
            setting="--max-batch-size (dlperf serve), the batch size", share=share, confidence=confidence,
            # the weights' reads are shared by 4x the items: at most the GEMMs' share of the time goes 4x down
            estimated_speedup=_speedup(share * gemm_s / bound_s, 4.0), fixes=[batch_fix(a.batch_size), compile_fix()],
        )
    # A fused chain reads its input and writes its output once: where the trace shows no run of elementwise operators
    # in a row, assume half the traffic goes away (5 in a row on 128 MiB, 11 passes eager and 2 fused, were estimated
    # 1.73x by that rule and measured 4.58x compiled); a run's time loses what fusing it leaves out of its traffic.
    # The time between a run's operators (freeing its intermediates, Python, dispatch) goes with fusing as well: left
    # out, 5 operators on 64 MiB whose gaps were 24% of the step were estimated 2.45x, "an upper bound", and
    # measured 4.40x compiled; the finding explains that time too.
    chains = op.elementwise_chains
    chain_share, gap_share = _fused_shares(op, share)
    if chains and chain_share > 0:
        evidence.append(
            f"{chains.longest_ops} elementwise operators on {chains.tensor_bytes / (1 << 20):.0f} MiB tensors in a "
            f"row: about {chains.eager_passes:.0f} passes over such a tensor eager, {chains.fused_passes:.0f} fused"
            + (f" ({chains.runs_per_step:.0f} such runs a step, {chain_share:.0%} of it)" if chains.runs_per_step > 1
               else "")
            + (f", and {gap_share:.0%} of the step between them, outside every operator (freeing intermediates, "
               "dispatch), which a fused run does not spend" if gap_share >= 0.01 else "")
            + "; the trace does not say which tensor each operator reads, so each is taken to read the one before "
              "it: an upper bound on the traffic fusing saves")
    saved = (chain_share * (1.0 - chains.fused_bytes / chains.eager_bytes) if chains and chain_share > 0 else 0.0) \
        + gap_share + (share - chain_share) / 2.0
    share += gap_share
    return Finding(
        category=MEMORY_BANDWIDTH, title=title, evidence=evidence,
        fix=("read and write each tensor fewer times: fuse chains of elementwise operators (torch.compile), "
             "use in-place operations, keep tensors in a smaller dtype"),
        setting="pass compile (dlperf optimize)", share=share,
        confidence=confidence, estimated_speedup=_speedup(saved, math.inf), fixes=[compile_fix(), bf16_fix()],
    )


def _threads(a: Analyses) -> list[Finding]:
    t = a.threads
    found: list[Finding] = []
    if t.oversubscription > 1.0:
        f = t.oversubscription
        # A rule of thumb, not a measurement (--verify measures it): 15% lost per extra multiple of the cores.
        share = min(0.8, 0.15 * (f - 1.0))
        in_step = t.threads_set_by == "step"
        # the cores other processes leave, as the busy-machine finding counts them: with another process on 1 of 2
        # cores, 8 threads were told `--threads 2` (beside that finding's `--threads 1`), and 2 threads, one of them
        # waiting for the busy core at each parallel operator, measured 0.37x (slower) against an estimated 1.68x
        target = _cores_left(t)
        left = (f"{target} of the {t.usable_cores} usable cores that {t.others} leave free (they kept "
                f"{t.other_busy_cores:.1f} busy)" if target < t.usable_cores else f"{t.usable_cores} usable cores")
        found.append(Finding(
            category=HOST_THREADS, title="torch uses more threads than there are cores",
            evidence=[f"{t.intra_op_threads} intra-op threads on {t.usable_cores} usable cores "
                      f"({f:.1f}x oversubscribed); every parallel operator waits for threads that cannot run",
                      f"{_busy(t.busy_threads)}; {'it' if t.busy_threads == 1 else 'together they'} kept "
                      f"{t.process_busy_cores:.1f} cores busy",
                      f"the {share:.0%} it explains is a rule of thumb (15% of the step per extra multiple of the "
                      "cores), not a measurement" + ("" if in_step else ": --verify measures the fix"),
                      *([f"it assumes the cores are this process's: with {t.others} keeping "
                         f"{t.other_busy_cores:.1f} busy, {t.intra_op_threads} threads also take a larger part of "
                         "the contested cores from them than fewer threads would, so fewer may measure slower here "
                         "(profile on an idle machine to tell)"] if target < t.usable_cores else []),
                      *_own_threads(t)],
            fix=(f"remove the torch.set_num_threads call from the workload's step (its forward), or make it set the "
                 f"{left}: the fix is in the workload's code" if in_step else
                 f"set the intra-op threads to the {left} (torch.set_num_threads, "
                 "OMP_NUM_THREADS); leave cores for data-loading workers when training"),
            setting=None if in_step else f"--threads {target}", share=share,
            confidence="high" if f >= 2 else "medium", estimated_speedup=_speedup(share, 10.0),
            root_cause=f >= 2, fixes=[] if in_step else [threads_fix(target)],
        ))
    under = _undersubscribed(a)
    if under is not None:
        found.append(under)
    shared = _shared_machine(a)
    if shared is not None:
        found.append(shared)
    share = min(0.8, t.other_python_threads_busy_cores / t.usable_cores)
    if t.other_python_threads_busy_cores >= 0.2 and share >= MIN_SHARE:
        found.append(Finding(
            category=HOST_THREADS, title="another thread of this process competes with the step",
            evidence=[f"other Python threads of this process used {t.other_python_threads_busy_cores:.1f} of "
                      f"{t.usable_cores} cores while the step ran; they share the GIL and the cores with it",
                      _busy(t.busy_threads)],
            fix="move the background work to another process, or pause it while the model runs",
            share=share, confidence="medium", estimated_speedup=_speedup(share, 10.0),
            root_cause=t.other_python_threads_busy_cores >= 0.5,
        ))
    return found


def _own_threads(t: ThreadAnalysis) -> list[str]:
    """The evidence that the workload's own code sets the thread count. Set in each step (a `set_num_threads(16)` in
    its forward), it undoes a count set from outside before the step: `--threads 2` was offered, and only --verify
    found it did not hold."""
    if t.threads_set_by == "step":
        return [f"the workload sets its own thread count: after each step torch had {t.intra_op_threads} threads, not "
                "the count the step started with (a torch.set_num_threads in its forward), so a count set from "
                "outside (--threads, OMP_NUM_THREADS) does not hold"]
    built = ([f"the workload's code sets {t.intra_op_threads} threads when it builds its model (a "
              "torch.set_num_threads in a factory): --threads overrides it in dlperf's runs; outside them, change "
              "it in that code"] if t.threads_set_by == "build" else [])
    return built + _unprobed(t)


def _unprobed(t: ThreadAnalysis) -> list[str]:
    """The evidence that no step ran under another thread count (an inference step's check call does, a training
    capture's first warm-up step, and a training capture with no warm-up step had none): a forward setting the count
    already in place then looks like one setting none, and a `--threads` fix from outside would not hold. Said where
    such a fix is offered."""
    if t.threads_probed is not False or t.threads_set_by == "step":
        return []
    return ["no step ran under another thread count than the one in place (in training the first warm-up step "
            "does; here there was none), so a torch.set_num_threads in the workload's forward that sets the count "
            "already in place would go unseen, and undo a --threads fix: --verify measures whether it holds"]


THREAD_SCALING = 0.8
"""Rule of thumb for operators torch splits across its intra-op threads: each added thread gives 80% of a core."""


def _undersubscribed(a: Analyses) -> Finding | None:
    """Fewer intra-op threads than the cores other processes leave free, with the step's time in the operators torch
    splits across them (compute- and memory-bound ones). `--threads 1`, OMP_NUM_THREADS=1 in a container or a
    set_num_threads(1) in the workload's code left a core idle, and the profile said nothing: the ceilings are
    calibrated at the profiled thread count, so % of peak looked fine."""
    t = a.threads
    # the loader's workers load while the step runs: their cores are not free for its threads
    free = t.usable_cores - round(t.other_busy_cores + t.loader_workers_busy_cores)
    if t.intra_op_threads >= free:
        return None
    parallel = a.operators.share_by_bound.get(COMPUTE, 0.0) + a.operators.share_by_bound.get(BANDWIDTH, 0.0)
    if parallel < MIN_SHARE:
        return None
    factor = 1.0 + THREAD_SCALING * (free / t.intra_op_threads - 1.0)
    share = parallel * (1.0 - 1.0 / factor)
    if share < MIN_SHARE:
        return None
    fix = threads_fix(free)
    in_step = t.threads_set_by == "step"
    return Finding(
        category=HOST_THREADS, title="torch uses fewer threads than there are free cores",
        evidence=[f"{_cores(t.intra_op_threads, 'intra-op thread')} on {_cores(t.usable_cores, 'usable core')}, "
                  f"{free} of them free of other processes"
                  + (" and of this process's loader workers" if t.loader_workers else ""),
                  f"{parallel:.0%} of the step is in compute- and memory-bound operators, which torch splits across "
                  "its intra-op threads",
                  f"the {share:.0%} it explains is a rule of thumb ({THREAD_SCALING:.0%} of a core per added thread), "
                  "not a measurement" + ("" if in_step else ": --verify measures the fix"),
                  f"% of peak in the roofline is of the {_cores(t.intra_op_threads, 'thread')} profiled (the "
                  "ceilings are calibrated at the profiled thread count), not of this machine", *_own_threads(t)],
        fix=(f"make the workload's torch.set_num_threads call (in its step) set {free} threads, or remove it: the fix "
             "is in the workload's code" if in_step else
             f"raise the intra-op threads to {free} (torch.set_num_threads; look for OMP_NUM_THREADS or "
             "MKL_NUM_THREADS in the environment and set_num_threads calls in the code); leave cores for "
             "data-loading workers when training"),
        setting=None if in_step else fix.setting, share=share, confidence="medium",
        estimated_speedup=_speedup(parallel, factor), fixes=[] if in_step else [fix],
    )


BUSY_ELSEWHERE = 0.5
"""Other processes keeping this many cores busy or more make the machine busy (a finding, a caveat), and the thread
fixes count the cores they leave."""


def _cores_left(t: ThreadAnalysis) -> int:
    """The cores a thread fix should use: all usable ones, or where other processes keep BUSY_ELSEWHERE or more busy,
    those they leave (at least 1)."""
    if t.other_busy_cores < BUSY_ELSEWHERE:
        return t.usable_cores
    return max(1, t.usable_cores - math.ceil(t.other_busy_cores))


def _shared_machine(a: Analyses) -> Finding | None:
    """Other processes hold cores this process's threads need. Two signals, each on its own evidence:
    starved, the process got half or less of the cores its threads could use (CPU time / wall time, against
    `wanted_cores`: a one-thread step is not starved by getting one core of two); and a
    measured stall, more threads than the cores left free while operators run far below their roofline
    (`_stalled`: a parallel operator waits for its descheduled threads). Both: high confidence and a
    root cause (it distorts every other measurement); one: medium; neither strongly: low."""
    t = a.threads
    if t.other_busy_cores < BUSY_ELSEWHERE:
        return None
    expected = t.wanted_cores
    starved = _starved(a, at_least=0.0)
    free_cores = t.usable_cores - t.other_busy_cores
    outnumbered = expected > free_cores  # a thread that never ran waits for no core
    stalled = [o for o in a.operators.operators if _stalled(o, a.operators)]
    stalled_share = sum(o.share for o in stalled) if outnumbered else 0.0
    if starved < 0.2 and stalled_share < MIN_SHARE:
        return None
    # The operators asked for `expected` cores and got fewer: the missing part of their time was spent waiting
    # to be scheduled; a measured stall is the time of the operators that ran far below the peak.
    share = max(min(0.9, starved) * min(1.0, a.breakdown.share(a.breakdown.operator_s)), min(0.9, stalled_share))
    if share < MIN_SHARE:  # a step mostly outside parallel operators (waiting for data, Python) loses little
        return None  # (the busy machine is still a caveat)
    evidence = [f"{t.others} kept {t.other_busy_cores:.1f} cores busy; this process ran "
                f"{_cores(t.intra_op_threads, 'thread')} but got only {t.process_busy_cores:.1f} of "
                f"{_cores(expected)}"
                if expected == min(t.intra_op_threads, t.usable_cores) else
                f"{t.others} kept {t.other_busy_cores:.1f} cores busy; the step ran on "
                f"{_cores(t.busy_threads, 'busy thread')} (of {t.intra_op_threads} intra-op threads), which got "
                f"only {t.process_busy_cores:.1f} of the {_cores(expected)} they could use"]
    signals = 0
    if starved >= 0.5:
        signals += 1
    if stalled_share >= MIN_SHARE:
        signals += 1
        worst = stalled[0]
        evidence.append(
            f"{stalled_share:.0%} of the step is in operators running below {FAR_BELOW_PEAK:.0%} of what this "
            f"machine's measured roofline allows them ({worst.name}, {worst.bound}, at "
            f"{_roofline_share(worst, a.operators) or 0.0:.1%}) while {t.intra_op_threads} threads shared "
            f"{max(0.0, free_cores):.1f} free cores: a parallel operator waits for its descheduled threads")
    if t.load_average_1m is not None:
        evidence.append(f"1-minute load average {t.load_average_1m:.1f} on {t.usable_cores} cores")
    free = _cores_left(t)
    # fewer threads help only a step that uses more, and only where the step does not set its own count
    fixes = [threads_fix(free)] if free < expected and t.threads_set_by != "step" else []
    if fixes:
        evidence.extend(_unprobed(t))
    confidence = ("low", "medium", "high")[signals]
    return Finding(
        category=HOST_THREADS, title=SHARED_MACHINE, evidence=evidence,
        fix="measure on an idle machine or give this process dedicated cores (taskset, cgroups)"
            + ("; use fewer threads than the busy cores leave free" if fixes else ""),
        setting=fixes[0].setting if fixes else None, share=share, confidence=confidence,
        estimated_speedup=_speedup(share, 2.0), root_cause=confidence == "high", fixes=fixes,
    )


def _starved(a: Analyses, at_least: float = 0.2) -> float:
    """The share of the cores its step could use that this process did not get while other processes kept half a
    core or more busy (time its threads waited to be scheduled); 0.0 below `at_least` or on an idle machine."""
    t = a.threads
    if t.other_busy_cores < BUSY_ELSEWHERE:
        return 0.0
    starved = max(0.0, 1.0 - t.process_busy_cores / t.wanted_cores)
    return starved if starved >= at_least else 0.0


def _roofline_share(o: OperatorStat, ops: OperatorAnalysis) -> float | None:
    """What an operator achieved as a share of what the roofline allows it: its % of peak when compute- or
    bandwidth-bound; when cache-resident, of the DRAM roofline (the peak, or intensity x bandwidth where lower),
    which data in the caches can only beat; None for dispatch-bound and unknown ones."""
    if o.bound in (COMPUTE, BANDWIDTH):
        return o.pct_of_peak
    if o.bound != CACHE_RESIDENT:
        return None
    if o.achieved_flops_s and o.intensity:
        peak = ops.peak_flops.get(o.dtype) or ops.peak_flops.get("fp32") or 0.0
        allowed = min(peak, o.intensity * ops.bandwidth_bytes_s)
        return o.achieved_flops_s / allowed if allowed > 0 else None
    return o.achieved_bytes_s / ops.bandwidth_bytes_s if o.achieved_bytes_s else None


def _stalled(o: OperatorStat, ops: OperatorAnalysis) -> bool:
    """Far below its roofline (FAR_BELOW_PEAK); outside the compute-bound class, also at least STALL_CALL_S a call.
    An `addmm` of about 1 MFLOP (cache-resident) took 14 ms under contention and was not counted, so the finding
    explained 45% of a step about 88% stalled."""
    share = _roofline_share(o, ops)
    if share is None or share >= FAR_BELOW_PEAK:
        return False
    return o.bound == COMPUTE or o.self_s / max(o.calls_per_step, 1e-9) >= STALL_CALL_S


def size_text(nbytes: float) -> str:
    """Bytes as MiB, KiB under one MiB, bytes under one KiB: a step holding 16 KiB read '0 MiB', a 16-byte
    allocation 'aten::addmm 0 KiB'. The findings and the profile's terminal report both write sizes with it."""
    if abs(nbytes) >= 2**20:
        return f"{nbytes / 2**20:,.0f} MiB"
    if abs(nbytes) >= 2**10:
        return f"{nbytes / 2**10:,.0f} KiB"
    return f"{nbytes:,.0f} B"


def _capacity(a: Analyses) -> list[Finding]:
    m = a.memory
    found = []
    if m.used_fraction >= CAPACITY_WARN:
        evidence = [f"peak host memory {size_text(m.peak_rss_bytes)} is {m.used_fraction:.0%} of the "
                    f"{size_text(m.budget_bytes)} budget ({m.budget_source}); headroom "
                    f"{m.headroom_bytes / 2**20:.0f} MiB",
                    f"of it, {size_text(m.start_rss_bytes)} were in use before the model was built (Python, torch, "
                    f"what the workload's code loaded), the model's parameters take {size_text(m.model_bytes)} and "
                    f"the step's operators hold up to {size_text(m.step_allocated_peak_bytes)} at once"]
        # the same allocation in each profiled step is one line, not one a step
        allocations = list(dict.fromkeys(f"{x.op} {size_text(x.bytes)} ({x.phase})" for x in m.largest_allocations))[:2]
        # one line: two lines that each began 'largest allocation:' named 512 MiB and then 512 KiB as the largest
        if allocations:
            evidence.append(f"largest allocation{'s' if len(allocations) > 1 else ''}: {', then '.join(allocations)}")
        # What the step holds can be cut (a smaller batch, fewer activations kept); what the process held before the
        # model was built and the weights cannot. When the step holds under half of the overrun, the memory is the
        # process's and the model's, and no batch brings it down.
        excess = m.peak_rss_bytes - CAPACITY_WARN * m.budget_bytes
        setting: str | None
        if m.step_allocated_peak_bytes >= 0.5 * excess:
            if a.batch_size > 1:
                fix = "lower the batch size or the activations kept"
                setting = "--batch-size (smaller)"
            else:
                fix = "keep fewer activations at once (already at batch 1)"
                setting = None
            fix += (" (inference_mode, activation checkpointing when training, smaller dtype), or raise the budget; "
                    "near the limit the process swaps or is killed")
        else:
            evidence.append(f"the step holds {size_text(m.step_allocated_peak_bytes)} (batch {a.batch_size}), "
                            f"against a peak {size_text(max(0.0, excess))} over {CAPACITY_WARN:.0%} of the budget: a "
                            "smaller batch cannot bring it down")
            fix = ("the memory is held outside the step: raise the budget, or hold less in the process (smaller "
                   "weights: an int8 or bf16 model, a smaller model; fewer libraries and data loaded next to it); "
                   "near the limit the process swaps or is killed")
            # smaller weights help only where the weights are a real part of the peak
            setting = (optimize_command([*INT8_PASSES, "precision"], "--objective memory ")
                       if m.model_bytes >= 0.1 * m.peak_rss_bytes else None)
        found.append(Finding(
            category=MEMORY_CAPACITY,
            title="host memory exceeds the budget" if m.used_fraction >= 1 else "host memory is nearly exhausted",
            evidence=evidence, fix=fix, setting=setting, share=m.used_fraction,
            confidence="high" if m.used_fraction >= CAPACITY_ROOT else "medium",
            estimated_gain="avoids out-of-memory and swapping", root_cause=m.used_fraction >= CAPACITY_ROOT,
        ))
    if m.device_used_fraction is not None and m.device_used_fraction >= CAPACITY_WARN:
        found.append(Finding(
            category=MEMORY_CAPACITY, title="device memory is nearly exhausted",
            evidence=[f"peak reserved {(m.device_peak_reserved_bytes or 0) / 2**20:.0f} MiB is "
                      f"{m.device_used_fraction:.0%} of the device's {(m.device_total_bytes or 0) / 2**20:.0f} MiB"],
            fix="lower the batch size, use bf16/fp16, activation checkpointing when training",
            setting="--batch-size (smaller)", share=m.device_used_fraction,
            confidence="high", estimated_gain="avoids CUDA out-of-memory",
            root_cause=m.device_used_fraction >= CAPACITY_ROOT,
        ))
    return found


def _communication(a: Analyses) -> Finding | None:
    if a.comm_share < MIN_SHARE:
        return None
    return Finding(
        category=COMMUNICATION, title="collective communication takes a large part of the step",
        evidence=[f"{a.comm_share:.0%} of the step is in communication operators (NCCL/Gloo collectives)"],
        fix="overlap communication with backward (DDP bucket size), use gradient accumulation, compress gradients",
        share=a.comm_share, confidence="medium", estimated_speedup=_speedup(a.comm_share, 2.0),
    )


def diagnose(a: Analyses) -> Diagnosis:
    """Rank the findings; the verdict names the top one, or says no clear bottleneck was found."""
    findings: list[Finding] = []
    for single in (_input_pipeline(a), _launch(a), _optimizer_step(a), _compute(a), _bandwidth(a),
                   _communication(a)):
        if single is not None:
            findings.append(single)
    findings += _threads(a) + _capacity(a)
    for f in findings:
        if f.estimated_speedup is not None and not f.estimated_gain:
            f.estimated_gain = f"up to {f.estimated_speedup:.2f}x faster steps (estimate)"
    findings.sort(key=lambda f: f.score, reverse=True)
    if findings:
        verdict = verdict_of(findings[0])
    else:
        b = a.breakdown
        verdict = (f"no clear bottleneck: no category explains {MIN_SHARE:.0%} or more of the "
                   f"{_ms(b.step_s)} step (operators {b.share(b.operator_s):.0%}, overhead "
                   f"{b.share(b.framework_overhead_s):.0%})")
    return Diagnosis(findings, verdict, _caveats(a))


def verdict_of(top: Finding) -> str:
    """The verdict line naming the top finding."""
    of = "budget" if top.category == MEMORY_CAPACITY else "step"
    return f"{top.category}: {top.title} ({top.share:.0%} of the {of})"


def _cores(n: int, what: str = "core") -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _busy(threads: int) -> str:
    """'1 thread of this process was busy' ('1 threads of this process were busy' was printed)."""
    return f"{_cores(threads, 'thread')} of this process {'was' if threads == 1 else 'were'} busy"


def times_faster(ratio: float) -> str:
    """How many times faster a time `ratio` (< 1) of another is: '2.5x', '35x', '1,200x' (a ratio of 0.0008 printed
    as '0.00x')."""
    factor = 1.0 / max(ratio, 1e-12)
    return f"{factor:.1f}x" if factor < 10 else f"{factor:,.0f}x"


def _caveats(a: Analyses) -> list[str]:
    out = []
    t = a.threads
    expected = t.wanted_cores
    if t.other_busy_cores >= 0.5 and t.process_busy_cores < 0.5 * expected:
        load = f", load average {t.load_average_1m:.1f}" if t.load_average_1m is not None else ""
        out.append(f"the machine was busy: this process got {t.process_busy_cores:.1f} of the {_cores(expected)} "
                   f"its threads could use ({t.other_busy_cores:.1f} cores busy in {t.others}{load}); times are "
                   "inflated and percentages of peak understated: re-run on an idle machine before trusting them")
    if t.threads_asked is not None and t.threads_set_by == "step" and t.intra_op_threads != t.threads_asked:
        # `--threads 2` on a forward calling torch.set_num_threads(1) printed "threads: 1 intra-op ..." and nothing
        # else: every figure was of 1 thread, not the 2 asked for
        out.append(f"--threads {t.threads_asked} did not hold: the workload sets its own thread count in its step (a "
                   f"torch.set_num_threads in its forward), and torch had {t.intra_op_threads} after each step, so "
                   f"the step ran on {t.intra_op_threads}; remove that call to profile it on {t.threads_asked}")
    # compute-bound operators only: their FLOPs are counted exactly, while bytes moved are an estimate
    above = [o for o in a.operators.operators
             if o.bound == COMPUTE and o.pct_of_peak is not None and o.pct_of_peak > ABOVE_CEILING]
    if above:
        worst = max(above, key=lambda o: o.pct_of_peak or 0.0)
        out.append(f"{worst.name} ran at {worst.pct_of_peak:.0%} of its roofline ceiling: the cached ceilings "
                   "understate this machine (a quick calibration, or one taken while the machine was busy); run "
                   f"`dlperf calibrate --force --threads {min(t.intra_op_threads, t.usable_cores)}` (the thread "
                   "count profiled here) on an idle machine, and until then read % of peak as relative only")
    if a.operators.ceilings_caveat is not None:  # a cached calibration's busy-machine warning, passed on
        out.append(a.operators.ceilings_caveat)
    if a.operators.ceilings_note is not None:
        out.append(a.operators.ceilings_note)
    ratio = a.breakdown.profiling_overhead
    busy = bool(out) and out[0].startswith("the machine was busy")
    if ratio is not None and ratio >= 3.0 and (busy or ratio > PLAUSIBLE_PROFILER_COST):
        why = "the busy machine above" if busy else "another process or a stall during the profiled steps"
        out.append(f"the profiled step took {ratio:.1f}x the unprofiled one, more than the profiler's own cost "
                   f"explains ({why} is the likelier cause): per-operator times are inflated; re-run on an idle "
                   "machine")
    elif ratio is not None and ratio >= DISTURBED_RATIO and a.breakdown.unprofiled_step_s:
        # a step of two large GEMMs profiled 1.67x slower (51.9 against 31.0 ms): its 2 operators cannot cost the
        # profiler 21 ms, a busy spell did, and "44% of peak: try torch.compile" was told with no word of it. From
        # 3x on the same test holds: MiniLM's 189 operators profiled 20x slower (248 against 12.4 ms) were said to be
        # "the profiler slowed the step 20.0x", and its addmm "at 5% of peak" was named the bottleneck.
        extra_s = a.breakdown.step_s - a.breakdown.unprofiled_step_s
        allowance_s = a.launch.ops_per_step * PROFILER_COST_PER_OP_S
        if extra_s <= 2 * allowance_s + 1e-3 and ratio >= 3.0:
            out.append(f"the profiler slowed the step {ratio:.1f}x: per-operator times of tiny operators are "
                       "inflated")
        elif extra_s > 2 * allowance_s + 1e-3:
            ops = a.launch.ops_per_step
            out.append(f"the profiled step took {ratio:.2f}x the unprofiled one ({_ms(extra_s)} more), far more than "
                       f"the profiler costs its {ops:.0f} operator{'' if round(ops) == 1 else 's'} (at most about "
                       f"{_ms(allowance_s)}): the profiled steps were disturbed (another process, a stall), so their "
                       "per-operator times and % of peak understate the step; re-run on an idle machine, or profile "
                       "more steps (--steps)")
    if ratio is not None and ratio < LOW_OVERHEAD_RATIO:
        b = a.breakdown
        # as how many times faster: 'took 0.00x the unprofiled one' said nothing of a 1 ms step against a 2 s one
        out.append(f"the profiled step ({_ms(b.step_s)}) was {times_faster(ratio)} faster than the unprofiled one "
                   f"({_ms(b.unprofiled_step_s or 0.0)}): the profiler cannot make a step faster, so the unprofiled "
                   "timing was disturbed (another process, a one-off stall); these figures are not representative: "
                   "re-run on an idle machine")
    return out
