"""The A/B settings parser: accepted keys and values, and the messages for mistakes."""

from __future__ import annotations

import pytest

from dlperf.compare.settings import ABSettings, parse_settings
from dlperf.errors import ConfigError

pytestmark = pytest.mark.unit


def test_all_keys_parse_to_typed_values() -> None:
    s = parse_settings("threads=1, precision=bf16,batch_size=8,channels_last=1,device=cpu,option.hidden=512")
    assert s == ABSettings(threads=1, precision="bf16", batch_size=8, channels_last=True, device="cpu",
                           options=(("hidden", 512),))
    assert s.describe() == "threads=1,precision=bf16,batch_size=8,channels_last=1,option.hidden=512"


def test_empty_means_defaults() -> None:
    assert parse_settings("") == ABSettings()
    assert parse_settings(" , ").describe() == "defaults"


@pytest.mark.parametrize(("text", "message"), [
    ("thread=2", "unknown key 'thread'"),
    ("threads", "has no value"),
    ("threads=0", "threads must be an integer >= 1"),
    ("threads=two", "threads must be an integer >= 1"),
    ("precision=int3", "unknown precision 'int3'"),
    ("channels_last=maybe", "channels_last must be 0 or 1"),
    ("device=tpu", "unknown device 'tpu'"),
    ("threads=1,threads=2", "'threads' is given twice"),
    ("option.hidden=64,option.hidden=128", "'option.hidden' is given twice"),  # the last one silently won
])
def test_mistakes_name_the_option_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--b") as info:
        parse_settings(text, "--b")
    assert message in str(info.value)


def test_option_values_are_typed() -> None:
    s = parse_settings("option.seq_len=64,option.scale=1.5,option.mode=fast")
    assert dict(s.options) == {"seq_len": 64, "scale": 1.5, "mode": "fast"}


def test_a_boolean_option_is_a_bool_as_in_a_workload_spec() -> None:
    """`option.pretrained=false` reached the factory as the string 'false', which is true; `?pretrained=false` in a
    spec was already a bool."""
    s = parse_settings("option.pretrained=false,option.fused=True")
    assert dict(s.options) == {"pretrained": False, "fused": True}
    assert parse_settings(s.describe()) == s  # 'option.pretrained=False' reads back the same
