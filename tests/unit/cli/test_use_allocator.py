"""`--allocator auto` called in-process (`main([...])`, not the `dlperf` command) keeps the allocator the process
runs: it cannot restart itself, and the default must not stop a command that an explicit choice would."""

from __future__ import annotations

import argparse

import pytest

from dlperf.cli.common import use_allocator
from dlperf.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _auto_picks_another_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """'auto' resolved to an allocator this process does not run (tcmalloc where it is installed)."""
    monkeypatch.setattr("dlperf.measure.allocator.resolve", lambda choice, engines=(): "jemalloc")
    monkeypatch.setattr("dlperf.measure.allocator.active_allocator", lambda: "glibc")


def test_auto_in_process_keeps_the_allocator_it_runs() -> None:
    use_allocator(argparse.Namespace(allocator="auto", _from_command_line=False), "serve")  # no error, no restart


def test_an_explicit_allocator_in_process_is_refused_with_how_to_preload_it() -> None:
    with pytest.raises(ConfigError, match="--allocator jemalloc: this process runs glibc and was not started from"):
        use_allocator(argparse.Namespace(allocator="jemalloc", _from_command_line=False), "bench")
