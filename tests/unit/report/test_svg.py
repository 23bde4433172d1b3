"""SVG chart helpers: ticks, bins, ECDF, and what a chart draws."""

from __future__ import annotations

import itertools
import re

import pytest

from dlperf.report.svg import Axis, Series, chart, ecdf, hbars, histogram_bins, log_ticks, nice_ticks
from tests.unit.report import svg_read

pytestmark = pytest.mark.unit


def test_nice_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3.2, 97.0) == [20.0, 40.0, 60.0, 80.0]


def test_log_ticks_are_decades_or_1_2_5() -> None:
    assert log_ticks(0.05, 200.0) == [0.1, 1.0, 10.0, 100.0]
    assert log_ticks(1.0, 20.0) == [1.0, 2.0, 5.0, 10.0, 20.0]


def test_histogram_fractions_sum_to_one_and_log_bins_are_geometric() -> None:
    xs, ys = histogram_bins([1, 2, 2, 3, 10], bins=3)
    assert sum(ys) == pytest.approx(1.0) and len(xs) == 3
    xs, ys = histogram_bins([1, 10, 100], bins=2, lo=1, hi=100, log=True)
    assert xs == pytest.approx([10**0.5, 10**1.5]) and ys == pytest.approx([1 / 3, 2 / 3])


def test_ecdf_ends_at_one_and_thins() -> None:
    xs, ys = ecdf(list(range(1000)), max_points=100)
    assert ys[-1] == 1.0 and xs[-1] == 999 and len(xs) <= 101
    assert all(a <= b for a, b in itertools.pairwise(ys))


def test_chart_draws_each_series_and_a_legend() -> None:
    svg = chart([Series("a", [1, 2, 3], [1, 4, 9], "line+points"), Series("b", [1, 2], [2, 3], "step")],
                Axis("x"), Axis("y", log=True), "t")
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 3
    assert 'data-series="2"' in svg and ">a</text>" in svg and ">b</text>" in svg


def test_non_positive_values_are_skipped_on_log_axes() -> None:
    svg = chart([Series("s", [0, 1, 10], [1, 2, 3], "points")], Axis("x", log=True), Axis("y"))
    assert svg.count("<circle") == 2


def test_hbars_label_each_value() -> None:
    svg = hbars(["forward", "overhead"], [8.0, 2.0], "Time", " ms")
    assert "forward" in svg and "8 ms" in svg and "2 ms" in svg


@pytest.mark.parametrize("mode", ["line", "step"])
def test_a_series_of_one_point_is_drawn_as_that_point(mode: str) -> None:
    svg = chart([Series("one sample", *ecdf([0.123]), mode=mode)], Axis("x"), Axis("y"))
    assert svg.count("<circle") == 1 and "<polyline" not in svg  # the step ECDF drew nothing at all


def test_long_titles_and_labels_are_cut_to_fit_the_chart() -> None:
    metric = "fidelity (mean cosine vs the original model's outputs on 32 held-out inputs)"
    svg = chart([Series("s", [1, 2], [0.99, 1.0], "points")], Axis("paired p50 latency (ms)"), Axis(metric),
                "Pareto frontier: latency vs " + metric)
    title = re.search(r'class="t">([^<]*)</text>', svg)
    ylabel = re.findall(r'class="al">([^<]*)</text>', svg)[1]
    assert title is not None and title.group(1).endswith("…") and len(title.group(1)) * 7.6 <= 560
    assert ylabel.endswith("…") and len(ylabel) * 6.8 <= 320  # it ran past the top and bottom of the chart
    assert f"<title>Pareto frontier: latency vs {metric.replace(chr(39), '&#x27;')}</title>" in svg  # all of it
    bars = hbars(["aten::scaled_dot_product_flash_attention_for_cpu", "mm"], [2.0, 1.0])
    assert "<title>aten::scaled_dot_product_flash_attention_for_cpu</title>" in bars and "…</text>" in bars


def test_close_reference_lines_share_one_label_instead_of_overwriting_each_other() -> None:
    # an A/B with a tight CI on an axis the block ratios spread: 'no change', 'CI low' and 'CI high' were drawn
    # a few pixels apart, each label over the others ('no cCI high')
    svg = chart([Series("B/A", [1, 2, 3, 4], [0.9, 1.1, 0.95, 1.05], "line+points")], Axis("block"), Axis("ratio"),
                hlines=[(1.0, "no change"), (0.998, "CI low"), (1.002, "CI high")])
    labels = re.findall(r'class="reft">([^<]*)</text>', svg)
    assert labels == ["CI high / no change / CI low"]
    assert svg.count('class="ref"/>') == 3  # every line is still drawn
    apart = chart([Series("cdf", [1, 2, 3], [0.3, 0.6, 1.0], "step")], Axis("ms"), Axis("fraction"),
                  hlines=[(0.5, "p50"), (0.99, "p99")])
    assert re.findall(r'class="reft">([^<]*)</text>', apart) == ["p50", "p99"]


