"""Progress bars for long commands: rich, on stderr, gone when done (never mixed into --json stdout)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from dlperf.cli.common import error_console


@contextlib.contextmanager
def bench_progress(batch_sizes: tuple[int, ...], min_duration_s: float, min_iters: int
                   ) -> Iterator[Callable[[int, int, float], None]]:
    """Yield `on_progress(batch_size, iterations, seconds)` for run_bench; one bar over all batch sizes.

    Each batch size counts as one unit; within it, progress is the lesser of the two stop conditions met.
    """
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.fields[iters]} iters"), TimeElapsedColumn(),
                        console=error_console(), transient=True, disable=_off())
    index = {b: i for i, b in enumerate(batch_sizes)}
    with progress:
        task = progress.add_task("bench", total=len(batch_sizes), iters=0)

        def on_progress(batch_size: int, iterations: int, seconds: float) -> None:
            by_time = seconds / min_duration_s if min_duration_s > 0 else 1.0
            fraction = min(1.0, by_time, iterations / max(min_iters, 1))
            progress.update(task, completed=index.get(batch_size, 0) + fraction,
                            description=f"batch {batch_size}", iters=iterations)

        yield on_progress


@contextlib.contextmanager
def step_progress(total: int, description: str) -> Iterator[Callable[[str], None]]:
    """Yield `on_step(label)`; each call finishes the previous step and shows the new label."""
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=error_console(), transient=True, disable=_off())
    with progress:
        task = progress.add_task(description, total=total)
        started = [False]

        def on_step(label: str) -> None:
            if started[0]:
                progress.advance(task)
            started[0] = True
            progress.update(task, description=f"{description}: {label}")

        yield on_step


@contextlib.contextmanager
def load_progress(mode: str) -> Iterator[tuple[Callable[[float, int, float], None], Console]]:
    """Yield `(on_window(level, windows, req/s), console)`: one status line for dlperf load, redrawn once
    per measurement window and never in between (`auto_refresh=False`: a refresh thread would take the GIL
    from the load generator ten times a second while it times requests). Print through the yielded
    console while it is shown, so that lines land above it."""
    from dlperf.loadgen.render import level_text

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=error_console(), transient=True, auto_refresh=False, disable=_off())
    with progress:
        task = progress.add_task(f"{mode}: warming up", total=None)

        def on_window(level: float, windows: int, throughput: float) -> None:
            # a rate the peak search computed, as the table and warnings write it (it read 'rate 227.713')
            progress.update(task, description=f"{mode} {level_text(level)}: window {windows}, {throughput:.1f} req/s")
            progress.refresh()

        yield on_window, progress.console


@contextlib.contextmanager
def warmup_progress() -> Iterator[Callable[[str, int, int], None]]:
    """Yield `on_warmup(variant, done, total)` for `dlperf serve`: one bar over the instances' warm-up calls
    (every batch size, each instance), which for a large model take a minute before the server listens; it is
    gone when the block ends, before the server says it is ready."""
    console = error_console()
    if not console.is_terminal:  # nothing to redraw in a log; a stopped bar would leave an empty line there
        yield lambda variant, done, total: None
        return
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=console, transient=True)
    with progress:
        task = progress.add_task("loading", total=None)

        def on_warmup(variant: str, done: int, total: int) -> None:
            which = "" if variant == "default" else f" variant {variant}"
            progress.update(task, completed=done, total=total,
                            description=f"warming up{which}: every batch size on every instance, {done}/{total}")

        yield on_warmup


def _off() -> bool:
    """Where stderr is no terminal (CI logs, `2> file`) a live display shows nothing but leaves a blank line, which
    came before an `error:` line; it is off there, as ab's and check's are."""
    return not error_console().is_terminal
