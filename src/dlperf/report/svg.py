"""Static SVG charts as strings: line/step/scatter charts on linear or log axes, horizontal bars.

Pure functions, no dependencies; the SVG is embedded in the HTML report so it opens without a network.
Every chart is an `<svg class="plot">` with `data-series` (number of drawn series) for the report's
self-check.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")

WIDTH = 560
HEIGHT = 320
MARGIN_LEFT = 64
MARGIN_RIGHT = 16
MARGIN_TOP = 28
MARGIN_BOTTOM = 46
_CLIP_IDS = itertools.count(1)
LEGEND_ROW = 16
# Average character widths (px) of the chart's fonts (system-ui: 13px bold titles, 12px axis labels, 11px text),
# to cut text that would run past the chart's edge.
TITLE_CHAR_PX = 7.6
LABEL_CHAR_PX = 6.8
TEXT_CHAR_PX = 6.2
LEGEND_CHAR_PX = 7.0
"""A legend entry's width per character: run ids and times are digits, wider than the average letter (entries
like 'dde1cd115b4c 12-04T23:36' ran into the next one's swatch at 6.2)."""


@dataclass
class Series:
    """One set of points. `mode`: 'line', 'step' (an ECDF), 'points', 'line+points' or 'bars'."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    mode: str = "line"
    color: str | None = None
    dashed: bool = False
    labels: Sequence[str] = field(default_factory=tuple)
    """Per-point tooltips (title elements), optional."""
    y_err: Sequence[tuple[float, float]] = field(default_factory=tuple)
    """Per-point (low, high) whiskers, optional."""
    marks: Sequence[str] = field(default_factory=tuple)
    """Per-point short texts written beside the points (a candidate's row number in its table), so a printout tells
    the points apart without the tooltips; placed in order where they overlap no point or other mark
    (`_place_marks`)."""


@dataclass
class Axis:
    label: str
    log: bool = False
    lo: float | None = None
    hi: float | None = None
    integer: bool = False
    """Ticks at whole numbers only (a run's index: '1.5' is no run)."""
    at: tuple[float, ...] = ()
    """Ticks at these values, not at round ones (the batch sizes measured: a log axis put them at 1, 2, 5, 10, 20
    for a bench of 1, 4, 16, 64); a label too close to the previous one is left out, its grid line kept."""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def fit(text: str, width_px: float, char_px: float) -> str:
    """`text` cut with an ellipsis to about `width_px` at `char_px` per character, so a long title or axis label
    stays inside the chart instead of running past its edge (the whole text stays in the chart's <title>)."""
    most = max(int(width_px / char_px), 2)
    return text if len(text) <= most else text[:most - 1].rstrip() + "…"


def fmt_number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6 or magnitude < 1e-3:
        return f"{value:.1e}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
    if magnitude >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


SI_PREFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"))
SI_FROM = 1e4
"""An axis whose largest tick reaches this is labelled with k, M and G: `fmt_number` wrote a throughput axis as
'0, 500000, 1.0e6, 1.5e6', three formats on one axis."""


def _si_texts(ticks: Sequence[float], log: bool, step: float) -> list[str] | None:
    """Labels of a large-valued axis in k/M/G: a linear axis in one unit (its largest tick's) with one number of
    decimals, '0, 0.5M, 1.0M, 1.5M'; a log axis, whose ticks are 1-2-5 multiples, each in its own, '1k, 10k, 1M'.
    None where no such label says each tick's value."""
    def unit(value: float) -> tuple[float, str]:
        return next(((size, name) for size, name in SI_PREFIXES if value >= size), (1.0, ""))

    if log:
        texts = []
        for t in ticks:
            size, name = unit(abs(t))
            texts.append(f"{t / size:g}{name}" if name else fmt_number(t))
        return texts
    size, name = unit(max(abs(t) for t in ticks))
    for decimals in range(4):
        texts = ["0" if t == 0 else f"{t / size:.{decimals}f}{name}" for t in ticks]
        if all(abs(parse_tick(text) - t) <= step * 1e-6 for text, t in zip(texts, ticks, strict=True)):
            return texts
    return None


def parse_tick(text: str) -> float:
    """The value a tick label says ('1.5M' is 1.5e6)."""
    scale = {name: size for size, name in SI_PREFIXES}.get(text[-1:], 1.0)
    return float(text[:-1] if scale != 1.0 else text) * scale


def tick_texts(ticks: Sequence[float], log: bool = False) -> list[str]:
    """The ticks' labels: `fmt_number`'s where they say each tick's value, else with the digits that do (an axis
    of fidelities from 0.9998 to 1 was labelled 1, 1, 1, 1, and ticks at 282.5 and 287.5 read 282 and 288); with
    k, M and G where the axis reaches `SI_FROM` (`_si_texts`)."""
    step = min((abs(b - a) for a, b in itertools.pairwise(ticks) if b != a), default=0.0)
    if ticks and max(abs(t) for t in ticks) >= SI_FROM:
        si = _si_texts(ticks, log, step)
        if si is not None:
            return si
    texts = [fmt_number(t) for t in ticks]

    def faithful(labels: list[str]) -> bool:
        return all(abs(float(text) - t) <= step * 1e-6 for text, t in zip(labels, ticks, strict=True))

    digits = 4
    while step and not faithful(texts) and digits <= 15:
        texts = [fmt_number(t) if t == 0 else f"{t:.{digits}g}" for t in ticks]
        digits += 1
    if len({"e" in text for text, t in zip(texts, ticks, strict=True) if t != 0}) > 1:
        # e-notation below 0.001 beside plain decimals ('0, 5.0e-4, 0.001, 0.0015'): the axis in plain decimals,
        # a log axis's 1-2-5 ticks each with its own digits ('0.0005, 0.001, 0.002')
        if log:
            return [f"{t:.12f}".rstrip("0").rstrip(".") for t in ticks]
        for decimals in range(1, 13):
            fixed = ["0" if t == 0 else f"{t:.{decimals}f}" for t in ticks]
            if faithful(fixed):
                return fixed
    return texts


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 5 x 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    steps = [m * power for m in (0.5, 1, 2, 2.5, 5, 10)]
    chosen = next((i for i, step in enumerate(steps) if step >= raw), len(steps) - 1)
    ticks = _ticks_at(lo, hi, steps[chosen])
    if len(ticks) < 3 and count >= 3:
        # the first round step at or above the span's fifth can leave two ticks (0.0207 .. 0.048: 0.03 and 0.04
        # only); the next finer one gives the axis enough labels to read a value off it
        ticks = _ticks_at(lo, hi, steps[chosen - 1])
    return ticks


def _ticks_at(lo: float, hi: float, step: float) -> list[float]:
    start = math.ceil(lo / step - 1e-9) * step
    ticks: list[float] = []
    value = start
    while value <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 12))
        value += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten in [lo, hi]; 1-2-5 multiples when the range spans fewer than two decades."""
    if lo <= 0 or hi <= 0:
        return []
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1, 2, 5) if last - first <= 3 else (1,)
    ticks = [m * 10.0**e for e in range(first, last + 1) for m in mults]
    return [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]


class _Scale:
    def __init__(self, lo: float, hi: float, start: float, end: float, log: bool) -> None:
        self.log = log
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi == lo:
            pad = abs(lo) * 0.05 or 1.0
            lo, hi = lo - pad, hi + pad
        self.lo, self.hi, self.start, self.end = lo, hi, start, end

    def __call__(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return self.start + (v - self.lo) / (self.hi - self.lo) * (self.end - self.start)


def _range(values: list[float], axis: Axis, pad_fraction: float, include_zero: bool) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v) and (v > 0 or not axis.log)]
    if not finite:
        return (1.0, 10.0) if axis.log else (0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if axis.log:
        lo, hi = lo / 1.3, hi * 1.3
    else:
        if include_zero:
            lo = min(lo, 0.0)
        span = hi - lo or abs(hi) or 1.0
        lo = lo - span * pad_fraction if lo != 0.0 else lo
        hi = hi + span * pad_fraction
    if axis.lo is not None:
        lo = axis.lo
    if axis.hi is not None:
        hi = axis.hi
    return lo, hi


def chart(series: Sequence[Series], x: Axis, y: Axis, title: str = "", *, width: int = WIDTH,
          height: int = HEIGHT, y_zero: bool = False, hlines: Sequence[tuple[float, str]] = (),
          chart_id: str = "") -> str:
    """An SVG chart of `series` with axes, ticks, grid, legend and optional horizontal reference lines."""
    xs = [float(v) for s in series for v in s.xs]
    ys = [float(v) for s in series for v in s.ys]
    ys += [float(v) for s in series for pair in s.y_err for v in pair]
    ys += [v for v, _ in hlines]
    legend_h = LEGEND_ROW * legend_rows(series, width)
    height += legend_h
    x_lo, x_hi = _range(xs, x, 0.02, False)
    y_lo, y_hi = _range(ys, y, 0.05, y_zero)
    left, right = MARGIN_LEFT, width - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, height - MARGIN_BOTTOM - legend_h
    sx = _Scale(x_lo, x_hi, left, right, x.log)
    sy = _Scale(y_lo, y_hi, bottom, top, y.log)
    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" data-series="{len(series)}"'
           + (f' id="{esc(chart_id)}"' if chart_id else "") + f'><title>{esc(title)}</title>',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    if title:
        out.append(f'<text x="{width / 2:.1f}" y="17" text-anchor="middle" class="t">'
                   f'{esc(fit(title, width - 16, TITLE_CHAR_PX))}</text>')
    x_ticks = [t for t in (sorted({t for t in x.at if x_lo <= t <= x_hi and _ok(t, x.log)}) if x.at else
                           log_ticks(x_lo, x_hi) if x.log else nice_ticks(x_lo, x_hi))
               if not x.integer or float(t).is_integer()]
    last_label = -math.inf
    for tick, text in zip(x_ticks, tick_texts(x_ticks, x.log), strict=True):
        px = sx(tick)
        if x.at and px - last_label < len(text) * TEXT_CHAR_PX + 4:
            out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" class="g"/>')
            continue
        last_label = px
        # a label centred on a tick near the right edge ran past the chart ('0.00102' showed as '0.0010')
        anchor, tx = ("end", width - 2.0) if px + len(text) * TEXT_CHAR_PX / 2 > width - 2 else ("middle", px)
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" class="g"/>'
                   f'<text x="{tx:.1f}" y="{bottom + 14}" text-anchor="{anchor}">{text}</text>')
    y_ticks = log_ticks(y_lo, y_hi) if y.log else nice_ticks(y_lo, y_hi)
    for tick, text in zip(y_ticks, tick_texts(y_ticks, y.log), strict=True):
        py = sy(tick)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" class="g"/>'
                   f'<text x="{left - 5}" y="{py + 4:.1f}" text-anchor="end">{text}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" class="frame"/>')
    out.append(f'<text x="{(left + right) / 2:.1f}" y="{bottom + 32}" text-anchor="middle" class="al">'
               f'{esc(fit(x.label, right - left, LABEL_CHAR_PX))}</text>')
    out.append(f'<text transform="translate(14 {(top + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'class="al">{esc(fit(y.label, bottom - top, LABEL_CHAR_PX))}</text>')
    shown = [(sy(value), label) for value, label in hlines if y_lo <= value <= y_hi and not (y.log and value <= 0)]
    labels = _ref_labels(shown)
    for i, (py, _) in enumerate(shown):
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" class="ref"/>'
                   + (f'<text x="{right - 4}" y="{py - 4:.1f}" text-anchor="end" class="reft">{esc(labels[i])}</text>'
                      if i in labels else ""))
    clip = f"clip{next(_CLIP_IDS)}"
    out.append(f'<clipPath id="{clip}"><rect x="{left}" y="{top}" width="{right - left}" '
               f'height="{bottom - top}"/></clipPath><g clip-path="url(#{clip})">')
    # under the points: a mark's line to its point passes under the points beside it
    out.append(_place_marks(series, sx, sy, x, y, (left, top, right, bottom)))
    for i, s in enumerate(series):
        out.append(_draw(s, s.color or PALETTE[i % len(PALETTE)], sx, sy, x, y, bottom))
    out.append("</g>")
    out.append(_legend(series, left, right, bottom + 52))
    out.append("</svg>")
    return "".join(out)


REF_LABEL_GAP_PX = 12
"""Reference lines closer than this share one label: an A/B's 'no change', 'CI low' and 'CI high' a few pixels
apart wrote over one another."""


def _ref_labels(lines: Sequence[tuple[float, str]]) -> dict[int, str]:
    """The label each drawn reference line (pixel y, label) carries, by index: the top line of a group of close
    lines carries the group's labels, top to bottom; the others none."""
    order = sorted(range(len(lines)), key=lambda i: lines[i][0])
    groups: list[list[int]] = []
    for i in order:
        if groups and lines[i][0] - lines[groups[-1][-1]][0] < REF_LABEL_GAP_PX:
            groups[-1].append(i)
        else:
            groups.append([i])
    return {group[0]: " / ".join(dict.fromkeys(lines[i][1] for i in group)) for group in groups}


