"""--verify results fed back into the findings: a measured fix outweighs the estimate that chose it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dlperf.measure.ab import FASTER, SAME, SLOWER
from dlperf.profile import diagnose as dg
from dlperf.profile.fixes import batch_fix, bf16_fix, compile_fix, loader_fix
from dlperf.profile.session import ProfileReport
from dlperf.profile.verify import VerifyResult, reconcile
from dlperf.report.profile_view import profile_report
from tests.unit.profile.builders import CEILINGS, gemm, trace

pytestmark = pytest.mark.unit


def _finding(category: str, title: str, estimate: float, confidence: str = "high", share: float = 0.3,
             root: bool = False) -> dg.Finding:
    return dg.Finding(category, title, ["evidence"], "fix", share, confidence, estimated_speedup=estimate,
                      estimated_gain=f"up to {estimate:.2f}x faster steps (estimate)", root_cause=root)


def _result(f: dg.Finding, speedup: float, ci: tuple[float, float], verdict: str, fix_id: str = "loader"
            ) -> VerifyResult:
    fix = loader_fix({"num_workers": 2, "persistent_workers": True}) if fix_id == "loader" else compile_fix()
    return VerifyResult(f.category, fix, f.estimated_speedup, finding=f.title, speedup=speedup, speedup_ci=ci,
                        verdict=verdict)


def test_a_fix_measured_slower_downgrades_its_finding_and_the_verdict_says_so() -> None:
    loader = _finding(dg.INPUT_PIPELINE, "the training step waits for its data", 1.41, root=True)
    d = dg.Diagnosis([loader], dg.verdict_of(loader))
    r = _result(loader, 0.45, (0.42, 0.47), SLOWER)
    reconcile(d, [r])
    assert loader.verification == "contradicted" and loader.confidence == "low"
    assert loader.estimated_gain.startswith("not confirmed: estimated up to 1.41x, measured 0.45x (slower)")
    assert any("measured 0.45x (slower" in e and "the estimate did not hold" in e for e in loader.evidence)
    assert "0.45x (slower)" in d.verdict and "the estimate did not hold" in d.verdict
    assert r.to_dict()["outcome"] == "contradicted"


def test_no_difference_contradicts_an_estimate_above_the_ci_and_reranks() -> None:
    compute = _finding(dg.COMPUTE_BOUND, "the step is compute-bound", 2.19, share=0.6)
    bandwidth = _finding(dg.MEMORY_BANDWIDTH, "the step is memory-bandwidth-bound", 1.3, "medium", share=0.4)
    d = dg.Diagnosis([compute, bandwidth], dg.verdict_of(compute))
    reconcile(d, [_result(compute, 0.71, (0.60, 1.05), SAME, "compile")])
    assert compute.verification == "contradicted"
    # 0.6 x 0.5 (low) now ranks below 0.4 x 0.8 (medium)
    assert d.findings[0] is bandwidth and d.verdict.startswith(dg.MEMORY_BANDWIDTH)


def test_a_root_cause_whose_fix_measured_no_faster_no_longer_outranks_a_confirmed_finding() -> None:
    """8 intra-op threads on 2 cores (a root cause, 45% by rule of thumb): 2 threads measured 0.92x (CI 0.65-1.30x),
    yet the verdict still named it, "but its fix ... did not hold", above a compute finding whose bf16 fix
    measured 1.92x (CI 1.68-2.20x)."""
    threads = _finding(dg.HOST_THREADS, "torch uses more threads than there are cores", 1.68, "medium", share=0.45,
                       root=True)
    compute = _finding(dg.COMPUTE_BOUND, "the step is compute-bound", 1.43, share=0.84)
    d = dg.Diagnosis([threads, compute], dg.verdict_of(threads))
    reconcile(d, [_result(threads, 0.92, (0.65, 1.30), SAME, "compile"), _result(compute, 1.92, (1.68, 2.20), FASTER,
                                                                                  "compile")])
    assert threads.verification == "contradicted" and not threads.root_cause
    assert d.findings[0] is compute and d.verdict == f"{dg.COMPUTE_BOUND}: the step is compute-bound (84% of the step)"


def test_a_fix_measured_faster_confirms_and_an_estimate_inside_the_ci_is_inconclusive() -> None:
    fast = _finding(dg.INPUT_PIPELINE, "waits", 2.11)
    unsure = _finding(dg.COMPUTE_BOUND, "compute", 1.05, "medium")
    d = dg.Diagnosis([fast, unsure], "v")
    reconcile(d, [_result(fast, 2.37, (1.82, 3.52), FASTER), _result(unsure, 1.01, (0.97, 1.08), SAME, "compile")])
    assert fast.verification == "confirmed" and fast.confidence == "high"
    assert fast.estimated_gain.endswith("measured 2.37x with DataLoader(num_workers=2, persistent_workers=True)")
    assert unsure.verification == "inconclusive" and unsure.confidence == "medium"


def test_the_report_and_its_json_say_the_estimate_did_not_hold() -> None:
    t = trace([gemm(0, 9000)])
    analyses = dg.analyze_all(t, CEILINGS)
    diagnosis = dg.diagnose(analyses)
    assert diagnosis.top is not None
    top = diagnosis.top
    r = VerifyResult(top.category, compile_fix(), top.estimated_speedup, finding=top.title, speedup=0.71,
                     speedup_ci=(0.66, 0.77), verdict=SLOWER)
    report = ProfileReport("synthetic", t, analyses, reconcile(diagnosis, [r]), {"gemm_flops": {}}, [r], 1.0)
    data = report.to_dict()
    assert data["findings"][0]["verification"] == "contradicted" and data["findings"][0]["confidence"] == "low"
    assert data["verify"][0]["outcome"] == "contradicted" and "did not hold" in data["verdict"]
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(data))
    text = out.getvalue()
    assert "the fix was measured 0.71x (slower)" in text and "the estimate did not hold" in text
    assert "estimate not confirmed by --verify" in text


def _render(data: dict[str, object]) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(data))
    return out.getvalue()


def test_a_finding_confirmed_by_one_fix_gets_no_did_not_hold_line_for_another() -> None:
    """compile measured 1.00x against the compute finding's 8.93x while bf16 measured 2.85x: the finding was
    'fix measured faster' and, under the table, 'the estimate did not hold' at once."""
    t = trace([gemm(0, 9000)])
    analyses = dg.analyze_all(t, CEILINGS)
    diagnosis = dg.diagnose(analyses)
    top = diagnosis.top
    assert top is not None
    same = VerifyResult(top.category, compile_fix(), 8.93, finding=top.title, speedup=1.0,
                        speedup_ci=(0.97, 1.03), verdict=SAME)
    faster = VerifyResult(top.category, bf16_fix(), 8.93, finding=top.title, speedup=2.85,
                          speedup_ci=(2.6, 3.1), verdict=FASTER)
    data = ProfileReport("synthetic", t, analyses, reconcile(diagnosis, [same, faster]), {"gemm_flops": {}},
                         [same, faster], 1.0).to_dict()
    assert data["findings"][0]["verification"] == "confirmed"
    text = _render(data)
    # the estimate's column header is on two lines: "finding's" over "estimate"
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.rstrip().endswith("finding's"))
    assert "the estimate did not hold" not in text and "estimate" in lines[header + 1]


def test_a_fix_that_failed_is_shown_whole_under_the_table() -> None:
    t = trace([gemm(0, 9000)])
    analyses = dg.analyze_all(t, CEILINGS)
    diagnosis = dg.diagnose(analyses)
    top = diagnosis.top
    assert top is not None
    error = ("WorkloadError: workload 'input-nokw': its loader factory does not take num_workers: give it "
             "**kwargs and pass them on to torch.utils.data.DataLoader")
    failed = VerifyResult(top.category, compile_fix(), 2.0, finding=top.title, error=error)
    data = ProfileReport("synthetic", t, analyses, reconcile(diagnosis, [failed]), {"gemm_flops": {}},
                         [failed], 1.0).to_dict()
    text = " ".join(_render(data).split())
    assert "could not be measured: " + error in text


def test_memory_capacity_says_how_much_of_the_budget_is_in_use() -> None:
    from tests.unit.profile.builders import memory

    t = trace([gemm(0, 9000)], mem=memory(peak=5 << 30, budget=2 << 30))
    analyses = dg.analyze_all(t, CEILINGS)
    data = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0).to_dict()
    text = _render(data)
    assert "of the memory budget in use" in text and "explains 2" not in text


def test_a_fix_measured_far_faster_than_estimated_ranks_its_finding_first() -> None:
    """A generator-fed training step: the per-call overhead finding (91%, medium) had torch.compile measured 0.27x,
    the busy-machine finding (23%, medium) had 1 thread measured 6.78x (CI 3.19-14.42x); re-ranked by the estimated
    shares, the contradicted finding stayed first and the verdict named it."""
    overhead = _finding(dg.LAUNCH_OVERHEAD, "the step is dominated by its fixed per-call cost", 3.14, "medium",
                        share=0.91)
    shared = _finding(dg.HOST_THREADS, dg.SHARED_MACHINE, 1.13, "medium", share=0.23)
    d = dg.Diagnosis([overhead, shared], dg.verdict_of(overhead))
    reconcile(d, [_result(overhead, 0.27, (0.19, 0.39), SLOWER, "compile"),
                  _result(shared, 6.78, (3.19, 14.42), FASTER)])
    assert d.findings[0] is shared and shared.confidence == "high"
    assert shared.share == pytest.approx(1 - 1 / 3.19)
    assert shared.evidence[-1].endswith("; so it explains at least 69% of the step, not the 23% estimated")
    assert d.verdict == f"{dg.HOST_THREADS}: {dg.SHARED_MACHINE} (69% of the step)"
    # a measured gain that implies less than the estimate leaves the share alone
    fast = _finding(dg.INPUT_PIPELINE, "waits", 2.11, share=0.6)
    reconcile(dg.Diagnosis([fast], "v"), [_result(fast, 1.3, (1.1, 1.5), FASTER)])
    assert fast.share == 0.6 and "so it explains" not in fast.evidence[-1]
    # a measured share that prints as the estimate's adds no line reading "at least 99% ..., not the 99% estimated"
    loop = _finding(dg.LAUNCH_OVERHEAD, "the step is dominated by per-operator dispatch overhead", 3.89, share=0.99)
    reconcile(dg.Diagnosis([loop], "v"), [_result(loop, 179.9, (163.6, 197.8), FASTER, "compile")])
    assert loop.share == pytest.approx(1 - 1 / 163.6) and "so it explains" not in loop.evidence[-1]
    # a low-confidence finding (per-call overhead of a process starved of cores) whose fix measured faster is
    # at least medium: the measurement shows the overhead is real, not only waits for a core
    low = _finding(dg.LAUNCH_OVERHEAD, "the step is dominated by its fixed per-call cost", 2.35, "low", share=0.77)
    reconcile(dg.Diagnosis([low], "v"), [_result(low, 1.73, (1.66, 1.79), FASTER, "compile")])
    assert low.verification == "confirmed" and low.confidence == "medium" and low.share == 0.77


def test_a_finding_with_one_fix_contradicted_and_another_inconclusive_is_inconclusive() -> None:
    """Only a finding whose measured fixes all contradict its estimate is demoted: one fix that could not tell
    (its CI reaches the estimate) leaves it as it was."""
    f = _finding(dg.INPUT_PIPELINE, "waits", 1.5, "medium")
    d = dg.Diagnosis([f], dg.verdict_of(f))
    reconcile(d, [_result(f, 0.8, (0.75, 0.85), SLOWER), _result(f, 1.2, (0.9, 1.7), SAME, "compile")])
    assert f.verification == "inconclusive" and f.confidence == "medium"
    assert "did not hold" not in d.verdict


def test_the_share_a_confirmed_fix_implies_comes_from_the_surest_of_them() -> None:
    """Of two fixes measured faster, the share of the step they imply is the larger lower CI end's (2.0x at least:
    50%), not the larger point estimate's (3.0x, but only 1.1x at least)."""
    f = _finding(dg.INPUT_PIPELINE, "waits", 1.3, share=0.2)
    d = dg.Diagnosis([f], dg.verdict_of(f))
    reconcile(d, [_result(f, 3.0, (1.1, 8.0), FASTER), _result(f, 2.2, (2.0, 2.4), FASTER, "compile")])
    assert f.share == pytest.approx(0.5)
    assert "measured 2.20x" in f.estimated_gain


