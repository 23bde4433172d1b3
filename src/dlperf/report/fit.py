"""Layouts for narrow consoles: the first of several that fits the console's width, and hanging indents."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

_UNBOUNDED = 100_000
"""The width a layout is measured at, so its measurement is its natural width, not one squeezed to the console."""


class FirstThatFits:
    """The first of `layouts` whose natural width (a table's columns unsqueezed, a text's longest line) fits the
    width it is drawn at; the last one where none does. Renderers that do not know their console (`dlperf runs
    show`, a Group) use it to offer a narrower layout instead of letting rich squeeze a table's columns to '…'."""

    def __init__(self, layouts: Sequence[RenderableType], wrapping: bool = False) -> None:
        """wrapping: a layout fits where its minimum width does, its wrapping columns wrapped (a table whose
        wrapping column has a min_width, so it wraps no narrower than that)."""
        if not layouts:
            raise ValueError("FirstThatFits needs at least one layout")
        self.layouts = list(layouts)
        self.wrapping = wrapping

    def pick(self, console: Console, width: int) -> RenderableType:
        options = console.options.update_width(_UNBOUNDED)
        for layout in self.layouts[:-1]:
            measured = Measurement.get(console, options, layout)
            if (measured.minimum if self.wrapping else measured.maximum) <= width:
                return layout
        return self.layouts[-1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.pick(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.pick(console, options.max_width))


def hanging(indent: str | Text, body: str | Text) -> Table:
    """`body` after `indent`, its wrapped lines under its first; a Text alone wraps them to column 0."""
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(indent, body)
    return grid


def indented_line(line: str) -> RenderableType:
    """A line of text whose leading spaces its wrapped lines keep (`hanging`); a line without any as it is."""
    body = line.lstrip(" ")
    indent = len(line) - len(body)
    return hanging(" " * indent, Text(body)) if indent else Text(line)
