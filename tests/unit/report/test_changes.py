"""What `runs history` and the report's history say changed between two runs: a setting or machine field both
runs recorded, each named once."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.report.changes import history_changes, run_changes
from dlperf.store.records import RunRecord

pytestmark = pytest.mark.unit

ENV = {"torch_version": "2.13.0+cpu", "cpu_model": "Test CPU", "logical_cores": 2, "torch_threads": 2}


def _run(run_id: str, config: dict[str, Any], environment: dict[str, Any] | None = None) -> RunRecord:
    return RunRecord(id=run_id, kind="bench", workload="zoo:mlp", status="ok", created_at="2026-12-01T00:00:00",
                     config=config, environment=ENV if environment is None else environment)


def test_a_timer_setting_is_read_from_the_timer() -> None:
    before = _run("a", {"timer": {"min_duration_s": 1.0, "warmup_iters": 5}})
    after = _run("b", {"timer": {"min_duration_s": 3.0, "warmup_iters": 5}})
    assert run_changes(before, after) == ["min_duration_s 1.0 -> 3.0"]


def test_a_setting_or_an_environment_an_older_record_lacks_is_not_a_change() -> None:
    """An older record without a precision, or without an environment, was not measured at 'None'."""
    old = _run("a", {}, environment={})
    new = _run("b", {"precision": "bf16"})
    assert run_changes(old, new) == [] and run_changes(new, old) == []
    assert history_changes([old, new, _run("c", {"precision": "fp32"})]) == {"c": ["precision bf16 -> fp32"]}