def test_an_axis_gets_at_least_three_ticks() -> None:
    """0.0207 .. 0.048 ms was labelled with 0.03 and 0.04 only: the step at or above a fifth of the span (0.01)."""
    assert nice_ticks(0.0207, 0.048) == [0.025, 0.03, 0.035, 0.04, 0.045]
    assert all(len(nice_ticks(lo, lo + span)) >= 3 for lo in (0.0, 0.013, 7.7, 282.0)
               for span in (0.0011, 0.027, 0.6, 1.0, 6.0, 55.0, 130.0))


def test_a_tick_label_at_the_right_edge_stays_inside_the_chart() -> None:
    """A label centred on a tick near the right edge ran past it: '0.00102' showed as '0.0010'."""
    svg = chart([Series("s", [0.007, 0.0095], [1.0, 2.0])], Axis("x", lo=0.007, hi=0.0095), Axis("y"), width=300)
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="(\w+)">([\d.]+)</text>', svg)
    right_most = max(labels, key=lambda t: float(t[0]))
    x, anchor, text = float(right_most[0]), right_most[1], right_most[2]
    right_edge = x if anchor == "end" else x + len(text) * 6.2 / 2
    assert text == "0.0095" and right_edge <= 300


@pytest.mark.parametrize(("x_log", "y_log"), [(False, False), (True, False), (False, True), (True, True)])
def test_points_are_drawn_at_their_values_on_linear_and_log_axes(x_log: bool, y_log: bool) -> None:
    xs, ys = [1.0, 3.0, 10.0, 40.0, 100.0], [2.0, 5.0, 20.0, 70.0, 300.0]
    svg = chart([Series("s", xs, ys, "points")], Axis("x", log=x_log), Axis("y", log=y_log))
    drawn = svg_read.points(svg, "s", x_log=x_log, y_log=y_log)
    # to a thousandth of a linear axis's span (its pixels are rounded to 0.1), a hundredth of a log axis's values
    assert [x for x, _ in drawn] == (pytest.approx(xs, rel=0.01) if x_log else pytest.approx(xs, abs=0.1))
    assert [y for _, y in drawn] == (pytest.approx(ys, rel=0.01) if y_log else pytest.approx(ys, abs=0.3))


def test_a_step_ecdf_moves_right_at_its_fraction_then_rises() -> None:
    """An ECDF stays at the fraction of the calls up to x_j-1 until x_j: a step that rose first would say that 2/3 of
    the calls took 1 ms or less."""
    svg = chart([Series("cdf", [1.0, 2.0, 3.0], [1 / 3, 2 / 3, 1.0], "step")], Axis("ms"), Axis("fraction"),
                y_zero=True)
    vertices = svg_read.line(svg, "cdf")
    expected = [(1.0, 1 / 3), (2.0, 1 / 3), (2.0, 2 / 3), (3.0, 2 / 3), (3.0, 1.0)]
    assert [x for x, _ in vertices] == pytest.approx([x for x, _ in expected], abs=0.01)
    assert [y for _, y in vertices] == pytest.approx([y for _, y in expected], abs=0.01)


def test_a_bar_reaches_from_the_axis_up_to_its_value() -> None:
    svg = chart([Series("h", [1.0, 2.0, 3.0], [10.0, 40.0, 25.0], "bars")], Axis("ms"), Axis("% of calls"),
                y_zero=True)
    drawn = svg_read.bars(svg, "h")
    assert [top for _, top, _ in drawn] == pytest.approx([10.0, 40.0, 25.0], abs=0.3)
    assert [bottom for _, _, bottom in drawn] == pytest.approx([0.0, 0.0, 0.0], abs=0.3)
    assert [x for x, _, _ in drawn] == pytest.approx([1.0, 2.0, 3.0], abs=0.02)


def test_a_run_axis_ticks_whole_runs_only() -> None:
    svg = chart([Series("s", [1, 2], [3.0, 4.0], "line+points")], Axis("run", lo=0.5, hi=2.5, integer=True),
                Axis("ms"))
    assert [value for value, _ in svg_read.ticks(svg, "x")] == [1.0, 2.0]


def test_a_histogram_s_fractions_are_of_all_the_values_those_outside_its_range_included() -> None:
    """The report cuts the 1% tails off a latency histogram's range: its bars are still fractions of every call."""
    _, fractions = histogram_bins([1.0, 2.0, 2.0, 3.0, 100.0], bins=2, lo=1.0, hi=3.0)
    assert fractions == pytest.approx([0.2, 0.6])
