"""--verify: apply the top fixes dlperf can apply itself, and measure each against the original step in an
interleaved A/B (dlperf.measure.ab.ab_test), so the reported gain is measured, not assumed.

A is the step as profiled, B the step with one fix. For a larger batch, A runs `factor` steps per call
and B one step of `factor` times the batch, so both calls process the same number of items. A fix whose
one-off cost is large (torch.compile) is warmed up before the A/B and its setup time is reported apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dlperf.errors import DlperfError
from dlperf.measure.ab import ABConfig, ab_test
from dlperf.measure.bench import torch_threads
from dlperf.measure.stats import median
from dlperf.profile.capture import CaptureConfig, Step
from dlperf.profile.diagnose import Diagnosis
from dlperf.profile.fixes import Fix
from dlperf.profile.trace import TRAIN, ProfileTrace
from dlperf.workload.base import Workload

BLOCK_TARGET_S = 0.15
"""Aim for A/B blocks of about this long: long enough to cover a step, short enough to track drift."""
BUDGET_S = 10.0
"""Aim for about this much measuring per fix; blocks are added or removed to fit (at least 4, at most 12)."""
PREFETCH_BLOCKS = 4
"""A loader with workers keeps fetching while the other side's block runs, so B's first `workers x
prefetch_factor` steps of a block find their batches ready. Blocks hold at least this many times that
depth, so the head start is at most 1/PREFETCH_BLOCKS of a block's waits."""


@dataclass
class VerifyResult:
    category: str
    fix: Fix
    estimated_speedup: float | None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    verdict: str | None = None
    ab: dict[str, Any] | None = None
    setup_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.speedup is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category, "fix": self.fix.to_dict(), "estimated_speedup": self.estimated_speedup,
            "speedup": self.speedup, "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None,
            "verdict": self.verdict, "setup_s": self.setup_s, "error": self.error, "ab": self.ab,
        }


def choose_fixes(diagnosis: Diagnosis, trace: ProfileTrace, max_fixes: int = 2) -> list[tuple[str, float | None, Fix]]:
    """(category, estimated speedup, fix) for the first `max_fixes` distinct applicable fixes, in rank order."""
    chosen: list[tuple[str, float | None, Fix]] = []
    seen: set[str] = set()
    for finding in diagnosis.findings:
        for fix in finding.fixes:
            if fix.id in seen or (fix.id == "batch" and trace.mode == TRAIN):
                continue
            if fix.id == "loader" and trace.mode != TRAIN:
                continue
            seen.add(fix.id)
            chosen.append((finding.category, finding.estimated_speedup, fix))
            if len(chosen) >= max_fixes:
                return chosen
    return chosen


def verify(
    workload: Workload,
    config: CaptureConfig,
    trace: ProfileTrace,
    diagnosis: Diagnosis,
    max_fixes: int = 2,
    ab_config: ABConfig | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> list[VerifyResult]:
    """Measure each chosen fix against the profiled step; a fix that fails becomes a result with its error."""
    progress = on_progress or (lambda _msg: None)
    step_s = median(trace.unprofiled_step_s or trace.step_wall_s)
    # A keeps the thread count the step was profiled with, explicitly, since B may change it.
    base = replace(config.options, threads=config.options.threads or trace.threads.intra_op_threads,
                   batch_size=trace.batch_size)
    results = []
    with torch_threads(base.threads):
        for category, estimate, fix in choose_fixes(diagnosis, trace, max_fixes):
            progress(f"verifying: {fix.label}" + (" (compiling takes a while on a busy CPU)" if fix.compile else ""))
            results.append(_verify_one(workload, config, base, fix, category, estimate, step_s, ab_config))
    return results


def _verify_one(workload: Workload, config: CaptureConfig, base: Any, fix: Fix, category: str,
                estimate: float | None, step_s: float, ab_config: ABConfig | None) -> VerifyResult:
    result = VerifyResult(category=category, fix=fix, estimated_speedup=estimate)
    a = b = None
    try:
        a = Step(workload, config.mode, config.device, base)
        t0 = time.perf_counter()
        b = Step(workload, config.mode, config.device, fix.apply(base, base.batch_size))
        b()  # the first call pays one-off costs (compile, worker start-up)
        result.setup_s = time.perf_counter() - t0
        factor = fix.batch_factor
        step_a = a

        def fn_a() -> None:
            for _ in range(factor):
                step_a()

        per_call_s = max(step_s * factor, 1e-6)
        iters = max(1, min(20, round(BLOCK_TARGET_S / per_call_s)))
        workers = dict(fix.loader_kwargs).get("num_workers", 0)
        if workers:
            depth = workers * (dict(fix.loader_kwargs).get("prefetch_factor") or 2)
            iters = max(iters, PREFETCH_BLOCKS * depth)
        blocks = max(4, min(12, round(BUDGET_S / (2 * iters * per_call_s))))
        cfg = ab_config or ABConfig(blocks=blocks, iters_per_block=iters, warmup_iters=2)
        ab = ab_test(fn_a, b, cfg, items_per_call=base.batch_size * factor)
        result.speedup = ab.speedup
        result.speedup_ci = ab.speedup_ci
        result.verdict = ab.verdict
        result.ab = ab.to_dict()
    except (DlperfError, Exception) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for s in (a, b):
            if s is not None:
                s.close()
    return result
