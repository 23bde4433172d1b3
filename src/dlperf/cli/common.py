"""Shared CLI plumbing: the store option, consoles, JSON output, parsing of lists and sizes."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from dlperf.errors import ConfigError
from dlperf.measure.allocator import CHOICES as ALLOCATOR_CHOICES
from dlperf.measure.env import thread_limit, usable_cores

__all__ = ["ALLOCATOR_CHOICES"]  # what `--allocator` accepts, for the commands that take it


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None,
                        help="run store: a path or SQLAlchemy URL (default $DLPERF_STORE or .dlperf/runs.db)")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


PIPED_WIDTH = 160
"""Columns when stdout is not a terminal and COLUMNS is unset (a CI log, `| tee`): Rich's 80 would squeeze
the wider tables (dlperf load's has 14 columns) into truncated headers."""
WORKLOAD_HELP = "zoo:NAME[?k=v], file.py or file.py:NAME[?k=v]"
"""The workload argument's forms, as every command's --help shows them (docs/workloads.md)."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader of stdout went away (`| head`): rich's own handling exits 1, which a CI script reads as a
        failed check; end as `main` ends any command whose reader went away (141, SIGPIPE's shell status)."""
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return _Console(highlight=False, width=PIPED_WIDTH if piped else None)


def error_console() -> Console:
    # soft_wrap: an error message stays one line (greppable) instead of being wrapped at 80 columns.
    return Console(stderr=True, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """dlperf's own warnings (`DlperfWarning`: a cache that cannot be written...) as one `warning: ...` line on
    stderr, each time, instead of Python's 'file:line: DlperfWarning: ...' and the source line; others as Python
    shows them."""
    import warnings

    from dlperf.errors import DlperfWarning

    with warnings.catch_warnings():  # restores the filters and showwarning afterwards
        shown = warnings.showwarning
        warnings.simplefilter("always", DlperfWarning)

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            if issubclass(category, DlperfWarning):
                error_console().print(f"warning: {message}", markup=False)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def print_json(data: Any) -> None:
    """`data` as JSON on stdout (the real one while `main` sends everything else to stderr, `_stdio`); a float that
    is not finite (a percentile of no requests) as null, since NaN and Infinity are not JSON and strict parsers
    refuse them."""
    from dlperf._stdio import json_stream

    out = json_stream()
    out.write(json.dumps(_finite(data), indent=2, default=str, allow_nan=False) + "\n")
    out.flush()


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def int_list(text: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32), with a clear error. '1,,8' is refused (a number left out), '' too."""
    items = [v.strip() for v in text.split(",")]
    if text.strip() and "" in items:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,8,32, got '{text}' (an empty item)")
    try:
        values = tuple(int(v) for v in items if v)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,8,32, got '{text}'") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def duration_s(text: str) -> float:
    """'90', '90s', '10m', '1h' -> seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 30s, 10m or 1h, got '{text}'")
    value = float(match.group(1))
    return value * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2) or "s"]


class WrittenFraction(float):
    """A fraction option's value that remembers how it was written (`bare_above_one`)."""

    text: str

    def __new__(cls, value: float, text: str) -> WrittenFraction:
        obj = super().__new__(cls, value)
        obj.text = text
        return obj

    def __reduce__(self) -> tuple[Any, tuple[float, str]]:  # copy, deepcopy (dataclasses.asdict) and pickle
        return WrittenFraction, (float(self), self.text)


SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
              "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}
BARE_BYTES_BELOW = 2**20
"""A bare number below this many bytes is refused: '--memory-budget 10' meant 10 GiB, and was read as 10 bytes."""