def _ok(v: float, log: bool) -> bool:
    return math.isfinite(v) and (v > 0 or not log)


def _draw(s: Series, color: str, sx: _Scale, sy: _Scale, x: Axis, y: Axis, bottom: float) -> str:
    pts = [(float(a), float(b)) for a, b in zip(s.xs, s.ys, strict=False)
           if _ok(float(a), x.log) and _ok(float(b), y.log)]
    if not pts:
        return ""
    dash = ' stroke-dasharray="5 3"' if s.dashed else ""
    parts = [f'<g class="series" data-name="{esc(s.name)}">']
    if s.mode == "bars":
        width = max(1.0, (sx(pts[-1][0]) - sx(pts[0][0])) / max(len(pts), 1) * 0.9) if len(pts) > 1 else 8.0
        for a, b in pts:
            px, py = sx(a), sy(b)
            parts.append(f'<rect x="{px - width / 2:.1f}" y="{py:.1f}" width="{width:.1f}" '
                         f'height="{max(bottom - py, 0):.1f}" fill="{color}" fill-opacity="0.45" stroke="{color}"/>')
    if s.mode in ("line", "line+points", "step") and len(pts) > 1:
        coords = []
        for j, (a, b) in enumerate(pts):
            if s.mode == "step" and j > 0:
                coords.append(f"{sx(a):.1f},{sy(pts[j - 1][1]):.1f}")
            coords.append(f"{sx(a):.1f},{sy(b):.1f}")
        parts.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{color}" '
                     f'stroke-width="1.8"{dash}/>')
    for j, (a, b) in enumerate(zip(s.xs, s.ys, strict=False)):
        a, b = float(a), float(b)
        if j < len(s.y_err) and _ok(a, x.log):
            lo, hi = s.y_err[j]
            if _ok(lo, y.log) and _ok(hi, y.log):
                parts.append(f'<line x1="{sx(a):.1f}" y1="{sy(lo):.1f}" x2="{sx(a):.1f}" y2="{sy(hi):.1f}" '
                             f'stroke="{color}" stroke-width="1.2"/>')
    # A line or an ECDF of one point has no segment to draw: the point itself (a bench of one sample left its
    # CDF empty).
    if s.mode in ("points", "line+points") or (s.mode in ("line", "step") and len(pts) == 1):
        for j, (a, b) in enumerate(zip(s.xs, s.ys, strict=False)):
            a, b = float(a), float(b)
            if not (_ok(a, x.log) and _ok(b, y.log)):
                continue
            tip = f"<title>{esc(s.labels[j])}</title>" if j < len(s.labels) else ""
            parts.append(f'<circle cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="3.6" fill="{color}">{tip}</circle>')
    parts.append("</g>")
    return "".join(parts)


