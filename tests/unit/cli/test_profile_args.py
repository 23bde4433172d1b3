"""`dlperf profile --trace FILE` is checked before anything is profiled: the profiler's own export fails
silently, and a trace into a missing folder was reported as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlperf.cli.main import main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("where", "message"), [
    ("missing/sub/t.json", "its folder .*missing/sub does not exist"),
    (".", "is a folder: give a file name, e.g. "),
    ("afile/t.json", "afile is a file, not a folder"),  # it said the folder did not exist
    # tried, not asked: os.access said yes to root, and the trace failed after the whole profile (stored as failed)
    ("/proc/t.json", "cannot write there \\("),
])
def test_a_trace_path_that_cannot_be_written_is_refused_up_front(tmp_path: Path, where: str, message: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    path = tmp_path / where
    assert main(["profile", "zoo:mlp", "--trace", str(path), "--store", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"--trace .*{message}", err), err
    assert not (tmp_path / "runs.db").exists()  # refused before a run was recorded


def test_a_trace_path_that_can_be_written_is_left_as_it_was(tmp_path: Path) -> None:
    from dlperf.cli.profile import _check_trace_path

    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text("kept")
    _check_trace_path(str(new))
    _check_trace_path(str(old))
    assert not new.exists() and old.read_text() == "kept"  # the probe made and removed one, and truncated nothing


def test_memory_budget_takes_an_upper_case_exponent_and_refuses_less_than_a_byte() -> None:
    from dlperf.cli.common import memory_size as parse_size
    from dlperf.errors import ConfigError

    assert parse_size("1E9") == parse_size("1e9") == 10**9  # 1E9 was refused
    for text in ("0.5", "0"):  # 0.5 was reported as "must be positive, got 0"
        with pytest.raises(ConfigError, match=f"at least one byte, got '{text}'"):
            parse_size(text)
