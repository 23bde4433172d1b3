"""Ceilings: quick measurement gives positive numbers, is cached per machine key, and the cache is respected."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import dlperf.calibrate.kernels as kernels
from dlperf.calibrate import CACHE_ENV_VAR, Ceilings, cache_dir, cache_path, get_ceilings, machine_key
from dlperf.calibrate.ceilings import cache_problem, ceilings_news, lookup_or_measure, read_cache
from dlperf.errors import CalibrationError, DlperfWarning

pytestmark = pytest.mark.unit


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replace the real micro-benchmarks; records each call."""
    calls: list[dict[str, Any]] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        calls.append({"device": device, "quick": quick})
        return Ceilings(device, key, {"fp32": 1e11 * len(calls)}, 1e10, f"t{len(calls)}", 2, quick=quick)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    return calls


def test_quick_measurement_is_positive_and_cached(cache: Path) -> None:
    import torch

    steps: list[str] = []
    c = get_ceilings("cpu", quick=True, on_progress=steps.append)
    assert c.quick and c.device == "cpu"
    assert c.gemm_flops["fp32"] > 1e6
    assert all(v > 0 for v in c.gemm_flops.values())
    assert set(c.gemm_flops) <= {"fp32", "bf16", "fp16", "int8"}
    assert c.memory_bandwidth_bytes_s > 1e6
    assert c.threads == torch.get_num_threads()
    assert c.machine_key == machine_key("cpu")
    assert steps[0] == "gemm fp32 256x256" and steps[-1] == "memory bandwidth (copy)"
    path = cache_path(c.machine_key, quick=True)
    assert path.is_file() and path.parent.parent == cache
    assert Ceilings.from_dict(json.loads(path.read_text())) == c
    again, cached = lookup_or_measure("cpu", quick=True)
    assert cached and again == c
    # what was skipped says why; what was measured says how
    for dtype in {"bf16", "fp16", "int8"} - set(c.gemm_flops):
        assert c.details["skipped"][dtype]
    assert c.details["gemm_fp32"]["n"] == 256 and c.details["gemm_fp32"]["samples"] >= 3


def test_machine_key_names_what_ceilings_depend_on() -> None:
    import torch

    key = machine_key("cpu")
    assert key.startswith("cpu|cpu=")
    assert f"threads={torch.get_num_threads()}" in key and f"torch={torch.__version__}" in key
    assert key.endswith("gpu=-")


def test_machine_key_names_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """`taskset -c 0 dlperf calibrate --threads 2` on 2 cores cached 2 threads contending for 1 core under the key
    of the whole machine's 2-thread peak, which an unrestricted profile or train then read."""
    import os

    from dlperf.measure import env

    whole = machine_key("cpu")
    assert f"|cores={os.cpu_count()}|usable={env.usable_cores()}|" in whole
    monkeypatch.setattr(env, "usable_cores", lambda: 1)
    pinned = machine_key("cpu")
    assert "|usable=1|" in pinned
    if "|usable=1|" not in whole:
        assert pinned != whole


def test_cache_hit_does_not_measure(cache: Path, fake_measure: list[dict[str, Any]]) -> None:
    first = get_ceilings("cpu")
    second = get_ceilings("cpu")
    assert len(fake_measure) == 1 and first == second
    third = get_ceilings("cpu", force=True)
    assert len(fake_measure) == 2 and third.measured_at == "t2"
    assert get_ceilings("cpu").measured_at == "t2"


def test_quick_request_is_served_by_a_full_cache_but_not_the_reverse(
        cache: Path, fake_measure: list[dict[str, Any]]) -> None:
    quick = get_ceilings("cpu", quick=True)
    assert quick.quick
    full = get_ceilings("cpu")
    assert not full.quick and len(fake_measure) == 2
    assert get_ceilings("cpu", quick=True) == full
    assert len(fake_measure) == 2


def test_missing_cache_without_measuring_raises(cache: Path, fake_measure: list[dict[str, Any]]) -> None:
    with pytest.raises(CalibrationError, match="dlperf calibrate"):
        get_ceilings("cpu", measure_if_missing=False)
    assert fake_measure == []


