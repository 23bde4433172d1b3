"""The micro-benchmarks behind the ceilings: square GEMMs per dtype and a large tensor copy.

Each is timed with dlperf's own timer (perf_counter_ns on CPU, CUDA events on GPU). A ceiling is what the
unit can do, so the 10th percentile of the per-call times is used (robust to one lucky sample, not dragged
down by other load on a shared machine): GEMM FLOP/s = 2·n³ / p10; bandwidth = 2·bytes (read + written)
/ p10. The GEMM size shrinks on slow devices so one call stays short. A dtype is measured only where
the hardware runs it natively (CPU flags for bf16/fp16; `torch._int_mm` must run for int8), so a slow
emulated path is not reported as a ceiling.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from dlperf.calibrate.ceilings import Ceilings, ProgressFn
from dlperf.errors import CalibrationError, MeasurementError
from dlperf.measure.clock import clock_for
from dlperf.measure.stats import FIXED_WORK_NOISE_CAUSES, NOISE_CAUSES, Measurement
from dlperf.measure.timer import TimerConfig, time_callable

CEILING_PERCENTILE = 10.0
FULL_GEMM_N = 2048
FULL_GEMM_N_CUDA = 8192
"""A data-centre GPU's tensor cores reach their peak only on large GEMMs: 2048^3 in fp16 is ~25 us on an H100, where
launch and the event pair weigh and the tiles do not fill the SMs (ceilings low, MFU high). 8192^3 takes ms there;
`_affordable_n` lowers it on a GPU too slow for it."""
QUICK_GEMM_N = 256
FULL_COPY_BYTES = 256 * 2**20  # well past any last-level cache
QUICK_COPY_BYTES = 16 * 2**20
FULL_TIMER = TimerConfig(warmup_iters=2, min_duration_s=0.5, min_iters=5, max_duration_s=10.0)
QUICK_TIMER = TimerConfig(warmup_iters=1, min_duration_s=0.02, min_iters=3, max_duration_s=1.0)

_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX-512/AMX, aarch64 'bf16'
_CPU_FP16_FLAGS = ("avx512_fp16", "amx_fp16", "fphp")  # x86 AVX512-FP16/AMX-FP16, aarch64 'fphp'
_CPU_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")  # int8 dot-product units
MAX_CALL_S = 1.0
MIN_FULL_GEMM_N = 1024  # smaller GEMMs stay in cache and pay fixed overheads: not a ceiling any more
"""The GEMM size is lowered (down to MIN_FULL_GEMM_N) until one call is projected to take at most MAX_CALL_S."""


def supported_dtypes(device: str) -> tuple[list[str], dict[str, str]]:
    """The GEMM dtypes this device runs natively (fp32 always), and why each other one was skipped."""

    found = ["fp32"]
    skipped: dict[str, str] = {}
    if device.startswith("cuda"):
        from dlperf._device import cuda_bf16_native

        if cuda_bf16_native(device):
            found.append("bf16")
        else:
            skipped["bf16"] = "no native bf16 (compute capability below 8.0: torch would emulate it)"
        found.append("fp16")
    else:
        flags = _cpu_flag_set()
        for dtype, wanted in (("bf16", _CPU_BF16_FLAGS), ("fp16", _CPU_FP16_FLAGS)):
            if flags & set(wanted):
                found.append(dtype)
            else:
                skipped[dtype] = f"no native support (CPU flags lack {'/'.join(wanted)})"
        if not flags & set(_CPU_INT8_FLAGS):
            skipped["int8"] = f"no int8 dot-product unit (CPU flags lack {'/'.join(_CPU_INT8_FLAGS)})"
            return found, skipped
    if _int_mm_runs(device):
        found.append("int8")
    else:
        skipped["int8"] = "torch._int_mm does not run here"
    return found, skipped


def _cpu_flag_set() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _int_mm_runs(device: str) -> bool:
    """torch._int_mm exists and runs here (CUDA needs m > 16 and k, n multiples of 8)."""
    import torch

    if not hasattr(torch, "_int_mm"):
        return False
    try:
        a = torch.ones(32, 32, dtype=torch.int8, device=device)
        out = torch._int_mm(a, a, out=torch.empty(32, 32, dtype=torch.int32, device=device))
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        return bool(out[0, 0].item() == 32)
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _gemm_call(dtype: str, n: int, device: str) -> Callable[[], Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    if dtype == "int8":
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8, generator=g).to(device)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8, generator=g).to(device)
        out = torch.empty(n, n, dtype=torch.int32, device=device)

        def int_call() -> Any:
            return torch._int_mm(a, b, out=out)

        return int_call
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    x = torch.randn(n, n, generator=g).to(device=device, dtype=torch_dtype)
    y = torch.randn(n, n, generator=g).to(device=device, dtype=torch_dtype)
    res = torch.empty(n, n, dtype=torch_dtype, device=device)

    def call() -> Any:
        return torch.mm(x, y, out=res)

    return call


def measure_gemm(dtype: str, device: str = "cpu", n: int = FULL_GEMM_N,
                 timer: TimerConfig = FULL_TIMER) -> tuple[float, dict[str, Any]]:
    """FLOP/s of an n x n x n GEMM in `dtype` on `device`, and how it was measured."""
    import torch

    with torch.inference_mode():
        n = _affordable_n(dtype, n, device)
        call = _gemm_call(dtype, n, device)
        m, others = _time_watched(call, timer, device, f"gemm {dtype} {n}")
    flops = 2.0 * n**3 / m.percentile_s(CEILING_PERCENTILE)
    return flops, _how(m, others, n=n)


def _affordable_n(dtype: str, n_max: int, device: str) -> int:
    """The largest power-of-two n in [MIN_FULL_GEMM_N, n_max] whose GEMM is projected to fit MAX_CALL_S."""
    if n_max <= QUICK_GEMM_N:
        return n_max
    probe = _gemm_call(dtype, QUICK_GEMM_N, device)
    # The fastest of a few calls: a ceiling is what the unit can do, not what a busy moment allowed.
    probe_s = _time(probe, TimerConfig(warmup_iters=1, min_duration_s=0.0, min_iters=5), device,
                    f"probe {dtype}").min_s
    n = n_max
    while n > MIN_FULL_GEMM_N and probe_s * (n / QUICK_GEMM_N) ** 3 > MAX_CALL_S:
        n //= 2
    return n


def measure_bandwidth(device: str = "cpu", nbytes: int = FULL_COPY_BYTES,
                      timer: TimerConfig = FULL_TIMER) -> tuple[float, dict[str, Any]]:
    """Bytes read + written per second by `dst.copy_(src)` of `nbytes` (fp32) on `device`."""
    import torch

    numel = nbytes // 4
    src = torch.ones(numel, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    m, others = _time_watched(lambda: dst.copy_(src), timer, device, f"copy {nbytes} B")
    moved = 2.0 * numel * 4
    return moved / m.percentile_s(CEILING_PERCENTILE), _how(m, others, bytes=numel * 4)


def _how(m: Measurement, other_cores: float, **size: int) -> dict[str, Any]:
    warning = m.noise_warning
    if warning is not None and warning.endswith(NOISE_CAUSES):
        # a GEMM or a copy does the same work every call: "warning: gemm_fp32: noisy ...; the model's own
        # per-call variation (data-dependent control flow, random-length loops)" named a cause it cannot have
        warning = f"{warning.removesuffix(NOISE_CAUSES)}{FIXED_WORK_NOISE_CAUSES}"
    return {**size, "p10_s": m.percentile_s(CEILING_PERCENTILE), "median_s": m.p50_s, "samples": m.n,
            "noise_warning": warning, "other_load_cores": round(other_cores, 2)}


def _time(call: Callable[[], Any], timer: TimerConfig, device: str, label: str) -> Measurement:
    try:
        return time_callable(call, timer, clock_for(device), label=label)
    except MeasurementError as exc:
        raise CalibrationError(f"calibration step '{label}' on {device} failed: {exc}") from exc


def _time_watched(call: Callable[[], Any], timer: TimerConfig, device: str, label: str) -> tuple[Measurement, float]:
    """`_time`, and how many cores other processes kept busy meanwhile (machine-wide busy CPU minus this process's,
    as bench's contention warning reads it). The sampler's thread never wakes inside the region (its interval is
    longer than any measurement): it only reads the CPU times at the start and the end."""
    import os

    from dlperf.measure.system import UtilizationSampler

    with UtilizationSampler(interval_s=3600.0) as util:
        m = _time(call, timer, device, label)
    cores = os.cpu_count() or 1
    others = max(0.0, util.result.system_cpu_percent * cores - util.result.process_cpu_percent) / 100.0
    return m, others


def contention_warning(what: str, other_cores: float) -> str | None:
    """A warning when other processes kept at least half a core busy while `what` was measured: a burst the load
    average (`busy_warnings`) has not caught yet makes this ceiling an underestimate all the same."""
    from dlperf.measure.bench import CONTENTION_PERCENT

    if other_cores * 100.0 < CONTENTION_PERCENT:
        return None
    return (f"{what}: other processes kept {other_cores:.1f} cores busy while it was measured: this ceiling is "
            "likely an underestimate; run `dlperf calibrate --force` again when the machine is idle")


def load_average() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    import os

    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_warnings() -> list[str]:
    """A warning when the machine is busy: other load makes every ceiling an underestimate."""
    import os

    load = load_average()
    if load is None:
        return []
    cores = os.cpu_count() or 1
    if load < cores:
        return []
    return [f"the machine is busy (load average {load:.1f} on {cores} cores): these ceilings are likely "
            "underestimates; run `dlperf calibrate --force` again when it is idle"]


def measure_ceilings(device: str, key: str, *, quick: bool = False,
                     on_progress: ProgressFn | None = None) -> Ceilings:
    """Measure every supported GEMM dtype and the copy bandwidth on `device` now."""
    import torch

    n = QUICK_GEMM_N if quick else (FULL_GEMM_N_CUDA if device.startswith("cuda") else FULL_GEMM_N)
    timer = QUICK_TIMER if quick else FULL_TIMER
    flops: dict[str, float] = {}
    details: dict[str, Any] = {"timer": "cuda_events" if device.startswith("cuda") else "perf_counter_ns",
                               "statistic": f"p{CEILING_PERCENTILE:g} of per-call time"}
    details["load_average"] = load_average()  # a provisional calibration is measured again when it is lower
    details["warnings"] = busy_warnings()
    # per measurement, what the load average (a minute's mean) missed; the busy warning says it for all of them. Not
    # in quick mode: a region of a few ms is a tick or two of the machine-wide CPU counters, too coarse to judge
    watch = not device.startswith("cuda") and not quick and not details["warnings"]
    dtypes, details["skipped"] = supported_dtypes(device)
    for dtype in dtypes:
        if on_progress is not None:
            on_progress(f"gemm {dtype} {n}x{n}")
        flops[dtype], details[f"gemm_{dtype}"] = measure_gemm(dtype, device, n, timer)
        said = contention_warning(f"the {dtype} GEMM", details[f"gemm_{dtype}"].get("other_load_cores", 0.0))
        if said is not None and watch:
            details["warnings"].append(said)
        used = details[f"gemm_{dtype}"]["n"]
        if used < n:  # a slow machine, or a busy moment the load average had not caught yet
            details["warnings"].append(
                f"the {dtype} GEMM ran at {used}x{used} instead of {n}x{n} (a {QUICK_GEMM_N}x{QUICK_GEMM_N} probe was "
                "too slow for the full size): a slow or busy machine; if it was busy, this ceiling is an "
                "underestimate: run `dlperf calibrate --force` when it is idle")
    if on_progress is not None:
        on_progress("memory bandwidth (copy)")
    bandwidth, details["copy"] = measure_bandwidth(
        device, QUICK_COPY_BYTES if quick else FULL_COPY_BYTES, timer)
    said = contention_warning("the memory bandwidth", details["copy"].get("other_load_cores", 0.0))
    if said is not None and watch:
        details["warnings"].append(said)
    return Ceilings(
        device=device,
        machine_key=key,
        gemm_flops=flops,
        memory_bandwidth_bytes_s=bandwidth,
        measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        threads=torch.get_num_threads(),
        quick=quick,
        details=details,
    )
