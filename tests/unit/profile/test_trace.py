from __future__ import annotations

import pytest

from dlperf.errors import ProfileError
from dlperf.profile.trace import dtype_kind, merged_length
from tests.unit.profile.builders import op, trace

pytestmark = pytest.mark.unit


def test_merged_length_counts_overlaps_once() -> None:
    assert merged_length([(0, 10), (5, 15), (20, 25)]) == 20
    assert merged_length([]) == 0
    assert merged_length([(3, 4), (0, 10)]) == 10


def test_dtype_kind_takes_the_first_tensor_dtype() -> None:
    assert dtype_kind(("Scalar", "c10::BFloat16", "float")) == "bf16"
    assert dtype_kind(("signed char",)) == "int8"
    assert dtype_kind(("Scalar",)) == "fp32"


def test_validate_rejects_empty_and_bad_traces() -> None:
    good = trace([op("aten::add", 0, 10)])
    assert good.validate() is good
    with pytest.raises(ProfileError, match="no operator events"):
        trace([]).validate()
    bad_mode = trace([op("aten::add", 0, 10)])
    bad_mode.mode = "serve"
    with pytest.raises(ProfileError, match="unknown mode"):
        bad_mode.validate()
    no_steps = trace([op("aten::add", 0, 10)])
    no_steps.steps = []
    with pytest.raises(ProfileError, match="no profiled steps"):
        no_steps.validate()


def test_summary_has_no_event_lists() -> None:
    s = trace([op("aten::add", 0, 10)], steps=2).summary()
    assert s["steps"] == 2 and s["op_events"] == 1
    assert "timeline" not in s["memory"]
