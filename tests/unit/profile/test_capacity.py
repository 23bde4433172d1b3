"""The memory-capacity finding says where the memory is (the process before the model, the weights, the step) and
names a smaller batch only where a smaller batch can bring the peak under the budget."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dlperf.profile import diagnose as dg
from dlperf.profile.trace import MemoryInfo
from tests.unit.profile.builders import CEILINGS, elementwise, op, trace

pytestmark = pytest.mark.unit

MIB = 2**20


def _capacity(*, start: int, peak: int, budget: int, model: int, step_holds: int, batch: int,
              also: list[Any] | None = None) -> dg.Finding:
    mem = MemoryInfo(start_rss_bytes=start, peak_rss_bytes=peak, available_bytes=budget, total_bytes=budget,
                     budget_bytes=budget, budget_source="--memory-budget", model_bytes=model,
                     timeline=[(100.0, step_holds), (9000.0, 0)])  # held at once within the step: step_holds
    ops = [elementwise(0, 9000)] + [op("aten::empty", 10.0 + i * 10_000, 5.0, step=i, mem=step_holds)
                                    for i in range(3)] + (also or [])
    t = dataclasses.replace(trace(ops, steps=3, mem=mem), batch_size=batch)
    d = dg.diagnose(dg.analyze_all(t, CEILINGS))
    found = [f for f in d.findings if f.category == dg.MEMORY_CAPACITY]
    assert len(found) == 1 and d.top is found[0]
    return found[0]


def test_memory_held_before_the_model_is_not_fixed_by_a_smaller_batch() -> None:
    """`dlperf profile zoo:mlp --memory-budget 100MiB`: 241 of the 248 MiB were torch itself, the step held 2 KiB
    at batch 1, and the fix said 'lower the batch size', 'apply with: --batch-size (smaller)'; the finding was
    titled 'nearly exhausted' at 248% of the budget and its allocations read '0 MiB'."""
    f = _capacity(start=241 * MIB, peak=248 * MIB, budget=100 * MIB, model=332 * 1024, step_holds=2048, batch=1)
    assert f.title == "host memory exceeds the budget"
    assert f.setting is None and "lower the batch" not in f.fix and "raise the budget" in f.fix
    text = " ".join(f.evidence)
    assert "241 MiB were in use before the model was built" in text
    assert "the model's parameters take 332 KiB" in text and "hold up to 2 KiB at once" in text
    assert "the step holds 2 KiB (batch 1), against a peak 163 MiB over 85% of the budget: a smaller batch " \
           "cannot bring it down" in text


@pytest.mark.parametrize(("step_mib", "batch_fix"), [(150, True), (80, False)])
def test_a_smaller_batch_is_named_where_the_step_holds_half_the_overrun_or_more(step_mib: int, batch_fix: bool) -> None:
    """Over 85% of an 800 MiB budget by 200 MiB: a step holding 150 MiB (three quarters of that) is brought under by
    a smaller batch; one holding 80 MiB (under half) is not, and the fix says what else holds the memory."""
    f = _capacity(start=600 * MIB, peak=880 * MIB, budget=800 * MIB, model=0, step_holds=step_mib * MIB, batch=4)
    assert (f.setting == "--batch-size (smaller)") == batch_fix
    assert f.fix.startswith("lower the batch size") == batch_fix


def test_large_weights_point_at_smaller_weights() -> None:
    f = _capacity(start=300 * MIB, peak=900 * MIB, budget=1000 * MIB, model=580 * MIB, step_holds=20 * MIB, batch=8)
    assert f.title == "host memory is nearly exhausted"
    assert f.setting is not None and "int8" in f.fix
    assert "--objective memory --passes dynamic_int8,onnxruntime,openvino,precision" in f.setting


def test_a_step_that_holds_the_overrun_is_fixed_by_a_smaller_batch() -> None:
    """examples/bottlenecks/memory_pressure.py: a 256 MiB intermediate at batch 2, the peak 1.1 budgets."""
    f = _capacity(start=600 * MIB, peak=880 * MIB, budget=800 * MIB, model=0, step_holds=256 * MIB, batch=2)
    assert f.setting == "--batch-size (smaller)" and f.fix.startswith("lower the batch size")
    assert "hold up to 256 MiB at once" in " ".join(f.evidence)
    # the same allocation in each of the 3 steps was listed twice as the two largest
    assert [e for e in f.evidence if e.startswith("largest")] == ["largest allocation: aten::empty 256 MiB (forward)"]
    # two different allocations are one line, largest first (two lines each began 'largest allocation:')
    two = _capacity(start=600 * MIB, peak=880 * MIB, budget=800 * MIB, model=0, step_holds=256 * MIB, batch=2,
                    also=[op("aten::sum", 20.0, 5.0, mem=512 * 1024)])
    assert [e for e in two.evidence if e.startswith("largest")] == [
        "largest allocations: aten::empty 256 MiB (forward), then aten::sum 512 KiB (forward)"]
    at_one = _capacity(start=600 * MIB, peak=880 * MIB, budget=800 * MIB, model=0, step_holds=256 * MIB, batch=1)
    assert at_one.setting is None and at_one.fix.startswith("keep fewer activations at once (already at batch 1)")