MARK_H = 10.0
MARK_CHAR_PX = 7.0
"""A mark's width per character: bold 11px digits."""
"""A mark's height (px) for its box: 11px digits stand about 8px above their baseline."""
_MARK_DIRECTIONS = ((1, 0), (0, -1), (-1, 0), (0, 1), (1, -1), (-1, -1), (1, 1), (-1, 1))
_MARK_DISTANCES = (5.0, 11.0, 18.0, 26.0)
"""How far (px) from its point a mark's box may stand; past the first, a thin line joins the two."""


def _boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _place_marks(series: Sequence[Series], sx: _Scale, sy: _Scale, x: Axis, y: Axis,
                 area: tuple[float, float, float, float]) -> str:
    """The series' marks, each beside its point at the nearest of eight directions and four distances where its box
    stays in the plot area and overlaps no drawn point and no mark placed before it, and, next to the point, is nearer
    it than any other point (further out a line joins mark and point); a mark with no such place is left out (its
    point keeps its tooltip). Marks are placed in the series' order, then the points'."""
    dots = [(sx(float(a)), sy(float(b))) for s in series if s.mode in ("points", "line+points")
            for a, b in zip(s.xs, s.ys, strict=False) if _ok(float(a), x.log) and _ok(float(b), y.log)]
    taken = [(px - 4.5, py - 4.5, px + 4.5, py + 4.5) for px, py in dots]
    left, top, right, bottom = area
    parts: list[str] = []
    for s in series:
        for a, b, text in zip(s.xs, s.ys, s.marks, strict=False):
            if not (text and _ok(float(a), x.log) and _ok(float(b), y.log)):
                continue
            px, py = sx(float(a)), sy(float(b))
            w = len(text) * MARK_CHAR_PX
            for dist, (dx, dy) in itertools.product(_MARK_DISTANCES, _MARK_DIRECTIONS):
                # the box's near edge `dist` past the dot's edge, in direction (dx, dy)
                cx = px + dx * (3.6 + dist + w / 2)
                cy = py + dy * (3.6 + dist + MARK_H / 2)
                box = (cx - w / 2, cy - MARK_H / 2, cx + w / 2, cy + MARK_H / 2)
                if not (left <= box[0] and box[2] <= right and top <= box[1] and box[3] <= bottom):
                    continue
                if any(_boxes_overlap(box, other) for other in taken):
                    continue
                # a mark with no line to its point sits nearer it than any other point ('4' right of the baseline's
                # point stood under the next two, and read as theirs)
                near = math.hypot(cx - px, cy - py)
                if dist == _MARK_DISTANCES[0] and any(math.hypot(cx - ox, cy - oy) < near for ox, oy in dots):
                    continue
                taken.append(box)
                if dist > _MARK_DISTANCES[0]:
                    ex, ey = min(max(px, box[0]), box[2]), min(max(py, box[1]), box[3])
                    parts.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" stroke="#9aa3b1" '
                                 f'stroke-width="0.8"/>')
                parts.append(f'<text x="{cx:.1f}" y="{box[3] - 1:.1f}" text-anchor="middle" class="mk">'
                             f'{esc(text)}</text>')
                break
    return f'<g class="marks">{"".join(parts)}</g>' if parts else ""


