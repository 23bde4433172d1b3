"""Environment capture: the fields a result is compared on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlperf.measure.env import Environment, capture_environment, environment_differences

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def env() -> Environment:
    return capture_environment()


def test_versions_and_threads(env: Environment) -> None:
    import platform

    import torch

    import dlperf

    assert env.torch_version == torch.__version__
    assert env.python_version == platform.python_version()
    assert env.dlperf_version == dlperf.__version__
    assert env.torch_threads == torch.get_num_threads()
    assert env.torch_interop_threads == torch.get_num_interop_threads()


def test_hardware_fields(env: Environment) -> None:
    import torch

    assert env.logical_cores == (os.cpu_count() or 1)
    assert env.cpu_model
    assert env.total_memory_bytes > 2**28
    assert env.machine
    assert set(env.cpu_flags) <= {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                  "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"}
    assert (env.gpu_count > 0) == torch.cuda.is_available()
    assert env.packages.get("numpy")


def test_round_trip_ignores_unknown_keys(env: Environment) -> None:
    data = env.to_dict() | {"added_in_a_later_version": 1}
    back = Environment.from_dict(data)
    assert back == env
    assert back.hardware_key == f"{env.cpu_model}|{env.logical_cores}|{env.gpu_name or '-'}"


def test_environment_differences(env: Environment) -> None:
    a = env.to_dict()
    b = a | {"torch_version": "9.9", "torch_threads": 64}
    diffs = environment_differences(a, b)
    assert diffs == [f"torch_version: {a['torch_version']} vs 9.9", f"torch_threads: {a['torch_threads']} vs 64"]
    assert environment_differences(a, dict(a)) == []


def test_gpu_index_of_a_device_string() -> None:
    from dlperf.measure.env import gpu_index

    assert gpu_index("cuda:3") == 3
    assert gpu_index("cuda:0") == 0


def test_governor_load_affinity_and_thread_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.measure import env as env_module

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(env_module, "cpu_governor", lambda: "powersave")
    monkeypatch.setattr(os, "getloadavg", lambda: (3.456, 2.0, 1.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    captured = capture_environment()
    assert captured.cpu_governor == "powersave"
    assert captured.load_average == [3.46, 2.0, 1.0]
    assert captured.usable_cores == 1  # pinned to one CPU of the machine's logical_cores
    assert captured.thread_env == {"OMP_NUM_THREADS": "1"}
    assert Environment.from_dict(captured.to_dict()) == captured


def test_governor_affinity_and_thread_variables_are_differences_where_both_records_have_them(
        env: Environment) -> None:
    a = env.to_dict() | {"cpu_governor": "performance", "usable_cores": 2, "thread_env": {}}
    b = a | {"cpu_governor": "powersave", "usable_cores": 1, "thread_env": {"OMP_NUM_THREADS": "1"}}
    assert environment_differences(a, b) == ["usable_cores: 2 vs 1", "cpu_governor: performance vs powersave",
                                             "thread_env: none set vs OMP_NUM_THREADS=1"]
    older = {k: v for k, v in a.items() if k not in ("cpu_governor", "usable_cores", "thread_env")}
    assert environment_differences(older, b) == []  # a record from before they were captured
    assert environment_differences(a, a | {"load_average": [9.0, 9.0, 9.0]}) == []  # load is no setting


def test_cpu_governor_is_none_where_cpufreq_is_not_exposed(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from dlperf.measure.env import cpu_governor

    real_open = builtins.open

    def fake_open(path: str, *args: object, **kwargs: object) -> object:
        if "scaling_governor" in str(path):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", fake_open)
    assert cpu_governor() is None


def test_threads_records_the_count_the_run_sets_not_torchs_current_one() -> None:
    import torch

    assert capture_environment(threads=7).torch_threads == 7
    assert capture_environment().torch_threads == torch.get_num_threads()


class _Captured(Exception):
    pass


@pytest.mark.parametrize("argv", [
    ["profile", "zoo:mlp", "--threads", "1"],
    ["train", "zoo:mlp", "--threads", "1", "--no-mfu"],
    ["calibrate", "--threads", "1", "--quick"],
])
def test_commands_record_their_threads_option(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: object) -> None:
    # each took the environment before setting --threads, and recorded torch's default thread count
    from dlperf.cli.main import main
    from dlperf.measure import env as env_module

    def capture(device: str | None = None, threads: int | None = None) -> Environment:
        raise _Captured(threads)

    monkeypatch.setattr(env_module, "capture_environment", capture)
    with pytest.raises(_Captured) as caught:
        main([*argv, "--store", f"sqlite:///{tmp_path}/runs.db"])
    assert caught.value.args == (1,)


def test_cpu_flags_are_a_difference_and_part_of_the_calibration_key(env: Environment) -> None:
    """One VM model name, two generations: 'AMD EPYC' with AVX2 only, then with AVX-512 VNNI (seen here)."""
    from dlperf.calibrate.ceilings import machine_key
    from dlperf.measure.env import cpu_flags

    avx2 = env.to_dict() | {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"]}
    vnni = avx2 | {"cpu_flags": ["avx2", "avx512_vnni", "fma"]}
    assert environment_differences(avx2, vnni) == ["cpu_flags: - only in the first, avx512_vnni only in the second"]
    assert environment_differences(avx2, avx2 | {"cpu_flags": ["fma", "avx2"]}) == []
    assert environment_differences(avx2, {k: v for k, v in avx2.items() if k != "cpu_flags"}) == []
    assert f"|isa={','.join(cpu_flags()) or '-'}|" in machine_key("cpu")


def test_bench_reads_the_utilization_of_the_device_it_names() -> None:
    from dlperf.measure.bench import _gpu_index

    assert _gpu_index("cpu") is None
    assert _gpu_index("cuda:2") == 2  # a named index needs no CUDA to read


def test_gpu_gauges_list_the_gpus_cuda_visible_devices_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.measure.system import visible_nvml_indices

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_nvml_indices(3) == [(0, 0), (1, 1), (2, 2)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    import torch

    if torch.version.cuda is None:  # this CPU build: NVML's numbering, whatever the variable says
        assert visible_nvml_indices(3) == [(0, 0), (1, 1), (2, 2)]


def test_gpu_gauges_find_each_gpu_by_its_uuid_once_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA numbers GPUs fastest first, NVML by PCI bus: without CUDA_VISIBLE_DEVICES the numbering was taken to be
    the same, so on a mixed machine serve's gauge `gpu="0"` read the GPU NVML lists first, not cuda:0."""
    import sys
    import types

    import torch

    from dlperf.measure.system import visible_nvml_indices

    uuids = ["GPU-bbbb", "GPU-aaaa"]  # NVML's order: the slower GPU on the first PCI bus
    nvml = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2,
                                 nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: uuids[h])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cuda_uuids = ["aaaa", "bbbb"]  # CUDA's order: the faster GPU first (torch writes the UUID without 'GPU-')
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(uuid=cuda_uuids[i]))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert visible_nvml_indices(2) == [(0, 0), (1, 1)]  # a CPU run does not initialise CUDA to ask
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert visible_nvml_indices(2) == [(0, 1), (1, 0)]


