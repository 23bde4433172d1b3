"""`dlperf calibrate --force` measures again over a cached figure, and a thread count torch cannot start is refused
before anything is measured or recorded (`--threads 999999` once filled the process table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.calibrate import Ceilings, machine_key
from dlperf.calibrate.ceilings import write_cache
from dlperf.cli.main import main

pytestmark = pytest.mark.unit


def test_force_measures_again_over_the_cached_ceilings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    write_cache(Ceilings(device="cpu", machine_key=machine_key("cpu"), gemm_flops={"fp32": 1.0},
                         memory_bandwidth_bytes_s=1.0, measured_at="test", threads=0, quick=True))
    store = str(tmp_path / "runs.db")
    assert main(["calibrate", "--quick", "--json", "--store", store]) == 0
    cached = json.loads(capsys.readouterr().out)
    assert cached["cached"] is True and cached["gemm_flops"]["fp32"] == 1.0
    assert main(["calibrate", "--quick", "--force", "--json", "--store", store]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["cached"] is False and measured["gemm_flops"]["fp32"] > 1.0


@pytest.mark.parametrize(("threads", "message"), [("0", "--threads must be >= 1, got 0"),
                                                   ("999999", "--threads 999999 is more than ")])
def test_a_thread_count_torch_cannot_start_is_refused(tmp_path: Path, threads: str, message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    assert main(["calibrate", "--quick", "--threads", threads, "--store", str(store)]) == 2
    assert message in capsys.readouterr().err
    assert not store.exists()
