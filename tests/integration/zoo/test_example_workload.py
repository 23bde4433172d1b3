"""examples/custom_workload.py loads as a user file, scores its metric and runs through the benchmark engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.measure.bench import BenchConfig, run_bench
from dlperf.measure.timer import TimerConfig
from dlperf.workload import load_workload

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom_workload.py"


def test_example_workload_loads_scores_and_benches() -> None:
    w = load_workload(str(EXAMPLE))
    assert w.name == "ring-classifier"
    assert w.source == f"{EXAMPLE}:workload"
    assert w.eval is not None and w.eval.metric_name == "accuracy"
    model = w.build_model()
    assert w.eval.evaluate(model) > 0.95
    # A model that always answers "outside the circle" scores the share of outside points (~80% of the square).
    import torch

    always_outside = w.eval.evaluate(lambda x: torch.tensor([[0.0, 1.0]]).expand(x.shape[0], 2))
    assert 0.7 < always_outside < 0.86
    assert w.eval.calibration_inputs is not None
    assert sum(b[0].shape[0] for b in w.eval.calibration_inputs()) == 512
    result = run_bench(w, BenchConfig(batch_sizes=(1, 32),
                                      timer=TimerConfig(warmup_iters=1, min_duration_s=0.0, min_iters=5)))
    assert [p.batch_size for p in result.points] == [1, 32]
    assert all(p.measurement.n >= 5 for p in result.points)