def test_a_cpu_run_on_a_gpu_machine_names_the_gpu_without_initializing_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda.get_device_name initializes CUDA: a CPU run made a context on GPU 0 to record its name. It asks
    NVML for a CPU run, and torch for the GPU a CUDA run uses."""
    import sys
    import types

    import torch

    asked: list[int] = []
    names = [b"NVIDIA H100", b"NVIDIA L4", b"NVIDIA A10"]
    nvml = types.SimpleNamespace(nvmlInit=lambda: None, nvmlSystemGetDriverVersion=lambda: "580.1",
                                 nvmlDeviceGetCount=lambda: 3, nvmlDeviceGetHandleByIndex=lambda i: i,
                                 nvmlDeviceGetName=lambda h: names[h])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    def name_of(i: int | None = None) -> str:
        asked.append(int(i or 0))
        return "NVIDIA H200"

    monkeypatch.setattr(torch.cuda, "get_device_name", name_of)
    cpu = capture_environment("cpu")
    assert (cpu.gpu_name, cpu.gpu_count, cpu.gpu_driver) == ("NVIDIA H100", 2, "580.1") and asked == []
    assert capture_environment("cuda:1").gpu_name == "NVIDIA H200" and asked == [1]
    # the first GPU this process sees, not the machine's first (a Ray trial given GPU 2 recorded GPU 0's name)
    import dlperf.measure.system as system

    monkeypatch.setattr(system, "visible_nvml_indices", lambda count: [(0, 2)])
    assert capture_environment("cpu").gpu_name == "NVIDIA A10"
    monkeypatch.setattr(system, "visible_nvml_indices", lambda count: [])
    assert capture_environment("cpu").gpu_name is None


def test_the_git_commit_the_command_ran_in_is_recorded_and_shown(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A number is of some code: the record names the commit checked out where the command ran, and whether the
    checkout had uncommitted changes to tracked files; outside a repository it records none."""
    import subprocess

    from dlperf.report.terminal import environment_line

    monkeypatch.chdir(tmp_path)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path counts
    outside = capture_environment()
    assert (outside.git_commit, outside.git_dirty) == (None, None)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "model.py").write_text("WIDTH = 64\n")
    git("add", "model.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = git("rev-parse", "HEAD").strip()
    (tmp_path / "notes.txt").write_text("untracked files do not make the checkout dirty\n")
    clean = capture_environment()
    assert (clean.git_commit, clean.git_dirty) == (head, False)
    assert environment_line(clean.to_dict()).endswith(f" · git {head[:12]}")

    (tmp_path / "model.py").write_text("WIDTH = 128\n")
    dirty = capture_environment()
    assert (dirty.git_commit, dirty.git_dirty) == (head, True)
    assert environment_line(dirty.to_dict()).endswith(f" · git {head[:12]} with uncommitted changes")
    assert Environment.from_dict(dirty.to_dict()) == dirty


def test_recording_the_commit_leaves_the_checkouts_index_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain `git status` rewrites the index (under index.lock) when a tracked file's timestamps moved: a bench
    run beside the user's `git commit` could make it fail. The index's bytes and timestamp stay as they were."""
    import subprocess

    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "model.py").write_text("WIDTH = 64\n")
    subprocess.run(["git", "add", "model.py"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"], cwd=tmp_path,
                   check=True)
    index = tmp_path / ".git" / "index"
    stamp = index.stat().st_mtime_ns
    os.utime(tmp_path / "model.py", ns=(stamp + 5 * 10**9, stamp + 5 * 10**9))  # touched, content unchanged
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    assert capture_environment().git_dirty is False
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
