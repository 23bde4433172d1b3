"""Each example in examples/bottlenecks/ is built to have one known bottleneck: the top finding must name it.

Ceilings are fixed (this machine kind's measured figures) so the roofline's ridge does not move with the
load on the machine; the steps run single-threaded except where threads are the point, so other processes
on a shared machine stall no OpenMP barrier of ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from dlperf.profile import diagnose as dg
from dlperf.profile.capture import CaptureConfig, StepOptions
from dlperf.profile.session import ProfileConfig, ProfileReport, profile_workload
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "bottlenecks"


@dataclass
class Ceilings:
    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float


CEILINGS = Ceilings({"fp32": 310e9}, 15e9)


def _profile(name: str, *, mode: str = "inference", threads: int | None = 1, verify: bool = False,
             budget: int | None = None, batch: int | None = None) -> ProfileReport:
    workload = load_workload(str(EXAMPLES / f"{name}.py"))
    capture = CaptureConfig(mode=mode, steps=3, warmup_steps=1, unprofiled_min_duration_s=0.2,
                            options=StepOptions(threads=threads, batch_size=batch), memory_budget_bytes=budget)
    return profile_workload(workload, ProfileConfig(capture=capture, verify=verify, max_fixes=1 if verify else None),
                            ceilings=CEILINGS)


def _top(report: ProfileReport) -> dg.Finding | None:
    """The top finding about the workload itself: on a shared machine (CI runners, this project's VM) the
    finding that other processes took the cores can honestly rank first, but it says nothing about the
    example's own bottleneck."""
    return next((f for f in report.diagnosis.findings if f.title != dg.SHARED_MACHINE), None)


@pytest.mark.slow
def test_slow_input_pipeline_and_workers_measured_faster() -> None:
    report = _profile("slow_input", mode="train", verify=True)
    top = _top(report)
    assert top is not None and top.category == dg.INPUT_PIPELINE
    assert report.analyses.loader is not None and report.analyses.loader.num_workers == 0
    assert report.verified is not None and len(report.verified) == 1
    v = report.verified[0]
    assert v.error is None and v.fix.id == "loader"
    assert v.ab is not None and len(v.ab["block_ratios"]) >= 4
    assert v.ab["a"]["n"] >= 4 * 16  # blocks of at least 4 x (2 workers x prefetch 2) steps
    # 80 ms of sleeping per batch split over 2 workers: a large, robust gain
    assert v.verdict == "faster" and v.speedup is not None and v.speedup > 1.3
    # 2 workers for a 5 ms-a-sample loader: about 2x. Blocks compared by their median step read 4-5x: a fed step
    # is bimodal (a batch ready or a wait) and the median of a block flipped between the two
    assert v.speedup < 4.0


def test_launch_overhead_and_larger_batch_measured() -> None:
    report = _profile("launch_overhead", verify=True)
    top = _top(report)
    assert top is not None and top.category == dg.LAUNCH_OVERHEAD
    assert report.analyses.launch.ops_per_step >= 900
    assert report.verified is not None and len(report.verified) == 1
    v = report.verified[0]
    assert v.error is None and v.fix.id == "batch"
    assert v.ab is not None and v.ab["a"]["items_per_call"] == 4 and len(v.ab["block_ratios"]) >= 4
    # 4 items per call either way; per-op cost does not grow with a [4, 8] tensor: far faster
    assert v.speedup is not None and v.speedup > 1.5


def test_compute_bound_gemms() -> None:
    report = _profile("compute_bound")
    top = _top(report)
    assert top is not None and top.category == dg.COMPUTE_BOUND
    assert report.analyses.operators.operators[0].name == "aten::addmm"
    assert report.analyses.operators.operators[0].flops == pytest.approx(4 * 2 * 256 * 512 * 512)


def test_bandwidth_bound_elementwise_chain() -> None:
    report = _profile("bandwidth_bound", batch=2)
    top = _top(report)
    assert top is not None and top.category == dg.MEMORY_BANDWIDTH
    assert all(f.category != dg.COMPUTE_BOUND for f in report.diagnosis.findings)


@pytest.mark.slow
def test_oversubscribed_threads() -> None:
    report = _profile("oversubscribed", threads=None, verify=True)
    found = [f for f in report.diagnosis.findings if f.title == "torch uses more threads than there are cores"]
    assert len(found) == 1
    # the top root cause, unless its fix measured no faster (on a busy machine): then it no longer outranks the rest
    if found[0].verification != "contradicted":
        assert _top(report) is found[0] and found[0].root_cause
    assert report.analyses.threads.intra_op_threads == 8 * (psutil.cpu_count() or 1)
    assert report.verified is not None and report.verified[0].fix.id == "threads"
    assert report.verified[0].error is None and report.verified[0].speedup is not None
    import torch

    assert torch.get_num_threads() != report.analyses.threads.intra_op_threads  # restored


def _settled_rss() -> int:
    """This process's RSS with earlier tests' garbage collected and glibc's free heap returned to the OS, so
    that it does not fall during the profile below what a budget was computed from."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int(psutil.Process().memory_info().rss)


def _memory_pressure_figures() -> dict[str, object]:
    """The memory_pressure profile against a budget of this process's settled RSS plus 192 MiB, with torch and the
    workload loaded first (what the profile's start holds besides the model): run in a fresh interpreter."""
    load_workload(str(EXAMPLES / "memory_pressure.py"))
    budget = _settled_rss() + 192 * 2**20
    report = _profile("memory_pressure", batch=2, budget=budget)
    top = _top(report)
    memory = report.analyses.memory
    return {"category": top.category if top else None, "setting": top.setting if top else None,
            "used_fraction": memory.used_fraction, "budget_source": memory.budget_source,
            "step_allocated_peak_bytes": memory.step_allocated_peak_bytes, "peak_rss_bytes": memory.peak_rss_bytes,
            "budget_bytes": memory.budget_bytes}


def test_memory_pressure_against_a_budget() -> None:
    # headroom 192 MiB, less than the step's 256 MiB intermediate: the peak is about 1.1 budgets. With the
    # headroom equal to the intermediate the peak was 1.00 budgets, and a peak under 0.93 of it loses to the
    # step's memory bandwidth finding (93% of the step): once, in the full suite, bandwidth ranked first.
    # In a fresh interpreter: in the suite's worker, the RSS history of earlier tests (a peak of 1,648 MiB, far above
    # the settled RSS plus the headroom) put the step's 256 MiB under half the overrun, and the finding had no
    # --batch-size setting
    import json
    import subprocess
    import sys

    code = ("import json; from tests.integration.profile.test_bottlenecks import _memory_pressure_figures as f; "
            "print(json.dumps(f()))")
    done = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLES.parents[1], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["category"] == dg.MEMORY_CAPACITY, figures
    assert figures["used_fraction"] >= 0.9
    assert figures["budget_source"] == "--memory-budget"
    assert figures["step_allocated_peak_bytes"] >= 256 * 2**20
    assert figures["setting"] == "--batch-size (smaller)", figures  # the step's intermediate is the overrun: a batch
    # of 1 halves it
