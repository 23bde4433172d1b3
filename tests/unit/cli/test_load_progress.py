"""dlperf load's live line writes a level as the levels table does."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dlperf.cli import progress

pytestmark = pytest.mark.unit


def test_a_computed_rate_is_written_to_a_tenth_and_a_given_one_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(progress, "error_console",
                        lambda: Console(file=out, force_terminal=True, width=200, highlight=False))
    with progress.load_progress("rate") as (on_window, _):
        on_window(227.71349, 3, 12.3456)
        on_window(2.25, 1, 2.0)
    shown = out.getvalue()
    assert "rate 227.7: window 3, 12.3 req/s" in shown
    assert "227.713" not in shown
    assert "rate 2.25: window 1, 2.0 req/s" in shown