def _legend(series: Sequence[Series], left: float, right: float, y: float) -> str:
    """Legend entries in rows under the x-axis label (so they never hide data)."""
    named = [(i, s) for i, s in enumerate(series) if s.name]
    if len(named) < 2:
        return ""
    parts = ['<g class="legend">']
    x = left
    for i, s in named:
        label = s.name[:40]
        item_w = 22 + LEGEND_CHAR_PX * len(label)
        if x + item_w > right and x > left:
            x, y = left, y + LEGEND_ROW
        color = s.color or PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{x + 14:.1f}" y="{y:.1f}">{esc(label)}</text>')
        x += item_w
    parts.append("</g>")
    return "".join(parts)


def legend_rows(series: Sequence[Series], width: int) -> int:
    named = [s for s in series if s.name]
    if len(named) < 2:
        return 0
    rows, x = 1, float(MARGIN_LEFT)
    for s in named:
        item_w = 22 + LEGEND_CHAR_PX * len(s.name[:40])
        if x + item_w > width - MARGIN_RIGHT and x > MARGIN_LEFT:
            rows, x = rows + 1, float(MARGIN_LEFT)
        x += item_w
    return rows


def hbars(labels: Sequence[str], values: Sequence[float], title: str = "", unit: str = "",
          *, width: int = WIDTH, colors: Sequence[str] = ()) -> str:
    """Horizontal bars with value labels, e.g. a time breakdown."""
    row_h = 22
    label_w = 170
    height = MARGIN_TOP + row_h * max(len(labels), 1) + 16
    top_value = max([v for v in values if math.isfinite(v)] or [1.0]) or 1.0
    span = width - label_w - 90
    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" data-series="{len(labels)}"><title>{esc(title)}</title>',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    if title:
        out.append(f'<text x="{width / 2:.1f}" y="17" text-anchor="middle" class="t">'
                   f'{esc(fit(title, width - 16, TITLE_CHAR_PX))}</text>')
    for i, (label, value) in enumerate(zip(labels, values, strict=False)):
        y = MARGIN_TOP + i * row_h
        bar = max(0.0, value) / top_value * span if math.isfinite(value) else 0.0
        color = colors[i] if i < len(colors) else PALETTE[i % len(PALETTE)]
        shown = fit(label, label_w - 10, TEXT_CHAR_PX)
        tip = f"<title>{esc(label)}</title>" if shown != label else ""
        out.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{tip}{esc(shown)}</text>'
                   f'<rect x="{label_w}" y="{y + 3}" width="{max(bar, 0.5):.1f}" height="{row_h - 7}" '
                   f'fill="{color}"/><text x="{label_w + bar + 5:.1f}" y="{y + 14}">'
                   f'{esc(fmt_number(value))}{esc(unit)}</text>')
    out.append("</svg>")
    return "".join(out)


