"""KPI series over stored runs."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.errors import ConfigError, StoreError
from dlperf.store.query import kpi_history, point_at
from dlperf.store.records import FAILED, OK, RunRecord

pytestmark = pytest.mark.unit


def _point(batch: int, p50: float, throughput: float, noise: str | None = None) -> dict[str, Any]:
    return {"batch_size": batch, "summary": {"p50_s": p50, "p90_s": p50 * 1.2, "p99_s": p50 * 1.5,
                                             "mean_s": p50, "throughput": throughput, "noise_warning": noise}}


def _record(run_id: str, created: str, points: list[dict[str, Any]], status: str = OK) -> RunRecord:
    return RunRecord(run_id, "bench", "zoo:mlp", status, created, result={"points": points})


RECORDS = [
    _record("c", "2026-01-03", [_point(1, 0.003, 330.0), _point(8, 0.010, 800.0)]),
    _record("a", "2026-01-01", [_point(1, 0.001, 1000.0), _point(8, 0.008, 1000.0)]),
    _record("b", "2026-01-02", [_point(8, 0.009, 900.0, noise="noisy")]),
    _record("f", "2026-01-04", [_point(1, 0.5, 2.0)], status=FAILED),
    RunRecord("e", "bench", "zoo:mlp", OK, "2026-01-05", result={}),
]


def test_series_is_oldest_first_at_the_newest_runs_first_batch() -> None:
    h = kpi_history(RECORDS, "p50", workload="zoo:mlp")
    assert h.batch_size == 1  # newest usable run is 'c', whose first point is batch 1
    assert [p.run_id for p in h.points] == ["a", "c"]
    assert h.values == [0.001, 0.003]
    assert h.change == pytest.approx(2.0)
    assert h.best is not None and h.best.run_id == "a"
    assert h.skipped == 3  # b has no batch 1, f failed, e has no points
    assert h.unit == "s" and not h.higher_is_better


def test_throughput_at_a_chosen_batch() -> None:
    h = kpi_history(RECORDS, "throughput", batch_size=8)
    assert [p.run_id for p in h.points] == ["a", "b", "c"]
    assert h.values == [1000.0, 900.0, 800.0]
    assert h.higher_is_better and h.best is not None and h.best.run_id == "a"
    assert h.change == pytest.approx(-0.2)
    assert h.points[1].noise_warning == "noisy"
    assert h.to_dict()["points"][0] == {"run_id": "a", "created_at": "2026-01-01", "value": 1000.0,
                                        "noise_warning": None}


def test_p99_values() -> None:
    assert kpi_history(RECORDS, "p99", batch_size=8).values == pytest.approx([0.012, 0.0135, 0.015])


def test_errors() -> None:
    with pytest.raises(ConfigError, match="unknown metric 'p42'"):
        kpi_history(RECORDS, "p42")
    with pytest.raises(StoreError, match="no finished bench runs of 'zoo:x'"):
        kpi_history([], "p50", workload="zoo:x")
    # `runs history --kind check` said "no finished bench runs" of a store full of them
    with pytest.raises(StoreError, match=r"no finished check runs of 'zoo:x' in the store: run `dlperf check zoo:x`"):
        kpi_history([], "p50", workload="zoo:x", kind="check")
    empty = kpi_history([], "p50", batch_size=4, workload="zoo:x")
    assert empty.points == [] and empty.change is None and empty.best is None


def test_point_at() -> None:
    assert point_at(RECORDS[0], 8) == RECORDS[0].result["points"][1]
    assert point_at(RECORDS[0], 32) is None