@pytest.mark.parametrize("top_measured", ["contradicted", "no fix to measure"])
def test_an_unmeasured_finding_ranked_above_a_measured_one_is_said_to_be_an_estimate(top_measured: str) -> None:
    """With --max-fixes 1 one finding's fix is measured: contradicted, it drops below the runner-up, whose estimate
    then named the verdict with nothing saying it was not measured; so did a top finding with no fix dlperf can
    apply, above the one whose fix measured faster."""
    compute = _finding(dg.COMPUTE_BOUND, "the step is compute-bound", 2.19, share=0.6)
    bandwidth = _finding(dg.MEMORY_BANDWIDTH, "the step is memory-bandwidth-bound", 1.3, "medium", share=0.4)
    if top_measured == "contradicted":
        findings, measured, unmeasured = [compute, bandwidth], compute, bandwidth
        r = _result(compute, 0.71, (0.60, 1.05), SAME, "compile")
    else:
        findings, measured, unmeasured = [compute, bandwidth], bandwidth, compute
        r = _result(bandwidth, 1.25, (1.2, 1.3), FASTER, "compile")
    d = reconcile(dg.Diagnosis(findings, dg.verdict_of(findings[0])), [r])
    assert d.findings[0] is unmeasured and unmeasured.verification == "not measured"
    assert measured.verification in ("contradicted", "confirmed")
    assert d.verdict == dg.verdict_of(unmeasured) + "; an estimate: --verify measured no fix for it"
    t = trace([gemm(0, 9000)])
    text = _render(ProfileReport("synthetic", t, dg.analyze_all(t, CEILINGS), d, {"gemm_flops": {}}, [r],
                                 1.0).to_dict())
    first = next(line for line in text.splitlines() if line.startswith("1. "))
    assert first.endswith("· an estimate, not measured by --verify"), first
    assert "; an estimate: --verify measured no fix for it" in text


