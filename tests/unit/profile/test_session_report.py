"""What a profile's report says of the step's two timings, and how many progress calls it plans."""

from __future__ import annotations

import pytest

from dlperf.profile.capture import CaptureConfig, StepOptions
from dlperf.profile.diagnose import analyze_all, diagnose
from dlperf.profile.session import ProfileConfig, ProfileReport, progress_steps
from tests.unit.profile.builders import CEILINGS, gemm, trace

pytestmark = pytest.mark.unit


def test_the_reports_overhead_names_the_profiled_and_the_unprofiled_step_each_as_itself() -> None:
    tr = trace([gemm(0, 9000)], unprofiled_s=0.004)  # a profiled step of 10 ms
    analyses = analyze_all(tr, CEILINGS)
    report = ProfileReport(workload="w", trace=tr, analyses=analyses, diagnosis=diagnose(analyses), ceilings={},
                           verified=None, elapsed_s=1.0, trace_path="t.json")
    assert report.to_dict()["overhead"] == {"profiled_step_s": pytest.approx(0.01),
                                            "unprofiled_step_s": pytest.approx(0.004), "ratio": pytest.approx(2.5)}


def test_the_calibration_planned_is_at_no_more_threads_than_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress bar counts the calibration load_ceilings runs: at the usable cores, as the cache is per count."""
    import torch

    from dlperf.calibrate import ceilings
    from dlperf.measure import env

    seen: list[int] = []

    def measuring_steps(device: str = "cpu", *, quick: bool = False) -> int:
        seen.append(torch.get_num_threads())
        return 5

    monkeypatch.setattr(env, "usable_cores", lambda: 1)
    monkeypatch.setattr(ceilings, "measuring_steps", measuring_steps)
    config = ProfileConfig(capture=CaptureConfig(options=StepOptions(threads=2)))
    assert progress_steps(config) == 5 + 4 and seen == [1]
    assert progress_steps(config, ceilings_given=True) == 4 and seen == [1]
    assert progress_steps(ProfileConfig(verify=True, max_fixes=3), ceilings_given=True) == 4 + 3
    assert progress_steps(ProfileConfig(verify=True), ceilings_given=True) == 4 + 2


def test_max_fixes_without_verify_is_said_to_be_unused_and_its_default_is_two_with_verify() -> None:
    """A default of 2 could not be told from a 2 asked for: `max_fixes=3` without `verify` was ignored unsaid."""
    from dlperf.errors import ConfigError, DlperfWarning, WorkloadError
    from dlperf.profile.session import profile_workload

    assert ProfileConfig(verify=True).fixes_to_verify == 2 and ProfileConfig(max_fixes=3).fixes_to_verify == 0
    assert ProfileConfig(verify=True, max_fixes=1).fixes_to_verify == 1
    with pytest.raises(ConfigError, match="max_fixes must be >= 1, got 0"):
        ProfileConfig(verify=True, max_fixes=0)
    # said before any work: the workload that does not load fails after it
    with pytest.warns(DlperfWarning, match="max_fixes=3 is used only with verify=True"), \
            pytest.raises(WorkloadError, match="no-such-model"):
        profile_workload("zoo:no-such-model", ProfileConfig(max_fixes=3))


def test_a_module_or_other_object_is_refused_before_any_work_with_what_to_pass() -> None:
    """`dlperf.profile_workload(nn.Sequential(...))`, as `dlperf.bench(model, ...)` takes a module, failed in the
    capture with "'Sequential' object has no attribute 'default_batch_size'" (after calibrating the ceilings)."""
    import torch

    from dlperf.errors import ConfigError
    from dlperf.profile.session import profile_workload

    with pytest.raises(ConfigError, match=r"got Sequential: for a module, pass dlperf.load_workload\(model, \(x,\)\)"):
        profile_workload(torch.nn.Sequential(torch.nn.Linear(4, 4)), ceilings=CEILINGS)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"a spec such as 'zoo:mlp' or 'file.py', or a path; got dict$"):
        profile_workload({"model": 1}, ceilings=CEILINGS)  # type: ignore[arg-type]


def test_a_report_printed_in_a_notebook_is_one_line_naming_where_the_findings_are() -> None:
    """The dataclass repr printed the whole trace, every operator: 61 KB for a three-layer MLP."""
    tr = trace([gemm(0, 9000)] * 200, unprofiled_s=0.004)
    analyses = analyze_all(tr, CEILINGS)
    diagnosis = diagnose(analyses)
    report = ProfileReport(workload="w", trace=tr, analyses=analyses, diagnosis=diagnosis, ceilings={},
                           verified=None, elapsed_s=1.25)
    shown = repr(report)
    assert shown.startswith(f"ProfileReport('w', {diagnosis.verdict!r}, {len(diagnosis.findings)} finding")
    assert "in .diagnosis.findings" in shown and shown.endswith(", 1.2 s)") and len(shown) < 400
