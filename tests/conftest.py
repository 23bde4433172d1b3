"""Suite-wide set-up."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest


def pytest_configure() -> None:
    """Take Ctrl-C's default back when pytest was started with SIGINT ignored (a non-interactive shell's `cmd &`):
    the tests that interrupt a command send SIGINT to a child process, which inherits an ignored signal and never
    sees it (eight such tests failed so). A handler, unlike SIG_IGN, is reset to the default in a child at exec."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that start a Ray driver in pytest's own process (tests/integration/ray) after all others.
    `ray.shutdown()` leaves Ray's C++ threads running (seen in this process during the train tests: its core
    worker's gcs_client_io_s, worker.io, client.poll0 and gRPC event_engine threads), and forking a process with
    Ray's threads in it is unsupported; the train tests, which came after them, fork DataLoader workers in this
    process, and one of those workers once died of a segmentation fault in a full run
    (test_cli_tune_prints_settings_and_records_each_trial; not reproduced, so the cause is not proven)."""
    ray_dir = Path(__file__).parent / "integration" / "ray"
    items.sort(key=lambda item: ray_dir in Path(str(item.path)).parents)  # a stable sort: the order is kept
