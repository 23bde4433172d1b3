"""`dlperf check` records and compares the environment it measured in: the baseline's thread count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.compare.check import check_against_baseline
from dlperf.store import Store

pytestmark = pytest.mark.unit


def test_a_check_records_the_baselines_thread_count_and_does_not_call_it_a_difference(tmp_path: Path) -> None:
    # the baseline ran at --threads N; the check reruns at N, so its record must say N (it said torch's default)
    # and no "torch_threads: N vs default" warning may appear
    store = Store(tmp_path / "runs.db")
    default = torch.get_num_threads()
    threads = 1 if default > 1 else 2
    dlperf.bench("zoo:mlp", batch_sizes=(1,), threads=threads, min_duration_s=0.0, min_iters=5, warmup_iters=0,
                 store=store)
    store.set_baseline("main", store.list(kind="bench")[0].id)
    outcome = check_against_baseline("zoo:mlp", "main", store, min_duration_s=0.001)
    check_run = store.get(outcome.run_id)
    assert check_run.config["threads"] == threads
    assert check_run.environment["torch_threads"] == threads
    assert not [w for w in outcome.gate.warnings if "torch_threads" in w]
    assert torch.get_num_threads() == default
