"""Starting a candidate's child process leaves the caller's `sys.warnoptions` as it was."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlperf.optimize.evaluate import TRACKER_WARNING, _tracker_warning_ignored, mp_context, run_isolated

pytestmark = pytest.mark.unit


def test_mp_context_leaves_warnoptions_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "warnoptions", ["default::DeprecationWarning"])
    mp_context()
    assert sys.warnoptions == ["default::DeprecationWarning"]


def test_the_tracker_option_is_set_while_a_child_starts_and_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "warnoptions", ["default::DeprecationWarning"])
    with _tracker_warning_ignored():
        assert sys.warnoptions == ["default::DeprecationWarning", TRACKER_WARNING]
    assert sys.warnoptions == ["default::DeprecationWarning"]
    monkeypatch.setattr(sys, "warnoptions", [TRACKER_WARNING])  # the caller's own: kept
    with _tracker_warning_ignored():
        pass
    assert sys.warnoptions == [TRACKER_WARNING]


def test_run_isolated_gives_warnoptions_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "warnoptions", [])
    result = run_isolated("no-such-target", {"settings": {}}, tmp_path / "child.log", timeout_s=60)
    assert result["status"] == "failed"  # the child ran (and refused the target)
    assert sys.warnoptions == []