def test_corrupt_or_foreign_cache_is_ignored(cache: Path, fake_measure: list[dict[str, Any]]) -> None:
    key = machine_key("cpu")
    path = cache_path(key, quick=False)
    path.parent.mkdir(parents=True)
    assert cache_problem(key) is None  # no file is no problem
    path.write_text("{not json")
    assert read_cache(key, quick=False) is None
    assert f"the ceilings cache '{path}' could not be read (JSONDecodeError" in (cache_problem(key) or "")
    other = Ceilings("cpu", "another machine", {"fp32": 1.0}, 1.0, "x", 1).to_dict()
    path.write_text(json.dumps(other))
    assert read_cache(key, quick=False) is None
    assert cache_problem(key) == f"the ceilings cache '{path}' was measured for another machine (another machine)"
    path.write_text(json.dumps({**other, "format_version": 0}))
    assert cache_problem(key) == f"the ceilings cache '{path}' has format version 0, this dlperf reads 1"
    get_ceilings("cpu")
    assert len(fake_measure) == 1
    assert cache_problem(key) is None  # measured again and replaced


def test_cache_dir_follows_env_var(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_dir() == cache
    monkeypatch.setenv(CACHE_ENV_VAR, "~/dlperf-cache")
    assert cache_dir() == Path.home() / "dlperf-cache"
    monkeypatch.delenv(CACHE_ENV_VAR)
    assert cache_dir().name == "dlperf"


def test_a_cache_that_cannot_be_written_warns_and_the_measurement_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_measure: list[dict[str, Any]]) -> None:
    """It raised after the measurement (a full one takes a minute): `dlperf train` and `profile` ended there."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "a-file" / "cache"))
    with pytest.warns(DlperfWarning) as said:
        first = get_ceilings("cpu")
    assert first.measured_at == "t1"
    message = str(said[0].message)
    path = cache_path(first.machine_key, False)
    assert f"cannot cache this machine's ceilings at '{path}' (Not a directory)" in message
    assert "the next command measures them again: set DLPERF_CACHE_DIR to a writable folder" in message
    assert said[0].filename == __file__  # pointed at the caller, not at dlperf's own code
    with pytest.warns(DlperfWarning):
        assert get_ceilings("cpu").measured_at == "t2"


def test_busy_machine_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 1.0, 1.0))
    (warning,) = kernels.busy_warnings()
    assert "load average 64.0" in warning and "--force" in warning
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert kernels.busy_warnings() == []


def test_round_trip_and_malformed() -> None:
    c = Ceilings("cpu", "k", {"fp32": 3e11, "int8": 1e12}, 2e10, "2026-01-01", 2, details={"copy": {"bytes": 1}})
    data = c.to_dict()
    assert data["format_version"] == 1
    assert Ceilings.from_dict(data) == c
    assert c.peak_flops("int8") == 1e12 and c.peak_flops("bf16") is None
    with pytest.raises(CalibrationError, match="malformed"):
        Ceilings.from_dict({"device": "cpu"})


@pytest.mark.parametrize("device", ["tpu", "cuda:x"])
def test_bad_device(device: str) -> None:
    with pytest.raises(CalibrationError, match="unknown device"):
        get_ceilings(device)


def test_cuda_without_cuda_is_a_clear_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(CalibrationError, match="no CUDA device"):
        get_ceilings("cuda")


def test_supported_dtypes_always_has_fp32() -> None:
    found, skipped = kernels.supported_dtypes("cpu")
    assert found[0] == "fp32"
    assert set(found).isdisjoint(skipped)
    assert set(found) | set(skipped) == {"fp32", "bf16", "fp16", "int8"}


def test_gemm_size_shrinks_on_a_slow_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "MAX_CALL_S", 1e-12)
    assert kernels._affordable_n("fp32", 2048, "cpu") == kernels.MIN_FULL_GEMM_N == 1024
    monkeypatch.setattr(kernels, "MAX_CALL_S", 1e6)
    assert kernels._affordable_n("fp32", 2048, "cpu") == 2048


def test_a_gemm_measured_below_its_full_size_is_warned_of(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy moment made the 256^3 probe slow, the fp32 GEMM ran at 1024^3 (68 GFLOP/s against 215 at 2048^3), and
    the ceilings were cached with no warning: every later MFU was 85-100%."""
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    monkeypatch.setattr(kernels, "supported_dtypes", lambda device: (["fp32", "bf16"], {}))
    sizes = {"fp32": 1024, "bf16": kernels.FULL_GEMM_N}
    monkeypatch.setattr(kernels, "measure_gemm", lambda dtype, device, n, timer: (1e9, {"n": sizes[dtype]}))
    monkeypatch.setattr(kernels, "measure_bandwidth", lambda device, nbytes, timer: (1e9, {"bytes": nbytes}))
    warnings = kernels.measure_ceilings("cpu", "key").details["warnings"]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"the fp32 GEMM ran at 1024x1024 instead of {kernels.FULL_GEMM_N}x"
                                  f"{kernels.FULL_GEMM_N}") and "dlperf calibrate --force" in warnings[0]


