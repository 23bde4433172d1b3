"""Suite-wide set-up."""

from __future__ import annotations

import signal


def pytest_configure() -> None:
    """Take Ctrl-C's default back when pytest was started with SIGINT ignored (a non-interactive shell's `cmd &`):
    the tests that interrupt a command send SIGINT to a child process, which inherits an ignored signal and never
    sees it (eight such tests failed so). A handler, unlike SIG_IGN, is reset to the default in a child at exec."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

