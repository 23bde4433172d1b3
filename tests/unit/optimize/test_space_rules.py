"""Search space rules a mutation audit found unchecked: saved configs read back, two engines, a named pass that
does not apply here."""

from __future__ import annotations

import json

import pytest

from dlperf.errors import OptimizeError
from dlperf.optimize.space import Candidate, build_space, can_extend, config_from_dict, load_pass_modules
from dlperf.passes.base import PassContext
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.workload.zoo import get

pytestmark = pytest.mark.unit


def test_a_config_saved_with_an_older_version_is_refused_too() -> None:
    """Only a newer version was caught by the check: a recipe saved by an older dlperf, whose fields meant something
    else, would be rebuilt silently as this version's config."""
    load_pass_modules()
    saved = DynamicInt8Config().to_dict()
    with pytest.raises(OptimizeError, match="saved with config version 0"):
        config_from_dict({**saved, "version": 0})


def test_a_config_read_back_from_json_equals_the_one_saved() -> None:
    """Recipes and resumed runs are JSON: a tuple field comes back as a list, and a config holding a list neither
    equals the saved one nor hashes (its candidate key and the search's dedup)."""
    load_pass_modules()
    config = DynamicInt8Config(min_features=8, skip=("fc", "head"))
    back = config_from_dict(json.loads(json.dumps(config.to_dict())))
    assert back == config and back.skip == ("fc", "head")
    assert Candidate((back,)).key == Candidate((config,)).key
    hash(back)


def test_no_engine_follows_another_engine() -> None:
    """The engines share one stage and order, so canonical order alone lets 'onnxruntime + openvino' through: the
    second engine would convert a model the first already converted."""
    load_pass_modules()
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.passes.openvino import OpenVinoConfig
    from dlperf.passes.tensorrt import TensorRtConfig

    engines = [OrtConfig(), OpenVinoConfig(), TensorRtConfig()]
    for first in engines:
        for second in engines:
            assert not can_extend(Candidate((first,)), second), (first.label(), second.label())


def test_a_named_pass_that_offers_nothing_here_is_not_applicable_not_unknown() -> None:
    """`--passes dynamic_int8` on a GPU: its module (torch_dynamic_int8) offers nothing there and is listed under its
    module's name; the pass must be reported not applicable, with the reason, and not refused as an unknown pass."""
    space = build_space(get("mlp"), PassContext(device="cuda"), only=("dynamic_int8",))
    assert space.configs == []
    assert [s for s in space.skipped if s.startswith("torch_dynamic_int8: not applicable: ")], space.skipped
    assert "on CPU here" in space.skipped[0]
