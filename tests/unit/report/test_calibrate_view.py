"""Headlines and views of runs that had none: a calibrate run in the report and in `runs list` (its ceilings with
their units, not a JSON dump of raw numbers like 165272096103.7736 under a 'calibrate: cpu' title), an optimize run
stopped before it picked a winner."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.report.html import render_report
from dlperf.report.terminal import headline_text
from dlperf.store.records import RunRecord

pytestmark = pytest.mark.unit

# as `dlperf calibrate` stores it (Ceilings.to_dict() of a cached result)
CEILINGS: dict[str, Any] = {
    "device": "cpu", "machine_key": "cpu|cpu=AMD EPYC|cores=2|threads=2", "threads": 2, "quick": False,
    "gemm_flops": {"fp32": 165272096103.7736, "bf16": 785667970986.0396, "int8": 1831241124488.6768},
    "memory_bandwidth_bytes_s": 32510246565.945652, "measured_at": "2026-12-04T14:29:22+00:00", "cached": True,
    "details": {"warnings": [], "skipped": {"fp16": "no native support"},
                "gemm_fp32": {"n": 2048, "samples": 5, "noise_warning": None},
                "gemm_bf16": {"n": 2048, "samples": 21, "noise_warning": "noisy: IQR is 15% of the median"},
                "gemm_int8": {"n": 2048, "samples": 46, "noise_warning": None},
                "copy": {"bytes": 268435456, "samples": 26, "noise_warning": None}},
}


def _record() -> RunRecord:
    return RunRecord(id="ca11b4a7e000", kind="calibrate", workload="cpu", status="ok",
                     created_at="2026-12-05T05:51:28", config={"device": "cpu"}, result=CEILINGS)


def test_the_report_shows_the_ceilings_with_their_units() -> None:
    html = render_report([_record()])
    section = html.split('id="run-ca11b4a7e000"', 1)[1]
    assert "Machine ceilings: cpu" in section
    assert "<td>165.3 GFLOP/s</td>" in section and "<td>1.8 TOP/s</td>" in section
    assert "<td>32.5 GB/s</td>" in section and "copy of 256.0 MiB (read + write), 26 calls" in section
    assert "cached at 2026-12-04T14:29:22+00:00" in section
    assert "warning: gemm_bf16: noisy: IQR is 15% of the median" in section
    assert "could not be drawn" not in section


def test_a_calibrate_run_has_a_headline() -> None:
    assert headline_text(_record()) == "fp32 GEMM 165.3 GFLOP/s, memory 32.5 GB/s"
    assert "fp32 GEMM 165.3 GFLOP/s, memory 32.5 GB/s" in render_report([_record()]).split("</table>", 1)[0]


def test_an_optimize_run_stopped_before_its_pick_says_so() -> None:
    """An interrupted optimize run (Ctrl-C after 8 candidates) had an empty headline in `runs list` and the report."""
    stopped = RunRecord(id="0b7", kind="optimize", workload="zoo:mlp", status="interrupted", created_at="2026-12-05",
                        result={"baseline": "k0", "candidates": [{"key": f"k{i}", "label": f"c{i}"} for i in range(8)]})
    assert headline_text(stopped) == "no winner picked: stopped after 8 candidates"
