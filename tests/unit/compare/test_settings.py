"""The A/B settings parser: accepted keys and values, and the messages for mistakes."""

from __future__ import annotations

import pytest

from dlperf.compare.settings import ABSettings, parse_settings
from dlperf.errors import ConfigError

pytestmark = pytest.mark.unit


def test_all_keys_parse_to_typed_values() -> None:
    s = parse_settings("threads=1, precision=bf16,batch_size=8,channels_last=1,device=cpu,option.hidden=512")
    assert s == ABSettings(threads=1, precision="bf16", batch_size=8, channels_last=True, device="cpu",
                           options=(("hidden", "512"),))
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


def test_option_values_are_kept_as_typed() -> None:
    """Only the workload knows what a value is for: 'nan' is a float for `scale: float` and a text for `metric:
    str`, so the settings keep the text and the loader reads it (`compare.ab.load_side`)."""
    s = parse_settings("option.seq_len=64,option.scale=1.5,option.mode=fast")
    assert dict(s.options) == {"seq_len": "64", "scale": "1.5", "mode": "fast"}
    assert parse_settings(s.describe()) == s


FACTORY = '''
import torch
import dlperf

def make(metric: str = "acc", width: int = 4, scale: float = 1.0, pretrained=True) -> dlperf.Workload:
    seen = (metric, width, scale, pretrained)
    return dlperf.Workload(name=repr(seen), make_model=lambda: torch.nn.Linear(width, 1),
                           make_inputs=lambda b: (torch.zeros(b, width),))
'''


def test_a_side_s_options_reach_the_factory_typed_by_its_parameters(tmp_path) -> None:
    """`option.metric=nan` passed float NaN to `metric: str` (the value was parsed by its text before the workload
    was known); `option.pretrained=false` must still be a bool and `option.width=8` an int, as in a spec."""
    import math

    from dlperf.compare.ab import load_side

    (tmp_path / "wl.py").write_text(FACTORY)
    spec = f"{tmp_path / 'wl.py'}:make"
    s = parse_settings("option.metric=nan,option.width=8,option.scale=nan,option.pretrained=false")
    metric, width, scale, pretrained = eval(load_side(spec, s.options).name, {"nan": float("nan")})
    assert metric == "nan" and width == 8 and pretrained is False
    assert isinstance(scale, float) and math.isnan(scale)
    # values that are not text (the Python API's, a stored A/B from before) are passed as they are
    metric, width, _, _ = eval(load_side(spec, (("width", 16), ("metric", "f1"))).name, {"nan": float("nan")})
    assert (metric, width) == ("f1", 16)


def test_an_option_without_a_name_is_an_unknown_key() -> None:
    """'option.=5' names no option: it is refused as a key, not passed to the workload as an option named ''."""
    with pytest.raises(ConfigError, match=r"--a: unknown key 'option\.'"):
        parse_settings("option.=5", where="--a")


def test_an_option_value_keeps_its_equals_signs() -> None:
    assert parse_settings("option.expr=a=b").options == (("expr", "a=b"),)


def test_settings_built_in_python_or_read_back_are_checked_as_parsed_ones() -> None:
    """ABSettings from Python or from a stored A/B (`from_dict`) refuse what the parser refuses, and a stored A/B
    without a channels_last entry ran with the default (contiguous) format."""
    with pytest.raises(ConfigError, match="batch_size must be >= 1, got 0"):
        ABSettings(batch_size=0)
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        ABSettings.from_dict({"device": "tpu"})
    assert ABSettings.from_dict({}) == ABSettings()
    assert ABSettings.from_dict(parse_settings("channels_last=1,batch_size=4").to_dict()).channels_last
