"""BenchPoint's derived fields: CPU taken by other processes and the contention warning."""

from __future__ import annotations

import os

import pytest

from dlperf.measure.bench import CONTENTION_PERCENT, BenchPoint
from dlperf.measure.stats import Measurement

pytestmark = pytest.mark.unit


def _point(process: float, system: float) -> BenchPoint:
    return BenchPoint(8, Measurement([1000, 1000, 1000, 1000]), 2**20, process, system)


def test_other_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    busy = _point(process=23.0, system=100.0)  # 200 core-% busy, 23 of it ours
    assert busy.other_load_percent == pytest.approx(177.0)
    assert busy.contention_warning is not None and "1.8 cores" in busy.contention_warning
    alone = _point(process=195.0, system=99.0)
    assert alone.other_load_percent == pytest.approx(3.0)
    assert alone.contention_warning is None
    assert _point(process=50.0, system=10.0).other_load_percent == 0.0
    edge = _point(process=0.0, system=CONTENTION_PERCENT / 2)
    assert edge.other_load_percent == pytest.approx(CONTENTION_PERCENT)
    assert edge.contention_warning is not None
    data = busy.to_dict()
    assert data["other_load_percent"] == pytest.approx(177.0) and data["contention_warning"]
