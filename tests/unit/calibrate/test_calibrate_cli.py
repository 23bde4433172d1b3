"""`dlperf calibrate` as a user runs it."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("threads", "noted"), [("3", True), ("2", False)])
def test_threads_beyond_the_usable_cpus_get_the_note_bench_gives(threads, noted, tmp_path, monkeypatch, capsys):
    """`calibrate --threads 8` on 2 CPUs measured and cached the ceilings of 8 contending threads without a word,
    while bench, profile, optimize and train note it."""
    from dlperf.cli.main import main

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    code = main(["calibrate", "--quick", "--threads", threads, "--json", "--store", str(tmp_path / "runs.db")])
    assert code == 0
    err = capsys.readouterr().err
    assert (f"note: --threads {threads} is more than the 2 CPUs this process may use" in err) is noted


def test_a_cache_that_cannot_be_written_is_a_warning_line_and_the_ceilings_are_shown(tmp_path, monkeypatch, capsys):
    """It was an error after the measurement: the ceilings measured were lost, and train and profile stopped."""
    import json
    import warnings

    from dlperf.cli.main import main

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    filters = list(warnings.filters)
    code = main(["calibrate", "--quick", "--json", "--store", str(tmp_path / "runs.db")])
    assert code == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if "cannot cache" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: cannot cache this machine's ceilings at ")
    assert "DlperfWarning" not in err  # one line, not Python's 'file:line: DlperfWarning:' and the source line
    result = json.loads(out)
    assert result["gemm_flops"]["fp32"] > 0 and result["cached"] is False
    assert result["cache_file"] is None
    assert warnings.filters == filters  # the CLI's way of showing them ends with the command
