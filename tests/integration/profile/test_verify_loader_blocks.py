"""--verify of any fix in a training step whose own loader has workers: the A/B's blocks are long enough that the
batches the workers fetch ahead while the other side runs are a small part of a block, as for a loader fix."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from dlperf.profile import diagnose as dg
from dlperf.profile.capture import CaptureConfig, StepOptions
from dlperf.profile.fixes import threads_fix
from dlperf.profile.trace import TRAIN
from dlperf.profile.verify import BUDGET_S, PREFETCH_BLOCKS, verify
from dlperf.workload.base import TrainSpec, Workload
from tests.unit.profile.builders import trace

pytestmark = pytest.mark.integration


class _SlowItems:
    """8 features, a 1 ms 'decode' per item (a sleep: the worker process does it without holding a core)."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> Any:
        import torch

        time.sleep(0.001)
        return torch.full((8,), float(i % 7)), i % 2


def _workload() -> Workload:
    import torch
    from torch.utils.data import DataLoader

    def make_loader(batch_size: int, **kwargs: Any) -> Any:
        # the workload's own loader already has a worker (what the fix under test does not change)
        return DataLoader(_SlowItems(), batch_size=batch_size, drop_last=True,  # type: ignore[arg-type]
                          **{"num_workers": 1, "persistent_workers": True, **kwargs})

    return Workload(name="one-worker", make_model=lambda: torch.nn.Linear(8, 2),
                    make_inputs=lambda b: (torch.ones(b, 8),),
                    train=TrainSpec(make_loader=make_loader, loss_fn=torch.nn.functional.cross_entropy,
                                    make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=4))


def test_a_threads_fix_behind_a_worker_fed_loader_gets_prefetch_sized_blocks() -> None:
    """A step of 0.2 s made blocks of 1 step: the side that had just run found its worker's queue empty, the other a
    full one, and the block ratios alternated 2x and 130x (a 1-thread fix read 0.06x, 'slower')."""
    config = CaptureConfig(mode=TRAIN, steps=1, options=StepOptions(threads=1))
    profiled = dataclasses.replace(trace([], mode=TRAIN, unprofiled_s=0.2), batch_size=4)
    finding = dg.Finding(category=dg.HOST_THREADS, title="t", evidence=["e"], fix="f", share=0.5, confidence="high",
                         estimated_speedup=1.2, fixes=[threads_fix(1)])
    [result] = verify(_workload(), config, profiled, dg.Diagnosis([finding], "v"), max_fixes=1)
    assert result.error is None, result.error
    assert result.ab is not None
    blocks = len(result.ab["block_ratios"])
    depth = 1 * 2  # one worker, prefetch_factor 2
    iters = PREFETCH_BLOCKS * depth
    assert blocks == max(4, min(12, round(BUDGET_S / (2 * iters * 0.2))))
    assert result.ab["a"]["n"] == blocks * iters == result.ab["b"]["n"]
    # no untimed wait between a training A/B's blocks: it would let the loader's worker fill its queue for the next
    assert "settle" not in result.ab
