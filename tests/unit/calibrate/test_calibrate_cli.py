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
