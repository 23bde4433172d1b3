"""Peak memory during a measured region: host RSS, CUDA allocator stats, model bytes.

Host peak RSS comes from the kernel's high-water mark where it can be reset (Linux: `VmHWM` in
/proc/self/status, reset by writing 5 to /proc/self/clear_refs): exact, and nothing runs beside the measured
code. Elsewhere a background thread reads the process RSS (psutil) every `interval_s` (default 2 ms) during
the region, and the peak is max(sampled peak, RSS at start and end); a spike shorter than the interval can be
missed (benchmarks/harness_accuracy.py compares the two). The thread also took the GIL every 2 ms inside the
timed loop: zoo:mlp's batch-1 p99 read 47-63 us with it and 33-38 us with a 1 s interval.

Resetting the high-water mark also resets getrusage's ru_maxrss; `lifetime_peak_rss_bytes()` is the process's
peak over its whole life in spite of that.

Helper processes (DataLoader workers) are measured by their USS, the memory private to each (`WorkerMemorySampler`):
a forked worker's RSS counts the pages it still shares with the main process (a slow_loader.py worker read 171 MiB
RSS, 61 MiB PSS and 11 MiB USS), so summed RSS would count the main process's memory again for each worker.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psutil

HWM_STATUS = "/proc/self/status"
HWM_RESET = "/proc/self/clear_refs"
_peak_before_resets = 0
"""The highest high-water mark read just before a reset (a reset loses it from ru_maxrss)."""
_active: list[PeakRssSampler] = []
"""Samplers whose region is open, outermost first: an inner one's reset must not lose an outer one's peak."""


def _high_water_mark() -> int | None:
    """The kernel's peak RSS of this process since it started or was last reset (bytes), None where not exposed."""
    try:
        with open(HWM_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_high_water_mark() -> bool:
    """Reset the kernel's peak RSS to the current RSS; False where that cannot be done (not Linux, not allowed)."""
    global _peak_before_resets
    before = _high_water_mark()
    if before is None:
        return False
    try:
        with open(HWM_RESET, "w") as f:
            f.write("5")
    except OSError:
        return False
    _peak_before_resets = max(_peak_before_resets, before)
    for outer in _active:  # their regions saw this peak; the mark restarts from here
        outer.peak_rss_bytes = max(outer.peak_rss_bytes, before)
    return True


def lifetime_peak_rss_bytes() -> int:
    """The process's peak RSS over its whole life: getrusage's ru_maxrss, and what high-water-mark resets took
    from it."""
    import resource  # not on Windows, where nothing resets the mark: the sampling thread measures

    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    maxrss = int(value if sys.platform == "darwin" else value * 1024)  # Linux reports KiB, macOS bytes
    return max(maxrss, _peak_before_resets)


def peak_rss_since_start_bytes() -> int:
    """This process's peak RSS since its program started: the kernel's high-water mark where it is exposed (Linux),
    for a process in which nothing reset it. getrusage's ru_maxrss does not start afresh at exec: a fresh interpreter
    spawned (fork + exec) from a 900 MiB process read 993 MiB with 193 MiB resident. Elsewhere ru_maxrss."""
    mark = _high_water_mark()
    return mark if mark is not None else lifetime_peak_rss_bytes()


def current_rss_bytes() -> int:
    """This process's resident set size now."""
    return int(psutil.Process().memory_info().rss)


class PeakRssSampler:
    """Context manager: `peak_rss_bytes` of this process while the block ran (`start_rss_bytes` at its start);
    `sampled` says whether a thread sampled it (no resettable high-water mark here)."""

    def __init__(self, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        self.peak_rss_bytes = 0
        self.start_rss_bytes = 0
        self.sampled = False
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            rss = self._rss()
            if rss > self.peak_rss_bytes:
                self.peak_rss_bytes = rss

    def __enter__(self) -> PeakRssSampler:
        self.start_rss_bytes = self.peak_rss_bytes = self._rss()
        self.sampled = not _reset_high_water_mark()
        if self.sampled:
            self._thread = threading.Thread(target=self._run, name="dlperf-rss", daemon=True)
            self._thread.start()
        _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):
            _active.remove(self)
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        mark = None if self.sampled else _high_water_mark()
        self.peak_rss_bytes = max(self.peak_rss_bytes, self._rss(), mark or 0)


class WorkerMemorySampler:
    """Context manager: the peak, while the block ran, of the summed USS (memory private to each process: what it
    adds to the machine's use beside the main process) of the processes `pids()` names at each reading.

    `pids()` is read at the start, every `interval_s` (default 0.5 s) by a thread, and at the end, so workers that
    start later (a new epoch's) are seen. USS has no kernel high-water mark and a reading walks the process's page
    tables (/proc/PID/smaps_rollup: ~10 ms for a 170 MiB worker here), hence the long interval: a spike between two
    readings is missed. `peak_uss_bytes` is None when no process was seen or USS could not be read (not allowed,
    or a platform psutil does not give it for); `processes` is the most seen at one reading.
    """

    def __init__(self, pids: Callable[[], Iterable[int]], interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peak_uss_bytes: int | None = None
        self.processes = 0
        self._pids = pids
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> None:
        total, seen = 0, 0
        for pid in list(self._pids()):
            proc = self._procs.get(pid)
            try:
                if proc is None:
                    proc = self._procs[pid] = psutil.Process(pid)
                total += int(proc.memory_full_info().uss)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):  # a worker that ended between two readings
                continue
            except (psutil.AccessDenied, AttributeError):  # no USS here (AttributeError: a platform without it)
                return
            seen += 1
        if seen:
            self.processes = max(self.processes, seen)
            self.peak_uss_bytes = max(self.peak_uss_bytes or 0, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> WorkerMemorySampler:
        self._read()
        self._thread = threading.Thread(target=self._run, name="dlperf-worker-uss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._read()


@dataclass
class CudaMemory:
    max_allocated_bytes: int
    max_reserved_bytes: int


def cuda_reset_peak(device: Any = None, release_cached: bool = False) -> None:
    """Start the allocator's peaks afresh (they restart at what is allocated and reserved now). `release_cached`
    first returns cached blocks no tensor uses to the driver, so the reserved peak is the region's own, not what
    an earlier, larger region left cached; for a region warmed up before it is timed, as its first allocations
    are the driver's again."""
    import torch

    torch.cuda.synchronize(device)
    if release_cached:
        cuda_release_cached(device)
    torch.cuda.reset_peak_memory_stats(device)


def cuda_release_cached(device: Any = None) -> None:
    """Return `device`'s cached blocks that no tensor uses to the driver (`torch.cuda.empty_cache` acts on the
    current device, whatever device the caller means)."""
    import torch

    with torch.cuda.device(device):
        torch.cuda.empty_cache()


def cuda_peak(device: Any = None) -> CudaMemory:
    import torch

    torch.cuda.synchronize(device)
    return CudaMemory(
        max_allocated_bytes=int(torch.cuda.max_memory_allocated(device)),
        max_reserved_bytes=int(torch.cuda.max_memory_reserved(device)),
    )


def tensor_bytes(t: Any) -> int:
    """Bytes a tensor holds. A wrapper subclass (torchao's int8 weights) reports its logical dtype, fp32, while it
    stores int8 data and scales: its inner tensors are counted instead (as fp32, torchao's int8-dynamic weights
    read as large as the fp32 model's, size 1.00x)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, name)) for name in names)
    return int(t.numel() * t.element_size())


def parameter_bytes(model: Any) -> int:
    """Bytes held by a module's parameters and buffers (0 for a non-module callable), a wrapper subclass's by its
    inner tensors (`tensor_bytes`). Lazy layers' parameters hold nothing until the first call gives them a shape
    (`nn.LazyLinear`): they count 0 until then (their numel() raised ValueError)."""
    from torch.nn.parameter import is_lazy

    stated = getattr(model, "dlperf_size_bytes", None)  # an exported artifact's files (`artifact_workload`)
    if isinstance(stated, int):
        return stated
    total = 0
    for getter in ("parameters", "buffers"):
        fn = getattr(model, getter, None)
        if fn is None:
            continue
        for t in fn():
            if not is_lazy(t):
                total += tensor_bytes(t)
    modules = getattr(model, "modules", None)
    return total + (sum(packed_bytes(m) for m in modules()) if modules is not None else 0)


def packed_bytes(module: Any) -> int:
    """Bytes of the weights that torch's quantized modules keep packed, outside their parameters and buffers: a
    dynamically quantized nn.GRU/nn.LSTM (`get_weight`, `get_bias`) or nn.Linear (`_weight_bias`) counted 0, and
    gru_wl.py's dynamic_int8 candidate read 0.0025 MiB (its head alone) beside the fp32 model's 0.057 MiB."""
    if not type(module).__module__.startswith("torch.ao.nn.quantized"):
        return 0
    if callable(getattr(module, "get_weight", None)) and callable(getattr(module, "get_bias", None)):
        tensors = [*module.get_weight().values(), *module.get_bias().values()]
    elif callable(getattr(module, "_weight_bias", None)):
        tensors = [t for t in module._weight_bias() if t is not None]
    else:
        return 0
    return sum(int(t.numel() * t.element_size()) for t in tensors)
