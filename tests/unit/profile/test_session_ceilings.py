"""profile holds a step to the ceilings of the thread count it runs with (`--threads N`), not torch's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dlperf.calibrate.kernels as kernels
from dlperf.calibrate import CACHE_ENV_VAR, Ceilings
from dlperf.profile.session import load_ceilings

pytestmark = pytest.mark.unit


def test_ceilings_are_measured_at_the_profiled_thread_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dlperf.measure import env

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(env, "usable_cores", lambda: 64)  # no clamp here (the next test's subject)
    seen: list[tuple[str, int]] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        threads = torch.get_num_threads()
        seen.append((key, threads))
        return Ceilings(device, key, {"fp32": 1e9 * threads}, 1e9, "t", threads, quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    before = torch.get_num_threads()
    target = 1 if before > 1 else 2
    ceilings = load_ceilings("cpu", quick=True, threads=target)
    assert seen == [(ceilings.machine_key, target)] and f"|threads={target}|" in ceilings.machine_key
    assert torch.get_num_threads() == before
    default = load_ceilings("cpu", quick=True)
    assert default.threads == before and len(seen) == 2


def test_ceilings_are_measured_at_no_more_threads_than_usable_cores(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile --threads 16` on 2 cores calibrated 16 oversubscribed threads and cached that as the machine's
    16-thread peak (half the real one), then held the step to it: 121% of peak, 'up to 12.54x'."""
    import torch

    from dlperf.measure import env

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(env, "usable_cores", lambda: 1)
    seen: list[int] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        seen.append(torch.get_num_threads())
        return Ceilings(device, key, {"fp32": 1e9}, 1e9, "t", seen[-1], quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    before = torch.get_num_threads()
    ceilings = load_ceilings("cpu", quick=True, threads=16)
    assert seen == [1] and "|threads=1|" in ceilings.machine_key
    assert torch.get_num_threads() == before


def test_an_operator_above_cached_ceilings_has_them_measured_again_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A later `dlperf profile zoo:minilm` showed addmm at "403% of its roofline ceiling" against ceilings a busy
    machine had cached: an operator above 110% of cached ceilings has them measured again (on a machine that is not
    busy), the profile is held to the new ones and says so; once, so a kernel that beats a square GEMM does not
    re-measure every run."""
    from dlperf.profile import diagnose as dg
    from dlperf.profile.session import above_ceilings
    from tests.unit.profile.builders import CEILINGS, gemm, trace

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    real = CEILINGS.gemm_flops["fp32"]

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        return Ceilings(device, key, {"fp32": real}, CEILINGS.memory_bandwidth_bytes_s, "t2", 2, quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    low = load_ceilings("cpu", quick=True)
    low.gemm_flops["fp32"], low.measured_at = real / 10, "t1"  # as a busy machine measured them
    t = trace([gemm(0, 9000)])
    why = above_ceilings(dg.analyze_all(t, low), low)
    assert why == "aten::addmm ran at 149% of its roofline ceiling against the ones measured at t1"
    monkeypatch.setattr(kernels, "busy_warnings", lambda: ["busy"])
    assert above_ceilings(dg.analyze_all(t, low), low) is None  # a measurement now would be as low
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    again = load_ceilings("cpu", quick=True, remeasure=why)
    assert again.gemm_flops["fp32"] == real
    caveats = dg.diagnose(dg.analyze_all(t, again)).caveats
    assert f"the cached ceilings were measured again: {why}" in caveats
    again.gemm_flops["fp32"] = real / 10
    assert above_ceilings(dg.analyze_all(t, again), again) is None  # measured again once already
    assert above_ceilings(dg.analyze_all(t, CEILINGS), CEILINGS) is None  # hand-made ceilings: not this run's to redo


def test_profile_holds_its_operators_to_the_ceilings_measured_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """profile_workload, with the cache holding ceilings a tenth of the machine's: measured again once, and the
    profile's % of peak and caveats are those of the new ones."""
    from dlperf.calibrate.ceilings import write_cache
    from dlperf.profile import session
    from tests.unit.profile.builders import CEILINGS, gemm, trace

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    monkeypatch.setattr(session, "capture", lambda workload, config, on_progress=None: trace([gemm(0, 9000)]))
    real = CEILINGS.gemm_flops["fp32"]
    measured: list[str] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        measured.append(key)
        return Ceilings(device, key, {"fp32": real}, CEILINGS.memory_bandwidth_bytes_s, "t2", 2, quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    low = load_ceilings("cpu", quick=False)
    low.gemm_flops["fp32"], low.measured_at = real / 10, "t1"
    write_cache(low)
    measured.clear()
    report = session.profile_workload("zoo:mlp")
    assert len(measured) == 1 and report.ceilings["gemm_flops"]["fp32"] == real
    assert report.ceilings["details"]["remeasured"].startswith("aten::addmm ran at 149% of its roofline ceiling")
    assert not any("ran at 149%" in c and "calibrate --force" in c for c in report.diagnosis.caveats)
    session.profile_workload("zoo:mlp")
    assert len(measured) == 1  # the new ones are cached
