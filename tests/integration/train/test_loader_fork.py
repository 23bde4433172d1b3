"""A DataLoader worker forked by dlperf does not finalize the parent's garbage: a gRPC object's finalizer run in a
worker spun there for good (a lock held by a parent's thread at the fork), and the loop waited for its first batch
forever (the A/B's tests hung a CI run 600 s)."""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from dlperf.profile.capture import Step, StepOptions
from dlperf.train.loop import StepConfig, TrainLoop

from ...unit.train._workloads import tiny

pytestmark = [pytest.mark.integration, pytest.mark.skipif(sys.platform != "linux", reason="forks its workers")]


class _Finalized:
    """Garbage (a cycle) whose finalizer notes each process it runs in, as a gRPC object's would run there."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.me = self

    def __del__(self) -> None:
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")


class _Collecting(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample runs a full collection in the worker, as a worker's allocations eventually do."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        gc.collect()
        return torch.zeros(16), torch.tensor(i % 4)


class _Wrapper:
    def __init__(self, loader: DataLoader[Any]) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        yield from self.loader


def _workload(wrapped: bool) -> Any:
    def make_loader(batch_size: int, **kwargs: Any) -> Any:
        loader = DataLoader(_Collecting(), batch_size=batch_size, timeout=60, **kwargs)
        return _Wrapper(loader) if wrapped else loader

    w = tiny()
    assert w.train is not None
    return dataclasses.replace(w, train=dataclasses.replace(w.train, make_loader=make_loader))


@pytest.mark.parametrize("runner", ["train", "train-wrapped", "profile"])
def test_the_workers_leave_the_parents_garbage_to_the_parent(runner: str, tmp_path: Path) -> None:
    log = tmp_path / "finalized"
    workload = _workload(wrapped=runner == "train-wrapped")
    if runner == "profile":
        step: Any = Step(workload, "train", "cpu", StepOptions(batch_size=8, loader_kwargs=(("num_workers", 2),)))
    else:
        step = TrainLoop(workload, StepConfig(batch_size=8, threads=1, num_workers=2)).step
    was_enabled = gc.isenabled()
    gc.disable()  # the garbage stays until a collection: the workers' first, had they inherited it
    try:
        _Finalized(log)
        step()
        step()
    finally:
        closing = step.__self__ if runner != "profile" else step
        closing.close()
        if was_enabled:
            gc.enable()
    gc.collect()
    finalized_in = log.read_text().split() if log.exists() else []
    assert finalized_in == [str(os.getpid())]  # here, once: in no worker
