from __future__ import annotations

import io

import pytest
from rich.console import Console

from dlperf.cli.profile import parse_size
from dlperf.errors import ConfigError
from dlperf.profile import diagnose as dg
from dlperf.profile.session import ProfileReport
from dlperf.report.profile_view import profile_report
from tests.unit.profile.builders import CEILINGS, gemm, op, trace

pytestmark = pytest.mark.unit


def test_parse_size() -> None:
    assert parse_size("4GiB") == 4 * 2**30
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size("1024") == 1024
    with pytest.raises(ConfigError, match="--memory-budget"):
        parse_size("lots")


def test_terminal_view_puts_the_verdict_first() -> None:
    t = trace([gemm(0, 9000), op("aten::empty", 9500, 10, mem=3 << 20), gemm(10_000, 9000, step=1)], steps=2)
    t.memory.timeline = [(100.0, 1 << 20), (9000.0, 4 << 20), (12_000.0, 0)]
    analyses = dg.analyze_all(t, CEILINGS)
    report = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0)
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(profile_report(report.to_dict(), "abc", "sqlite://"))
    text = out.getvalue()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[1].startswith("verdict: compute")
    assert "fix:" in text and "estimated gain" in text and "addmm" in text
    assert "profiling overhead" in text
    assert "largest allocation: aten::empty 3 MiB" in text