def memory_size(text: str, option: str = "--memory-budget") -> int:
    """'4GiB', '512MB', '2g', '1e9' -> bytes (binary units for KiB/k, decimal for KB). A bare number is bytes, and one
    below 1 MiB is refused as a missing unit; so is anything else that is not a size, or less than one byte."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+]?[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in SIZE_UNITS:
        raise ConfigError(f"{option}: expected a size like 4GiB, 512MiB or 2GB, got '{text}'")
    value = float(match.group(1)) * SIZE_UNITS[unit]
    if not math.isfinite(value) or value > 2**62:  # 1e400 read as inf: int() raised OverflowError
        raise ConfigError(f"{option} {text.strip()} is beyond any machine's memory: give a size like 4GiB")
    size = int(value)
    if size < 1:
        raise ConfigError(f"{option} must be at least one byte, got '{text}'")
    if not unit and size < BARE_BYTES_BELOW:
        # 'host memory exceeds the budget (3374735360% of the budget) ... of the 0 KiB budget'
        number = match.group(1)
        example = f"e.g. {number}GiB or {number}MiB" if number.isdigit() else "e.g. 4GiB or 512MiB"
        raise ConfigError(f"{option} {text.strip()}: a number without a unit is bytes, so this is {size} bytes: give "
                          f"a unit, {example}")
    return size


def percent_or_float(text: str) -> float:
    """'1%' -> 0.01; '0.01' -> 0.01 (a WrittenFraction: `bare_above_one` tells '5' from '500%')."""
    try:
        return WrittenFraction(float(text[:-1]) / 100.0 if text.endswith("%") else float(text), text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a fraction or a percentage like 1%, got '{text}'") from exc


def bare_above_one(option: str, value: float) -> None:
    """ConfigError for a fraction option written as a bare number above 1: `--max-regression 5` meant 500% and
    let a 97% slowdown pass; '500%' says it."""
    text = getattr(value, "text", None)
    if text is not None and not text.endswith("%") and value > 1.0:
        raise ConfigError(f"{option} '{text}' would be {value:.0%} (a bare number is a fraction): write {text}% for "
                          f"{value / 100:g}, or {value:.0%} if you mean it")


TOKEN_FILE_HELP = ("as --token, the token read from FILE (alone in it; surrounding whitespace and the final newline "
                   "are dropped), e.g. a mounted Kubernetes secret")
"""--token-file's help, the same for every command that takes a bearer token (serve, load, compare --live)."""


def bearer_token(token: str | None, token_file: str | None) -> str | None:
    """The bearer token of `--token` or `--token-file` (None: neither). A command line is readable by every user of
    the host (ps, /proc/PID/cmdline), a file need not be: the file's text without surrounding whitespace, refused
    where it cannot be read, is empty or holds more than one word, and so are both options at once."""
    if token_file is None:
        return token
    if token is not None:
        raise ConfigError("give either --token or --token-file, not both")
    try:
        text = Path(token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--token-file '{token_file}' cannot be read ({exc}): give a readable file holding the "
                          "bearer token") from exc
    if not text:
        raise ConfigError(f"--token-file '{token_file}' is empty: write the bearer token in it")
    if any(ch.isspace() for ch in text):
        raise ConfigError(f"--token-file '{token_file}' holds more than one word: write the bearer token alone in "
                          "it (no spaces or further lines)")
    return text


def open_store(args: argparse.Namespace, *, create: bool = True) -> Any:
    """The `--store` of `args`. `create=False` for commands that only read what is stored (runs, report, baseline,
    check, compare): a store that does not exist is a mistyped path, an error, not a new empty store."""
    from dlperf.store import Store

    location = getattr(args, "store", None)
    if create:
        from dlperf.store.db import DEFAULT_PATH, resolve_url, sqlite_path

        path = sqlite_path(resolve_url(location, create_folder=False))
        if path is not None and path != DEFAULT_PATH and not path.parent.exists():
            # a mistyped folder in a CI script started a second history without a word (the commands that only read
            # the store refuse a path that does not exist)
            error_console().print(f"note: the store's folder '{path.parent}' does not exist and is created: a new "
                                  f"store starts at '{path}'", markup=False)
    return Store(location, create=create)


def require_positive(name: str, value: float | None) -> None:
    """Refuse a value of option `name` that is not a positive finite number (NaN and inf included: every
    comparison with NaN is False, so `value <= 0` let it through and it turned the limit off)."""
    if value is not None and not 0 < value < math.inf:
        raise ConfigError(f"{name} must be a positive number, got {value}")


def use_allocator(args: argparse.Namespace, command: str, on_ray: bool = False, specs: Sequence[str] = ()) -> None:
    """Run this process under `args.allocator`'s choice, restarting the command with the library preloaded if
    needed (call it before the model is loaded). Without the option, or with 'auto' where the command cannot
    restart, the process keeps what it started with. Called in-process (`main([...])`, not from the command
    line) or with --ray, an explicit choice the process does not already run is refused: there is no command
    line to restart, or the replicas are Ray's worker processes. `specs`: the models the command loads, whose
    artifacts' engines may need glibc (`allocator.GLIBC_ONLY_ENGINES`)."""
    from dlperf.measure.allocator import REEXEC_MARK, active_allocator, resolve, run_under

    choice = getattr(args, "allocator", None)
    from_command_line = getattr(args, "_from_command_line", False)
    if choice is None:
        return
    name = resolve(choice, artifact_engines(specs))  # refuses a choice such an engine cannot run under, also in-process
    if choice == "auto" and (on_ray or not from_command_line):
        return
    current = active_allocator()
    if name == current:
        return
    if choice == "auto" and os.environ.get(REEXEC_MARK) == name:
        # the default must not stop a command that ran before it existed: say so and go on
        error_console().print(f"note: --allocator auto: restarted with {name} preloaded, but this process still "
                              f"runs {current} (LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}); going on with "
                              f"{current}", markup=False)
        return
    if on_ray:
        raise ConfigError(f"--allocator {name} does not go with --ray: the replicas run in Ray's worker processes; "
                          "set LD_PRELOAD in the Ray cluster's environment (runtime_env env_vars) instead")
    if not from_command_line:
        raise ConfigError(f"--allocator {name}: this process runs {current} and was not started from "
                          f"the command line, so it cannot restart itself; start Python with LD_PRELOAD set to "
                          f"the {name} library, or run `dlperf {command}` as a command")
    run_under(name)


