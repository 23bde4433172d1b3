"""Synthetic run records with raw samples, written to a real store in a temporary folder."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlperf.measure.stats import Measurement
from dlperf.store import Store

ENV = {"dlperf_version": "0.1.0", "python_version": "3.11.7", "torch_version": "2.13.0+cpu",
       "cpu_model": "Test CPU", "logical_cores": 2, "torch_threads": 2, "gpu_name": None, "cuda_version": None,
       "os": "Linux"}


def bench_result(medians_s: dict[int, float], n: int = 200, seed: int = 0, sigma: float = 0.05) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    points: list[dict[str, Any]] = []
    for batch, med in medians_s.items():
        m = Measurement([int(v) for v in rng.lognormal(np.log(med), sigma, n) * 1e9], items_per_call=batch)
        points.append({"batch_size": batch, "summary": m.summary(), "measurement": m.to_dict(),
                       "peak_rss_bytes": 300 * 2**20, "process_cpu_percent": 95.0, "system_cpu_percent": 50.0})
    return {"workload": "w", "points": points,
            "headline": {"kpi": "p90_s", "value": points[0]["summary"]["p90_s"], "batch_size": points[0]["batch_size"]}}


def add_run(store: Store, kind: str, result: dict[str, Any], workload: str = "zoo:mlp",
            env: dict[str, Any] | None = None, status: str = "ok", config: dict[str, Any] | None = None,
            parent_id: str | None = None) -> str:
    record = store.create_run(kind, workload, config or {"batch_sizes": [1], "scenario": "offline"},
                              env or ENV, parent_id=parent_id)
    store.finish_run(record.id, result, status)
    return record.id
