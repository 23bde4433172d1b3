"""Why a candidate is slower than the baseline, or failed: likely causes from what it is and where it ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlperf.measure.ab import SAME, SLOWER, STALL_FACTOR
from dlperf.measure.ab import stalled_blocks as stalled_blocks  # moved to measure, for `dlperf ab` too
from dlperf.measure.stats import fmt_ratio

INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")

COPY_OVERHEAD_S = 1e-3
"""The most time a call can add by an engine's copies of a small batch's inputs and outputs (batch 1 or 2)."""




def stalled_timing(latency: Any) -> str | None:
    """Why a row's timing (its `latency` summary) is not the model's: its calls stalled, as a model's OpenMP threads
    do on a busy machine, each waiting on the other's preemption (a dynamic-int8 MLP took 21-45 ms a call on 2 threads
    against 0.25-0.5 ms on 1). Neither check the search had flags it: the IQR stays small when nearly all or under a
    quarter of the calls stall, and the paired gain is a ratio of two sides stalled alike. None where it did not."""
    if not isinstance(latency, dict):
        return None
    read = (latency.get(k) for k in ("min_s", "p50_s", "mean_s"))
    figures = [x for x in read if isinstance(x, (int, float)) and x > 0]
    if len(figures) < 3:
        return None
    fastest, mid, mean = (float(x) for x in figures)
    p99 = latency.get("p99_s")
    if median_stalled(latency):
        return (f"its median call took {mid / fastest:,.0f}x its fastest ({mid * 1e3:.3g} against "
                f"{fastest * 1e3:.3g} ms over {latency.get('n', '?')} calls): most calls stalled, so its p50 is not "
                "the model's")
    if mean >= STALL_FACTOR * mid:
        tail = f", p99 {p99 * 1e3:.3g} ms" if isinstance(p99, (int, float)) else ""
        return (f"its mean call took {mean / mid:,.0f}x its median ({mean * 1e3:.3g} against {mid * 1e3:.3g} "
                f"ms{tail}): some calls stalled, so its p99 and items/s are not the model's")
    return None


def median_stalled(latency: Any) -> bool:
    """Whether a row's stalled calls (`stalled_timing`) reach its median, which the latency objective ranks by; a
    stalled tail (the mean STALL_FACTOR times the median) leaves the p50 the model's."""
    if not isinstance(latency, dict):
        return False
    fastest, mid = latency.get("min_s"), latency.get("p50_s")
    return isinstance(fastest, (int, float)) and isinstance(mid, (int, float)) and 0 < STALL_FACTOR * fastest <= mid


def stalled_process(row: dict[str, Any], baseline: dict[str, Any]) -> tuple[str | None, str | None]:
    """Whether the process that timed `row`, or the baseline's, stalled as a whole: its paired blocks timed the
    original model beside the candidate, so the original's time per call there (the row's p50 over its paired ratio)
    is the same model as the baseline's p50, in another process; STALL_FACTOR apart, one process stalled on every call,
    the fastest included, which `stalled_timing` cannot see (hygiene's 10 calls on a busy machine all took 100-140 ms
    against the baseline's 0.062 ms, with paired 0.73x and an IQR of 9%). Returns (why for the row, why for the
    baseline), each None where it did not."""
    read = ((row.get("paired") or {}).get("ratio"), row.get("p50_s"), baseline.get("p50_s"))
    figures = [float(x) for x in read if isinstance(x, (int, float)) and x > 0]
    if len(figures) < 3:
        return None, None
    ratio, own, base = figures
    original = own / ratio  # the original model's time per call in the row's process
    if original >= STALL_FACTOR * base:
        return (f"the original model, timed beside it in its process, took {original * 1e3:.3g} ms a call against "
                f"the baseline's {base * 1e3:.3g} ms in its own ({original / base:,.0f}x): that process stalled on "
                "every call, so its p50 is not the candidate's"), None
    if base >= STALL_FACTOR * original:
        return None, (f"its median call took {base * 1e3:.3g} ms against {original * 1e3:.3g} ms for the same model "
                      f"timed in {row.get('label')}'s process ({base / original:,.0f}x): its process stalled on every "
                      "call, so its p50 and every gain taken against it are not the model's")
    return None, None


def stalled_threads(row: dict[str, Any]) -> str | None:
    """Whether the baseline's process stalled on every call, told without a candidate's pairing (`stalled_process`
    needs one): its model timed again with one thread (`one_thread`, recorded by the evaluation) ran STALL_FACTOR
    times faster than its p50 on all its threads, which only threads waiting on each other's preemption do (with 5
    CPU hogs on 2 cores zoo:digits-cnn's baseline read p50 292 ms, every call, against ~0.06 ms quiet; on one thread
    it took 0.062 ms). None where it did not, or nothing was recorded."""
    one, p50 = row.get("one_thread"), row.get("p50_s")
    if not isinstance(one, dict) or not isinstance(p50, (int, float)):
        return None
    single = one.get("min_s")
    if not isinstance(single, (int, float)) or single <= 0 or p50 < STALL_FACTOR * single:
        return None
    return (f"its median call took {p50 * 1e3:.3g} ms on {one.get('threads')} threads against {single * 1e3:.3g} ms "
            f"timed again on one thread in its process ({p50 / single:,.0f}x): its threads stalled on every call, "
            "so its p50 and every gain taken against it are not the model's")


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
    return (f"by its gain ({fmt_ratio(isolated)}, its own process against the baseline's), while beside the "
            f"original in its own process it measured {fmt_ratio(paired_gain)} faster (paired{within}): the two "
            "disagree by more than 2x, so one was disturbed (another load on the machine, or the original timed "
            "beside the candidate's busy threads); the search took the lower: measure it again on a quiet machine "
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
