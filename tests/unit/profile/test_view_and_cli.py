from __future__ import annotations

import io

import pytest
from rich.console import Console

from dlperf.cli.common import memory_size
from dlperf.errors import ConfigError
from dlperf.profile import diagnose as dg
from dlperf.profile.session import ProfileReport
from dlperf.report.profile_view import profile_report
from tests.unit.profile.builders import CEILINGS, gemm, op, trace

pytestmark = pytest.mark.unit


def test_memory_size() -> None:
    assert memory_size("4GiB") == 4 * 2**30
    assert memory_size("512MB") == 512 * 10**6
    assert memory_size("2g") == 2 * 2**30 and memory_size("1.5GB") == 1_500_000_000
    assert memory_size("1e9") == 10**9 and memory_size("2097152") == 2**21
    with pytest.raises(ConfigError, match="--memory-budget"):
        memory_size("lots")
    # a bare number below 1 MiB is a missing unit ('--memory-budget 10' was 10 bytes: '3374735360% of the budget')
    with pytest.raises(ConfigError, match=r"--memory-budget 10: a number without a unit is bytes, so this is 10 bytes: "
                                          r"give a unit, e.g. 10GiB"):
        memory_size("10")
    with pytest.raises(ConfigError, match=r"this is 1000 bytes: give a unit, e.g. 4GiB or 512MiB"):
        memory_size("1e3")  # '1e3GiB' was suggested
    with pytest.raises(ConfigError, match="beyond any machine's memory"):
        memory_size("1e400")  # an OverflowError traceback


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


def test_at_105_columns_the_verified_fixes_keep_their_labels_and_every_column() -> None:
    """The fix column was squeezed to 15: 'DataLoader(num…' over 'persistent_wor…'. A label now wraps between its
    words, each whole, and the figures and the setup column stay."""
    t = trace([gemm(0, 9000), gemm(10_000, 9000, step=1)], steps=2)
    analyses = dg.analyze_all(t, CEILINGS)
    data = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0).to_dict()
    data["verify"] = [
        {"category": "input pipeline",
         "fix": {"id": "loader", "label": "DataLoader(num_workers=2, persistent_workers=True)"},
         "estimated_speedup": 2.718, "speedup": 2.391, "speedup_ci": [1.873, 3.051], "verdict": "faster",
         "setup_s": 0.27, "error": None},
        {"category": "host threads/CPU contention", "fix": {"id": "threads", "label": "1 intra-op thread"},
         "estimated_speedup": 1.342, "speedup": 1.093, "speedup_ci": [0.874, 1.366],
         "verdict": "no significant difference", "setup_s": 0.1, "error": None},
    ]
    out = io.StringIO()
    Console(file=out, width=105, color_system=None).print(profile_report(data))
    lines = out.getvalue().splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Verified fixes"))
    table = lines[title:title + 10]
    text = "\n".join(table)
    assert "…" not in text, text
    first = next(line for line in table if "DataLoader(" in line)
    assert first.split()[:2] == ["DataLoader(num_workers=2,", "input"] and first.rstrip().endswith("0.3 s")
    assert table[table.index(first) + 1].startswith("persistent_workers=True)")
    assert any(line.rstrip().endswith("setup") for line in table)


def test_the_overhead_line_of_a_step_far_faster_profiled_says_how_many_times() -> None:
    """It read 'profiled step 10.00 ms vs unprofiled 20000 ms (0.00x)'."""
    t = trace([gemm(0, 9000), gemm(10_000, 9000, step=1)], steps=2, unprofiled_s=20.0)
    analyses = dg.analyze_all(t, CEILINGS)
    data = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0).to_dict()
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(data))
    line = next(line for line in out.getvalue().splitlines() if line.startswith("profiling overhead"))
    assert "(profiled 2,000x faster: the unprofiled timing was disturbed)" in line and "0.00x" not in line, line


def test_the_view_s_sizes_are_in_binary_units() -> None:
    """A 300 MiB peak RSS (314,572,800 bytes) is '300 MiB', not the 315 of decimal megabytes."""
    from dlperf.report.profile_view import _mib

    assert [_mib(v) for v in (512 * 2**10, 300 * 2**20, 3 * 2**30, None)] == ["512 KiB", "300 MiB", "3,072 MiB", "-"]


def test_the_threads_line_gives_the_loader_workers_cores_beside_this_processs_and_the_machines() -> None:
    from tests.unit.profile.builders import threads

    t = trace([gemm(0, 9000)], thread_info=threads(process_pct=90.0, system_pct=100.0, workers=2, workers_busy=1.1))
    analyses = dg.analyze_all(t, CEILINGS)
    data = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0).to_dict()
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(data))
    assert "2 busy threads kept 0.9 cores busy, its 2 loader workers 1.1, the machine 2.0" in out.getvalue()
    del data["analyses"]["threads"]["loader_workers"]  # recorded before the workers were read
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(data))
    assert "2 busy threads kept 0.9 cores busy, the machine 2.0" in out.getvalue()


def test_a_size_under_one_kib_is_written_in_bytes() -> None:
    """`dlperf profile` of a Linear(4, 4) said 'model 0 KiB' and 'largest allocation: aten::addmm 0 KiB' for 80 and
    16 bytes; the findings and the view write sizes with one formatter."""
    t = trace([gemm(0, 9000), op("aten::addmm", 9500, 10, mem=16), gemm(10_000, 9000, step=1)], steps=2)
    t.memory.timeline = [(100.0, 16), (9000.0, 16), (12_000.0, 0)]
    analyses = dg.analyze_all(t, CEILINGS)
    report = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(profile_report(report.to_dict(), "abc", "sqlite://"))
    assert "largest allocation: aten::addmm 16 B" in out.getvalue()
    assert [dg.size_text(n) for n in (0, 16, 1023, 1024, 3 << 9, 5 << 20, -2048)] == [
        "0 B", "16 B", "1,023 B", "1 KiB", "2 KiB", "5 MiB", "-2 KiB"]


def test_an_int8_products_achieved_rate_is_in_integer_operations() -> None:
    """torch._int_mm's row read "1630.3 GF/s" beside calibrate's "int8 4.4 TOP/s": integer operations, not FLOPs."""
    int_mm = op("aten::_int_mm", 0, 2000.0, shapes=((512, 2048), (2048, 512)), dtypes=("signed char", "signed char"))
    t = trace([int_mm, gemm(2500, 2000)])
    analyses = dg.analyze_all(t, CEILINGS)
    report = ProfileReport("synthetic", t, analyses, dg.diagnose(analyses), {"gemm_flops": {}}, None, 1.0)
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(profile_report(report.to_dict()))
    rows = {line.split()[0]: line for line in out.getvalue().splitlines() if line.strip()}
    assert "536.9 GOP/s" in rows["_int_mm"]  # 2 x 512 x 2048 x 512 in 2 ms
    assert "GF/s" in rows["addmm"] and "GOP/s" not in rows["addmm"]
