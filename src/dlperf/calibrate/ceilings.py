"""The machine's ceilings (GEMM FLOP/s per dtype, memory bandwidth), cached per machine in the user cache dir.

`get_ceilings()` returns the cached ceilings for this machine and device, measuring them first if the cache
has none. The cache key is what changes the ceilings: CPU model, core count, torch's thread count, torch's
version and the GPU. A quick measurement (small sizes, for tests) is cached apart from a full one; a quick
request is served from the full cache when there is one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf._cache import CACHE_ENV_VAR, cache_dir, warn_not_cached
from dlperf._files import write_text_atomic
from dlperf.errors import CalibrationError

CACHE_FORMAT_VERSION = 1
DTYPES = ("fp32", "bf16", "fp16", "int8")

ProgressFn = Callable[[str], None]
"""on_progress(what is being measured now), e.g. 'gemm fp32 2048x2048'."""


@dataclass
class Ceilings:
    """What this machine can do at best on `device`: GEMM FLOP/s per measured dtype and memory bandwidth.

    `gemm_flops` maps 'fp32' | 'bf16' | 'fp16' | 'int8' to FLOP/s (integer ops/s for int8) and holds only
    the dtypes that were measured (those the hardware runs natively). `memory_bandwidth_bytes_s` counts
    bytes read plus bytes written per second by a large tensor copy.
    """

    device: str
    machine_key: str
    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float
    measured_at: str
    threads: int
    quick: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    """How each number was measured: sizes, median seconds, sample count, noise warning."""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["format_version"] = CACHE_FORMAT_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ceilings:
        try:
            return cls(
                device=str(data["device"]),
                machine_key=str(data["machine_key"]),
                gemm_flops={str(k): float(v) for k, v in dict(data["gemm_flops"]).items()},
                memory_bandwidth_bytes_s=float(data["memory_bandwidth_bytes_s"]),
                measured_at=str(data["measured_at"]),
                threads=int(data["threads"]),
                quick=bool(data.get("quick", False)),
                details=dict(data.get("details", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"malformed ceilings data ({type(exc).__name__}: {exc})") from exc

    def peak_flops(self, dtype: str = "fp32") -> float | None:
        """FLOP/s for `dtype`, or None when that dtype was not measured on this machine."""
        return self.gemm_flops.get(dtype)

    @property
    def provisional(self) -> bool:
        """Measured by a command that calibrated on the way (profile, train) while the machine was busy or the calls
        noisy: cached, but measured again by a later run on a quieter machine (`lookup_or_measure`)."""
        return bool(self.details.get("provisional"))

    @property
    def warnings(self) -> list[str]:
        """What the measurement said of itself (a busy machine, a GEMM run at a reduced size, other load during a
        measurement): kept in the cache, so every figure computed against these ceilings later can pass it on."""
        return ceiling_warnings(self)


def ceiling_warnings(ceilings: Any) -> list[str]:
    """The warnings recorded with `ceilings` (a Ceilings, its `to_dict()`, or any object with `details`); [] when
    none were recorded or the object carries no details (hand-made ceilings)."""
    details = ceilings.get("details") if isinstance(ceilings, dict) else getattr(ceilings, "details", None)
    found = details.get("warnings") if isinstance(details, dict) else None
    return [str(w) for w in found] if isinstance(found, list) else []


def ceilings_caveat(ceilings: Any, figure: str = "% of peak", uses: Iterable[str] | None = None) -> str | None:
    """One line for wherever a figure computed against `ceilings` (MFU, % of peak) is shown, when the ceilings were
    recorded with a warning: they are likely underestimates, so the figure is likely overstated. None otherwise.
    `uses`: the ceilings the figure divides by (GEMM dtypes such as 'fp32', and 'bandwidth'); a warning about
    another one is left out (an fp32 MFU was doubted for a bf16 GEMM run at a smaller size). None: every one."""
    warnings = ceiling_warnings(ceilings)
    if uses is not None:
        used = set(uses)
        warnings = [w for w in warnings if (named := warned_ceiling(w)) is None or named in used]
    if not warnings:
        return None
    get = ceilings.get if isinstance(ceilings, dict) else lambda name: getattr(ceilings, name, None)
    when, threads, device = get("measured_at"), get("threads"), get("device")
    # each warning's cause, without its own advice (said once below, with the thread count the cache is keyed by)
    causes = "; ".join(_ADVICE.split(w, maxsplit=1)[0] for w in warnings)
    again = ("`dlperf calibrate --force" + (f" --device {device}" if device and device != "cpu" else "")
             + (f" --threads {threads}" if threads else "") + "`")
    details = get("details")
    provisional = (" (cached as provisional: a later run measures them again when the machine is quieter)"
                   if isinstance(details, dict) and details.get("provisional") else "")
    return (f"the ceilings behind {figure}{f' (measured at {when})' if when else ''} were recorded with a warning, "
            f"so they are likely underestimates and {figure} likely overstated: {causes}; run {again} on an idle "
            f"machine before trusting it{provisional}")


def ceilings_news(ceilings: Any) -> str | None:
    """What this command did to the cached ceilings, for its output: measured them again (why), or None."""
    details = ceilings.get("details") if isinstance(ceilings, dict) else getattr(ceilings, "details", None)
    said = details.get("remeasured") if isinstance(details, dict) else None
    return f"the cached ceilings were measured again: {said}" if isinstance(said, str) else None


def doubts(ceilings: Ceilings) -> list[str]:
    """Why a measurement of the ceilings may understate them: the warnings it recorded (a busy machine, other load
    during a measurement, a GEMM at a reduced size) and each kernel's noise warning (IQR/p50 above 10%)."""
    noisy = [str(d["noise_warning"]) for d in ceilings.details.values()
             if isinstance(d, dict) and d.get("noise_warning")]
    return [*ceilings.warnings, *noisy]


