"""A renderable that picks, where it is drawn, the first of several layouts that fits the console's width."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement

_UNBOUNDED = 100_000
"""The width a layout is measured at, so its measurement is its natural width, not one squeezed to the console."""


class FirstThatFits:
    """The first of `layouts` whose natural width (a table's columns unsqueezed, a text's longest line) fits the
    width it is drawn at; the last one where none does. Renderers that do not know their console (`dlperf runs
    show`, a Group) use it to offer a narrower layout instead of letting rich squeeze a table's columns to '…'."""

    def __init__(self, layouts: Sequence[RenderableType]) -> None:
        if not layouts:
            raise ValueError("FirstThatFits needs at least one layout")
        self.layouts = list(layouts)

    def pick(self, console: Console, width: int) -> RenderableType:
        options = console.options.update_width(_UNBOUNDED)
        for layout in self.layouts[:-1]:
            if Measurement.get(console, options, layout).maximum <= width:
                return layout
        return self.layouts[-1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.pick(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.pick(console, options.max_width))