def test_a_cached_busy_warning_becomes_a_caveat_for_the_figures_held_to_it(cache: Path) -> None:
    """The warning calibrate recorded stays in the cache; `ceilings_caveat` passes it on to whatever shows a figure
    computed against those ceilings (MFU, % of peak), from the Ceilings or its stored dict, without its own advice
    repeated: one command to run, at the thread count the cache is keyed by."""
    from dlperf.calibrate.ceilings import ceilings_caveat, write_cache

    busy = ("the machine is busy (load average 2.2 on 2 cores): these ceilings are likely underestimates; run "
            "`dlperf calibrate --force` again when it is idle")
    smaller = ("the bf16 GEMM ran at 1024x1024 instead of 2048x2048 (a 256x256 probe was too slow for the full size): "
               "a slow or busy machine; if it was busy, this ceiling is an underestimate: run `dlperf calibrate "
               "--force` when it is idle")
    key = machine_key("cpu")
    write_cache(Ceilings("cpu", key, {"fp32": 1e11}, 1e10, "2026-12-05T08:16:58+00:00", 2,
                         details={"warnings": [busy, smaller]}))
    cached = read_cache(key, quick=False)
    assert cached is not None and cached.warnings == [busy, smaller]
    said = ceilings_caveat(cached, "MFU")
    assert said == ceilings_caveat(cached.to_dict(), "MFU")
    assert said is not None and said.startswith("the ceilings behind MFU (measured at 2026-12-05T08:16:58+00:00)")
    assert "MFU likely overstated: the machine is busy (load average 2.2 on 2 cores); the bf16 GEMM ran at " \
           "1024x1024 instead of 2048x2048 (a 256x256 probe was too slow for the full size); run `dlperf " \
           "calibrate --force --threads 2` on an idle machine" in said
    assert said.count("dlperf calibrate") == 1
    assert ceilings_caveat(Ceilings("cpu", key, {"fp32": 1e11}, 1e10, "t", 2)) is None
    gpu = ceilings_caveat(Ceilings("cuda:0", key, {"fp32": 1e13}, 1e12, "t", 2, details={"warnings": [busy]}))
    assert gpu is not None and "`dlperf calibrate --force --device cuda:0 --threads 2`" in gpu
    assert ceilings_caveat(object()) is None  # hand-made ceilings carry no details
    # a figure held to the fp32 ceiling is not doubted for the bf16 one (the helper's fp32 MFU was, for a bf16 GEMM
    # run at a smaller size); a warning about the whole machine still counts
    only = Ceilings("cpu", key, {"fp32": 1e11}, 1e10, "t", 2, details={"warnings": [smaller]})
    assert ceilings_caveat(only, "MFU", uses=("fp32",)) is None
    assert ceilings_caveat(only, "MFU", uses=("bf16",)) is not None
    fp32_only = ceilings_caveat(cached, "MFU", uses=("fp32", "bandwidth"))
    assert fp32_only is not None and "machine is busy" in fp32_only and "bf16" not in fp32_only
    bandwidth = kernels.contention_warning("the memory bandwidth", 0.9)
    assert bandwidth is not None
    with_bw = Ceilings("cpu", key, {"fp32": 1e11}, 1e10, "t", 2, details={"warnings": [bandwidth]})
    assert ceilings_caveat(with_bw, uses=("fp32",)) is None
    assert ceilings_caveat(with_bw, uses=("fp32", "bandwidth")) is not None


