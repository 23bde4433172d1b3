"""Search space: discovery, canonical order, extension rules, configs saved and rebuilt."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.errors import ConfigError, OptimizeError
from dlperf.optimize.space import (
    Candidate,
    PassOption,
    SearchSpace,
    build_space,
    can_extend,
    candidate_from_list,
    check_pass_names,
    config_from_dict,
    extensions,
    load_pass_modules,
    pass_module_names,
    with_metric_budget,
)
from dlperf.passes.base import PassContext
from dlperf.passes.compile import CompileConfig
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from dlperf.workload.zoo import get

pytestmark = pytest.mark.unit


class _Engine:
    pass


def test_discovery_lists_pass_modules_but_not_private_ones() -> None:
    names = pass_module_names()
    assert "dlperf.passes.hygiene" in names and "dlperf.passes.compile" in names
    assert "dlperf.passes.base" not in names
    assert not any(n.rsplit(".", 1)[-1].startswith("_") for n in names)


def test_candidate_key_is_stable_and_label_readable() -> None:
    a = Candidate((HygieneConfig(), CompileConfig()))
    b = Candidate((HygieneConfig(), CompileConfig()))
    assert a.key == b.key and len(a.key) == 12
    assert a.key != Candidate((HygieneConfig(), CompileConfig(freezing=True))).key
    assert a.label == "hygiene + compile"
    assert Candidate().label == "baseline" and Candidate().is_baseline
    assert a.prefix == Candidate((HygieneConfig(),))


def test_config_round_trip_and_version_check() -> None:
    load_pass_modules()
    config = DynamicInt8Config(min_features=8, skip=("fc",))
    assert config_from_dict(config.to_dict()) == config
    cand = Candidate((HygieneConfig(threads=2), config))
    assert candidate_from_list(cand.to_list()) == cand
    with pytest.raises(OptimizeError, match="version 99"):
        config_from_dict({**config.to_dict(), "version": 99})
    with pytest.raises(OptimizeError, match="not known"):
        config_from_dict({"pass": "warp-drive", "version": 1})


def test_extension_follows_stage_order_and_one_config_per_pass() -> None:
    hyg, int8, comp = HygieneConfig(), DynamicInt8Config(), CompileConfig()
    assert can_extend(Candidate(), comp)
    assert can_extend(Candidate((hyg,)), int8)
    assert can_extend(Candidate((hyg, int8)), comp)
    assert not can_extend(Candidate((comp,)), int8)  # compile comes last among torch transforms
    assert not can_extend(Candidate((int8,)), hyg)  # prepare before transform
    assert not can_extend(Candidate((comp,)), CompileConfig(freezing=True))  # one config per pass
    space = SearchSpace([PassOption(c, "m") for c in (hyg, int8, comp)], [])
    assert [c.label for c in extensions(Candidate((hyg,)), space)] == ["hygiene + dynamic_int8", "hygiene + compile"]


def test_one_precision_setting_pass_per_pipeline() -> None:
    """int8 and bf16/fp16/tf32 passes each take an fp32 model: 'dynamic_int8 + precision' was built and
    recorded as not applicable ('the model is already int8'), on a CPU with bf16."""
    from dlperf.passes.precision import PrecisionConfig
    from dlperf.passes.qat import QatConfig
    from dlperf.passes.torchao_quant import TorchAoConfig

    int8, bf16 = DynamicInt8Config(), PrecisionConfig()
    assert not can_extend(Candidate((int8,)), bf16)
    assert not can_extend(Candidate((HygieneConfig(), int8)), bf16)
    assert not can_extend(Candidate((QatConfig(),)), TorchAoConfig())
    assert can_extend(Candidate((bf16,)), CompileConfig()) and can_extend(Candidate((int8,)), CompileConfig())


def test_nothing_follows_an_engine_pass() -> None:
    load_pass_modules()
    from dlperf.passes.onnxruntime import OrtConfig

    engine = OrtConfig()
    assert not can_extend(Candidate((engine,)), CompileConfig())


def test_an_engine_follows_only_passes_that_change_what_it_converts() -> None:
    load_pass_modules()
    from dlperf.passes.channels_last import ChannelsLastConfig
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.passes.openvino import OpenVinoConfig
    from dlperf.passes.precision import PrecisionConfig
    from dlperf.passes.pruning import PruneConfig

    engine = OpenVinoConfig(precision="int8-static", keep_fp32="auto")
    # Call-time-only passes: the engine converts the same module as without them (a duplicate candidate).
    for prefix in (HygieneConfig(), ChannelsLastConfig(), CompileConfig(), PrecisionConfig(mode="autocast")):
        assert not can_extend(Candidate((prefix,)), engine), prefix.label()
    # Torch-only low-precision layers: nothing an engine can convert.
    for low in (DynamicInt8Config(), PrecisionConfig(mode="cast")):
        assert not can_extend(Candidate((low,)), OrtConfig()), low.label()
    # Pruning changes the weights: pruned + engine is a different model.
    pruned = PruneConfig(amount=0.25)
    assert can_extend(Candidate((pruned,)), engine)
    assert not can_extend(Candidate((HygieneConfig(), pruned)), engine)
    space = SearchSpace([PassOption(c, "m") for c in (HygieneConfig(), DynamicInt8Config(), engine)], [])
    assert [c.label for c in extensions(Candidate((HygieneConfig(),)), space)] == ["hygiene + dynamic_int8"]


def test_build_space_restricts_to_named_passes_and_rejects_unknown() -> None:
    workload = get("mlp")
    space = build_space(workload, PassContext(), only=("hygiene", "dynamic_int8"))
    assert {c.name for c in space.configs} == {"hygiene", "dynamic_int8"}
    assert next(c.name for c in space.configs) == "hygiene"  # prepare stage first
    assert not any(s.startswith("channels_last") for s in space.skipped)  # not asked for: not consulted
    space = build_space(workload, PassContext(), only=("channels_last", "hygiene"))
    assert any(s.startswith("channels_last: not applicable") for s in space.skipped)
    with pytest.raises(ConfigError, match="unknown passes warp"):
        build_space(workload, PassContext(), only=("warp",))


def test_a_pass_module_without_a_search_space_is_listed_as_skipped_with_why(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """It was left out without a word: `--passes fuse_linear_relu` measured the baseline alone and said "no pass
    offered a configuration for this workload (see the skipped passes)", with no pass listed."""
    import dlperf.passes.base as base

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # the pass below stays out of the other tests
    file = tmp_path / "y1_unsearched.py"
    file.write_text(
        "from dataclasses import dataclass\n"
        "from typing import ClassVar\n"
        "from dlperf.passes.base import PassConfig, register\n\n"
        "@dataclass(frozen=True)\n"
        "class UnsearchedConfig(PassConfig):\n"
        "    name: ClassVar[str] = 'y1_unsearched'\n\n"
        "@register(UnsearchedConfig)\n"
        "class Unsearched:\n"
        "    def applicable(self, config, state, ctx): return None\n"
        "    def apply(self, config, state, ctx): return state\n")
    space = build_space(get("mlp"), PassContext(), only=("y1_unsearched",), extra_modules=[str(file)])
    assert space.configs == []
    assert space.skipped == ["y1_unsearched: not applicable: its module defines no search_space(workload, ctx), so "
                             "the search has no configuration of it to try"]
    # sensitivity.py registers no pass: nothing to say about it
    assert not any(s.startswith("sensitivity") for s in build_space(get("mlp"), PassContext()).skipped)


