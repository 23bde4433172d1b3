"""The units the views print: `dlperf calibrate`'s table (OP/s for int8, the copy's size in MiB), SI prefixes down to
k, a p-value that underflowed to 0, and the sample times and ranges the HTML latency plots are drawn from."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.report.html_parts import fmt_p_value, sampled_seconds, trimmed_range, wide_range
from dlperf.report.svg import Series
from dlperf.report.terminal import ceilings_table, fmt_si
from tests.unit.report.test_terminal import _text

pytestmark = pytest.mark.unit


CEILINGS: dict[str, Any] = {
    "device": "cpu", "machine_key": "k", "threads": 2, "quick": False, "measured_at": "2026-12-04T14:29:22+00:00",
    "gemm_flops": {"fp32": 165272096103.7736, "int8": 1831241124488.6768},
    "memory_bandwidth_bytes_s": 32510246565.945652,
    "details": {"warnings": [], "skipped": {}, "gemm_fp32": {"n": 2048, "samples": 5},
                "gemm_int8": {"n": 1024, "samples": 46}, "copy": {"bytes": 268435456, "samples": 26}},
}


def test_the_calibrate_table_names_each_ceiling_in_its_unit() -> None:
    """int8 GEMMs are integer operations (OP/s, as the HTML report says), and the copy is of 256 MiB, the bytes each
    call copied (the bandwidth counts them twice, read and written)."""
    text = _text(ceilings_table(CEILINGS), width=160)
    rows = {line.split()[2]: line for line in text.splitlines() if "GEMM" in line}
    assert "165.3 GFLOP/s" in rows["fp32"] and "2048³ matmul, 5 calls" in rows["fp32"]
    assert "1.8 TOP/s" in rows["int8"] and "FLOP" not in rows["int8"] and "1024³ matmul, 46 calls" in rows["int8"]
    assert "32.5 GB/s" in text and "copy of 256.0 MiB (read + write), 26 calls" in text


def test_si_prefixes_go_down_to_kilo() -> None:
    """A small model's FLOPs per step or a slow copy read '12345.0 B/s' without the k."""
    assert fmt_si(12_345.0, "FLOP") == "12.3 kFLOP"
    assert fmt_si(2.5e6, "B/s") == "2.5 MB/s"
    assert fmt_si(950.0, "B/s") == "950.0 B/s"


def test_a_p_value_that_underflowed_to_zero_is_shown_as_a_bound() -> None:
    """0.0 is what an underflow gives: shown as '0' it reads as certainty."""
    assert fmt_p_value(0.0) == "<1e-300"
    assert fmt_p_value(1e-320) == "<1e-300"
    assert fmt_p_value(0.25) != "<1e-300"


def test_a_bound_or_an_estimate_is_right_aligned_with_the_other_numbers() -> None:
    """A Mann-Whitney p written '<1e-300' sat left-aligned in the report's right-aligned p column."""
    from dlperf.report.html_parts import html_table

    table = html_table(["p"], [[fmt_p_value(0.0)], [fmt_p_value(0.03)], [">5"], ["~1.2"], ["<"], ["<b>"]])
    cells = table.split("<tbody>")[1]
    assert cells.count('<td class="n">') == 4
    assert '<td class="n">&lt;1e-300</td>' in cells and '<td class="n">&gt;5</td>' in cells
    assert "<td>&lt;</td>" in cells and "<td>&lt;b&gt;</td>" in cells  # a bare sign, a word: text


def test_sampled_seconds_are_seconds() -> None:
    """The stored samples are nanoseconds; the plots convert seconds to ms: a 1.5 ms call drawn at 1500 ms otherwise."""
    point = {"measurement": {"samples_ns": [1_500_000, 2_000_000], "items_per_call": 4}}
    assert sampled_seconds(point) == ([0.0015, 0.002], 4)
    assert sampled_seconds({"measurement": {"samples_ns": []}}) is None


def test_a_histogram_s_range_leaves_out_the_top_and_bottom_percent() -> None:
    """One 100x outlier among 1000 calls squashed every other call into the first bar."""
    values = [1.0 + i / 1000 for i in range(999)] + [100.0]
    lo, hi = trimmed_range(values)
    assert lo == pytest.approx(1.009) and hi == pytest.approx(1.990)  # the 10th and the 991st of 1000: 1% each side


def test_a_histogram_of_calls_nearly_all_alike_spans_the_few_others() -> None:
    """Where the 1st and 99th percentiles are one value, cutting to them leaves one bar of 100%: the range is the
    whole of the calls instead."""
    assert trimmed_range([1.0] * 200 + [5.0]) == (1.0, 5.0)


def test_a_log_axis_from_a_span_above_twenty_times() -> None:
    assert wide_range([Series("a", [1.0, 50.0], [0.0, 1.0])])
    assert not wide_range([Series("a", [1.0, 10.0], [0.0, 1.0])])


def test_a_throughput_in_the_report_s_tables_is_written_out_as_the_terminal_writes_it() -> None:
    """A bench of a digits MLP: its batch 64 row read '1.8e6' items/s beside the headline's 1,800,926 and the row
    above's '476842'; an ab run's side '1.4e6' where the terminal printed 1,393,303."""
    import re

    from dlperf.measure.stats import Measurement
    from dlperf.report.html import render_report
    from dlperf.report.html_parts import fmt_rate
    from dlperf.store.records import RunRecord

    def point(batch: int, call_s: float) -> dict[str, Any]:
        m = Measurement([round(call_s * 1e9)] * 20, items_per_call=batch)
        return {"batch_size": batch, "summary": m.summary(), "measurement": m.to_dict()}

    points = [point(8, 8 / 476842.0), point(64, 64 / 1800926.0)]
    rec = RunRecord(id="b1", kind="bench", workload="wl.py", status="ok", created_at="2026-12-07T04:29:31",
                    config={"batch_sizes": [8, 64]}, environment={}, result={"points": points})
    cells = re.findall(r'<td class="n">([^<]*)</td>', render_report([rec]))
    rates = [p["summary"]["throughput"] for p in points]
    assert 1.80e6 < rates[1] < 1.81e6 and f"{rates[1]:,.0f}" in cells and f"{rates[0]:,.0f}" in cells
    assert not [c for c in cells if "e6" in c]
    assert fmt_rate(45.678) == "45.7" and fmt_rate(None) == "-"
