from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from dlperf._device import cuda_bf16_native
from dlperf.measure.ab import ABConfig
from dlperf.train.knobs import TuneContext
from dlperf.train.knobs.batch import LargestBatch, cuda_fits, search_largest_batch
from dlperf.train.loop import PhaseTimer, StepConfig, TrainLoop, base_config
from dlperf.train.parity import ParityConfig
from dlperf.train.step import measure_training
from dlperf.train.tune import FAILED, TuneConfig, tune
from dlperf.workload.base import TrainSpec, Workload
from dlperf.workload.loader import load_workload

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def wide_mlp(hidden: int = 8192, features: int = 64) -> Workload:
    """An MLP whose loader holds two batches of whatever size is asked (zoo:mlp has only 2048 samples)."""
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    def make_loader(batch_size: int, **kwargs: Any) -> Any:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2 * batch_size, features, generator=g)
        y = x[:, :10].argmax(dim=1)
        return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(0), **kwargs)

    def make_model() -> nn.Module:
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                             nn.Linear(hidden, 10))

    return Workload(
        name="wide-mlp", make_model=make_model, make_inputs=lambda b: (torch.randn(b, features),),
        train=TrainSpec(make_loader=make_loader, loss_fn=nn.functional.cross_entropy,
                        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.05), batch_size=64),
        kind="mlp",
    )


def test_fp16_autocast_with_grad_scaler_trains() -> None:
    w = load_workload("zoo:mlp")
    loop = TrainLoop(w, base_config(w, device="cuda", precision="fp16"))
    assert loop.scaler is not None
    losses = [float(loop.step()) for _ in range(10)]
    assert all(math.isfinite(x) for x in losses)
    assert loop.scaler.get_scale() > 0


def test_pinned_memory_loader_and_cuda_phase_timing() -> None:
    w = load_workload("zoo:mlp")
    config = base_config(w, device="cuda", num_workers=1, pin_memory=True)
    result = measure_training(w, config, steps=5, warmup_steps=2)
    assert result.cuda_max_allocated_bytes is not None and result.cuda_max_allocated_bytes > 0
    assert all(len(v) == 5 for v in result.phases_ns.values())
    assert sum(result.phases_ns["forward"]) > 0 and sum(result.phases_ns["backward"]) > 0


def test_phase_timer_reads_cuda_events_after_the_step() -> None:
    loop = TrainLoop(load_workload("zoo:mlp"), StepConfig(batch_size=64, device="cuda"))
    timer = PhaseTimer("cuda")
    loop.step(timer)
    phases = timer.finish()
    assert phases["forward"] > 0 and phases["optimizer"] > 0


def test_oom_search_finds_a_batch_under_a_small_budget() -> None:
    w = wide_mlp()
    config = StepConfig(batch_size=8192, device="cuda")
    fits = cuda_fits(w, config, budget_bytes=1 * 2**30, margin=0.1)
    search = search_largest_batch(fits, wanted=8192, budget_bytes=1 * 2**30, margin=0.1)
    assert 0 < search.largest_fitting < 8192
    ok, peak = fits(search.largest_fitting)
    assert ok and peak * 1.1 <= 2**30


def test_largest_batch_knob_on_cuda_keeps_the_effective_batch() -> None:
    w = wide_mlp()
    ctx = TuneContext(workload=w, device="cuda", memory_budget_bytes=1 * 2**30, safety_margin=0.1)
    candidates = LargestBatch().candidates(StepConfig(batch_size=8192, device="cuda"), ctx)
    assert candidates
    change = candidates[0].change
    assert change["batch_size"] * change["accumulation_steps"] == 8192


def test_oom_search_survives_real_out_of_memory_errors() -> None:
    # cap this process's allocator at ~2 GiB so that large batches raise a real OutOfMemoryError
    total = torch.cuda.get_device_properties(0).total_memory
    w = wide_mlp()
    config = StepConfig(batch_size=65536, device="cuda")  # 2 GiB for each [65536, 8192] fp32 activation
    torch.cuda.set_per_process_memory_fraction(2 * 2**30 / total)
    try:
        fits = cuda_fits(w, config, budget_bytes=total, margin=0.1)
        assert fits(65536) == (False, 0)  # an OOM, not the budget (which is the whole device)
        search = search_largest_batch(fits, wanted=65536, budget_bytes=total, margin=0.1)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert 0 < search.largest_fitting < 65536
    assert any(footprint == 0 and not ok for _, footprint, ok in search.probes)
    assert all(ok for batch, _, ok in search.probes if batch <= search.largest_fitting)


def test_the_batch_probe_counts_its_own_memory_not_what_the_device_already_held() -> None:
    """The tuner keeps its best loop alive while the batch knob probes: the allocator's peak counted those weights
    and optimizer state as the probe's, so the largest batch found was too small."""
    total = torch.cuda.get_device_properties(0).total_memory
    fits = cuda_fits(wide_mlp(), StepConfig(batch_size=256, device="cuda"), budget_bytes=total, margin=0.1)
    _, alone = fits(256)
    held = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    _, beside = fits(256)
    del held
    assert alone > 0 and abs(beside - alone) < 64 * 2**20, (alone, beside)


def test_tuner_tries_pinned_memory_and_both_autocast_dtypes_on_cuda() -> None:
    w = wide_mlp(hidden=1024)
    quick = ABConfig(blocks=4, iters_per_block=2, warmup_iters=2)
    config = TuneConfig(knobs=("pin_memory", "precision"), parity=ParityConfig(steps=8), ab=quick, final_ab=quick,
                        measure_steps=4, count_flops=False)
    result = tune(w, base_config(w, device="cuda"), config)
    changes = [t.change for t in result.trials]
    assert {"pin_memory": True} in changes and {"precision": "fp16"} in changes
    if cuda_bf16_native():
        assert {"precision": "bf16"} in changes
    for trial in result.trials:
        assert trial.status != FAILED, (trial.knob, trial.reason)
        assert trial.parity is not None
    assert result.best_measurement.cuda_max_allocated_bytes is not None


def test_ddp_launch_uses_nccl_on_cuda() -> None:
    from dlperf.train.ddp import DdpConfig, run_ddp

    result = run_ddp("zoo:mlp", StepConfig(batch_size=64, device="cuda"),
                     DdpConfig(nproc=1, steps=4, warmup_steps=1, timeout_s=300))
    assert result.backend == "nccl"
    assert result.multi.world_size == 1 and result.multi.step_s > 0
    assert result.overlap is None  # nothing to all-reduce with one rank