QUIETER = 0.75
"""A provisional calibration is measured again once the load average is below the core count and this fraction of
the load it was measured at (or below the cores, where that load was not recorded)."""


def quieter_now(ceilings: Ceilings) -> str | None:
    """Why the machine is quieter now than when the provisional `ceilings` were measured (the load averages), or None
    when it is not (a provisional calibration measured again under the same load would be as doubtful)."""
    from dlperf.calibrate.kernels import load_average

    now = load_average()
    cores = os.cpu_count() or 1
    then = ceilings.details.get("load_average")
    if now is None or now >= cores or (isinstance(then, (int, float)) and now > QUIETER * then):
        return None
    was = f"{then:.1f}" if isinstance(then, (int, float)) else "unrecorded"
    return (f"those measured at {ceilings.measured_at} were provisional ({'; '.join(doubts(ceilings)) or 'doubted'}) "
            f"and the machine is quieter now (load average {now:.1f} on {cores} cores, against {was} then)")


ABOVE_CEILING = 1.1
"""A figure above 110% of a ceiling (an operator's roofline, a training step's MFU) means the ceilings, not the work,
are off."""


def worth_measuring_again(ceilings: Any, why: str) -> str | None:
    """`why` (how a figure ran above ABOVE_CEILING of the cached `ceilings`) where measuring them again is worth it,
    else None: not where they were measured again already (once: work that beats a square GEMM would otherwise
    re-measure every run), nor on a busy machine (a measurement now would be as low; the cache is marked provisional
    by its own warnings instead), nor for ceilings no cache file holds (hand-made ones are not this machine's to
    redo). Profile's and train's shared rule (`profile.session.above_ceilings`, `train.step.measure_loop`)."""
    from dlperf.calibrate.kernels import busy_warnings

    details = getattr(ceilings, "details", None)
    if not isinstance(details, dict) or details.get("remeasured") or busy_warnings():
        return None
    cached = read_cache(str(getattr(ceilings, "machine_key", "")), bool(getattr(ceilings, "quick", False)))
    # the cache's, not the caller's copy: train's tuner holds the ones it read first for its last measurement
    if cached is None or cached.details.get("remeasured"):
        return None
    return why


def warned_ceiling(warning: str) -> str | None:
    """The one ceiling a calibration warning is about ('fp32' for 'the fp32 GEMM ...', 'bandwidth' for 'the memory
    bandwidth ...'), or None for one about them all (a busy machine)."""
    if match := _NAMED.search(warning):
        return match.group(1) or "bandwidth"
    return None


_NAMED = re.compile(r"\bthe (?:(\w+) GEMM|memory bandwidth)\b")
_ADVICE = re.compile(r": (?=these ceilings|this ceiling|a slow or busy machine)")


def normalize_device(device: str) -> str:
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        return "cuda:0"
    if device.startswith("cuda:") and device[5:].isdigit():
        return device
    raise CalibrationError(f"unknown device '{device}' for calibration: use cpu, cuda or cuda:N")


