"""Reading the report's SVG charts back: a chart by its title, each axis's value at a pixel (from its labelled ticks),
and the points, line, bars, whiskers and reference lines a series drew, so a test asserts the value a mark stands
at rather than the markup around it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dlperf.report.svg import parse_tick

_TICK = re.compile(r'<line x1="([-\d.]+)" y1="([-\d.]+)" x2="([-\d.]+)" y2="([-\d.]+)" class="g"/>'
                   r'<text [^>]*>([^<]+)</text>')


def plot(html: str, title: str) -> str:
    """The one chart of `html` whose title is `title`."""
    found = [svg for svg in re.findall(r'<svg class="plot".*?</svg>', html, flags=re.S)
             if f"<title>{title}</title>" in svg]
    assert len(found) == 1, f"{len(found)} charts titled {title!r}"
    return found[0]


@dataclass(frozen=True)
class Scale:
    """An axis as its first and last labelled ticks place it: value <-> pixel, linear or log."""

    first: tuple[float, float]
    last: tuple[float, float]
    log: bool

    def _t(self, value: float) -> float:
        return math.log10(value) if self.log else value

    def pixel(self, value: float) -> float:
        (v0, p0), (v1, p1) = self.first, self.last
        return p0 + (self._t(value) - self._t(v0)) / (self._t(v1) - self._t(v0)) * (p1 - p0)

    def value(self, pixel: float) -> float:
        (v0, p0), (v1, p1) = self.first, self.last
        t = self._t(v0) + (pixel - p0) / (p1 - p0) * (self._t(v1) - self._t(v0))
        return 10**t if self.log else t


def ticks(svg: str, which: str) -> list[tuple[float, float]]:
    """(value, pixel) of each labelled tick of the x or the y axis."""
    found = []
    for x1, y1, x2, _, text in _TICK.findall(svg):
        vertical = x1 == x2
        if vertical == (which == "x"):
            found.append((parse_tick(text), float(x1) if vertical else float(y1)))
    return found


def axis(svg: str, which: str, log: bool = False) -> Scale:
    labelled = ticks(svg, which)
    assert len(labelled) >= 2, f"the {which} axis has {len(labelled)} labelled ticks"
    return Scale(labelled[0], labelled[-1], log)


def _series(svg: str, name: str) -> str:
    found = re.search(rf'<g class="series" data-name="{re.escape(name)}">(.*?)</g>', svg, flags=re.S)
    assert found is not None, f"no series {name!r}"
    return found.group(1)


def points(svg: str, name: str, x_log: bool = False, y_log: bool = False) -> list[tuple[float, float]]:
    """The (x, y) values at which series `name` drew its points, read off the axes."""
    sx, sy = axis(svg, "x", x_log), axis(svg, "y", y_log)
    return [(sx.value(float(cx)), sy.value(float(cy)))
            for cx, cy in re.findall(r'<circle cx="([-\d.]+)" cy="([-\d.]+)"', _series(svg, name))]


def line(svg: str, name: str, x_log: bool = False, y_log: bool = False) -> list[tuple[float, float]]:
    """The (x, y) values of the vertices of series `name`'s line."""
    sx, sy = axis(svg, "x", x_log), axis(svg, "y", y_log)
    drawn = re.search(r'<polyline points="([^"]*)"', _series(svg, name))
    assert drawn is not None, f"series {name!r} drew no line"
    return [(sx.value(float(x)), sy.value(float(y))) for x, y in (p.split(",") for p in drawn.group(1).split())]


def bars(svg: str, name: str, x_log: bool = False) -> list[tuple[float, float, float]]:
    """(x at the bar's centre, y at its top, y at its bottom) of each bar of series `name`."""
    sx, sy = axis(svg, "x", x_log), axis(svg, "y")
    return [(sx.value(float(x) + float(w) / 2), sy.value(float(y)), sy.value(float(y) + float(h)))
            for x, y, w, h in re.findall(r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)"',
                                         _series(svg, name))]


def whiskers(svg: str, name: str) -> list[tuple[float, float, float]]:
    """(x, y at one end, y at the other) of each whisker of series `name`."""
    sx, sy = axis(svg, "x"), axis(svg, "y")
    return [(sx.value(float(x)), sy.value(float(y1)), sy.value(float(y2)))
            for x, y1, y2 in re.findall(r'<line x1="([-\d.]+)" y1="([-\d.]+)" x2="[-\d.]+" y2="([-\d.]+)" stroke=',
                                        _series(svg, name))]


def reference_lines(svg: str, y_log: bool = False) -> list[float]:
    """The y values of the chart's horizontal reference lines (an SLO, p50 and p99 of a CDF)."""
    sy = axis(svg, "y", y_log)
    return [sy.value(float(y)) for y in re.findall(r'<line x1="[-\d.]+" y1="([-\d.]+)" x2="[-\d.]+" y2="[-\d.]+" '
                                                   r'class="ref"/>', svg)]


def frame(svg: str) -> tuple[float, float, float, float]:
    """The plot area's left, top, right and bottom pixels."""
    found = re.search(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" class="frame"/>', svg)
    assert found is not None
    left, top, width, height = map(float, found.groups())
    return left, top, left + width, top + height


def marks(svg: str) -> list[tuple[str, tuple[float, float, float, float], tuple[float, float] | None]]:
    """Each mark written beside a point: (its text, its box's left, top, right and bottom pixels, the pixel its line
    starts at, None where it has no line)."""
    from dlperf.report.svg import MARK_CHAR_PX, MARK_H

    found = []
    for x1, y1, x, y, text in re.findall(r'(?:<line x1="([-\d.]+)" y1="([-\d.]+)" x2="[-\d.]+" y2="[-\d.]+" [^>]*/>)?'
                                         r'<text x="([-\d.]+)" y="([-\d.]+)" text-anchor="middle" class="mk">([^<]+)'
                                         r'</text>', svg):
        half = len(text) * MARK_CHAR_PX / 2
        box = (float(x) - half, float(y) + 1 - MARK_H, float(x) + half, float(y) + 1)
        found.append((text, box, (float(x1), float(y1)) if x1 else None))
    return found


def dots(svg: str, name: str) -> list[tuple[float, float]]:
    """The pixels of the points series `name` drew."""
    return [(float(cx), float(cy))
            for cx, cy in re.findall(r'<circle cx="([-\d.]+)" cy="([-\d.]+)"', _series(svg, name))]


def boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