@pytest.mark.parametrize(("names", "hint"), [
    (("onnxruntim",), "; did you mean onnxruntime?"),
    (("hygeine", "openvin", "warp"), "; did you mean hygiene for hygeine, openvino for openvin?"),
    (("warp",), "tensorrt, torchao"),  # nothing close: the known passes only
    (("onnxruntime(precision=int8-dynamic)",), "give onnxruntime: the search tries each configuration a pass offers "
                                               "for the workload"),
])
def test_pass_names_are_checked_without_a_workload_and_a_typo_gets_the_closest_pass(names: tuple[str, ...],
                                                                                    hint: str) -> None:
    """`--passes onnxruntim` was refused only by build_space, after the workload loaded, and with no suggestion."""
    with pytest.raises(ConfigError, match=r"^--passes \(passes\) names unknown passes ") as caught:
        check_pass_names(names)
    assert str(caught.value).endswith(hint)
    check_pass_names(("hygiene", "onnxruntime"))
    check_pass_names(None)


def test_a_missing_engine_library_gets_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from dlperf.optimize.space import missing_library

    assert missing_library("hygiene") is None  # not an engine
    if importlib.util.find_spec("onnxruntime") is not None:
        assert missing_library("onnxruntime") is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None)
    assert missing_library("openvino") == "openvino is not installed: install dlperf[openvino]"
    # the pass runs on torch_tensorrt, which no dlperf extra installs (dlperf[gpu] is only NVML)
    assert missing_library("tensorrt") == ("torch_tensorrt is not installed: install torch-tensorrt (the build "
                                           "that matches your torch; no dlperf extra brings it)")


def test_the_search_budget_reaches_only_the_fallback_searching_configs() -> None:
    load_pass_modules()
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.passes.openvino import OpenVinoConfig

    auto = OrtConfig(precision="int8-static", keep_fp32="auto")
    fixed = OpenVinoConfig(precision="int8-static")
    space = SearchSpace([PassOption(c, "m") for c in (HygieneConfig(), auto, fixed)], ["x: not applicable"])
    budgeted = with_metric_budget(space, 0.0097331234)
    assert budgeted.configs[0] == HygieneConfig() and budgeted.configs[2] == fixed  # untouched
    assert budgeted.configs[1] == OrtConfig(precision="int8-static", keep_fp32="auto", max_metric_drop=0.009733)
    assert budgeted.skipped == ["x: not applicable"]
    # Deterministic: the same baseline gives the same candidate keys (an interrupted search resumes).
    assert Candidate((with_metric_budget(space, 0.0097331234).configs[1],)).key == Candidate((budgeted.configs[1],)).key
    # The budget is the search's own constraint (the report heads with it): the label leaves it out, the key not.
    assert budgeted.configs[1].label() == auto.label() == "onnxruntime(precision=int8-static,keep_fp32=auto)"
    assert Candidate((budgeted.configs[1],)).key != Candidate((with_metric_budget(space, 0.02).configs[1],)).key