def machine_key(device: str = "cpu") -> str:
    """What the ceilings depend on: device, CPU model and the flags that matter to kernels (a VM's model name can
    hide another generation: 'AMD EPYC' with AVX2 only, or with AVX-512 VNNI and bf16), cores and the cores this
    process may use (`taskset -c 0 dlperf calibrate --threads 2` measured 2 threads on 1 core and cached it as the
    2-core machine's 2-thread peak), torch threads, torch version, GPU name."""
    import torch

    from dlperf.measure import env
    from dlperf.measure.env import cpu_flags, cpu_model

    device = normalize_device(device)
    gpu = "-"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise CalibrationError(
                f"calibration on '{device}' asked for, but no CUDA device is available "
                "(torch.cuda.is_available() is False): use --device cpu"
            )
        gpu = torch.cuda.get_device_name(torch.device(device))
    return (
        f"{device}|cpu={cpu_model()}|isa={','.join(cpu_flags()) or '-'}|cores={os.cpu_count() or 1}"
        f"|usable={env.usable_cores()}"
        f"|threads={torch.get_num_threads()}"
        f"|torch={torch.__version__}|gpu={gpu}"
    )


def cache_path(key: str, quick: bool) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "ceilings" / f"{digest}{'-quick' if quick else ''}.json"


def read_cache(key: str, quick: bool) -> Ceilings | None:
    """The cached ceilings for `key`, or None when absent, unreadable or for another key/format."""
    return _read_cache(key, quick)[0]


def cache_problem(key: str, quick: bool = False) -> str | None:
    """Why the cache file for `key` exists but cannot be used (corrupt, another format or machine), else None:
    such a file is measured again and overwritten, and the user should hear why."""
    return _read_cache(key, quick)[1]


def _read_cache(key: str, quick: bool) -> tuple[Ceilings | None, str | None]:
    path = cache_path(key, quick)
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"the ceilings cache '{path}' could not be read ({type(exc).__name__}: {exc})"
    if not isinstance(data, dict) or data.get("format_version") != CACHE_FORMAT_VERSION:
        found = data.get("format_version") if isinstance(data, dict) else None
        return None, (f"the ceilings cache '{path}' has format version {found!r}, this dlperf reads "
                      f"{CACHE_FORMAT_VERSION}")
    try:
        ceilings = Ceilings.from_dict(data)
    except CalibrationError as exc:
        return None, f"the ceilings cache '{path}' is damaged: {exc}"
    if ceilings.machine_key != key:
        return None, f"the ceilings cache '{path}' was measured for another machine ({ceilings.machine_key})"
    return ceilings, None


def write_cache(ceilings: Ceilings) -> Path:
    path = cache_path(ceilings.machine_key, ceilings.quick)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(ceilings.to_dict(), indent=2))
    except OSError as exc:
        raise CalibrationError(
            f"cannot write the ceilings cache '{path}': {exc}; set {CACHE_ENV_VAR} to a writable folder"
        ) from exc
    return path


def get_ceilings(
    device: str = "cpu",
    *,
    measure_if_missing: bool = True,
    force: bool = False,
    quick: bool = False,
    on_progress: ProgressFn | None = None,
    threads: int | None = None,
    remeasure: str | None = None,
) -> Ceilings:
    """This machine's ceilings on `device`, from the cache or measured now (and then cached).

    force=True measures even when cached. quick=True measures small sizes (a second or two, for tests)
    and may return a full cached measurement instead. With measure_if_missing=False a cache miss raises
    CalibrationError instead of measuring. `threads`: the ceilings of the torch thread count a measured run uses,
    at most the usable cores (default: torch's count as it is): a step on 1 thread held against 2-thread peaks would
    look half as efficient as it is, and threads beyond the cores cannot raise the peak (`dlperf calibrate
    --threads 16` on 2 cores measures the oversubscription, not the machine's peak). `remeasure`: why the cached ones
    are doubted (an operator ran above 110% of them): measured again, and the reason kept in `details["remeasured"]`.
    """
    from dlperf.measure.bench import torch_threads
    from dlperf.measure.env import usable_cores

    with torch_threads(None if threads is None else min(threads, usable_cores())):
        ceilings, _ = lookup_or_measure(device, measure_if_missing=measure_if_missing, force=force, quick=quick,
                                        on_progress=on_progress, remeasure=remeasure)
    return ceilings


def _keep_higher(ceilings: Ceilings, before: Ceilings) -> list[str]:
    """Where `before` (the cached ceilings a run doubted and measured again) has a higher ceiling than `ceilings` (the
    new measurement), keep it, with how it was measured and its warnings, in place; return what was kept ('the fp32
    GEMM', 'the memory bandwidth'). Other load only lowers a measurement: a profile whose int8 product ran at 2423% of
    a busy calibration's int8 peak measured them all again with other processes keeping 1.3 cores busy, and replaced
    a 29.4 GB/s bandwidth with 9.3 GB/s, overstating every memory-bound operator's % of it 3x."""
    kept: list[str] = []
    for dtype, flops in before.gemm_flops.items():
        if dtype in ceilings.gemm_flops and flops > ceilings.gemm_flops[dtype]:
            ceilings.gemm_flops[dtype] = flops
            _take_detail(ceilings, before, f"gemm_{dtype}")
            kept.append(dtype)
    if before.memory_bandwidth_bytes_s > ceilings.memory_bandwidth_bytes_s:
        ceilings.memory_bandwidth_bytes_s = before.memory_bandwidth_bytes_s
        _take_detail(ceilings, before, "copy")
        kept.append("bandwidth")
    if kept:
        # each warning goes with the measurement it is about; one about them all (a busy machine) stays the new one's
        ceilings.details["warnings"] = (
            [w for w in ceilings.warnings if warned_ceiling(w) not in kept]
            + [w for w in before.warnings if warned_ceiling(w) in kept])
        ceilings.details["kept"] = {name: before.measured_at for name in kept}
    return [f"the {name} GEMM" if name != "bandwidth" else "the memory bandwidth" for name in kept]