def artifact_engines(specs: Sequence[str]) -> set[str]:
    """The engines of the exported artifacts among `specs` (workloads and unreadable manifests left out)."""
    from dlperf.optimize.artifact import peek_manifest

    return {str(m["engine"]) for m in map(peek_manifest, specs) if m is not None and "engine" in m}


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, a cancelled CI job, an orchestrator) raised in the main thread so that a command ends
    as on Ctrl-C: `dlperf load` records its run as interrupted with the levels finished so far and releases its
    shared memory; `dlperf serve` says it was stopped during its warm-up. A KeyboardInterrupt, so that asyncio
    lets it out of a callback and the store records it as interrupted."""


SIGTERM_EXIT = 128 + signal.SIGTERM
"""The exit code after SIGTERM (143, as a shell reports a process ended by it); 130 after Ctrl-C."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM raises `Terminated`, once: a second one while cleaning up is ignored, so the
    shared-memory regions are still unregistered. The previous handler is restored afterwards. While an event
    loop runs, it is raised from a loop callback, not wherever the signal landed."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set in the main thread
        return
    pending: list[Terminated] = []  # raised from the loop: kept until it is, in case the loop ends first

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        exc = Terminated(f"terminated by {signal.Signals(signum).name}")
        loop = asyncio_loop()
        if loop is None:
            raise exc
        # raised here, inside a protocol's data_received, uvloop took it for the transport's fatal error: the
        # run went on to the end and exited 0. A loop callback lets a KeyboardInterrupt out.
        pending.append(exc)
        loop.call_soon_threadsafe(_raise_pending, pending)

    previous_hook = sys.unraisablehook

    def delivered_again(info: Any) -> None:
        # Raised where Python only reports an exception and goes on (an os.fork callback such as logging's,
        # a __del__, a weakref callback): the command would have run to its end and exited 0. The signal is
        # delivered again, to be raised at the next line of ordinary code; Ctrl-C's KeyboardInterrupt too.
        # (From another thread: raised here, at once, it would be swallowed again.)
        exc = info.exc_value
        if isinstance(exc, Terminated):
            signal.signal(signal.SIGTERM, interrupt)
            _signal_soon(signal.SIGTERM)
        elif isinstance(exc, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            _signal_soon(signal.SIGINT)
        else:
            previous_hook(info)

    previous = signal.signal(signal.SIGTERM, interrupt)
    sys.unraisablehook = delivered_again
    try:
        yield
        if pending:  # the loop ended before its callback ran
            _raise_pending(pending)
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _signal_soon(signum: int, delay_s: float = 0.01) -> None:
    """Send this process `signum` from a short-lived thread, `delay_s` from now: its handler then runs in the main
    thread wherever that has got to, not inside the code asking for it (an exception raised in an unraisable hook
    is not handed to the hook again: it would be lost)."""
    def send() -> None:
        time.sleep(delay_s)
        os.kill(os.getpid(), signum)

    threading.Thread(target=send, name="dlperf-signal-again", daemon=True).start()


def asyncio_loop() -> Any:
    """The event loop running in this thread, or None."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _raise_pending(pending: list[Terminated]) -> None:
    if pending:
        raise pending.pop()


def note_oversubscribed(threads: int | None) -> None:
    """A note on stderr when --threads asks for more intra-op threads than the CPUs this process may run on: every
    parallel operator then waits for threads that cannot run (`train --threads 99` on 2 CPUs took 1.46 s a step
    against 2 ms), and the figures measure that, not the model."""
    if threads is None or threads > thread_limit():  # refused with its own error
        return
    cpus = usable_cores()
    if threads > cpus:
        error_console().print(f"note: --threads {threads} is more than the {cpus} CPUs this process may use: the "
                              "threads contend for them, and every figure measures that", markup=False)
