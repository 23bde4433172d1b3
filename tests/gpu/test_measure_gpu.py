"""Measurement on CUDA: the event clock, allocator peaks, calibration and bench with fp16/bf16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dlperf._device import cuda_bf16_native
from dlperf.cli.main import main

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_event_clock_times_device_work() -> None:
    from dlperf.measure.clock import CudaEventClock, clock_for
    from dlperf.measure.timer import TimerConfig, time_callable

    clock = clock_for("cuda")
    assert isinstance(clock, CudaEventClock) and clock.name == "cuda_events"
    x = torch.randn(4096, 4096, device="cuda")
    m_small = time_callable(lambda: x[:256, :256] @ x[:256, :256], TimerConfig(warmup_iters=3, min_duration_s=0.05,
                                                                                min_iters=10), clock)
    m_big = time_callable(lambda: x @ x, TimerConfig(warmup_iters=3, min_duration_s=0.05, min_iters=10), clock)
    assert m_small.clock == "cuda_events"
    assert 0 < m_small.p50_s < m_big.p50_s
    # device time of the enqueued work, not the host time of enqueuing it: a 4096³ matmul (137 GFLOP)
    # cannot be faster than ~1 PFLOP/s
    assert m_big.p50_s > 2 * 4096**3 / 1e15


def test_cuda_event_clock_sees_a_sleep_kernel() -> None:
    from dlperf.measure.clock import CudaEventClock

    clock = CudaEventClock()
    token = clock.start()
    torch.cuda._sleep(50_000_000)  # tens of ms on any GPU clocked below 5 GHz
    elapsed_ns = clock.stop(token)
    assert elapsed_ns > 5_000_000


def test_synced_host_clock_counts_queued_gpu_work_the_plain_host_clock_misses() -> None:
    from dlperf.measure.clock import Clock, CpuClock, CudaEventClock, SyncedHostClock

    def time_sleep(clock: Clock) -> int:
        token = clock.start()
        torch.cuda._sleep(50_000_000)
        elapsed = clock.stop(token)
        torch.cuda.synchronize()
        return elapsed

    device_ns = time_sleep(CudaEventClock())
    synced_ns = time_sleep(SyncedHostClock(["cuda"]))
    queued_ns = time_sleep(CpuClock())  # returns once the kernel is queued
    assert synced_ns >= 0.9 * device_ns > 5_000_000
    assert queued_ns < 0.5 * device_ns


def test_ab_with_a_cuda_side_uses_the_synced_clock() -> None:
    """`dlperf ab ... device=cuda`: a CUDA call returns once its kernels are queued, so the A/B's clock syncs the
    GPU at both ends of each call (the clock itself is checked against a sleep kernel above)."""
    from dlperf.compare.ab import run_ab
    from dlperf.compare.settings import parse_settings

    run = run_ab("zoo:mlp", parse_settings("device=cpu"), parse_settings("device=cuda"), blocks=4, iters_per_block=3)
    assert run.result.a.clock == run.result.b.clock == "perf_counter_ns+cuda_sync"
    assert len(run.result.b.samples_ns) == 12 and min(run.result.b.samples_ns) > 0


def test_cuda_memory_peaks() -> None:
    from dlperf.measure.memory import cuda_peak, cuda_reset_peak

    cuda_reset_peak("cuda")
    before = cuda_peak("cuda").max_allocated_bytes
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    del block
    peak = cuda_peak("cuda")
    assert peak.max_allocated_bytes >= before + 256 * 2**20
    assert peak.max_reserved_bytes >= peak.max_allocated_bytes
    cuda_reset_peak("cuda")
    assert cuda_peak("cuda").max_allocated_bytes < peak.max_allocated_bytes


def test_calibrate_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.calibrate import get_ceilings

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    c = get_ceilings("cuda", quick=True)
    assert c.device == "cuda:0"
    assert torch.cuda.get_device_name(0) in c.machine_key
    assert c.gemm_flops["fp32"] > 1e11
    assert c.gemm_flops["fp16"] > 1e11
    assert c.memory_bandwidth_bytes_s > 1e10
    assert c.details["timer"] == "cuda_events"
    # a quick calibration is cached as quick: a full lookup does not take it, a quick one does
    assert get_ceilings("cuda", measure_if_missing=False, quick=True) == c


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_bench_on_cuda(precision: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if precision == "bf16" and not cuda_bf16_native():
        pytest.skip("bf16 not supported on this GPU")
    code = main(["bench", "zoo:mlp", "--device", "cuda", "--precision", precision, "--batch-sizes", "1,64",
                 "--min-duration", "50ms", "--min-iters", "5", "--warmup", "2", "--json",
                 "--store", str(tmp_path / "runs.db")])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["precision"] == precision and data["config"]["device"] == "cuda"
    assert data["environment"]["gpu_name"] == torch.cuda.get_device_name(0)
    for point in data["result"]["points"]:
        assert point["measurement"]["clock"] == "cuda_events"
        assert point["cuda_max_allocated_bytes"] > 0
        assert point["summary"]["p50_s"] > 0


def test_environment_names_the_gpu_the_run_used() -> None:
    from dlperf.measure.env import capture_environment

    last = torch.cuda.device_count() - 1
    assert capture_environment(f"cuda:{last}").gpu_name == torch.cuda.get_device_name(last)
    assert capture_environment("cuda").gpu_name == torch.cuda.get_device_name(torch.cuda.current_device())


def test_a_batch_after_a_larger_one_has_its_own_reserved_peak() -> None:
    # reset_peak_memory_stats restarts the reserved peak at what is reserved: batch 1 after batch 4096 read at
    # least the blocks 4096's activations left cached
    import dlperf

    model = torch.nn.Sequential(torch.nn.Linear(1024, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 1024))
    result = dlperf.bench(model, (torch.randn(1, 1024),), batch_sizes=(4096, 1), device="cuda", min_duration_s=0.0,
                          min_iters=3, warmup_iters=1)
    big, small = result.points
    assert big.cuda_max_reserved_bytes is not None and small.cuda_max_reserved_bytes is not None
    activations = 4096 * 8192 * 4  # 128 MiB: the hidden layer's output at batch 4096
    assert small.cuda_max_reserved_bytes < big.cuda_max_reserved_bytes - activations // 2


def test_bench_samples_the_gpu_the_model_runs_on() -> None:
    """Plain 'cuda' is torch's current device, which `torch.cuda.set_device` moves (the sampler read GPU 0 always)."""
    from dlperf.measure.bench import _gpu_index

    assert _gpu_index("cpu") is None
    assert _gpu_index("cuda") == torch.cuda.current_device()
    last = torch.cuda.device_count() - 1
    assert _gpu_index(f"cuda:{last}") == last
    with torch.cuda.device(last):
        assert _gpu_index("cuda") == last


