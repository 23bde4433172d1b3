"""One profile, end to end: capture -> analyses -> diagnosis -> (optionally) verified fixes, as a report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import ConfigError, DlperfWarning
from dlperf.profile.analyzers.operators import CeilingsLike
from dlperf.profile.capture import CaptureConfig, capture
from dlperf.profile.diagnose import Analyses, Diagnosis, analyze_all, diagnose
from dlperf.profile.trace import ProfileTrace
from dlperf.profile.verify import VerifyResult, reconcile, verify
from dlperf.workload.base import Workload


@dataclass(frozen=True)
class ProfileConfig:
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    verify: bool = False
    max_fixes: int | None = None
    """The fixes `verify` measures (None: `DEFAULT_MAX_FIXES`); given without `verify`, `profile_workload` warns that
    it is unused (a default of 2 could not be told from a 2 that was asked for, and the CLI ignored `--max-fixes 3`
    without `--verify` silently)."""
    quick_ceilings: bool = False
    """Measure small-size ceilings when none are cached (a full `dlperf calibrate` result is used if cached)."""

    def __post_init__(self) -> None:
        if self.max_fixes is not None and self.max_fixes < 1:
            raise ConfigError(f"max_fixes must be >= 1, got {self.max_fixes}")

    @property
    def fixes_to_verify(self) -> int:
        """The most fixes `verify` measures: 0 without it."""
        if not self.verify:
            return 0
        return DEFAULT_MAX_FIXES if self.max_fixes is None else self.max_fixes


DEFAULT_MAX_FIXES = 2


@dataclass
class ProfileReport:
    workload: str
    trace: ProfileTrace
    analyses: Analyses
    diagnosis: Diagnosis
    ceilings: dict[str, Any]
    verified: list[VerifyResult] | None
    elapsed_s: float
    trace_path: str | None = None

    def __repr__(self) -> str:  # the default printed the whole trace, every operator: ~60 KB for a 3-layer MLP
        findings = len(self.diagnosis.findings)
        caveats = len(self.diagnosis.caveats)
        verified = "" if self.verified is None else f", {len(self.verified)} fixes verified in .verified"
        return (f"ProfileReport({self.workload!r}, {self.diagnosis.verdict!r}, {findings} finding"
                f"{'' if findings == 1 else 's'} in .diagnosis.findings, {caveats} caveat{'' if caveats == 1 else 's'}"
                f" in .diagnosis.caveats{verified}, {self.elapsed_s:.1f} s)")

    def to_dict(self) -> dict[str, Any]:
        b = self.analyses.breakdown
        return {
            "workload": self.workload,
            "verdict": self.diagnosis.verdict,
            "caveats": self.diagnosis.caveats,
            "findings": [f.to_dict() for f in self.diagnosis.findings],
            "overhead": {"profiled_step_s": b.step_s, "unprofiled_step_s": b.unprofiled_step_s,
                         "ratio": b.profiling_overhead},
            "analyses": self.analyses.to_dict(),
            "trace": self.trace.summary(),
            "ceilings": self.ceilings,
            "verify": [v.to_dict() for v in self.verified] if self.verified is not None else None,
            "elapsed_s": self.elapsed_s,
            "trace_path": self.trace_path,
        }


def load_ceilings(device: str, quick: bool = True, on_progress: Callable[[str], None] | None = None,
                  threads: int | None = None, remeasure: str | None = None) -> Any:
    """This machine's ceilings at the thread count the profile runs with (`threads`, or torch's): a step on 1
    thread held against 2-thread peaks would look half as efficient as it is. At most the usable cores: threads
    beyond them cannot raise the peak, and a calibration at `--threads 16` on 2 cores, cached as the machine's
    16-thread peak, measured the oversubscription (84 against 165 GFLOP/s) and held the step to that."""
    import torch

    from dlperf.calibrate import get_ceilings

    return get_ceilings(device, measure_if_missing=True, quick=quick, on_progress=on_progress,
                        threads=threads or torch.get_num_threads(), remeasure=remeasure)


def above_ceilings(analyses: Analyses, ceilings: Any) -> str | None:
    """Why `ceilings` (loaded from the cache) should be measured again: a compute-bound operator ran above 110% of
    them, which says the ceilings understate the machine; None when none did, when they were measured again already
    (once: an operator that beats a square GEMM would otherwise re-measure every run), or on a busy machine (a
    measurement now would be as low; the cache is marked provisional by its own warnings instead)."""
    from dlperf.calibrate.ceilings import ABOVE_CEILING, worth_measuring_again
    from dlperf.profile.analyzers.operators import COMPUTE

    above = [o for o in analyses.operators.operators
             if o.bound == COMPUTE and o.pct_of_peak is not None and o.pct_of_peak > ABOVE_CEILING]
    if not above:
        return None
    worst = max(above, key=lambda o: o.pct_of_peak or 0.0)
    return worth_measuring_again(ceilings, f"{worst.name} ran at {worst.pct_of_peak:.0%} of its roofline ceiling "
                                           f"against the ones measured at {getattr(ceilings, 'measured_at', '?')}")


def progress_steps(config: ProfileConfig, ceilings_given: bool = False) -> int:
    """How many `on_progress` calls `profile_workload(..., config)` makes, at most: the calibration's where no
    ceilings are cached (none when the caller gives them), the capture's, and one per fix --verify measures (fewer
    where fewer fixes apply). A fixed 6 ran `dlperf profile`'s bar past 100% on a first calibration of several
    dtypes, and left it at half with the ceilings cached."""
    import torch

    from dlperf.calibrate.ceilings import measuring_steps
    from dlperf.measure.bench import torch_threads
    from dlperf.measure.env import usable_cores
    from dlperf.profile.capture import CAPTURE_STEPS

    calibration = 0
    if not ceilings_given:  # at the threads load_ceilings measures at: the cache is per thread count
        with torch_threads(min(config.capture.options.threads or torch.get_num_threads(), usable_cores())):
            calibration = measuring_steps(config.capture.device, quick=config.quick_ceilings)
    return calibration + CAPTURE_STEPS + config.fixes_to_verify


def profile_workload(workload: Workload | str | os.PathLike[str], config: ProfileConfig | None = None,
                     ceilings: CeilingsLike | None = None, on_progress: Callable[[str], None] | None = None,
                     on_diagnosis: Callable[[ProfileReport], None] | None = None) -> ProfileReport:
    """Profile `workload` (a Workload or a spec such as 'zoo:mlp') per `config`; `ceilings` defaults to this
    machine's (dlperf.calibrate). `on_diagnosis` gets the report before --verify measures its fixes (the CLI saves
    it, so that an interrupt during the verification keeps the capture and the diagnosis). `config` defaults to
    `ProfileConfig()`, as the other entry points' configs do."""
    config = ProfileConfig() if config is None else config
    if not isinstance(config, ProfileConfig):  # a dict failed as "'dict' object has no attribute 'capture'"
        raise ConfigError(f"config must be a dlperf.ProfileConfig, got {type(config).__name__}")
    if config.max_fixes is not None and not config.verify:
        import warnings

        warnings.warn(f"max_fixes={config.max_fixes} is used only with verify=True: no fix is measured",
                      DlperfWarning, stacklevel=2)
    if isinstance(workload, (str, os.PathLike)):
        from dlperf.workload.loader import load_workload

        workload = load_workload(os.fspath(workload))  # a Path too, as dlperf.bench takes one
    elif not isinstance(workload, Workload):
        # an nn.Module failed deep in the capture, after calibrating the ceilings: "'Sequential' object has no
        # attribute 'default_batch_size'"
        hint = (": for a module, pass dlperf.load_workload(model, (x,)) with an example batch"
                if hasattr(workload, "forward") else "")
        raise ConfigError(f"workload must be a dlperf.Workload, a spec such as 'zoo:mlp' or 'file.py', or a path; got "
                          f"{type(workload).__name__}{hint}")
    t0 = time.perf_counter()
    loaded = ceilings is None
    if ceilings is None:
        ceilings = load_ceilings(config.capture.device, config.quick_ceilings, on_progress,
                                 config.capture.options.threads)
    trace = capture(workload, config.capture, on_progress)
    analyses = analyze_all(trace, ceilings)
    if loaded and (why := above_ceilings(analyses, ceilings)) is not None:
        ceilings = load_ceilings(config.capture.device, config.quick_ceilings, on_progress,
                                 config.capture.options.threads, remeasure=why)
        analyses = analyze_all(trace, ceilings)
    diagnosis = diagnose(analyses)
    to_dict = getattr(ceilings, "to_dict", None)
    ceil = to_dict() if callable(to_dict) else {"gemm_flops": dict(ceilings.gemm_flops),
                                                "memory_bandwidth_bytes_s": ceilings.memory_bandwidth_bytes_s}

    def report(verified: Any) -> ProfileReport:
        return ProfileReport(workload=workload.name, trace=trace, analyses=analyses, diagnosis=diagnosis,
                             ceilings=ceil, verified=verified, elapsed_s=time.perf_counter() - t0,
                             trace_path=config.capture.trace_path)

    if not config.verify:
        return report(None)
    if on_diagnosis is not None:
        on_diagnosis(report(None))
    verified = verify(workload, config.capture, trace, diagnosis, config.fixes_to_verify, on_progress=on_progress)
    # A measured fix outweighs the estimate that chose it: the findings and the verdict say what was measured.
    diagnosis = reconcile(diagnosis, verified)
    return report(verified)