def _take_detail(ceilings: Ceilings, before: Ceilings, name: str) -> None:
    """How `before` measured the ceiling `name` replaces how `ceilings` did; none where it recorded none (a `None`
    there broke the table that reads `details.get("copy", {})`)."""
    if isinstance(before.details.get(name), dict):
        ceilings.details[name] = before.details[name]
    else:
        ceilings.details.pop(name, None)


def measuring_steps(device: str = "cpu", *, quick: bool = False) -> int:
    """How many `on_progress` calls `get_ceilings(device, quick=quick)` makes now: none where the cache has the
    ceilings, else one per GEMM dtype the device runs natively and one for the bandwidth (so a progress bar can
    count them: `dlperf profile` counted a fixed 6 stages, and a first calibration of fp32, bf16, fp16 and int8 ran
    it past 100%)."""
    device = normalize_device(device)
    key = machine_key(device)
    cached = read_cache(key, quick=False) or (read_cache(key, quick=True) if quick else None)
    if cached is not None and not (cached.provisional and quieter_now(cached)):  # a provisional one measured again
        return 0
    from dlperf.calibrate.kernels import supported_dtypes

    return len(supported_dtypes(device)[0]) + 1


def lookup_or_measure(
    device: str = "cpu",
    *,
    measure_if_missing: bool = True,
    force: bool = False,
    quick: bool = False,
    on_progress: ProgressFn | None = None,
    explicit: bool = False,
    remeasure: str | None = None,
) -> tuple[Ceilings, bool]:
    """Like get_ceilings, and also whether the answer came from the cache.

    A calibration measured on the way (`explicit=False`: profile, train) that has doubts (a busy machine, a noisy
    kernel: `doubts`) is cached as provisional, and a later lookup measures it again once the machine is quieter
    (`quieter_now`): a helper's profile on a busy machine cached fp32 86 GFLOP/s, and every later profile held
    operators to it ("addmm at 403% of its roofline ceiling") until `dlperf calibrate --force`. `dlperf calibrate`
    (`explicit=True`) caches what the user asked for as it is, with its warnings.
    """
    device = normalize_device(device)
    key = machine_key(device)
    remeasured = remeasure
    doubted_ones: Ceilings | None = None
    if not force:
        cached = read_cache(key, quick=False) or (read_cache(key, quick=True) if quick else None)
        if cached is not None:
            doubted = remeasure is not None or (cached.provisional and (remeasured := quieter_now(cached)) is not None)
            if not doubted or not measure_if_missing:  # a caller that never measures takes the doubted ones too
                return cached, True
            doubted_ones = cached
        elif not measure_if_missing:
            raise CalibrationError(
                f"no ceilings cached for this machine ({key}) in {cache_dir()}: run `dlperf calibrate"
                f"{'' if device == 'cpu' else ' --device cuda'}` first"
            )
    from dlperf.calibrate.kernels import measure_ceilings

    ceilings = measure_ceilings(device, key, quick=quick, on_progress=on_progress)
    kept = _keep_higher(ceilings, doubted_ones) if doubted_ones is not None and doubted_ones.quick == quick else []
    if kept and remeasured is not None:
        remeasured += (f"; {' and '.join(kept)} measured now came out lower than the cached one"
                       f"{'s' if len(kept) > 1 else ''}, which {'are' if len(kept) > 1 else 'is'} kept (a ceiling is "
                       "the best the machine did: other load only lowers it)")
    if not explicit and doubts(ceilings):
        ceilings.details["provisional"] = True
    if remeasured is not None:
        ceilings.details["remeasured"] = remeasured
    try:
        write_cache(ceilings)
    except CalibrationError as exc:  # the measurement is good; only the next command's shortcut is lost
        warn_not_cached("this machine's ceilings", cache_path(key, quick), exc.__cause__ or exc, "measures them")
    return ceilings, False
