"""`dlperf compare` and `dlperf.testing` read runs and baselines: a mistyped store path is an error, not a new
empty store."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.errors import StoreError
from dlperf.testing import assert_no_regression

pytestmark = pytest.mark.unit


def test_compare_refuses_a_store_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "typo" / "runs.db"
    assert main(["compare", "abc", "def", "--store", str(missing)]) == 2
    assert "no run store at" in capsys.readouterr().err
    assert not missing.exists() and not missing.parent.exists()


def test_assert_no_regression_refuses_a_store_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(StoreError, match="no run store at"):
        assert_no_regression("zoo:mlp", baseline="main", store=str(missing))
    assert not missing.exists()
