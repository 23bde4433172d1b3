"""The curated public API: every name resolves, and no name is shadowed by a subpackage of the same name."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import dlperf


def test_every_public_name_resolves() -> None:
    for name in dlperf.__all__:
        assert getattr(dlperf, name) is not None, name


def test_no_public_name_is_also_a_subpackage() -> None:
    # importing dlperf.X sets the attribute dlperf.X to the module, which would hide a function called X
    subpackages = {info.name for info in pkgutil.iter_modules(dlperf.__path__)}
    assert not subpackages & set(dlperf.__all__)


def test_load_stays_the_artifact_loader_after_every_subpackage_is_imported() -> None:
    for info in pkgutil.iter_modules(dlperf.__path__):
        if info.name not in {"ray", "__main__"}:
            importlib.import_module(f"dlperf.{info.name}")
    assert callable(dlperf.load) and dlperf.load.__module__ == "dlperf.api"


def test_import_dlperf_does_not_import_torch() -> None:
    code = "import sys, dlperf; dlperf.__all__; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bench_records_the_thread_count_it_ran_at(tmp_path: object) -> None:
    import torch

    from dlperf.store.db import Store

    store = f"{tmp_path}/runs.db"
    before = torch.get_num_threads()
    target = 1 if before > 1 else 2
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), threads=target, min_duration_s=0.0, min_iters=3,
                 warmup_iters=0, store=store)
    (record,) = Store(store).list()
    assert record.environment["torch_threads"] == target and record.config["threads"] == target
    assert torch.get_num_threads() == before


def test_bench_with_a_minimum_duration_over_the_default_cap_raises_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # as `dlperf bench --min-duration 5m`; it was a ConfigError about max_duration_s, which bench() does not take
    import torch

    from dlperf import api

    seen = []
    monkeypatch.setattr(api, "run_bench", lambda workload, config: seen.append(config))
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), min_duration_s=300.0)
    assert seen[0].timer.min_duration_s == 300.0 and seen[0].timer.max_duration_s == 300.0
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), min_duration_s=0.5)
    assert seen[1].timer.max_duration_s == 120.0
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), min_iters=2_000_000)  # over the 1,000,000-call cap
    assert seen[2].timer.min_iters == 2_000_000 and seen[2].timer.max_iters == 2_000_000


def test_bench_refuses_batch_sizes_a_latency_scenario_would_ignore() -> None:
    # single-stream ran batch 1 and returned it as if batch 8 had been measured, with nothing said
    import torch

    from dlperf.errors import ConfigError

    with pytest.raises(ConfigError, match=r"batch_sizes \(8,\) is for the offline scenario; single-stream runs"):
        dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), scenario="single-stream", batch_sizes=(8,))
    with pytest.raises(ConfigError, match="multi-stream runs batch 8"):
        dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), scenario="multi-stream", batch_sizes=(8,))
    with pytest.raises(ConfigError, match="unknown scenario 'burst'"):
        dlperf.bench(torch.nn.Linear(4, 2), scenario="burst")
