"""Other load while a ceiling is measured: recorded with each measurement, and a warning when it is above half a core.

The load average (`busy_warnings`) is a minute's mean: a calibration started as another process began its work
measured fp32 at 68 GFLOP/s against 205-228 idle, with no warning, and cached it for every later profile."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlperf.calibrate.kernels import contention_warning, measure_bandwidth, measure_gemm
from dlperf.measure.timer import TimerConfig

pytestmark = pytest.mark.unit


@pytest.fixture()
def busy_cores():
    """One spinning process per CPU, for the length of the test."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def test_other_load_is_recorded_with_each_ceiling(busy_cores):
    timer = TimerConfig(warmup_iters=1, min_duration_s=0.5, min_iters=3, max_duration_s=5.0)
    _, gemm = measure_gemm("fp32", "cpu", n=128, timer=timer)
    _, copy = measure_bandwidth("cpu", nbytes=2**20, timer=timer)
    # every core had a spinner: at least half a core of them ran beside the measurement
    assert gemm["other_load_cores"] >= 0.5
    assert copy["other_load_cores"] >= 0.5


def test_the_warning_says_how_many_cores_others_used():
    said = contention_warning("the fp32 GEMM", 1.24)
    assert said == ("the fp32 GEMM: other processes kept 1.2 cores busy while it was measured: this ceiling is likely "
                    "an underestimate; run `dlperf calibrate --force` again when the machine is idle")
    assert contention_warning("the memory bandwidth", 0.3) is None


def test_measure_ceilings_warns_of_the_measurements_others_slowed(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.calibrate import kernels

    monkeypatch.setattr(kernels, "supported_dtypes", lambda device: (["fp32", "bf16"], {}))
    others = {"fp32": 1.1, "bf16": 0.1}
    monkeypatch.setattr(kernels, "measure_gemm", lambda dtype, device, n, timer: (
        1e9, {"n": n, "other_load_cores": others[dtype]}))
    monkeypatch.setattr(kernels, "measure_bandwidth", lambda device, nbytes, timer: (
        1e9, {"bytes": nbytes, "other_load_cores": 0.6}))
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    assert kernels.measure_ceilings("cpu", "key").details["warnings"] == [
        contention_warning("the fp32 GEMM", 1.1), contention_warning("the memory bandwidth", 0.6)]
    # quick mode's regions are too short to judge; a busy load average already says it of every ceiling
    assert kernels.measure_ceilings("cpu", "key", quick=True).details["warnings"] == []
    monkeypatch.setattr(kernels, "busy_warnings", lambda: ["the machine is busy"])
    assert kernels.measure_ceilings("cpu", "key").details["warnings"] == ["the machine is busy"]


def test_a_noisy_ceiling_names_no_model_variation():
    """`dlperf calibrate` printed "warning: gemm_fp32: noisy: IQR is 40% of the median (> 10%); other load on the
    machine, frequency scaling, the model's own per-call variation (data-dependent control flow, random-length
    loops) or too few samples": a GEMM or a copy has no control flow of its own to vary."""
    from dlperf.calibrate.kernels import _how
    from dlperf.measure.stats import Measurement

    noisy = Measurement([1_000_000 * (1 + i % 2) for i in range(50)])
    assert noisy.noise_warning is not None and "model's own" in noisy.noise_warning
    how = _how(noisy, 0.0, n=128)
    assert how["noise_warning"] == ("noisy: IQR is 67% of the median (> 10%); other load on the machine, frequency "
                                    "scaling or too few samples")
    assert _how(Measurement([1_000_000 + i for i in range(50)]), 0.0, n=128)["noise_warning"] is None
