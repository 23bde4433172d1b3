"""How a command's process ends: what the command-line entry does on its way out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def test_a_command_from_the_command_line_leaves_its_objects_to_the_exit_not_a_last_collection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After 'interrupted: run ... is kept' the process took 7-20 s more to end on a busy machine (2 s idle): the
    interpreter's last garbage collection over the 400k objects torch and MiniLM had made. The command-line entry
    freezes them; a caller of main(argv) (a test, a script) keeps its collector as it was."""
    import gc

    from dlperf.cli.main import main

    store = str(tmp_path / "runs.db")
    gc.unfreeze()
    try:
        code = main(["runs", "list", "--store", store])
        assert gc.get_freeze_count() == 0
        monkeypatch.setattr(sys, "argv", ["dlperf", "runs", "list", "--store", store])
        assert main() == code
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_dlperf_without_a_command_prints_its_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dlperf") and "check" in out
