"""DDP's gradient buckets as a user's DistributedDataParallel(model) has them: a 1 MiB first bucket, then up to 25 MiB.

dlperf passed bucket_cap_mb=25.0 explicitly, which makes torch's first bucket 25 MiB too, and read the bucket count
from DDP's initial assignment rather than the buckets it rebuilds after its first step: a model with 4 MiB of
gradients was measured and reported with one bucket ('all 4.01 MiB of gradients fit one bucket: ... nothing
overlaps'), where the user's DDP reduces it in two (1.05 + 3.15 MB) and can start on the first during backward.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.train.ddp import DdpConfig, run_ddp
from dlperf.train.loop import StepConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WIDE = '''
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dlperf


def make_loader(batch_size: int, **kwargs: Any) -> Any:
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=batch_size, drop_last=True, **kwargs)


workload = dlperf.Workload(
    name="wide",
    make_model=lambda: nn.Sequential(*(nn.Linear(512, 512) for _ in range(4)), nn.Linear(512, 2)),
    make_inputs=lambda b: (torch.randn(b, 512),),
    train=dlperf.TrainSpec(make_loader=make_loader, loss_fn=nn.functional.cross_entropy,
                           make_optimizer=lambda p: torch.optim.SGD(p, lr=0.01), batch_size=8),
)
'''


def test_a_model_over_one_mib_of_gradients_has_ddps_default_buckets(tmp_path: Path) -> None:
    spec = tmp_path / "wide.py"
    spec.write_text(WIDE)
    result = run_ddp(str(spec), StepConfig(batch_size=8), DdpConfig(nproc=2, steps=3, warmup_steps=1,
                                                                   threads_per_process=1, timeout_s=300))
    gradient_bytes = (4 * (512 * 512 + 512) + 512 * 2 + 2) * 4
    assert result.multi.gradient_bytes == gradient_bytes
    assert result.multi.buckets == 2
    first, rest = result.multi.bucket_bytes
    assert first + rest == gradient_bytes
    assert first < 1.1 * 2**20 < rest  # the last layers' gradients, ready first, in the small first bucket
    assert not any("fit one bucket" in f for f in result.findings)
    assert result.to_dict()["bucket_bytes"] == [first, rest]
