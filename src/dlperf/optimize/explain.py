"""Why a candidate is slower than the baseline, or failed: likely causes from what it is and where it ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlperf.measure.ab import SAME, SLOWER

INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")

COPY_OVERHEAD_S = 1e-3
"""The most time a call can add by an engine's copies of a small batch's inputs and outputs (batch 1 or 2)."""


def _added_s(row: dict[str, Any], baseline: dict[str, Any]) -> float | None:
    """The candidate's p50 less the baseline's, in seconds; None where either is missing."""
    cand, base = row.get("p50_s"), baseline.get("p50_s")
    if not isinstance(cand, (int, float)) or not isinstance(base, (int, float)):
        return None
    return float(cand) - float(base)


def _disagreement(row: dict[str, Any], paired: dict[str, Any]) -> str | None:
    """Where the search ranked a candidate by its isolated gain because its paired gain, over 1x, was more than
    twice that: the two figures, and that one of them was disturbed. A cause of slowness would contradict the
    paired figure. zoo:minilm's `compile` read "slower: the compiled graph found little to fuse" at 0.18x isolated
    beside 1.15x paired, the speed-up `dlperf profile --verify` had just measured for torch.compile."""
    isolated, paired_gain = row.get("gain"), row.get("paired_gain")
    if row.get("ranked_by") != "gain" or not isinstance(isolated, (int, float)) \
            or not isinstance(paired_gain, (int, float)) or paired_gain <= 1.0:
        return None
    ci: Sequence[float] = paired.get("ci") or ()
    within = f", 95% CI {1 / ci[1]:.2f}-{1 / ci[0]:.2f}x" if len(ci) == 2 and min(ci) > 0 else ""
    return (f"by its gain ({isolated:.2f}x, its own process against the baseline's), while beside the original "
            f"in its own process it measured {paired_gain:.2f}x faster (paired{within}): the two disagree by more "
            "than 2x, so one was disturbed (another load on the machine, or the original timed beside the "
            "candidate's busy threads); the search took the lower: measure it again on a quiet machine "
            "(`dlperf ab`) before reading it as slower")


def slower_reasons(row: dict[str, Any], baseline: dict[str, Any], cpu_flags: Sequence[str], batch_size: int,
                   device: str = "cpu") -> list[str]:
    """Likely reasons a measured candidate is not faster than the baseline (most specific first)."""
    reasons: list[str] = []
    paired = row.get("paired") or {}
    disagreement = _disagreement(row, paired)
    if disagreement:
        return [disagreement]
    if paired.get("verdict") == SAME and paired.get("ratio") and len(paired.get("ci") or ()) == 2:
        # below 1.0x but within its CI of no change: "slower: the passes add work per call ..." was said of a
        # hygiene candidate whose paired blocks could not tell it from the original
        lo, hi = paired["ci"]
        reasons.append(f"not measurably different from the original in its own process (paired "
                       f"{1 / paired['ratio']:.2f}x, 95% CI {1 / hi:.2f}-{1 / lo:.2f}x)")
    names = [c.get("pass") for c in row.get("pipeline", [])]
    precision = row.get("precision", "fp32")
    engine = row.get("engine", "torch")
    flags = set(cpu_flags)
    on_cpu = device == "cpu"
    weights_only = any(c.get("precision") == "int8-weights" for c in row.get("pipeline", []))
    if precision == "int8" and weights_only:
        # OpenVINO's weight compression: int8 weights turned back into floats for float GEMMs, no int8 arithmetic
        reasons.append("weight-only int8 computes in float: it turns the int8 weights back into floats on each "
                       "call, which pays off only where reading the weights dominates (large layers, small batches "
                       "on a memory-bound model)")
    elif precision == "int8" and on_cpu:
        if not flags & set(INT8_FLAGS):
            reasons.append("no int8 hardware support: this CPU lacks VNNI/AMX-INT8, so int8 GEMMs are not faster")
        if batch_size <= 4:
            reasons.append(f"at batch {batch_size} quantizing activations and rescaling outputs costs about as "
                           "much as the small int8 GEMMs save")
        elif flags & set(INT8_FLAGS):  # a VNNI CPU at batch 16 got only "the measurement is noisy" for 0.47x
            reasons.append("quantizing the activations and rescaling the outputs on every call costs more than the "
                           "int8 GEMMs save at this model's layer sizes (int8 pays off on wide layers)")
    if precision in ("bf16", "fp16") and on_cpu:
        amx, avx512 = f"amx_{precision}", f"avx512_{precision}"
        if avx512 in flags and amx not in flags:
            # an AVX512-BF16 CPU measured bf16 GEMMs at ~4x fp32 (dlperf calibrate): "at or below fp32 speed" was false
            reasons.append(f"this CPU computes {precision} GEMMs with AVX512-{precision.upper()} (no AMX): faster "
                           f"than fp32 for large matrices, but at this model's sizes the casts between {precision} "
                           "and fp32 around the other operators cost more than the GEMMs save")
        elif amx not in flags:
            reasons.append(f"no native {precision} on this CPU (neither AMX nor AVX512-{precision.upper()}): "
                           f"{precision} GEMMs run at or below fp32 speed, and casts add work")
    if engine != "torch":
        # copying a small batch's inputs and outputs costs microseconds: it explains an engine a fraction of a
        # millisecond slower, not zoo:minilm's ONNX Runtime at 150 ms a call against torch's 55 ms (it was said so)
        added_s = _added_s(row, baseline)
        copies = batch_size <= 2 and (added_s is None or added_s <= COPY_OVERHEAD_S)
        reasons.append(f"conversion overhead: inputs and outputs are copied between torch and {engine} on every "
                       f"call, which dominates at batch {batch_size}" if copies else
                       f"{engine} did not beat torch's kernels for this model")
    if "compile" in names:
        reasons.append("the compiled graph found little to fuse, or guard checks and launch overhead dominate "
                       "this small a model")
    if "channels_last" in names:
        reasons.append("layout conversions around ops without channels_last kernels cost more than they save")
    if "hygiene" in names and any(c.get("threads") for c in row.get("pipeline", [])):
        reasons.append("the thread count chosen is not better here (other load on the machine?)")
    noise = row.get("noise_warning") or baseline.get("noise_warning")
    # slower by the paired blocks in its own process: noise does not explain it away ("the difference may not be
    # real" was said of a candidate at 0.47x paired, 0.46x isolated, and again on a rerun)
    if noise and paired.get("verdict") != SLOWER:
        # "noisy: IQR is 34% of the median (> 10%); ..." or "only 3 samples: ..."; it read "noisy (noisy)"
        first = noise.split(";")[0]
        reasons.append(f"the measurement is noisy, its {first.removeprefix('noisy: ')}: the difference may not be real"
                       if first.startswith("noisy: ") else f"the measurement may mislead ({first})")
    if not reasons:
        reasons.append("the passes add work per call that this model and batch size do not repay")
    return reasons
