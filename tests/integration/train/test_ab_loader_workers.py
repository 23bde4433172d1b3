"""The interleaved A/B of two training loops with loader workers: the idle side's workers are paused, so a side
neither trains on batches its workers banked while the other side was timed nor takes the other side's CPU."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from dlperf.measure.ab import ABConfig
from dlperf.train.loop import StepConfig, TrainLoop
from dlperf.train.tune import ab_loops, throughput_speedup

from ...unit.train._workloads import tiny

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sys.platform != "linux", reason="reads process states from /proc")]

DECODE_S = 0.002


class _SlowSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample costs DECODE_S of sleep: the loader, not the model, sets the pace, and 2 workers at most
    double it (nothing here needs CPU)."""

    def __init__(self) -> None:
        self.x = torch.randn(512, 16, generator=torch.Generator().manual_seed(0))
        self.y = self.x[:, :4].argmax(dim=1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(DECODE_S)
        return self.x[i], self.y[i]


def _slow_loader(batch_size: int, **kwargs: Any) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    if kwargs.get("num_workers"):
        kwargs["timeout"] = 60  # a worker that hangs fails the test in a minute (a CI run waited 600 s on one)
    return DataLoader(_SlowSamples(), batch_size=batch_size, shuffle=False, drop_last=True, **kwargs)


def _slow_workload() -> Any:
    w = tiny()
    assert w.train is not None
    return dataclasses.replace(w, train=dataclasses.replace(w.train, make_loader=_slow_loader))


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def test_a_loader_bound_candidate_with_a_deep_prefetch_is_not_credited_with_banked_batches() -> None:
    """2 workers with prefetch_factor 8 bank 16 batches while the baseline's block runs; each side's block is 8
    steps, so the candidate's steps found every batch ready: the A/B read 25x on examples/slow_loader.py, where
    measured alone each configuration gave 2.1x. The loader sleeps, so 2 workers can at most double it."""
    w = _slow_workload()
    base = StepConfig(batch_size=8, threads=1)
    cand = base.replace(num_workers=2, prefetch_factor=8)
    a, b = TrainLoop(w, base), TrainLoop(w, cand)
    try:
        ab, _ = ab_loops(a, b, ABConfig(blocks=4, iters_per_block=2, warmup_iters=1), steps_per_call=4)
    finally:
        a.close()
        b.close()
    speedup = throughput_speedup(ab, base, cand)
    assert speedup < 4.0, f"the A/B credited the candidate {speedup:.1f}x for batches loaded in the other's blocks"


def test_pausing_stops_the_workers_until_resumed_and_close_ends_paused_workers() -> None:
    loop = TrainLoop(tiny(), StepConfig(batch_size=32, threads=1, num_workers=2))
    try:
        loop.step()
        pids = [w.pid for w in loop._iter._workers]  # type: ignore[union-attr]
        assert len(pids) == 2
        loop.pause_loader()
        assert [_state(pid) for pid in pids] == ["T", "T"]
        loop.pause_loader()  # twice is once
        loop.resume_loader()
        assert "T" not in [_state(pid) for pid in pids]
        loop.step()  # the resumed workers load again
        loop.pause_loader()
    finally:
        started = time.perf_counter()
        loop.close()  # resumes them first: a stopped worker would not act on the shutdown
    assert time.perf_counter() - started < 4.0  # the shutdown's join waits 5 s for a worker that does not answer
    assert all(not Path(f"/proc/{pid}").exists() or _state(pid) == "Z" for pid in pids)


class _ToDevice:
    """A loader of the user's own: its __iter__ yields from the DataLoader it holds, moving each batch."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        for x, y in self.loader:
            yield x.to("cpu"), y.to("cpu")


def test_the_workers_of_a_dataloader_a_loader_wraps_are_found_paused_and_ended() -> None:
    """The loop's iterator is then the wrapper's generator, which has no `_workers`: `dlperf train` read none behind
    a wrapper with num_workers=2 (its memory line said the workers' memory could not be read) and the A/B's idle side
    went on loading."""
    w = tiny()
    assert w.train is not None
    make = w.train.make_loader
    w = dataclasses.replace(w, train=dataclasses.replace(
        w.train, make_loader=lambda batch_size, **kwargs: _ToDevice(make(batch_size, **kwargs))))
    loop = TrainLoop(w, StepConfig(batch_size=32, threads=1, num_workers=2))
    try:
        loop.step()
        pids = loop.worker_pids()
        assert len(pids) == 2
        loop.pause_loader()
        assert [_state(pid) for pid in pids] == ["T", "T"]
        loop.resume_loader()
        loop.step()
    finally:
        loop.close()
    assert all(not Path(f"/proc/{pid}").exists() or _state(pid) == "Z" for pid in pids)


def test_a_loop_without_workers_pauses_nothing() -> None:
    loop = TrainLoop(tiny(), StepConfig(batch_size=32, threads=1))
    try:
        loop.step()
        loop.pause_loader()
        loop.resume_loader()
        loop.step()
    finally:
        loop.close()


@pytest.mark.timeout(60)  # pausing the shared workers hung the A/B for good
def test_two_loops_sharing_one_loaders_persistent_workers_are_not_stopped_for_each_other() -> None:
    """A make_loader that hands out one cached DataLoader with persistent workers gives both sides of the A/B the same
    worker processes: pausing them for the idle side would stop the running side's loading for good."""
    from torch.utils.data import TensorDataset

    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))
    shared = DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=8, drop_last=True, num_workers=2,
                        persistent_workers=True, timeout=60)  # a batch stopped workers never send: an error
    # (a fresh clone's full run timed out here once: a worker had hung finalizing the pytest process's gRPC garbage,
    # which start_loader now keeps from the workers; tests/integration/train/test_loader_fork.py)
    w = tiny()
    assert w.train is not None
    w = dataclasses.replace(w, train=dataclasses.replace(w.train, make_loader=lambda batch_size, **kwargs: shared))
    a, b = TrainLoop(w, StepConfig(batch_size=8, threads=1)), TrainLoop(w, StepConfig(batch_size=8, threads=1))
    try:
        _, trained = ab_loops(a, b, ABConfig(blocks=4, iters_per_block=1, warmup_iters=1), steps_per_call=2)
    finally:
        a.close()
        b.close()
    assert trained == (4 * 2 * 8, 4 * 2 * 8)
