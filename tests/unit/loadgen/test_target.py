"""The pure parts of `dlperf load`'s target: how a server's error reply reads in an error message."""

from __future__ import annotations

import pytest

from dlperf.loadgen.target import NOT_KSERVE, error_of

pytestmark = pytest.mark.unit


def test_an_error_reply_gives_kserve_s_message_or_the_start_of_its_body() -> None:
    assert error_of(b'{"error": "unknown model \'m\'"}') == "unknown model 'm'"
    assert error_of(b"<html><body><h1>502 Bad Gateway</h1></body></html>") == f"502 Bad Gateway ({NOT_KSERVE})"
    # an empty body says so; an 'error' that is not a message is no KServe error (it printed the dict)
    assert error_of(b"") == f"an empty body ({NOT_KSERVE})"
    assert error_of(b'{"error": {"code": 13}}') == f'{{"error": {{"code": 13}}}} ({NOT_KSERVE})'