@pytest.fixture
def load_measure(monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], list[float]]:
    """A fake load reading (`load[0]`, on 2 cores) and a fake calibration that, as the real one, records the load and
    warns of a busy machine; returns (load, the fp32 ceiling of each measurement)."""
    load = [9.0]
    measured: list[float] = []
    monkeypatch.setattr(os, "getloadavg", lambda: (load[0], load[0], load[0]))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        measured.append(86e9 if load[0] >= 2 else 230e9)
        return Ceilings(device, key, {"fp32": measured[-1]}, 1e10, f"t{len(measured)}", 2, quick=quick,
                        details={"load_average": load[0], "warnings": kernels.busy_warnings()})

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    return load, measured


def test_a_calibration_on_the_way_under_load_is_provisional_and_measured_again_when_quieter(
        cache: Path, load_measure: tuple[list[float], list[float]]) -> None:
    """A profile on a busy machine cached fp32 86 GFLOP/s and every later profile held its operators to it ('addmm at
    403% of its roofline ceiling') until `dlperf calibrate --force`: such a calibration is now provisional, kept while
    the machine is as busy, and measured again once it is quieter."""
    from dlperf.calibrate.ceilings import ceilings_caveat, lookup_or_measure

    load, measured = load_measure
    first, cached = lookup_or_measure("cpu")
    assert not cached and first.provisional and first.warnings
    caveat = ceilings_caveat(first)
    assert caveat is not None and caveat.endswith(
        "(cached as provisional: a later run measures them again when the machine is quieter)")
    load[0] = 8.0  # still busy: not measured again (it would be as low), the provisional one serves
    again, cached = lookup_or_measure("cpu")
    assert cached and again.provisional and measured == [86e9]
    load[0] = 0.5
    quiet, cached = lookup_or_measure("cpu")
    assert not cached and measured == [86e9, 230e9] and quiet.gemm_flops["fp32"] == 230e9
    assert not quiet.provisional and ceilings_caveat(quiet) is None
    news = ceilings_news(quiet)
    assert news is not None and news.startswith("the cached ceilings were measured again: those measured at t1 were "
                                                "provisional (the machine is busy (load average 9.0 on 2 cores)")
    assert "the machine is quieter now (load average 0.5 on 2 cores, against 9.0 then)" in news
    kept, cached = lookup_or_measure("cpu")
    assert cached and kept.gemm_flops["fp32"] == 230e9 and len(measured) == 2


def test_a_progress_bar_counts_the_measurement_of_a_provisional_calibration(
        cache: Path, load_measure: tuple[list[float], list[float]]) -> None:
    """`dlperf profile` sizes its bar by `measuring_steps`: a provisional calibration measured again on a quieter
    machine is as many steps as a first one (none were counted, and the bar ran past 100%)."""
    from dlperf.calibrate.ceilings import lookup_or_measure, measuring_steps

    load, _ = load_measure
    first = measuring_steps("cpu")
    assert first >= 2
    lookup_or_measure("cpu")
    assert measuring_steps("cpu") == 0  # as busy: the provisional one serves
    load[0] = 0.5
    assert measuring_steps("cpu") == first
    lookup_or_measure("cpu")
    assert measuring_steps("cpu") == 0


