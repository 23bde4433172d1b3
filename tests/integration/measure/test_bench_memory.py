"""Bench's peak RSS is the process's: the run says what the process held before the model was built, so the
model's own part (weights, activations) can be read off it."""

from __future__ import annotations

import pytest
import torch
from rich.console import Console

import dlperf
from dlperf.report.terminal import bench_report

pytestmark = pytest.mark.integration

TEMP_BYTES = 200 * 2**20


class BigTemporary(torch.nn.Module):
    """Allocates and fills a 200 MiB tensor in every call (an activation far larger than its weights)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.ones(TEMP_BYTES // 4)
        return x + scratch[:1]


def test_the_process_rss_before_the_model_is_recorded_and_shown() -> None:
    result = dlperf.bench(BigTemporary(), (torch.randn(1, 4),), min_duration_s=0.05, min_iters=3, warmup_iters=1)
    before, peak = result.rss_before_model_bytes, result.points[0].peak_rss_bytes
    assert before is not None and before > 50 * 2**20  # Python and torch
    # the model's part of the peak is its 200 MiB scratch tensor, not the ~200+ MiB the process held already
    assert TEMP_BYTES * 0.95 <= peak - before <= TEMP_BYTES + 64 * 2**20
    data = result.to_dict()
    assert data["rss_before_model_bytes"] == before
    console = Console(width=300, record=True)
    console.print(bench_report(data, {}))
    text = " ".join(console.export_text().split())  # the caption wraps at the table's width
    assert f"RSS: the process's peak ({before / 2**20:.1f} MiB before the model was built)" in text


def test_a_stored_run_without_it_keeps_the_short_caption() -> None:
    result = dlperf.bench(torch.nn.Linear(4, 4), (torch.randn(1, 4),), min_duration_s=0.01, warmup_iters=1)
    data = result.to_dict()
    del data["rss_before_model_bytes"]  # a run recorded before the field existed
    console = Console(width=300, record=True)
    console.print(bench_report(data, {}))
    assert "RSS: peak;" in " ".join(console.export_text().split())
