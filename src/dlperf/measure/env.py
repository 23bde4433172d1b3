"""The environment a result was taken in: versions, CPU model and flags, cores, threads, GPU, OS, allocator,
CPU governor, load and the git commit of the code it ran."""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf.errors import ConfigError

CPU_FLAGS_OF_INTEREST = (
    "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile",
    "amx_bf16", "amx_int8",
)


@dataclass
class Environment:
    dlperf_version: str
    python_version: str
    torch_version: str
    os: str
    machine: str
    cpu_model: str
    cpu_flags: list[str]
    physical_cores: int | None
    logical_cores: int
    torch_threads: int
    torch_interop_threads: int
    total_memory_bytes: int
    gpu_name: str | None = None
    gpu_driver: str | None = None
    cuda_version: str | None = None
    gpu_count: int = 0
    packages: dict[str, str] = field(default_factory=dict)
    allocator: str | None = None
    """The heap allocator the process ran with: glibc, jemalloc or tcmalloc (`measure.allocator`); None in
    records from before it was recorded."""
    usable_cores: int | None = None
    """CPUs this process may run on (its affinity: `taskset`, a container's cpuset); fewer than
    `logical_cores` when it was pinned. None in older records."""
    cpu_governor: str | None = None
    """cpufreq's scaling governor of CPU 0 ('performance', 'powersave', ...); None where the OS does not expose
    it (most VMs) or in older records."""
    load_average: list[float] | None = None
    """The 1, 5 and 15-minute load averages when the environment was captured, before the measurement: the
    machine's load from before the run (bench's points carry the load during each measurement)."""
    thread_env: dict[str, str] = field(default_factory=dict)
    """The environment variables that set thread pools (OMP_NUM_THREADS, MKL_NUM_THREADS, ...), where set."""
    git_commit: str | None = None
    """The commit checked out in the git repository holding the directory the command ran from (`git rev-parse
    HEAD`): the code a number was taken with. None outside a repository, without git, or in older records."""
    git_dirty: bool | None = None
    """Whether that checkout had changes to tracked files not committed (`git status --porcelain
    --untracked-files=no`), so the commit alone is not the code that ran; None where `git_commit` is."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def hardware_key(self) -> str:
        """What must match for two timings to be comparable (same CPU, cores, GPU)."""
        return f"{self.cpu_model}|{self.logical_cores}|{self.gpu_name or '-'}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [f for f in CPU_FLAGS_OF_INTEREST if f in flags]
    except OSError:
        pass
    return []


THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "OMP_PROC_BIND",
                   "GOMP_CPU_AFFINITY", "KMP_BLOCKTIME")
"""Environment variables that change how many threads torch's CPU kernels run and where."""


