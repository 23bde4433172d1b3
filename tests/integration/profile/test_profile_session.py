"""profile_workload's order of work: the ceilings given, the report handed over before --verify, the verified fixes
fed back into the findings, the trace file named in the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.measure.ab import SLOWER
from dlperf.profile import diagnose as dg
from dlperf.profile import session
from dlperf.profile.capture import CaptureConfig
from dlperf.profile.fixes import compile_fix
from dlperf.profile.session import ProfileConfig, ProfileReport, profile_workload
from dlperf.profile.verify import VerifyResult
from dlperf.workload.base import Workload

pytestmark = pytest.mark.integration


@dataclass
class Ceilings:
    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float


def test_a_verified_profile_uses_the_ceilings_given_and_feeds_the_measured_fix_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement of the fixes is stubbed (its own tests are test_verify's): it measures the one finding's
    fix 0.5x, which the final report's finding must say; the report handed over before it has no fix measured."""
    finding = dg.Finding(dg.COMPUTE_BOUND, "the step is compute-bound", ["evidence"], "fix", 0.6, "high",
                         estimated_speedup=2.0, estimated_gain="up to 2.00x faster steps (estimate)",
                         fixes=[compile_fix()])
    asked: list[int] = []

    def measured(workload: Any, config: Any, trace: Any, diagnosis: dg.Diagnosis, max_fixes: int,
                 on_progress: Any = None) -> list[VerifyResult]:
        asked.append(max_fixes)
        return [VerifyResult(finding.category, compile_fix(), 2.0, finding=finding.title, speedup=0.5,
                             speedup_ci=(0.45, 0.55), verdict=SLOWER)]

    def no_calibration(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the ceilings given are the ones to use")

    monkeypatch.setattr(session, "diagnose", lambda analyses: dg.Diagnosis([finding], dg.verdict_of(finding)))
    monkeypatch.setattr(session, "verify", measured)
    monkeypatch.setattr(session, "load_ceilings", no_calibration)
    workload = Workload(name="lin", make_model=lambda: torch.nn.Linear(8, 8),
                        make_inputs=lambda b: (torch.randn(b, 8),))
    trace_path = str(tmp_path / "trace.json")
    config = ProfileConfig(capture=CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.01,
                                                 trace_path=trace_path), verify=True, max_fixes=3)
    before: list[ProfileReport] = []
    report = profile_workload(workload, config, ceilings=Ceilings({"fp32": 1e9}, 1e9), on_diagnosis=before.append)
    assert [(r.verified, r.trace_path) for r in before] == [(None, trace_path)]
    assert asked == [3]
    assert report.ceilings == {"gemm_flops": {"fp32": 1e9}, "memory_bandwidth_bytes_s": 1e9}
    assert report.trace_path == trace_path and Path(trace_path).stat().st_size > 0
    assert report.verified is not None and report.verified[0].speedup == 0.5
    assert report.diagnosis.findings[0].verification == "contradicted"
    assert report.to_dict()["findings"][0]["confidence"] == "low"
