"""The CUDA paths of `dlperf profile`: kernel events, device idle time, device memory. Skipped without CUDA."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "bottlenecks"


@dataclass
class Ceilings:
    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float


def test_cuda_inference_profile_has_kernels_idle_time_and_device_memory() -> None:
    from dlperf.profile.capture import CaptureConfig
    from dlperf.profile.session import ProfileConfig, profile_workload
    from dlperf.workload.loader import load_workload

    workload = load_workload(str(EXAMPLES / "compute_bound.py"))
    report = profile_workload(
        workload, ProfileConfig(capture=CaptureConfig(device="cuda", steps=2, unprofiled_min_duration_s=0.2)),
        ceilings=Ceilings({"fp32": 50e12}, 3e12),
    )
    assert report.trace.kernels, "no CUDA kernel events captured"
    assert report.analyses.launch.kernels_per_step is not None and report.analyses.launch.kernels_per_step > 0
    b = report.analyses.breakdown
    assert b.device_idle_s is not None and 0 <= b.device_idle_s <= b.step_s
    assert b.device_sync_s is not None and 0 <= b.device_sync_s <= b.step_s
    # runtime calls are not operators; the matrix products carry their kernels' time
    assert not [o.name for o in report.trace.ops if o.name.startswith("cuda")]
    assert any(o.device_us > 0 for o in report.trace.ops if o.name in ("aten::mm", "aten::addmm"))
    op = report.analyses.operators
    assert op.timed_by == "kernel time" and op.operators
    assert report.trace.cache_bytes and report.trace.cache_bytes > 2 << 20  # the device's L2, not a CPU core's
    assert all(o.self_s <= b.step_s for o in op.operators)
    m = report.analyses.memory
    assert m.device_peak_allocated_bytes and m.device_total_bytes and m.device_used_fraction is not None
    assert m.device_peak_allocated_bytes >= 4 * 512 * 512 * 4  # the weights at least


def test_cuda_training_profile_with_h2d_copies() -> None:
    from dlperf.profile.capture import CaptureConfig
    from dlperf.profile.session import ProfileConfig, profile_workload
    from dlperf.workload.loader import load_workload

    workload = load_workload("zoo:mlp")
    report = profile_workload(
        workload, ProfileConfig(capture=CaptureConfig(mode="train", device="cuda", steps=2,
                                                      unprofiled_min_duration_s=0.2)),
        ceilings=Ceilings({"fp32": 50e12}, 3e12),
    )
    assert any(k.kind == "memcpy_h2d" for k in report.trace.kernels)
    assert report.analyses.breakdown.backward_s > 0
    assert report.analyses.loader is not None


def test_an_fp16_training_step_is_profiled_with_its_loss_scaler() -> None:
    """`dlperf train --precision fp16` scales the loss (GradScaler); the profiled step did not, so its unscale and
    inf checks were missing from the profile and small gradients flushed to zero."""
    from dlperf.profile.capture import Step, StepOptions
    from dlperf.workload.loader import load_workload

    step = Step(load_workload("zoo:mlp"), "train", "cuda", StepOptions(precision="fp16"))
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                step()
    finally:
        step.close()
    names = {e.name for e in prof.events()}
    assert any("unscale" in n for n in names), sorted(names)
    assert step._scaler is not None and step._scaler.get_scale() > 0


def test_a_pinned_batch_is_copied_without_waiting_for_the_copy() -> None:
    """The training step's copy of a pinning loader's batch is queued (non_blocking), as `dlperf train` copies it:
    copied blocking, `profile --verify`'s pin_memory fix gained less than in training. A 256 MiB copy is still
    running on the stream when the call returns; a plain (pageable) tensor's copy has finished."""
    from dlperf.measure.bench import to_device

    pinned = torch.empty(64 * 2**20, dtype=torch.float32).pin_memory()
    torch.cuda.synchronize()
    (moved,) = to_device((pinned,), "cuda", non_blocking=True)
    assert moved.is_cuda and not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    (blocking,) = to_device((torch.empty(64 * 2**20, dtype=torch.float32),), "cuda", non_blocking=True)
    assert blocking.is_cuda and torch.cuda.current_stream().query()  # not pinned: a synchronous copy, as before
