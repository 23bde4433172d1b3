"""Launch / dispatch overhead: how many operators a step runs, how long a typical one takes, and how much of
the step goes to tiny operators and to the gaps between operators (Python and dispatcher time)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dlperf.measure.stats import median
from dlperf.profile.analyzers.breakdown import stalled_us, typical_call_us
from dlperf.profile.trace import ProfileTrace, merged_length

TINY_OP_US = 20.0
"""A top-level operator shorter than this is dominated by dispatch cost, not by its work (CPU or launch)."""
TINY_KERNEL_US = 10.0


@dataclass
class LaunchAnalysis:
    ops_per_step: float
    """Top-level operators per step (what Python dispatched), outside the data phase."""
    all_ops_per_step: float
    """Every operator event per step, nested ones included."""
    median_op_us: float
    tiny_threshold_us: float
    tiny_op_fraction: float
    """Share of top-level operators shorter than the threshold."""
    tiny_op_time_s: float
    gap_time_s: float
    """Step time (outside data loading) between operators: Python and framework overhead (on CUDA, not the
    host's wait in synchronize calls)."""
    busy_step_s: float
    """Step time outside data loading."""
    overhead_share: float
    """(tiny-operator time + gaps) / the whole step (data wait included) less its stalled operator calls (see
    breakdown.STALLED_CALL_FACTOR): the share of the step a fused or batched step could win back. A call descheduled
    for 8 ms is neither dispatch nor work: counted in, 200 tiny calls a step read "tiny ops + gaps = 35%". Over the
    busy step alone, a training step that waited 17.4 of its 18.1 ms for data read "68% of the step" of 0.44 ms of
    overhead, and Amdahl on the whole step then promised 2.04x."""
    kernels_per_step: float | None = None
    median_kernel_us: float | None = None
    tiny_kernel_fraction: float | None = None
    python_reads_per_step: float = 0.0
    """Top-level reads of a tensor's value into Python per step (`aten::item`: .item(), float(), int(), bool() of a
    tensor; `_local_scalar_dense` where item is not recorded), outside the optimizer step. Those nested in other
    operators are not Python's: nn.TransformerEncoder's fast path reads 19 a step inside its nested-tensor softmax."""
    optimizer_ops_per_step: float = 0.0
    """Top-level operators per step in the optimizer phase (training): a single-tensor optimizer runs a few for
    each parameter."""
    optimizer_overhead_share: float = 0.0
    """Of `overhead_share`, the optimizer step's: its tiny top-level operators and the gaps between them within the
    optimizer phase (training). A single-tensor optimizer's is a finding of its own, whose fix is not the dispatch
    finding's torch.compile of the model."""
    optimizer_multi_tensor: bool = False
    """The optimizer step ran multi-tensor operators (`_foreach_*`, `_fused_*`): its foreach or fused
    implementation, which updates all parameters in one operator per stage."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyze(trace: ProfileTrace, tiny_op_us: float = TINY_OP_US) -> LaunchAnalysis:
    trace.validate()
    if tiny_op_us <= 0:
        raise ValueError(f"tiny_op_us must be positive, got {tiny_op_us}")
    counts, all_counts, tiny_s, gap_s, busy_s, shares, reads, optimizer = [], [], [], [], [], [], [], []
    optimizer_shares: list[float] = []
    durations: list[float] = []
    typical = typical_call_us(trace)
    for step in trace.steps:
        ops = trace.ops_in_step(step.index)
        top = [o for o in ops if o.depth == 0 and o.phase != "data"]
        counts.append(float(len(top)))
        optimizer.append(float(sum(o.phase == "optimizer" for o in top)))
        # the optimizer's own reads are not the model's: single-tensor Adam reads each parameter's step count
        # (`step_t.item()`), and 402 of them a step were told "vectorise the Python loop over the batch's rows"
        names = [o.name.split("::")[-1] for o in top if o.phase != "optimizer"]
        reads.append(float(names.count("item") or names.count("_local_scalar_dense")))
        all_counts.append(float(len([o for o in ops if o.phase != "data"])))
        durations += [o.dur_us for o in top]
        scale = step.wall_s / (step.dur_us * 1e-6) if step.dur_us > 0 else 1.0
        data_s = max(step.data_wait_s, step.phase_us.get("data", 0.0) * 1e-6 * scale)
        busy = max(step.wall_s - data_s, 1e-12)
        covered = merged_length([(o.start_us, o.end_us) for o in top]) * 1e-6 * scale
        tiny = sum(o.dur_us for o in top if o.dur_us < tiny_op_us) * 1e-6 * scale
        gap = max(0.0, busy - covered - step.device_sync_us * 1e-6 * scale)
        tiny_s.append(tiny)
        gap_s.append(gap)
        busy_s.append(busy)
        stalled = stalled_us(top, typical) * 1e-6 * scale
        whole = max(max(step.wall_s, busy) - stalled, 1e-12)
        shares.append(min(1.0, (tiny + gap) / whole))
        in_optimizer = [o for o in top if o.phase == "optimizer"]
        optimizer_tiny = sum(o.dur_us for o in in_optimizer if o.dur_us < tiny_op_us)
        optimizer_gap = max(0.0, step.phase_us.get("optimizer", 0.0)
                            - merged_length([(o.start_us, o.end_us) for o in in_optimizer]))
        optimizer_shares.append(min(shares[-1], (optimizer_tiny + optimizer_gap) * 1e-6 * scale / whole))
    result = LaunchAnalysis(
        ops_per_step=median(counts),
        all_ops_per_step=median(all_counts),
        median_op_us=median(durations) if durations else 0.0,
        tiny_threshold_us=tiny_op_us,
        tiny_op_fraction=(sum(1 for d in durations if d < tiny_op_us) / len(durations)) if durations else 0.0,
        tiny_op_time_s=median(tiny_s),
        gap_time_s=median(gap_s),
        busy_step_s=median(busy_s),
        overhead_share=median(shares),
        python_reads_per_step=median(reads),
        optimizer_ops_per_step=median(optimizer),
        optimizer_overhead_share=median(optimizer_shares),
        optimizer_multi_tensor=any(o.phase == "optimizer" and ("_foreach_" in o.name or "_fused_" in o.name)
                                   for o in trace.ops),
    )
    kernels = [k for k in trace.kernels if k.kind == "kernel" and k.step >= 0]
    if kernels:
        result.kernels_per_step = len(kernels) / len(trace.steps)
        result.median_kernel_us = median([k.dur_us for k in kernels])
        result.tiny_kernel_fraction = sum(1 for k in kernels if k.dur_us < TINY_KERNEL_US) / len(kernels)
    return result
