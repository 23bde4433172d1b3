"""A Workload object changed after loading (dataclasses.replace of zoo:mlp with the user's own metric) kept zoo:mlp's
source, so every candidate process rebuilt plain zoo:mlp and the search ranked by fidelity instead of the metric:
optimize refuses such an object before spending its budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlperf.errors import OptimizeError
from dlperf.optimize.search import OptimizeConfig, optimize
from dlperf.workload.base import EvalSpec
from dlperf.workload.loader import is_rebuilt, load_workload

pytestmark = pytest.mark.unit


def test_loaded_workloads_are_what_their_source_builds(tmp_path: Path) -> None:
    path = tmp_path / "wl.py"
    path.write_text("import torch\ndef model():\n    return torch.nn.Linear(4, 2)\n"
                    "def inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")
    for spec in ("zoo:mlp", str(path)):
        wl = load_workload(spec)
        assert is_rebuilt(wl) and is_rebuilt(load_workload(wl))
        assert not is_rebuilt(dataclasses.replace(wl, name="mine"))


def test_optimize_refuses_a_workload_its_source_does_not_build(tmp_path: Path) -> None:
    mine = dataclasses.replace(load_workload("zoo:mlp"),
                               eval=EvalSpec(evaluate=lambda predict: 1.0, metric_name="mag"))
    with pytest.raises(OptimizeError, match=r"not what its source 'zoo:mlp' builds .* pass 'file.py:NAME'"):
        optimize(mine, OptimizeConfig(workdir=str(tmp_path / "work")), store=str(tmp_path / "runs.db"))
