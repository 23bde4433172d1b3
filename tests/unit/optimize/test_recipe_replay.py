"""A torch recipe whose pass does not replay on the loading machine names the artifact, the pass and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dlperf
import dlperf.measure.env
from dlperf.errors import OptimizeError
from dlperf.optimize.artifact import TORCH_FORMAT, write_manifest
from dlperf.optimize.space import Candidate
from dlperf.passes.precision import PrecisionConfig
from dlperf.workload.zoo import get

pytestmark = pytest.mark.unit


def _bf16_recipe(folder: Path) -> Path:
    """A zoo:mlp recipe with bf16 autocast, written as export_torch_recipe writes one."""
    folder.mkdir()
    torch.save(get("mlp").build_model().state_dict(), folder / "weights.pt")
    write_manifest(folder, {"engine": "torch", "format": TORCH_FORMAT, "files": ["weights.pt"], "trained_after": -1,
                            "inputs": [], "outputs": [],
                            "workload": "zoo:mlp", "recipe": Candidate((PrecisionConfig(),)).to_list(),
                            "batch_size": 1, "device": "cpu",
                            "environment": {"cpu_model": "Intel Xeon 8480+"}})
    return folder


def test_a_recipe_whose_pass_does_not_apply_here_says_which_artifact_and_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded on a CPU without bf16 (this machine's flags, as measure.env reads them, stand for one), dlperf.load
    raised the pass's own PassNotApplicable: 'precision: not applicable: no native bf16 on this CPU ...', naming
    neither the artifact nor a way out."""
    folder = _bf16_recipe(tmp_path / "bf16")
    monkeypatch.setattr(dlperf.measure.env, "cpu_flags", lambda *args, **kwargs: ["avx2", "fma"])
    with pytest.raises(OptimizeError) as info:
        dlperf.load(folder)
    assert str(info.value) == (
        f"artifact '{folder}': its recipe replays precision, which does not apply here: no native bf16 on this CPU "
        "(flags lack avx512_bf16/amx_bf16); load it on a machine like the one it was measured on (Intel Xeon 8480+, "
        "where it was exported), or run dlperf optimize on this one")
    # where the CPU has bf16 it replays, and returns fp32 like the original
    monkeypatch.setattr(dlperf.measure.env, "cpu_flags", lambda *args, **kwargs: ["avx512_bf16"])
    out = dlperf.load(folder)(torch.randn(3, 64))
    assert out.shape == (3, 10) and out.dtype == torch.float32


def test_a_recipe_s_thread_count_from_a_larger_machine_is_capped_at_this_one_s_cpus(tmp_path: Path) -> None:
    """hygiene(threads=N) is the export machine's physical cores, set process-wide when the recipe loads: a recipe
    from a 16-core machine set 16 torch threads on a 2-CPU one."""
    from dlperf.measure.env import usable_cores
    from dlperf.passes.hygiene import HygieneConfig

    folder = tmp_path / "hygiene"
    folder.mkdir()
    torch.save(get("mlp").build_model().state_dict(), folder / "weights.pt")
    many = usable_cores() + 6
    write_manifest(folder, {"engine": "torch", "format": TORCH_FORMAT, "files": ["weights.pt"], "trained_after": -1,
                            "inputs": [], "outputs": [],
                            "workload": "zoo:mlp", "recipe": Candidate((HygieneConfig(threads=many),)).to_list()})
    before = torch.get_num_threads()
    try:
        out = dlperf.load(folder)(torch.randn(2, 64))
        assert torch.get_num_threads() == usable_cores()
    finally:
        torch.set_num_threads(before)
    assert out.shape == (2, 10)


def _hygiene_recipe(folder: Path, threads: object) -> Path:
    """A zoo:mlp recipe whose hygiene pass has `threads` as written in its manifest (an edited one, or exported on a
    large machine)."""
    folder.mkdir()
    torch.save(get("mlp").build_model().state_dict(), folder / "weights.pt")
    write_manifest(folder, {"engine": "torch", "format": TORCH_FORMAT, "files": ["weights.pt"], "trained_after": -1,
                            "inputs": [], "outputs": [], "workload": "zoo:mlp",
                            "recipe": [{"pass": "hygiene", "version": 1, "inference_mode": True, "threads": threads}]})
    return folder


def test_a_recipe_with_more_threads_than_this_machine_accepts_loads_at_its_cpus(tmp_path: Path) -> None:
    """A recipe exported on a 128-core machine (hygiene threads=128, its physical cores) failed to load on a small
    one: 'hygiene: threads 128 is more than 64, the most accepted on this machine ...', from the config's own check,
    before the replay that caps them."""
    from dlperf.measure.env import thread_limit, usable_cores

    folder = _hygiene_recipe(tmp_path / "big", thread_limit() * 2)
    before = torch.get_num_threads()
    try:
        out = dlperf.load(folder)(torch.randn(2, 64))
        assert torch.get_num_threads() == usable_cores()
    finally:
        torch.set_num_threads(before)
    assert out.shape == (2, 10)


@pytest.mark.parametrize(("threads", "said"), [(0, "threads must be >= 1, got 0"),
                                               ("16", "threads must be a whole number >= 1 (or null: torch's "
                                                      "default), got '16'"),
                                               (2.5, "got 2.5"), (True, "got True")])
def test_a_recipe_with_threads_no_machine_accepts_is_refused_naming_the_artifact(tmp_path: Path, threads: object,
                                                                                 said: str) -> None:
    folder = _hygiene_recipe(tmp_path / "bad", threads)
    with pytest.raises(OptimizeError) as info:
        dlperf.load(folder)
    assert str(info.value).startswith(f"artifact '{folder}': its recipe cannot be replayed: hygiene: ")
    assert said in str(info.value) and str(info.value).endswith("export it again with dlperf optimize")
