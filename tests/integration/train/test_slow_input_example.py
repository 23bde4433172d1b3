"""examples/bottlenecks/slow_input.py must train within the loss-parity steps, or `--tune` cannot vouch for anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.train.loop import base_config
from dlperf.train.parity import ParityConfig, blind_reason, frozen_curve, loss_curve
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "bottlenecks" / "slow_input.py"


def test_slow_input_example_learns_within_the_parity_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its loss hardly fell over the 16 parity steps (tail mean 2.04 against a frozen model's 2.09), so every
    `dlperf train examples/bottlenecks/slow_input.py --tune` noted that a model that does not train passes parity."""
    workload = load_workload(str(EXAMPLE))
    module = __import__("sys").modules[workload.make_model.__module__]
    monkeypatch.setattr(module, "DECODE_S", 0.0)  # the sleep is the example's point, not this test's
    config = base_config(workload, threads=1)
    parity = ParityConfig()
    baseline = loss_curve(workload, config, parity.steps, parity.seed)
    assert blind_reason(baseline, frozen_curve(workload, config, parity), parity.rtol) is None
    assert sum(baseline[-4:]) / 4 < 0.5 * baseline[0]  # it learns, it does not just wobble