def test_nvml_reads_the_gpu_cuda_runs_on_by_its_uuid() -> None:
    """NVML numbers GPUs by PCI bus, CUDA fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID: with CUDA initialised
    the GPU is found by its UUID, so each CUDA device's NVML index names the same GPU."""
    import pynvml

    from dlperf.measure.system import nvml_index

    torch.cuda.init()
    pynvml.nvmlInit()
    for cuda_index in range(torch.cuda.device_count()):
        found = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(nvml_index(cuda_index)))
        found = found.decode() if isinstance(found, bytes) else found
        assert found.removeprefix("GPU-") == str(torch.cuda.get_device_properties(cuda_index).uuid)


def test_a_full_cuda_calibration_times_gemms_large_enough_for_the_tensor_cores() -> None:
    """2048³ (the CPU size) left an H100's fp16 ceiling well below its peak: the MFU read high."""
    from dlperf.calibrate.kernels import FULL_GEMM_N, FULL_GEMM_N_CUDA, FULL_TIMER, measure_gemm

    large, how = measure_gemm("fp16", "cuda", FULL_GEMM_N_CUDA, FULL_TIMER)
    small, _ = measure_gemm("fp16", "cuda", FULL_GEMM_N, FULL_TIMER)
    assert how["n"] == FULL_GEMM_N_CUDA  # not lowered: a call takes well under a second on a GPU
    assert large > small, (large, small)