def test_calibrate_keeps_what_the_user_asked_for_and_a_caller_that_never_measures_takes_a_provisional_one(
        cache: Path, load_measure: tuple[list[float], list[float]]) -> None:
    from dlperf.calibrate.ceilings import lookup_or_measure

    load, measured = load_measure
    asked, _ = lookup_or_measure("cpu", explicit=True)  # `dlperf calibrate`: cached as it is, with its warning
    assert not asked.provisional and asked.warnings
    load[0] = 0.5
    assert lookup_or_measure("cpu")[1] and len(measured) == 1
    lookup_or_measure("cpu", force=True)  # under load again (load 0.5 measures 230e9): a quiet one
    load[0] = 9.0
    lookup_or_measure("cpu", force=True)
    assert read_cache(machine_key("cpu"), quick=False).provisional  # type: ignore[union-attr]
    load[0] = 0.5
    never, cached = lookup_or_measure("cpu", measure_if_missing=False)  # the precision pass's question
    assert cached and never.provisional and len(measured) == 3


def test_a_doubt_named_by_the_caller_measures_again_and_is_kept_as_the_reason(
        cache: Path, fake_measure: list[dict[str, Any]]) -> None:
    from dlperf.calibrate.ceilings import lookup_or_measure

    lookup_or_measure("cpu")
    again, cached = lookup_or_measure("cpu", remeasure="aten::addmm ran at 403% of its roofline ceiling")
    assert not cached and len(fake_measure) == 2
    assert ceilings_news(again) == ("the cached ceilings were measured again: aten::addmm ran at 403% of its roofline "
                                    "ceiling")
    assert ceilings_news(lookup_or_measure("cpu")[0]) is not None and len(fake_measure) == 2


def test_a_ceiling_measured_again_lower_than_the_doubted_cached_one_keeps_the_cached_one(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile whose int8 product ran at 2423% of a busy calibration's int8 peak measured the ceilings again while
    other processes kept 1.3 cores busy, and the cached 29.4 GB/s bandwidth became 9.3 GB/s. Each ceiling now keeps the
    higher of the two (with that measurement's details and warnings); --force replaces them all."""
    from dlperf.calibrate.ceilings import ceilings_caveat

    slow_copy = ("the memory bandwidth: other processes kept 1.3 cores busy while it was measured: this ceiling is "
                 "likely an underestimate; run `dlperf calibrate --force` again when the machine is idle")
    runs = [({"fp32": 441e9, "int8": 122e9}, 29.4e9, []), ({"fp32": 430e9, "int8": 3272e9}, 9.3e9, [slow_copy]),
            ({"fp32": 430e9, "int8": 3272e9}, 9.3e9, [slow_copy])]

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        flops, bandwidth, warnings = runs.pop(0)
        return Ceilings(device, key, dict(flops), bandwidth, f"t{3 - len(runs)}", 2, quick=quick,
                        details={"warnings": list(warnings), "copy": {"bytes": int(bandwidth)}})

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    lookup_or_measure("cpu")
    again, cached = lookup_or_measure("cpu", remeasure="aten::_int_mm ran at 2423% of its roofline ceiling")
    assert not cached
    assert again.gemm_flops == {"fp32": 441e9, "int8": 3272e9} and again.memory_bandwidth_bytes_s == 29.4e9
    assert again.details["copy"] == {"bytes": int(29.4e9)}  # how the kept one was measured
    assert again.warnings == [] and ceilings_caveat(again) is None  # the 9.3 GB/s one's warning went with it
    assert again.details["kept"] == {"fp32": "t1", "bandwidth": "t1"}
    news = ceilings_news(again)
    assert news is not None and news.endswith("; the fp32 GEMM and the memory bandwidth measured now came out lower "
                                              "than the cached ones, which are kept (a ceiling is the best the "
                                              "machine did: other load only lowers it)")
    assert read_cache(machine_key("cpu"), quick=False) == again
    forced, _ = lookup_or_measure("cpu", force=True)  # what the user asked for: measured now, as it is
    assert forced.memory_bandwidth_bytes_s == 9.3e9 and forced.warnings == [slow_copy]
    from dlperf.calibrate.ceilings import _keep_higher

    bare = Ceilings("cpu", "k", {"fp32": 1e12}, 1e11, "t0", 2)  # kept, with no details of how it was measured
    assert _keep_higher(forced, bare) == ["the fp32 GEMM", "the memory bandwidth"]
    assert "copy" not in forced.details and "gemm_fp32" not in forced.details