def cpu_governor() -> str | None:
    """cpufreq's scaling governor of CPU 0, or None where it is not exposed (VMs, containers, macOS)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") as f:
            return f.read().strip() or None
    except OSError:
        return None


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask), or the machine's count where the OS has no mask."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def per_cpu_limit(per_cpu: int, at_least: int) -> int:
    """`per_cpu` per usable CPU, and at least `at_least`: the most of a thing that costs a thread or a process
    each (threads, instances, workers, ranks) a command accepts on this machine."""
    return max(at_least, per_cpu * usable_cores())


def check_per_cpu(value: int, name: str, per_cpu: int, at_least: int, why: str, hint: str = "") -> None:
    """ConfigError when `value` is above `per_cpu_limit(per_cpu, at_least)`; `why` says what each one starts."""
    limit = per_cpu_limit(per_cpu, at_least)
    if value > limit:
        raise ConfigError(f"{name} {value} is more than {limit}, the most accepted on this machine ({per_cpu} per "
                          f"usable CPU, at least {at_least}): {why}{hint}")


THREADS_PER_CPU = 8
"""The most threads a command starts per usable CPU (torch intra-op threads, serve's model instances), at least
MIN_THREAD_LIMIT in all."""
MIN_THREAD_LIMIT = 64
PROCESSES_PER_CPU = 4
"""The most processes a command starts per usable CPU (DDP ranks on CPU, DataLoader workers), at least
MIN_PROCESS_LIMIT in all: `--nproc 1000` would start a thousand processes, each importing torch."""
MIN_PROCESS_LIMIT = 8


def thread_limit() -> int:
    """The most torch intra-op threads `check_threads` accepts on this machine."""
    return per_cpu_limit(THREADS_PER_CPU, MIN_THREAD_LIMIT)


def check_threads(threads: int | None, name: str = "threads", hint: str = "") -> None:
    """ConfigError unless `threads` (None: torch's default) is a thread count torch can start here: at least 1,
    and at most `thread_limit()`. torch starts every thread asked for: `--threads 999999` started OpenMP threads
    until the machine's process table was full, and every process on it failed to fork. `hint` follows the
    message (e.g. how to leave the option out)."""
    if threads is None:
        return
    if threads < 1:
        raise ConfigError(f"{name} must be >= 1, got {threads}{hint}")
    check_per_cpu(threads, name, THREADS_PER_CPU, MIN_THREAD_LIMIT, "torch would start every one of them; an "
                  f"oversubscription experiment fits within {thread_limit()}", hint)


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def git_state(folder: str | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding `folder` (default: the working directory); (None, None) outside
    one, without git, or where git takes over 5 s (a huge checkout's status)."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            # --no-optional-locks: a plain `git status` refreshes and rewrites the checkout's index (taking its
            # index.lock) when a tracked file's timestamps moved, which fails a `git commit` run beside it
            done = subprocess.run(["git", "--no-optional-locks", *args], cwd=folder or os.getcwd(),
                                  capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "--verify", "HEAD")
    if head is None or not head.strip():
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return head.strip(), None if status is None else bool(status.strip())


def _version(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


def capture_environment(device: str | None = None, threads: int | None = None,
                        code_folder: str | None = None) -> Environment:
    """The environment of this process; `device` ('cuda:1', 'cuda', 'cpu') names the GPU the run used (default:
    torch's current CUDA device), so a result taken on the second GPU of a mixed machine carries its name.
    `threads`: the intra-op thread count the run sets (a command's --threads), recorded instead of torch's
    current one, as the environment is captured before the run sets it."""
    import psutil
    import torch

    from dlperf import __version__
    from dlperf.measure.allocator import active_allocator

    gpu_name = gpu_driver = cuda_version = None
    gpu_count = 0
    if torch.cuda.is_available():
        gpu_count = torch.cuda.device_count()
        cuda_version = torch.version.cuda
        nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            nvml = pynvml
            gpu_driver = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            gpu_driver = None
        if device is not None and device.startswith("cuda"):
            gpu_name = torch.cuda.get_device_name(gpu_index(device))
        elif nvml is not None:
            # a CPU run names the first GPU this process can see through NVML: torch's name initialized CUDA in
            # the process, a context on GPU 0 for a run that does not use it (and beside `train --nproc`'s rank 0);
            # NVML counts every GPU, so CUDA_VISIBLE_DEVICES maps torch's first to its index
            from dlperf.measure.system import visible_nvml_indices

            with contextlib.suppress(Exception):
                visible = visible_nvml_indices(int(nvml.nvmlDeviceGetCount()))
                if visible:
                    name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(visible[0][1]))
                    gpu_name = name.decode() if isinstance(name, bytes) else str(name)
    commit, dirty = git_state(code_folder)  # the checkout of the code measured where known, else the working one
    packages = {
        name: v
        for name in ("onnxruntime", "openvino", "nncf", "torchao", "numpy", "transformers")
        if (v := _version(name)) is not None
    }
    return Environment(
        dlperf_version=__version__,
        python_version=platform.python_version(),
        torch_version=torch.__version__,
        os=f"{platform.system()} {platform.release()}",
        machine=platform.machine(),
        cpu_model=cpu_model(),
        cpu_flags=cpu_flags(),
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=os.cpu_count() or 1,
        torch_threads=threads if threads is not None else torch.get_num_threads(),
        torch_interop_threads=torch.get_num_interop_threads(),
        total_memory_bytes=int(psutil.virtual_memory().total),
        gpu_name=gpu_name,
        gpu_driver=gpu_driver,
        cuda_version=cuda_version,
        gpu_count=gpu_count,
        packages=packages,
        allocator=active_allocator(),
        usable_cores=usable_cores(),
        cpu_governor=cpu_governor(),
        load_average=load_average(),
        thread_env={k: v for k in THREAD_ENV_VARS if (v := os.environ.get(k)) is not None},
        git_commit=commit,
        git_dirty=dirty,
    )


def gpu_index(device: str | None) -> int:
    """The CUDA device index `device` names ('cuda:1' -> 1); torch's current device for 'cuda', 'cpu' or None."""
    import torch

    if device and device.startswith("cuda"):
        index = torch.device(device).index
        if index is not None:
            return int(index)
    return int(torch.cuda.current_device())


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Human-readable differences that make two results not directly comparable. The allocator, usable cores,
    CPU governor, thread variables and the CPU flags that matter to kernels count only where both records have
    them (older ones do not)."""
    keys = ("torch_version", "python_version", "dlperf_version", "cpu_model", "logical_cores",
            "torch_threads", "gpu_name", "cuda_version", "os")
    diffs = [f"{k}: {a.get(k)} vs {b.get(k)}" for k in keys if a.get(k) != b.get(k)]
    for k in ("allocator", "usable_cores", "cpu_governor"):
        if a.get(k) and b.get(k) and a[k] != b[k]:
            diffs.append(f"{k}: {a[k]} vs {b[k]}")
    # A cloud VM's model name ('AMD EPYC') can hide another generation behind it: AVX2 only one day, AVX-512 with
    # VNNI and bf16 the next, which changes what int8 and bf16 kernels cost.
    flags_a, flags_b = a.get("cpu_flags"), b.get("cpu_flags")
    if isinstance(flags_a, list) and isinstance(flags_b, list) and set(flags_a) != set(flags_b):
        only_a, only_b = sorted(set(flags_a) - set(flags_b)), sorted(set(flags_b) - set(flags_a))
        diffs.append(f"cpu_flags: {' '.join(only_a) or '-'} only in the first, {' '.join(only_b) or '-'} only in "
                     "the second")
    if "thread_env" in a and "thread_env" in b and a["thread_env"] != b["thread_env"]:
        diffs.append(f"thread_env: {thread_env_text(a['thread_env'])} vs {thread_env_text(b['thread_env'])}")
    return diffs


def thread_env_text(variables: Mapping[str, str]) -> str:
    """'KMP_AFFINITY=compact OMP_NUM_THREADS=4', or 'none set'."""
    return " ".join(f"{k}={v}" for k, v in sorted(variables.items())) or "none set"
