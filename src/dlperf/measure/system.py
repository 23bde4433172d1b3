"""Utilization while a measurement runs: process and machine CPU (psutil) and, where present, NVML GPU; waiting
for this process's other threads to go idle (`wait_until_threads_idle`)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil


@dataclass
class Utilization:
    process_cpu_percent: float = 0.0
    """Process CPU time over wall time, in percent of one core (200 = two cores busy)."""
    system_cpu_percent: float = 0.0
    """Machine-wide CPU busy share, in percent of all cores; high while the process is idle = contention."""
    gpu_util_percent: float | None = None
    gpu_memory_used_bytes: int | None = None
    run_queue_wait_cores: float | None = None
    """Time this process's threads spent runnable but waiting for a core, over wall time (1.0 = one thread waiting
    the whole time); None where Linux's per-thread schedstat is not readable. High when its threads are starved, near
    0 when it just did not ask for the CPU (a call that sleeps, waits on I/O or a GPU)."""
    samples: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class UtilizationSampler:
    """Context manager sampling CPU (and GPU through NVML if available) every `interval_s`."""

    def __init__(self, interval_s: float = 0.1, gpu_index: int | None = None) -> None:
        """`gpu_index`: torch's CUDA device index (mapped to NVML's through CUDA_VISIBLE_DEVICES)."""
        self.interval_s = interval_s
        self.result = Utilization()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu = _nvml_handle(gpu_index) if gpu_index is not None else None
        self._gpu_util: list[float] = []
        self._gpu_mem: list[int] = []

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.result.samples += 1
            if self._gpu is not None:
                try:
                    util, mem = _nvml_read(self._gpu)
                except Exception as exc:  # NVML's NotSupported on a MIG instance, a GPU lost: no GPU numbers
                    self.result.extra["gpu_util_error"] = f"{type(exc).__name__}: {exc}"
                    self._gpu = None
                    continue
                self._gpu_util.append(util)
                self._gpu_mem.append(mem)

    def __enter__(self) -> UtilizationSampler:
        import time

        # the process's CPU time at nanosecond resolution: psutil's cpu_times() counts 10 ms clock ticks, which over
        # a region of a few ms read as 482% on a 2-core machine
        self._cpu0 = time.process_time()
        self._wait0 = run_queue_wait_s()
        psutil.cpu_percent(None)
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="dlperf-util", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import time

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        wall = max(time.perf_counter() - self._t0, 1e-9)
        busy = time.process_time() - self._cpu0
        cores = psutil.cpu_count() or 1  # no process is busier than every core (a rounding of the clocks could say so)
        self.result.process_cpu_percent = min(100.0 * busy / wall, 100.0 * cores)
        self.result.system_cpu_percent = float(psutil.cpu_percent(None))
        wait = run_queue_wait_s()
        if wait is not None and self._wait0 is not None:  # a thread that ended meanwhile takes its wait along: >= 0
            self.result.run_queue_wait_cores = max(0.0, wait - self._wait0) / wall
        if self._gpu_util:
            self.result.gpu_util_percent = sum(self._gpu_util) / len(self._gpu_util)
            self.result.gpu_memory_used_bytes = max(self._gpu_mem)


def nvml_index(cuda_index: int) -> int:
    """NVML's index of torch's CUDA device `cuda_index`: NVML counts every GPU in the machine, CUDA only those in
    CUDA_VISIBLE_DEVICES (`CUDA_VISIBLE_DEVICES=2` makes NVML's GPU 2 torch's cuda:0). Where this process has
    initialised CUDA, the GPU's UUID decides: NVML numbers GPUs by PCI bus, CUDA by CUDA_DEVICE_ORDER, fastest first
    by default, so on a machine of mixed GPUs the numbers differ. Elsewhere (a CPU run, which must not initialise
    CUDA to name a GPU) the numbering is taken to be the same."""
    try:
        import torch

        if torch.cuda.is_initialized():
            found = _nvml_index_of_uuid(str(torch.cuda.get_device_properties(cuda_index).uuid))
            if found is not None:
                return found
        return int(torch.cuda._get_nvml_device_index(cuda_index))
    except Exception:  # a torch without the helper, or a UUID list NVML cannot resolve: the plain numbering
        return cuda_index


def _nvml_index_of_uuid(uuid: str) -> int | None:
    """The NVML index of the GPU whose UUID is `uuid` (torch writes it without NVML's 'GPU-'), None if none."""
    import pynvml

    pynvml.nvmlInit()
    for index in range(int(pynvml.nvmlDeviceGetCount())):
        found = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
        found = found.decode() if isinstance(found, bytes) else str(found)
        if found.removeprefix("GPU-") == uuid.removeprefix("GPU-"):
            return index
    return None


def visible_nvml_indices(nvml_count: int) -> list[tuple[int, int]]:
    """(CUDA index, NVML index) of each GPU this process's CUDA can use, in CUDA's order: NVML lists all
    `nvml_count` of the machine's, CUDA only those CUDA_VISIBLE_DEVICES names (none where it names none). Without
    the variable the numbering is taken to be the same, unless this process has initialised CUDA: then each GPU is
    found by its UUID (`nvml_index`), as CUDA orders GPUs fastest first and NVML by PCI bus (serve's gauges
    labelled the slower GPU of a mixed machine `gpu="0"`, while --device cuda:0 ran on the faster one)."""
    try:
        import torch

        if os.environ.get("CUDA_VISIBLE_DEVICES") is None and not torch.cuda.is_initialized():
            return [(i, i) for i in range(nvml_count)]
        if torch.version.cuda is None:  # a CPU build's count is 0 (an engine's CUDA provider may still use a GPU)
            return [(i, i) for i in range(nvml_count)]
        count = int(torch.cuda.device_count())
    except Exception:  # no torch here: NVML's own numbering
        return [(i, i) for i in range(nvml_count)]
    return [(i, nvml_index(i)) for i in range(count)]


def _nvml_handle(index: int) -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(nvml_index(index))
    except Exception:
        return None


def _nvml_read(handle: Any) -> tuple[float, int]:
    import pynvml

    util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return float(util.gpu), int(mem.used)


IDLE_SHARE = 0.05
"""This process's other threads together running less than this share of one core count as idle (a sampler's or a
pool's bookkeeping), for IDLE_POLLS polls in a row with none of them runnable."""
IDLE_POLLS = 3


@dataclass(frozen=True)
class ThreadsActivity:
    """This process's threads other than the calling one: their CPU time so far (ns) and how many are runnable now."""

    cpu_ns: int
    runnable: int


def other_threads_activity() -> ThreadsActivity | None:
    """From Linux's per-thread `schedstat` (CPU time in ns) and `stat` (state R: running or waiting for a core, so a
    spinning thread that another process took the core from still counts), else psutil's per-thread times (clock
    ticks on some systems; no states); None where neither is readable."""
    me = threading.get_native_id()
    if os.path.exists(f"/proc/self/task/{me}/schedstat"):
        cpu_ns = runnable = 0
        for tid in os.listdir("/proc/self/task"):
            if int(tid) == me:
                continue
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    cpu_ns += int(f.read().split()[0])
                with open(f"/proc/self/task/{tid}/stat") as f:
                    runnable += f.read().rpartition(")")[2].split()[0] == "R"
            except (OSError, ValueError, IndexError):  # a thread that ended since the listing
                continue
        return ThreadsActivity(cpu_ns, runnable)
    try:
        threads = psutil.Process().threads()
    except (psutil.Error, NotImplementedError):
        return None
    return ThreadsActivity(int(sum(t.user_time + t.system_time for t in threads if t.id != me) * 1e9), 0)


def wait_until_threads_idle(max_s: float, poll_s: float = 0.001) -> float:
    """Sleep until this process's other threads have stopped running (IDLE_POLLS polls in a row with none runnable
    and all of them together under IDLE_SHARE of a core), at most `max_s`; returns the seconds waited. An engine's
    thread pool spins for a while after its last call: ONNX Runtime's intra-op workers kept a core busy for 50 ms of
    CPU (100-200 ms of wall time on a loaded 2-core machine) after a block of calls, and torch's OpenMP workers for
    about 10 ms. Code timed in that window shares the cores with the spinning."""
    start = time.perf_counter()
    if max_s <= 0:
        return 0.0
    before = other_threads_activity()
    if before is None:
        return 0.0
    if not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"):
        poll_s = max(poll_s, 0.02)  # psutil's per-thread times may count 10 ms ticks
    quiet = 0
    last = start
    while quiet < IDLE_POLLS and time.perf_counter() - start < max_s:
        time.sleep(poll_s)
        now, seen = time.perf_counter(), other_threads_activity()
        if seen is None:
            break
        idle = seen.runnable == 0 and seen.cpu_ns - before.cpu_ns < IDLE_SHARE * (now - last) * 1e9
        quiet = quiet + 1 if idle else 0
        before, last = seen, now
    return time.perf_counter() - start


def run_queue_wait_s() -> float | None:
    """Seconds this process's threads (those alive now) have spent runnable and waiting for a core, from Linux's
    per-thread `schedstat`; None where it is not readable (not Linux)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    total_ns, read = 0, False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total_ns += int(f.read().split()[1])
            read = True
        except (OSError, ValueError, IndexError):  # a thread that ended since the listing
            continue
    return total_ns / 1e9 if read else None


def core_time_s(path: str = "/proc/thread-self/schedstat") -> float | None:
    """Seconds a task has run on a core or waited in the run queue for one, from Linux's `schedstat` (the calling
    thread's by default; `/proc/PID/schedstat` for a process's main thread); None where unreadable (not Linux).

    A task's wall time less this is time it was blocked (on disk, the network, a sleep, a lock): what separates a
    loader waiting on I/O from one that needs the CPU, however busy the machine (CPU time alone reads low for a
    CPU-bound task that other processes keep off the cores)."""
    try:
        with open(path) as f:
            on_cpu, waiting = f.read().split()[:2]
        return (int(on_cpu) + int(waiting)) / 1e9
    except (OSError, ValueError):
        return None


class ThreadCoreClock:
    """`core_time_s` of the thread that made it, read from a file kept open: each `read()` is one `pread` (about 2 µs
    here) where `core_time_s` opens the file anew (about 25 µs). For reads inside timed code: `profile --train` read
    it twice in every unprofiled step of a loader without workers, 37 µs a step counted as the step's time.

    `read()` gives None where the file is unreadable (not Linux). `close()` closes the file; a closed clock reads
    None."""

    def __init__(self, path: str = "/proc/thread-self/schedstat") -> None:
        self._fd: int | None
        try:
            self._fd = os.open(path, os.O_RDONLY)  # /proc/thread-self resolves now: this thread's task from here on
        except OSError:
            self._fd = None

    def read(self) -> float | None:
        if self._fd is None:
            return None
        try:
            on_cpu, waiting = os.pread(self._fd, 256, 0).split()[:2]
            return (int(on_cpu) + int(waiting)) / 1e9
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
