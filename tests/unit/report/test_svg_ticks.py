"""Tick labels say their ticks' values: a Pareto plot of fidelities 0.9998 to 1 had a y-axis labelled 1, 1, 1, 1, and
a load run's throughput axis labelled its ticks at 282.5 and 287.5 as 282 and 288."""

from __future__ import annotations

import re

import pytest

from dlperf.report.svg import Axis, Series, chart, parse_tick, tick_texts

pytestmark = pytest.mark.unit


def _y_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end">([^<]+)</text>', svg)


def test_close_metric_values_get_distinct_y_tick_labels() -> None:
    svg = chart([Series("candidates", [0.013, 0.014, 0.058, 0.092], [1.0, 0.99991, 0.99987, 0.99999], "points")],
                Axis("latency (ms)"), Axis("fidelity"), "Pareto frontier")
    labels = _y_labels(svg)
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert all(abs(float(text) - 1.0) < 1e-3 for text in labels)  # each label is its tick's value


def test_labels_stay_short_where_three_digits_tell_them_apart() -> None:
    assert tick_texts([0.0, 5.0, 10.0, 25.0]) == ["0", "5", "10", "25"]
    assert tick_texts([0.6, 0.8, 1.0]) == ["0.6", "0.8", "1"]
    assert tick_texts([1000.2, 1000.4, 1000.6]) == ["1000.2", "1000.4", "1000.6"]  # '{:.0f}' made them all 1000


def test_a_half_step_tick_is_not_rounded_to_a_whole_number() -> None:
    svg = chart([Series("p50", [284.5], [0.38], "line+points")], Axis("throughput (requests/s)"), Axis("latency (ms)"),
                "Latency vs throughput")
    x_labels = re.findall(r'text-anchor="middle">([0-9.]+)</text>', svg)
    assert "282.5" in x_labels and "287.5" in x_labels and "282" not in x_labels and "288" not in x_labels


def test_a_large_valued_axis_has_one_format() -> None:
    """A bench's 'Throughput vs batch size' y axis read '0, 500000, 1.0e6, 1.5e6'."""
    svg = chart([Series("items/s", [1, 8, 64], [65384.0, 476842.0, 1800926.0], "line+points")],
                Axis("batch size", log=True, at=(1, 8, 64)), Axis("items/s"), "Throughput vs batch size", y_zero=True)
    labels = _y_labels(svg)
    assert labels[0] == "0" and all(re.fullmatch(r"\d\.\dM", text) for text in labels[1:]), labels
    assert [parse_tick(text) for text in labels] == [0.0, 5e5, 1e6, 1.5e6]
    assert tick_texts([0.0, 2e5, 4e5, 6e5]) == ["0", "200k", "400k", "600k"]
    assert tick_texts([0.0, 2.5e5, 5e5, 7.5e5, 1e6]) == ["0", "0.25M", "0.50M", "0.75M", "1.00M"]
    assert tick_texts([100.0, 1e3, 1e4, 1e5, 1e6], log=True) == ["100", "1k", "10k", "100k", "1M"]
    assert tick_texts([0.0, 2000.0, 4000.0]) == ["0", "2000", "4000"]  # under 10k, whole numbers read as they are


def test_an_axis_below_a_thousandth_does_not_mix_e_notation_with_decimals() -> None:
    """fmt_number writes values under 0.001 in e-notation: a linear axis read '0, 5.0e-4, 0.001, 0.0015' and a log
    axis '5.0e-4, 0.001, 0.002'."""
    assert tick_texts([0.0, 0.0005, 0.001, 0.0015]) == ["0", "0.0005", "0.0010", "0.0015"]
    assert tick_texts([0.0005, 0.001, 0.002, 0.005], log=True) == ["0.0005", "0.001", "0.002", "0.005"]
    assert tick_texts([0.0002, 0.0004, 0.0006]) == ["2.0e-4", "4.0e-4", "6.0e-4"]  # one format already
    svg = chart([Series("p50", [1.0, 2.0], [0.0004, 0.0014], "line+points")], Axis("run"), Axis("latency (ms)"),
                "Trend", y_zero=True)
    labels = _y_labels(svg)
    assert not any("e" in text for text in labels) and len({len(t) for t in labels if t != "0"}) == 1, labels
