"""A cached calibration recorded on a busy machine: every profile held to those ceilings says so where its % of peak
is shown (the caveats, the roofline's title, the JSON), instead of presenting % of peak as authoritative."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.calibrate import Ceilings, machine_key
from dlperf.calibrate.ceilings import write_cache
from dlperf.cli.main import main

pytestmark = pytest.mark.integration

BUSY = ("the machine is busy (load average 3.1 on 2 cores): these ceilings are likely underestimates; run "
        "`dlperf calibrate --force` again when it is idle")


def _seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warnings: list[str]) -> None:
    """The 1-thread ceilings of this machine (what `--threads 1` is held to), recorded with `warnings`, and marked
    measured again already: an operator above 110% of them has them measured again once (53f6e40e), which 50 GFLOP/s
    invited on a quiet machine, and the test's caveat went with them."""
    from dlperf.measure.bench import torch_threads

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    with torch_threads(1):
        write_cache(Ceilings(device="cpu", machine_key=machine_key("cpu"), gemm_flops={"fp32": 50e9},
                             memory_bandwidth_bytes_s=10e9, measured_at="2026-12-05T08:16:58+00:00", threads=1,
                             details={"warnings": warnings, "remeasured": True}))


def _profile(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    code = main(["profile", "zoo:mlp?hidden=512", "--batch-size", "64", "--steps", "2", "--threads", "1",
                 "--store", str(tmp_path / "runs.db"), *extra])
    assert code == 0
    return capsys.readouterr().out


def test_a_busy_calibration_is_a_caveat_of_every_profile_held_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _seed(tmp_path, monkeypatch, [BUSY])
    result = json.loads(_profile(tmp_path, capsys, "--json"))["result"]
    said = [c for c in result["caveats"] if c.startswith("the ceilings behind % of peak")]
    assert len(said) == 1
    caveat = said[0]
    # the cause as calibrate recorded it, which way it skews % of peak, and the command that replaces this cache
    assert "the machine is busy (load average 3.1 on 2 cores)" in caveat
    assert "% of peak likely overstated" in caveat and "2026-12-05T08:16:58" in caveat
    assert "`dlperf calibrate --force --threads 1`" in caveat
    assert result["analyses"]["operators"]["ceilings_caveat"] == caveat

    shown = " ".join(_profile(tmp_path, capsys).split())
    assert "caveat: the ceilings behind % of peak" in shown
    assert "ridge 5.0 FLOP/B (recorded with a warning: see the caveat above)" in shown


def test_a_clean_calibration_adds_no_caveat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _seed(tmp_path, monkeypatch, [])
    result = json.loads(_profile(tmp_path, capsys, "--json"))["result"]
    assert not [c for c in result["caveats"] if "ceilings behind" in c]
    assert result["analyses"]["operators"]["ceilings_caveat"] is None