def test_cost_classes_order_cheap_candidates_first() -> None:
    load_pass_modules()
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.passes.pruning import PruneConfig

    assert OrtConfig().relative_cost() == 0 and OrtConfig(precision="int8-dynamic").relative_cost() == 0
    assert OrtConfig(precision="int8-static").relative_cost() == 1
    assert OrtConfig(precision="int8-static", keep_fp32="auto").relative_cost() == 2
    assert CompileConfig().relative_cost() == 1 and CompileConfig(mode="max-autotune").relative_cost() == 3
    assert PruneConfig(finetune_steps=0).relative_cost() == 0 and PruneConfig().relative_cost() == 2
    assert HygieneConfig().relative_cost() == 0


def test_a_pass_module_file_that_failed_to_import_is_not_cached_half_run(tmp_path: Path) -> None:
    """The failed module stayed in sys.modules: the next import of the file returned it, without its passes and
    without an error."""
    from dlperf.optimize.space import import_module

    file = tmp_path / "broken_passes.py"
    file.write_text("VALUE = 1\nraise RuntimeError('half-way')\n")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="half-way"):
            import_module(str(file))
    file.write_text("VALUE = 2\n")
    assert import_module(str(file)).VALUE == 2


def test_a_pass_module_that_fails_on_a_dlperf_import_is_an_error_not_skipped(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A new pass module with a misspelt import of dlperf's (torch_reasons for torch_reason) was skipped like one
    whose optional library is missing: its pass vanished, and `--passes fuse_linear_relu` said only "unknown
    passes fuse_linear_relu: known passes are ..."."""
    import dlperf.optimize.space as space

    (tmp_path / "dlperf_y1_typo_pass.py").write_text("from dlperf.passes._torch_call import torch_reasons\n")
    (tmp_path / "dlperf_y1_optional_pass.py").write_text("import dlperf_y1_no_such_library\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    builtin = space.pass_module_names()
    monkeypatch.setattr(space, "pass_module_names", lambda: [*builtin, "dlperf_y1_optional_pass"])
    names = [name for name, _ in load_pass_modules()]  # a missing optional library: skipped, as before
    assert "dlperf_y1_optional_pass" not in names and "dlperf.passes.hygiene" in names
    monkeypatch.setattr(space, "pass_module_names", lambda: [*builtin, "dlperf_y1_typo_pass"])
    with pytest.raises(OptimizeError, match=r"pass module 'dlperf_y1_typo_pass' failed to import: ImportError: "
                                            r"cannot import name 'torch_reasons'"):
        load_pass_modules()
    monkeypatch.setattr(space, "pass_module_names", lambda: builtin)
    with pytest.raises(OptimizeError, match=r"pass module 'dlperf_y1_optional_pass' failed to import: "
                                            r"ModuleNotFoundError: No module named 'dlperf_y1_no_such_library'"):
        load_pass_modules(["dlperf_y1_optional_pass"])  # named explicitly: its error is the user's to see


def test_a_configuration_label_given_to_passes_is_told_to_name_the_pass() -> None:
    """`--passes "onnxruntime(precision=int8-dynamic)"`, a label copied from the report's table, was refused as an
    unknown pass, with no word that --passes takes pass names and the search tries each of a pass's configurations."""
    workload = get("mlp")
    with pytest.raises(ConfigError) as info:
        build_space(workload, PassContext(), only=("onnxruntime(precision=int8-dynamic)", "warp"))
    assert str(info.value).endswith(
        "; --passes takes pass names, not configurations: give onnxruntime: the search tries each configuration a "
        "pass offers for the workload")
    with pytest.raises(ConfigError) as info:  # a plain typo gets no such hint
        build_space(workload, PassContext(), only=("warp",))
    assert "configurations" not in str(info.value)


def test_a_budget_on_a_small_metric_scale_is_not_rounded_away() -> None:
    """`--max-metric-drop 20%` on a workload whose metric is an MSE of 1.06e-06 handed the int8 fallback search a
    budget of 0.0 (rounded to 1e-6), so it kept every layer fp32 whatever the trials scored."""
    load_pass_modules()
    from dlperf.passes.onnxruntime import OrtConfig

    space = SearchSpace([PassOption(OrtConfig(precision="int8-static", keep_fp32="auto"), "m")], [])
    assert with_metric_budget(space, 0.2 * 1.0607231e-06).configs[0].max_metric_drop == 2.121e-07  # type: ignore[attr-defined]
    # budgets of 1e-3 and more round to 1e-6 as before (the keys of searches recorded then stay the same)
    assert with_metric_budget(space, 0.00123456789).configs[0].max_metric_drop == 0.001235  # type: ignore[attr-defined]
    assert with_metric_budget(space, 0.0).configs[0].max_metric_drop == 0.0  # type: ignore[attr-defined]
