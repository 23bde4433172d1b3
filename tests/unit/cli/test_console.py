"""The CLI's console: piped output keeps wide tables whole."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from dlperf.cli import common

pytestmark = pytest.mark.unit


def _render_header(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> str:
    buffer = io.StringIO()  # not a terminal, like a CI log or `| tee`
    monkeypatch.setattr(common.sys, "stdout", buffer)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    table = Table()
    for name in ("rate", "req/s", "items/s", "p50", "p90", "p95", "p99", "p99 bound", "p99.9", "errors",
                 "queue", "compute", "batch", "stable"):
        table.add_column(name, no_wrap=True)
    table.add_row(*["123.456"] * 14)
    common.console().print(table)
    return buffer.getvalue()


def test_piped_output_is_not_squeezed_to_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _render_header(monkeypatch, None)
    assert "p99 bound" in out and "compute" in out and "…" not in out
    squeezed = _render_header(monkeypatch, "80")  # COLUMNS still decides when set
    assert "…" in squeezed


def test_an_error_message_is_printed_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """Errors were printed as Rich markup, so an install hint 'pip install dlperf[zoo]' lost its '[zoo]' (an unknown
    tag) and a message naming '[bold]' would have been styled."""
    from dlperf.cli.main import main

    # a workload file that does not exist: its name comes back in the message, brackets and all
    assert main(["bench", "nothere[zoo]/wl[bold].py"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nothere[zoo]/wl[bold].py" in err
