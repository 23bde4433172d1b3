"""A two-input model fed by the default collate: a dataset's ((x, y), t) arrives as [[X, Y], T], which `dlperf
train` unpacks; `dlperf profile --train` passed the list as one argument ("forward() missing 1 required positional
argument: 'y'"). Also: profile_workload takes a Path, as dlperf.bench does (it raised AttributeError)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dlperf.profile.capture import CaptureConfig, StepOptions
from dlperf.profile.session import ProfileConfig, profile_workload

pytestmark = pytest.mark.integration

WORKLOAD = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dlperf


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


class Pairs(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(64, 8, generator=g), torch.randn(64, 8, generator=g)
        self.t = torch.randint(0, 4, (64,), generator=g)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return (self.x[i], self.y[i]), self.t[i]


workload = dlperf.Workload(
    name="two-inputs", make_model=Net, make_inputs=lambda b: (torch.randn(b, 8), torch.randn(b, 8)),
    train=dlperf.TrainSpec(make_loader=lambda batch_size, **kw: DataLoader(Pairs(), batch_size=batch_size, **kw),
                           loss_fn=nn.functional.cross_entropy,
                           make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8))
'''


@dataclass
class _Ceilings:
    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float


def test_profile_train_unpacks_a_collated_list_of_inputs(tmp_path: Path) -> None:
    path = tmp_path / "two_inputs.py"
    path.write_text(WORKLOAD)
    capture = CaptureConfig(mode="train", steps=2, warmup_steps=1, unprofiled_min_duration_s=0.05,
                            options=StepOptions(threads=1))
    report = profile_workload(path, ProfileConfig(capture=capture), ceilings=_Ceilings({"fp32": 310e9}, 15e9))
    assert report.analyses.breakdown.step_s > 0