def histogram_bins(values: Sequence[float], bins: int = 40, lo: float | None = None,
                   hi: float | None = None, log: bool = False) -> tuple[list[float], list[float]]:
    """Bin centers and the fraction of values in each bin: equal-width bins over [lo, hi], or equal in
    log space with `log` (for a log-scaled axis; needs lo > 0)."""
    data = [v for v in values if math.isfinite(v)]
    if not data:
        return [], []
    lo = min(data) if lo is None else lo
    hi = max(data) if hi is None else hi
    if hi <= lo:
        return [lo], [1.0]
    if log and lo > 0:
        f: Callable[[float], float] = math.log10
        inv: Callable[[float], float] = lambda t: 10.0**t  # noqa: E731
    else:
        f = inv = lambda t: t
    a, b = f(lo), f(hi)
    width = (b - a) / bins
    counts = [0] * bins
    for v in data:
        if lo <= v <= hi:
            counts[min(int((f(v) - a) / width), bins - 1)] += 1
    return [inv(a + (i + 0.5) * width) for i in range(bins)], [c / len(data) for c in counts]


def ecdf(values: Sequence[float], max_points: int = 400) -> tuple[list[float], list[float]]:
    """The empirical CDF as (sorted values, cumulative fraction), thinned to at most `max_points` steps."""
    data = sorted(v for v in values if math.isfinite(v))
    n = len(data)
    if n == 0:
        return [], []
    step = max(1, n // max_points)
    idx = list(range(0, n, step))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return [data[i] for i in idx], [(i + 1) / n for i in idx]
