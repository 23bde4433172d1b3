"""Third-party import chatter kept off the console: only inside the block, and the levels put back."""

from __future__ import annotations

import logging

import pytest

from dlperf._thirdparty import quiet_imports

pytestmark = pytest.mark.unit


def test_quiet_imports_hides_warnings_inside_the_block_only(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("torchao")
    saved = log.level  # a CLI test in this process may have quieted it for good
    log.setLevel(logging.WARNING)
    try:
        with caplog.at_level(logging.DEBUG):
            with quiet_imports():
                log.warning("Failed to load /x/_C_mxfp8.so")
                log.error("a real error")
            log.warning("after the block")
        messages = [r.getMessage() for r in caplog.records if r.name == "torchao"]
        assert messages == ["a real error", "after the block"]
        assert log.level == logging.WARNING
    finally:
        log.setLevel(saved)
