"""`--executor`: what each spelling names, and the spellings refused before Ray is imported."""

from __future__ import annotations

import pytest

from dlperf.errors import ConfigError
from dlperf.optimize.executor import parse_executor

pytestmark = pytest.mark.unit


def test_each_spelling_names_its_executor() -> None:
    assert parse_executor("local") == ("local", None)
    assert parse_executor("ray") == ("ray", None)
    assert parse_executor("ray:auto") == ("ray", "auto")
    assert parse_executor("ray:10.0.0.5:6379") == ("ray", "10.0.0.5:6379")
    # a Ray client address whole: it was 'ray:' and a host named '//127.0.0.1' ("Name or service not known")
    assert parse_executor("ray://127.0.0.1:10001") == ("ray", "ray://127.0.0.1:10001")
    assert parse_executor("ray:ray://10.0.0.5:10001") == ("ray", "ray://10.0.0.5:10001")


@pytest.mark.parametrize("spec, said", [
    ("rayy", "unknown executor 'rayy'"),
    ("ray:", "give an address after the colon"),
    # Ray's own message rewrote the host: "Unable to parse port number from abc (full address = 192.0.2.2:abc)"
    ("ray:127.0.0.1:abc", "--executor ray:127.0.0.1:abc: 'abc' is not a port"),
    ("ray:127.0.0.1:70000", "'70000' is not a port"),
])
def test_a_bad_spelling_is_refused_with_the_fix(spec: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_executor(spec)
