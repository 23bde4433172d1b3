from __future__ import annotations

import math

import pytest
import torch

from dlperf.train.knobs import TuneContext
from dlperf.train.knobs.batch import LargestBatch, cuda_fits, search_largest_batch
from dlperf.train.loop import PhaseTimer, StepConfig, TrainLoop, base_config
from dlperf.train.step import measure_training
from dlperf.workload.loader import load_workload

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


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
    w = load_workload("zoo:mlp?hidden=8192")
    config = StepConfig(batch_size=8192, device="cuda")
    fits = cuda_fits(w, config, budget_bytes=1 * 2**30, margin=0.1)
    search = search_largest_batch(fits, wanted=8192, budget_bytes=1 * 2**30, margin=0.1)
    assert 0 < search.largest_fitting < 8192
    ok, peak = fits(search.largest_fitting)
    assert ok and peak * 1.1 <= 2**30


def test_largest_batch_knob_on_cuda_keeps_the_effective_batch() -> None:
    w = load_workload("zoo:mlp?hidden=8192")
    ctx = TuneContext(workload=w, device="cuda", memory_budget_bytes=1 * 2**30, safety_margin=0.1)
    candidates = LargestBatch().candidates(StepConfig(batch_size=8192, device="cuda"), ctx)
    assert candidates
    change = candidates[0].change
    assert change["batch_size"] * change["accumulation_steps"] == 8192
