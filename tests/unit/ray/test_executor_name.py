"""A joined cluster is recorded under the name `--executor` was given: a Ray Client address read 'ray:ray://...'."""

from __future__ import annotations

import pytest

from dlperf.ray.trials import executor_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("address", "name"), [
    ("10.0.0.5:6379", "ray:10.0.0.5:6379"),
    ("ray://head:10001", "ray://head:10001"),
    ("RAY://head:10001", "RAY://head:10001"),
])
def test_executor_name(address: str, name: str) -> None:
    assert executor_name(address) == name
