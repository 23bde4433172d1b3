"""A step that only ever runs one thread, on a busy machine: not starved by getting one core of two."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlperf.profile import diagnose as dg
from dlperf.profile.analyzers import threads as threads_analysis
from dlperf.profile.trace import ThreadInfo
from tests.unit.profile.builders import CEILINGS, gemm, threads, trace

pytestmark = pytest.mark.unit


def _diagnose(t: object) -> dg.Diagnosis:
    return dg.diagnose(dg.analyze_all(t, CEILINGS))  # type: ignore[arg-type]


def _busy(process_pct: float, busy_threads: int) -> ThreadInfo:
    # 2 intra-op threads on 2 cores, the machine fully busy: other processes hold 2 - process cores
    return replace(threads(intra=2, usable=2, process_pct=process_pct, system_pct=100.0), busy_threads=busy_threads)


def test_the_cores_a_step_could_use_are_capped_by_its_busy_threads() -> None:
    one = threads_analysis.analyze(trace([gemm(0, 9000)], thread_info=_busy(90.0, 1)))
    assert one.wanted_cores == 1
    two = threads_analysis.analyze(trace([gemm(0, 9000)], thread_info=_busy(90.0, 2)))
    assert two.wanted_cores == 2
    unmeasured = threads_analysis.analyze(trace([gemm(0, 9000)], thread_info=_busy(90.0, 0)))
    assert unmeasured.wanted_cores == 2  # 0: not measured, the intra-op threads as before


def test_a_one_thread_step_getting_most_of_a_core_is_not_starved() -> None:
    """`dlperf profile` of a Python loop over 200 Linear(8, 8) on a busy 2-core machine said "this process ran 2
    threads but got only 0.9 of 2 cores" (explains 33%, fix --threads 1), though one thread was busy: the step
    could never use a second core, and --verify measured --threads 1 at 0.95x."""
    d = _diagnose(trace([gemm(0, 9000)], thread_info=_busy(90.0, 1)))
    assert all(f.category != dg.HOST_THREADS for f in d.findings)
    assert not any("machine was busy" in c for c in d.caveats)
    # the same CPU use by two busy threads is starvation, as before
    both = _diagnose(trace([gemm(0, 9000)], thread_info=_busy(90.0, 2)))
    busy = [f for f in both.findings if f.title == dg.SHARED_MACHINE]
    assert len(busy) == 1 and "ran 2 threads but got only 0.9 of 2 cores" in busy[0].evidence[0]
    assert busy[0].fixes[0].threads == 1


def test_a_one_thread_step_getting_little_of_its_core_is_starved_without_a_threads_fix() -> None:
    d = _diagnose(trace([gemm(0, 9000)], thread_info=_busy(30.0, 1)))
    busy = [f for f in d.findings if f.title == dg.SHARED_MACHINE]
    assert len(busy) == 1
    assert "the step ran on 1 busy thread (of 2 intra-op threads), which got only 0.3 of the 1 core they could use" \
        in busy[0].evidence[0]
    assert busy[0].share == pytest.approx(0.7 * 0.9)  # got 0.3 of its 1 core, over the operators' 90%
    assert busy[0].fixes == [] and busy[0].setting is None  # fewer threads cannot help a step that runs one
    assert "fewer threads" not in busy[0].fix and "dedicated cores" in busy[0].fix
    assert any("got 0.3 of the 1 core its threads could use" in c for c in d.caveats)
