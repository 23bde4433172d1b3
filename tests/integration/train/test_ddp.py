from __future__ import annotations

import pytest

from dlperf.train.ddp import DdpConfig, run_ddp
from dlperf.train.loop import StepConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_gloo_processes_report_scaling_communication_and_buckets() -> None:
    config = StepConfig(batch_size=32)
    result = run_ddp("zoo:mlp", config, DdpConfig(nproc=2, steps=4, warmup_steps=1, threads_per_process=1,
                                                  timeout_s=300))
    assert result.single.world_size == 1 and result.multi.world_size == 2
    assert result.backend == "gloo"
    assert len(result.multi.per_rank_step_s) == 2
    assert result.multi.step_s == max(result.multi.per_rank_step_s)
    assert result.scaling_efficiency == pytest.approx(
        (2 * 32 / result.multi.step_s) / (2 * 32 / result.single.step_s))
    # zoo:mlp: (64*256 + 256 + 256*256 + 256 + 256*10 + 10) fp32 gradients, one 25 MiB bucket
    assert result.multi.gradient_bytes == (64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10) * 4
    assert result.multi.buckets == 1
    assert result.multi.allreduce_s > 0
    assert 0.0 <= result.comm_share < 1.0
    assert any("one bucket" in f for f in result.findings)
