"""The optimize benchmarks' lines (benchmarks/optimize_common.py): the worst single input's fidelity, which
--min-fidelity-worst constrains, beside the mean wherever the mean is shown."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

pytestmark = pytest.mark.unit

COMMON = Path(__file__).parents[3] / "benchmarks" / "optimize_common.py"


def _common() -> ModuleType:
    spec = importlib.util.spec_from_file_location("optimize_common", COMMON)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("optimize_common", module)
    spec.loader.exec_module(module)
    return module


def _ab(speedup: float) -> SimpleNamespace:
    side = SimpleNamespace(summary=lambda: {"p50_s": 0.010})
    return SimpleNamespace(speedup=speedup, speedup_ci=(speedup - 0.1, speedup + 0.1), a=side, b=side,
                           block_ratios=[1.0] * 16, verdict="faster")


def test_a_candidate_line_gives_its_worst_inputs_fidelity_beside_the_mean(capsys: pytest.CaptureFixture[str]) -> None:
    row = {"status": "ok", "label": "dynamic_int8", "p50_s": 0.004, "gain": 2.5, "metric": 0.9987,
           "metric_worst": 0.9312, "feasible": False, "violations": ["worst-case fidelity 0.9312 < 0.95"]}
    _common().progress("candidate_done", {"row": row})
    assert "metric 0.9987 (worst 0.9312), build 0 s: worst-case fidelity 0.9312 < 0.95" in capsys.readouterr().out
    _common().progress("candidate_done", {"row": {**row, "metric_worst": None}})  # no per-input figure
    assert "metric 0.9987, build" in capsys.readouterr().out


def test_the_table_judges_the_worst_input_where_the_benchmark_constrains_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    common = _common()
    assert not common.print_side_by_side(_ab(3.2), 3.0, 0.995, 0.93, 0.99, "held-out", target_worst=0.95)
    out = capsys.readouterr().out.splitlines()
    assert [line.split() for line in out if line.startswith("fidelity (")] == [
        ["fidelity", "(mean)", "0.9950", ">=", "0.99", "MET"], ["fidelity", "(worst)", "0.9300", ">=", "0.95", "NOT",
                                                                  "MET"]]
    assert out[-1] == "target 3.0x at fidelity >= 0.99, worst >= 0.95: NOT MET"
    assert common.print_side_by_side(_ab(3.2), 3.0, 0.995, 0.93, 0.99, "held-out")  # shown, not judged
    out = capsys.readouterr().out.splitlines()
    assert [line.split() for line in out if line.startswith("fidelity (worst)")] == [
        ["fidelity", "(worst)", "0.9300", "-"]]
    assert out[-1] == "target 3.0x at fidelity >= 0.99: MET"
