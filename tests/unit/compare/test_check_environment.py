"""`dlperf check` records and compares the environment it measured in: the baseline's thread count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.compare.check import check_against_baseline
from dlperf.store import Store

pytestmark = pytest.mark.unit


def test_a_check_records_the_baselines_thread_count_and_does_not_call_it_a_difference(tmp_path: Path) -> None:
    # the baseline ran at --threads N; the check reruns at N, so its record must say N (it said torch's default)
    # and no "torch_threads: N vs default" warning may appear
    store = Store(tmp_path / "runs.db")
    default = torch.get_num_threads()
    threads = 1 if default > 1 else 2
    dlperf.bench("zoo:mlp", batch_sizes=(1,), threads=threads, min_duration_s=0.0, min_iters=5, warmup_iters=0,
                 store=store)
    store.set_baseline("main", store.list(kind="bench")[0].id)
    outcome = check_against_baseline("zoo:mlp", "main", store, min_duration_s=0.001)
    check_run = store.get(outcome.run_id)
    assert check_run.config["threads"] == threads
    assert check_run.environment["torch_threads"] == threads
    assert not [w for w in outcome.gate.warnings if "torch_threads" in w]
    assert torch.get_num_threads() == default


def test_a_baseline_at_torchs_default_is_rechecked_at_the_threads_it_had(tmp_path: Path) -> None:
    """Taken without --threads (torch's default, recorded as torch_threads), the baseline was re-measured at the
    runner's default: under OMP_NUM_THREADS=1 unchanged code failed at +20.6%."""
    store = Store(tmp_path / "runs.db")
    default = torch.get_num_threads()
    dlperf.bench("zoo:mlp", batch_sizes=(1,), min_duration_s=0.0, min_iters=5, warmup_iters=0, store=store)
    store.set_baseline("main", store.list(kind="bench")[0].id)
    try:
        torch.set_num_threads(1 if default > 1 else 2)  # the runner's default differs from the baseline's
        outcome = check_against_baseline("zoo:mlp", "main", store, min_duration_s=0.001)
    finally:
        torch.set_num_threads(default)
    assert store.get(outcome.run_id).environment["torch_threads"] == default
    assert not [w for w in outcome.gate.warnings if "torch_threads" in w]


def test_what_the_bench_said_about_its_measurements_reaches_the_checks_warnings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`runs show` printed a check run's contention and noise warnings, its verdict and JSON did not: a FAIL
    measured on a busy runner read as a regression of the code."""
    from dlperf.measure.bench import BenchPoint

    store = Store(tmp_path / "runs.db")
    dlperf.bench("zoo:mlp", batch_sizes=(1,), min_duration_s=0.0, min_iters=20, warmup_iters=0, store=store)
    store.set_baseline("main", store.list(kind="bench")[0].id)
    busy = "other processes kept 1.0 cores busy while measuring (this process: 1.0)"
    monkeypatch.setattr(BenchPoint, "contention_warning", property(lambda self: busy))
    outcome = check_against_baseline("zoo:mlp", "main", store, min_duration_s=0.001)
    assert f"batch 1: {busy}" in outcome.gate.warnings
    assert f"batch 1: {busy}" in outcome.to_dict()["warnings"]


def test_a_cuda_baseline_on_a_machine_without_cuda_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.errors import ConfigError

    from .helpers import add_run, bench_result

    store = Store(tmp_path / "runs.db")
    run_id = add_run(store, "bench", bench_result({1: 0.001}),
                     config={"batch_sizes": [1], "scenario": "offline", "device": "cuda"})
    store.set_baseline("gpu", run_id)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"baseline 'gpu' \(run \w+\) was measured on cuda, and this machine has "
                                          r"no CUDA device"):
        check_against_baseline("zoo:mlp", "gpu", store)
    assert store.list(kind="check") == []


def test_a_fail_measured_beside_busy_processes_says_to_rerun() -> None:
    from types import SimpleNamespace

    from dlperf.compare.check import _measurement_warnings
    from dlperf.measure.stats import Measurement

    calm = Measurement([1_000_000 + i for i in range(50)])
    points = [SimpleNamespace(batch_size=1, measurement=calm, contention_warning="other processes kept 1.0 cores "
                                                                                 "busy while measuring"),
              SimpleNamespace(batch_size=8, measurement=calm, contention_warning=None)]
    verdict = SimpleNamespace(points=[SimpleNamespace(batch_size=1, failed=True),
                                      SimpleNamespace(batch_size=8, failed=True)])
    said = _measurement_warnings(points, {1: calm, 8: calm}, verdict)  # type: ignore[arg-type]
    assert said[0] == "batch 1: other processes kept 1.0 cores busy while measuring"
    assert said[-1].startswith("the failing batch size 1 was measured noisily or beside other busy processes")
    verdict.points[0].failed = False
    assert not any("failing" in w for w in _measurement_warnings(points, {1: calm, 8: calm}, verdict))  # type: ignore[arg-type]


def test_the_baseline_noise_is_told_only_for_the_batch_sizes_judged() -> None:
    """`dlperf check zoo:mlp --baseline main --batch-size 8` warned "the baseline's batch 1: noisy ..." and the same
    of batch 32, which the check neither measured nor compared."""
    from types import SimpleNamespace

    from dlperf.compare.check import _measurement_warnings
    from dlperf.measure.stats import Measurement

    calm = Measurement([1_000_000 + i for i in range(50)])
    noisy = Measurement([1_000_000 * (1 + i % 2) for i in range(50)])
    assert noisy.noise_warning and not calm.noise_warning
    points = [SimpleNamespace(batch_size=8, measurement=calm, contention_warning=None)]
    verdict = SimpleNamespace(points=[SimpleNamespace(batch_size=8, failed=False)])
    said = _measurement_warnings(points, {1: noisy, 8: noisy, 32: noisy}, verdict)  # type: ignore[arg-type]
    assert [w.split(":")[0] for w in said] == ["the baseline's batch 8"]


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("1", 1.0), ("500%", 5.0)])
def test_fractions_and_percentages(text: str, value: float) -> None:
    from dlperf.cli.common import percent_or_float

    assert percent_or_float(text) == pytest.approx(value)


def test_a_bare_number_above_one_is_not_read_as_hundreds_of_percent() -> None:
    """`--max-regression 5` meant 500% and passed a 97% slowdown."""
    from dlperf.cli.common import bare_above_one, percent_or_float
    from dlperf.compare.gate import GateConfig
    from dlperf.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--max-regression '5' would be 500% .*write 5% for 0.05"):
        bare_above_one("--max-regression", percent_or_float("5"))
    bare_above_one("--max-regression", percent_or_float("500%"))
    bare_above_one("--max-regression", percent_or_float("0.5"))
    with pytest.raises(ConfigError, match="max_regression must be a number"):
        GateConfig(max_regression="5%")  # type: ignore[arg-type]


def test_a_baseline_from_a_machine_with_more_cores_is_not_pinned_to_its_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 threads recorded on a 64-core machine, checked on a smaller runner: oversubscribing the runner would
    measure that, not the code; the runner's default is kept and the environment warning says it differs."""
    from dlperf.measure import env

    from .helpers import ENV, add_run, bench_result

    store = Store(tmp_path / "runs.db")
    store.set_baseline("big", add_run(store, "bench", bench_result({1: 0.001}), env={**ENV, "torch_threads": 64}))
    monkeypatch.setattr(env, "usable_cores", lambda: 2)
    outcome = check_against_baseline("zoo:mlp", "big", store, min_duration_s=0.001)
    assert store.get(outcome.run_id).config.get("threads") in (None, torch.get_num_threads())
    assert any("torch_threads: 64 vs" in w for w in outcome.gate.warnings)


def test_an_interrupted_check_lists_the_change_it_measured_before_the_interrupt(tmp_path: Path) -> None:
    from dlperf.report.terminal import headline_text, record_view

    store = Store(tmp_path / "runs.db")
    dlperf.bench("zoo:mlp", batch_sizes=(1, 2), min_duration_s=0.0, min_iters=20, warmup_iters=0, store=store)
    store.set_baseline("main", store.list(kind="bench")[0].id)

    def stop_in_batch_2(batch: int, calls: int, seconds: float) -> None:
        if batch == 2 and calls >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_against_baseline("zoo:mlp", "main", store, min_duration_s=0.05, on_progress=stop_in_batch_2)
    stopped = store.list(kind="check")[0]
    assert stopped.status == "interrupted"
    # `runs list` gave its p50, as of a bench run: no change against the baseline, nor that it had no verdict
    headline = headline_text(stopped)
    assert re.fullmatch(r"no verdict \(stopped\): p50 [+-]\d+\.\d% (worse |better )?@ bs1.*, .* @ bs2.*", headline)
    assert "PASS" not in headline and "FAIL" not in headline
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(record_view(stopped))
    assert headline in console.export_text()
    console.file.close()


def test_the_baseline_measured_beside_busy_processes_is_said() -> None:
    """A baseline whose batch 8 ran beside 1.3 busy cores (p50 38 ms, 500x a quiet run's) got only "the baseline's
    batch 8: noisy: IQR is 12% of the median" under every check's "-99.8% better ... pass"."""
    from types import SimpleNamespace

    from dlperf.compare.check import _measurement_warnings
    from dlperf.measure.stats import Measurement

    calm = Measurement([1_000_000 + i for i in range(50)])
    points = [SimpleNamespace(batch_size=b, measurement=calm, contention_warning=None) for b in (1, 8)]
    verdict = SimpleNamespace(points=[SimpleNamespace(batch_size=b, failed=b == 8) for b in (1, 8)])
    busy = {8: "other processes kept 1.3 cores busy while measuring (this process: 0.7)", 32: "not judged"}
    said = _measurement_warnings(points, {1: calm, 8: calm, 32: calm}, verdict, busy)  # type: ignore[arg-type]
    assert said[0] == "the baseline's batch 8: other processes kept 1.3 cores busy while measuring (this process: 0.7)"
    assert said[-1].startswith("the failing batch size 8 was measured noisily or beside other busy processes")
    assert len(said) == 2
