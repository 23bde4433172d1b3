"""Where `dlperf optimize`'s time budget counts from: the command's process start, or a caller's call of `main`."""

from __future__ import annotations

import time

import psutil

from dlperf.cli.optimize import budget_start


def test_a_caller_of_main_in_a_long_lived_process_counts_from_its_call() -> None:
    # a process that has run for a while: its age was taken from the budget, up to a minute of it
    time.sleep(max(0.0, 0.6 - (time.time() - psutil.Process().create_time())))
    before = time.monotonic()
    assert budget_start(from_command_line=False) >= before


def test_the_dlperf_command_counts_from_its_process_start() -> None:
    age = time.time() - psutil.Process().create_time()
    start = budget_start(from_command_line=True)
    # the process's start, at most 60 s back (the cap for a process older than its command)
    assert time.monotonic() - start >= min(age, 60.0) - 0.5