def test_no_finding_is_marked_unmeasured_where_verify_measured_nothing() -> None:
    """A --verify whose every fix failed (or had none to measure) marks no finding: its table says why."""
    compute = _finding(dg.COMPUTE_BOUND, "the step is compute-bound", 2.19, share=0.6)
    failed = VerifyResult(compute.category, compile_fix(), 2.19, finding=compute.title, error="RuntimeError: x")
    d = reconcile(dg.Diagnosis([compute], dg.verdict_of(compute)), [failed])
    assert compute.verification is None and d.verdict == dg.verdict_of(compute)


def test_a_larger_batch_measured_beyond_its_factor_is_called_disturbed() -> None:
    """Batch 4 of 200 tiny operators on [1, 8], profiled on a busy 2-core machine: "batch 4 instead of 1 was measured
    9.81x (faster, 95% CI 6.61-14.56x)", where A's four calls of batch 1 against B's one of batch 4 can give 4x at
    most (one call took 0.88 ms, one of batch 4 0.90 ms, in a timing loop of ours)."""
    launch = _finding(dg.LAUNCH_OVERHEAD, "the step is dominated by per-operator dispatch overhead", 3.99, share=0.5)
    d = dg.Diagnosis([launch], dg.verdict_of(launch))
    r = VerifyResult(launch.category, batch_fix(1), 3.99, finding=launch.title, speedup=9.81,
                     speedup_ci=(6.61, 14.56), verdict=FASTER)
    reconcile(d, [r])
    line = next(e for e in launch.evidence if e.startswith("--verify: "))
    assert "more than the 4x that 4 times the items in a call can give" in line
    assert "faster, but by 4x at most; so it explains at least 75% of the step" in line
    assert launch.estimated_gain.endswith("measured 9.81x with batch 4 instead of 1 (disturbed: at most 4x)")
    # the share it implies is that of a 4x gain (75%), not of the disturbed 6.61x (85%)
    assert launch.share == pytest.approx(0.75)
    assert r.to_dict()["summary"] == r.describe()
    # within the factor it is an ordinary measurement
    ok = VerifyResult(launch.category, batch_fix(1), 3.99, finding=launch.title, speedup=3.81,
                      speedup_ci=(3.72, 3.89), verdict=FASTER)
    assert not ok.beyond_batch and "disturbed" not in ok.describe()
