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


def test_a_recording_command_says_when_it_creates_the_store_s_folder(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`--store nodir/x.db` made the folder without a word, so a typo in CI started a second history."""
    from argparse import Namespace

    from dlperf.cli.common import open_store

    new = tmp_path / "nodir" / "x.db"
    open_store(Namespace(store=str(new)))
    assert f"the store's folder '{new.parent}' does not exist and is created" in capsys.readouterr().err
    open_store(Namespace(store=str(new)))  # there now: nothing to say
    assert capsys.readouterr().err == ""
