"""One rank's side of a DDP launch (`python -m dlperf.train.ddp`), run in this process as a world of one: what it
writes for rank 0 to gather (torchrun and several ranks are left to test_ddp.py, which is slow)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.train.ddp import RankStats, main
from dlperf.train.loop import StepConfig

pytestmark = pytest.mark.integration

PARTLY_FROZEN = '''
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dlperf


def make_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 4))
    model[0].requires_grad_(False)  # a frozen first layer: DDP all-reduces the others' gradients only
    return model


def make_loader(batch_size, **kwargs):
    x = torch.randn(128, 16, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=batch_size, drop_last=True, **kwargs)


def loss_fn(out, target):
    Path(__file__).with_name("threads").write_text(str(torch.get_num_threads()))  # what the rank's steps run on
    return nn.functional.cross_entropy(out, target)


workload = dlperf.Workload(
    name="partly-frozen", make_model=make_model, make_inputs=lambda b: (torch.randn(b, 16),),
    train=dlperf.TrainSpec(make_loader=make_loader, loss_fn=loss_fn,
                           make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8),
)
'''


PADDED = '''
import torch
from torch import nn

import dlperf


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, ids, mask):
        kept = mask.unsqueeze(-1).to(torch.float32)
        return self.head((self.embed(ids) * kept).sum(1) / kept.sum(1).clamp(min=1.0))


def make_loader(batch_size, **kwargs):
    # row i of a batch has i % 16 + 1 real tokens of 16
    mask = (torch.arange(16) <= (torch.arange(batch_size) % 16).unsqueeze(1)).to(torch.int64)
    ids = torch.randint(1, 100, (batch_size, 16), generator=torch.Generator().manual_seed(0))
    return [((ids * mask, mask), ids[:, 0] % 4)] * 8


workload = dlperf.Workload(
    name="padded", make_model=lambda: Masked(),
    make_inputs=lambda b: (torch.randint(1, 100, (b, 16)), torch.ones(b, 16, dtype=torch.int64)),
    train=dlperf.TrainSpec(make_loader=make_loader, loss_fn=nn.functional.cross_entropy,
                           make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8,
                           count_tokens=COUNT),
)
'''


def _rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: StepConfig,
          workload: str = PARTLY_FROZEN) -> RankStats:
    """Run the rank's main on the partly frozen workload as rank 0 of a world of one, at 1 thread; what it wrote.

    Port 0: rank 0's store binds a port the kernel picks. A port found free and closed again could be taken before
    the store bound it (EADDRINUSE, seen in CI)."""
    spec = tmp_path / "frozen.py"
    spec.write_text(workload)
    out = tmp_path / "result.json"
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "0"}.items():
        monkeypatch.setenv(name, value)
    threads = torch.get_num_threads()
    try:
        assert main(["--workload", str(spec), "--config", json.dumps(config.to_dict()), "--out", str(out),
                     "--steps", "2", "--warmup", "0", "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)  # the rank sets its process's threads
    return RankStats.from_dict(json.loads(out.read_text()))


def test_a_rank_reports_the_effective_batch_and_the_gradients_ddp_reduces(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    stats = _rank(tmp_path, monkeypatch, StepConfig(batch_size=8, accumulation_steps=2, threads=2))
    assert (tmp_path / "threads").read_text() == "1"  # the launch's --threads, not the config's
    assert stats.world_size == 1
    assert stats.batch_size == 16  # samples per optimizer step: 2 micro-batches of 8
    assert stats.gradient_bytes == (512 * 512 + 512 + 512 * 4 + 4) * 4  # the trainable layers' fp32 gradients
    # over 1 MiB, which the size alone would put in two buckets; the one process's DDP has one
    assert stats.bucket_bytes == [stats.gradient_bytes] and stats.buckets == 1
    assert stats.per_rank_step_s == [stats.step_s] and stats.step_s > 0 and stats.nosync_step_s > 0
    assert stats.allreduce_s == 0.0  # no other rank to reduce with


def test_the_slowest_ranks_medians_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gathered medians get a second, slower rank's added (the collective itself is a world of one here)."""
    import torch.distributed as dist

    gather = dist.all_gather
    # step, no-sync step and all-reduce medians in seconds; no tokens; then its 2 DDP and 2 no-sync steps' ns
    slower = (10.0, 9.0, 0.5, float("nan"), 9e9, 11e9, 8e9, 10e9)

    def with_a_slower_rank(gathered: list[Any], mine: Any) -> None:
        gather(gathered, mine)
        gathered.append(torch.tensor(slower, dtype=torch.float64))

    monkeypatch.setattr(dist, "all_gather", with_a_slower_rank)
    stats = _rank(tmp_path, monkeypatch, StepConfig(batch_size=8))
    assert (stats.step_s, stats.nosync_step_s, stats.allreduce_s) == slower[:3]
    # the slowest rank's steps, which the noise warnings judge (2 samples: too few)
    assert stats.step_samples_ns == [9_000_000_000, 11_000_000_000]
    assert stats.nosync_samples_ns == [8_000_000_000, 10_000_000_000]
    assert stats.noise_notes[0] == "DDP step: only 2 samples: percentiles and spread are unreliable"
    assert stats.tokens_per_step is None and stats.tokens_per_s is None  # not token ids
    assert len(stats.per_rank_step_s) == 2 and stats.per_rank_step_s[1] == 10.0 and stats.per_rank_step_s[0] < 10.0


def test_the_ranks_collective_tensors_outlive_its_process_group(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A gloo worker thread destroys the last work it ran with the process group, while the destroying thread holds
    the GIL: a work holding the only reference to a Python tensor needs the GIL to free it, and a full run of the
    suite hung for good in ~ProcessGroupGloo (its worker in ~AsyncAllgatherWork, from all_gather_object). The
    gathered figures' tensors are held past it, and the group is gone when the rank returns."""
    import torch.distributed as dist

    from dlperf.train import ddp

    before = len(ddp._COLLECTIVE_TENSORS)
    stats = _rank(tmp_path, monkeypatch, StepConfig(batch_size=8, threads=1))
    held = ddp._COLLECTIVE_TENSORS[before:]
    assert len(held) == 2  # this rank's figures and the one gathered slot of a world of one
    assert held[1].tolist()[0] == pytest.approx(stats.step_s)  # the tensors the all-gather filled
    assert not dist.is_initialized()


@pytest.mark.parametrize(("count", "per_sample"), [("lambda inputs: int(inputs[1].sum())", 4.5), ("None", 16.0)])
def test_a_rank_of_token_ids_reports_the_tokens_of_its_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             count: str, per_sample: float) -> None:
    """--nproc gave samples/s only, where a single-process run and a tuning give tokens/s too: 8 rows of 1-8 real
    tokens (4.5 a sample) counted by count_tokens, or 16 positions each guessed from the shape."""
    stats = _rank(tmp_path, monkeypatch, StepConfig(batch_size=8, accumulation_steps=2),
                  PADDED.replace("COUNT", count))
    assert stats.tokens_per_step == pytest.approx(16 * per_sample)  # 2 micro-batches of 8
    assert stats.tokens_guessed == (count == "None")
    assert stats.tokens_per_s == pytest.approx(stats.samples_per_s * per_sample)
    assert RankStats.from_dict(stats.to_dict()) == stats
