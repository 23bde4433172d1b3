"""The memory of a training job's DataLoader workers: reported beside the main process's, and counted in the batch
search's footprint as the batches their queue holds."""

from __future__ import annotations

import io
import os
import warnings
from typing import Any

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, Dataset

from dlperf.measure.env import usable_cores
from dlperf.report.train_view import measurement_view
from dlperf.train.knobs.batch import step_footprint_bytes
from dlperf.train.loop import StepConfig
from dlperf.train.step import measure_training
from dlperf.workload.base import TrainSpec, Workload

pytestmark = pytest.mark.integration

HELD_BYTES = 48 * 2**20
FEATURES = 16
_held: dict[int, bytearray] = {}
"""By process id: a worker forked from a process that holds its own still allocates its own."""


class HoardingDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each process that reads a sample keeps HELD_BYTES of its own (a per-worker cache, say)."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if os.getpid() not in _held:
            _held[os.getpid()] = bytearray(b"\x01" * HELD_BYTES)  # written: private pages, not shared zero pages
        g = torch.Generator().manual_seed(i)
        x = torch.randn(FEATURES, generator=g)
        return x, x[:4].argmax()


def _hoarding() -> Workload:
    def make_loader(batch_size: int, **kwargs: Any) -> DataLoader[Any]:
        return DataLoader(HoardingDataset(), batch_size=batch_size, drop_last=True, **kwargs)

    return Workload(
        name="hoarding", make_model=lambda: nn.Linear(FEATURES, 4),
        make_inputs=lambda b: (torch.randn(b, FEATURES),),
        train=TrainSpec(make_loader=make_loader, loss_fn=nn.functional.cross_entropy,
                        make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8),
    )


def test_a_run_with_workers_reports_their_own_memory_beside_the_main_process() -> None:
    """`dlperf train --num-workers 2` reported the main process's peak RSS only: the same with 0 or 2 workers, while
    each worker here holds 48 MiB of its own. Their memory is their summed USS: summed RSS would count the pages a
    forked worker shares with the main process (most of its ~170 MiB) once more per worker."""
    result = measure_training(_hoarding(), StepConfig(batch_size=8, num_workers=2, threads=1), steps=6,
                              warmup_steps=1, count_flops=False)
    assert result.worker_processes == 2
    assert result.workers_peak_uss_bytes is not None
    assert 2 * HELD_BYTES <= result.workers_peak_uss_bytes < 2 * HELD_BYTES + result.peak_rss_bytes // 2
    assert result.job_peak_bytes == result.peak_rss_bytes + result.workers_peak_uss_bytes
    data = result.to_dict()
    assert data["workers_peak_uss_bytes"] == result.workers_peak_uss_bytes and data["worker_processes"] == 2
    out = io.StringIO()
    Console(file=out, width=300).print(measurement_view(data))
    memory = next(line for line in out.getvalue().splitlines() if line.strip().startswith("memory"))
    assert "main process +" in memory and "in its 2 loader workers (their private memory, USS)" in memory
    assert f"= {(result.job_peak_bytes) / 2**20:.1f} MiB" in memory


def test_a_run_without_workers_reports_no_worker_memory() -> None:
    result = measure_training(_hoarding(), StepConfig(batch_size=8, threads=1), steps=3, warmup_steps=1,
                              count_flops=False)
    assert result.workers_peak_uss_bytes is None and result.worker_processes == 0
    assert result.job_peak_bytes == result.peak_rss_bytes


def test_the_batch_footprint_counts_the_batches_queued_by_the_workers() -> None:
    """The CPU batch search ignored workers: a batch that fits with 0 workers was said to fit with 2 workers each
    prefetching 4 batches, whose 8 queued batches are held beside the step's tensors."""
    w = _hoarding()
    batch_bytes = 8 * (FEATURES * 4 + 8)  # float32 features + an int64 label per sample
    alone = step_footprint_bytes(w, StepConfig(batch_size=8, threads=1))
    assert step_footprint_bytes(w, StepConfig(batch_size=8, threads=1, num_workers=2)) == alone + 4 * batch_bytes
    assert (step_footprint_bytes(w, StepConfig(batch_size=8, threads=1, num_workers=2, prefetch_factor=4))
            == alone + 8 * batch_bytes)


def test_more_workers_than_cpus_is_said_once_in_dlperfs_words() -> None:
    """`--num-workers 3` on 2 CPUs printed torch's UserWarning twice (from DataLoader() and from iter() on it)."""
    workers = usable_cores() + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = measure_training(_hoarding(), StepConfig(batch_size=8, num_workers=workers, threads=1), steps=2,
                                  warmup_steps=1, count_flops=False)
    torch_warnings = [w for w in caught if "worker processes in total" in str(w.message)]
    assert torch_warnings == []
    notes = [n for n in result.notes if "more than PyTorch suggests" in n]
    assert len(notes) == 1 and notes[0].startswith(f"{workers} DataLoader workers on {workers - 1} usable CPU")
    fits = measure_training(_hoarding(), StepConfig(batch_size=8, num_workers=1, threads=1), steps=2,
                            warmup_steps=1, count_flops=False)
    assert not any("more than PyTorch suggests" in n for n in fits.notes)
