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
    # the median operator of 9 ms in the unit the rest of the view uses ('median 9000.0 µs' before)
    assert "top-level operators per step (2 with nested), median 9.00 ms;" in " ".join(text.split())


def test_on_80_columns_findings_wrap_under_their_text_and_the_operators_title_is_as_wide_as_the_console() -> None:
    t = trace([gemm(0, 9000), op("aten::empty", 9500, 10, mem=3 << 20), gemm(10_000, 9000, step=1)], steps=2)
    analyses = dg.analyze_all(t, CEILINGS)
    report = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0)
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(profile_report(report.to_dict()))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    first = next(i for i, line in enumerate(lines) if line.startswith("1. ["))
    block = lines[first:next(i for i in range(first, len(lines)) if not lines[i].strip())]
    assert len(block) > 3 and all(line.startswith("   ") for line in block[1:])  # wrapped lines went to column 0
    bullets = [i for i, line in enumerate(block) if line.startswith("   • ")]
    assert bullets and all(block[i + 1].startswith(("     ", "   • ", "   fix: ")) for i in bullets)
    title = next(i for i, line in enumerate(lines) if line.startswith("Top operators by"))
    # it wrapped at the operators table's width (about 70 columns), 'fp32 peak 71' / 'GFLOP/s, ...'
    assert len(lines[title]) > 72 and lines[title + 2].split()[0] == "operator"


def test_the_view_counts_one_step_one_core_one_thread_in_the_singular() -> None:
    t = trace([gemm(0, 9000), gemm(10_000, 9000, step=1)], steps=2)
    analyses = dg.analyze_all(t, CEILINGS)
    data = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0).to_dict()
    data["trace"]["steps"] = 1
    data["analyses"]["threads"].update(usable_cores=1, busy_threads=1)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(data))
    text = out.getvalue()
    assert "batch 8, 1 profiled step)" in text  # it said "1 profiled steps"
    assert "on 1 usable core; 1 busy thread kept" in text  # '1 usable cores; 1 busy threads'
