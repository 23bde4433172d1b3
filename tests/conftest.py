"""Suite-wide set-up."""

from __future__ import annotations

import os
import signal


def pytest_configure() -> None:
    """Take Ctrl-C's default back when pytest was started with SIGINT ignored (a non-interactive shell's `cmd &`):
    the tests that interrupt a command send SIGINT to a child process, which inherits an ignored signal and never
    sees it (eight such tests failed so). A handler, unlike SIG_IGN, is reset to the default in a child at exec."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # pytest-xdist (`scripts/test` runs with -n 2) sets COLUMNS=80 in its workers; a CLI under test then wraps at
    # 80 columns where a single pytest process, not a terminal either, gives it dlperf's piped width (160): the
    # same test saw "wrote <path>" split over two lines under xdist only.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)

