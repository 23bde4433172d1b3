"""The `dlperf` command: a thin shell that dispatches to one module per command.

Each command module defines `add_arguments(parser)` and `run(args) -> int`, and imports torch and the
library only inside `run`, so `dlperf --help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import importlib
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

# (command, module under dlperf.cli, one-line help)
COMMANDS: list[tuple[str, str, str]] = [
    ("bench", "bench", "measure latency, throughput and memory of a workload"),
    ("profile", "profile", "find the bottleneck of a workload, show the evidence and the fix"),
    ("optimize", "optimize", "search for the fastest model within an accuracy budget"),
    ("train", "train", "measure and tune a training loop"),
    ("serve", "serve", "serve a workload or an optimized artifact over KServe v2 / OIP"),
    ("load", "load", "generate load against an inference server and measure it"),
    ("ab", "ab", "interleaved A/B of two settings of one workload"),
    ("compare", "compare", "compare two stored runs, or the live variants of a server"),
    ("check", "check", "regression gate: re-measure against a baseline, exit 1 on a real regression"),
    ("baseline", "baseline", "manage named baselines (set, list, rm)"),
    ("report", "report", "write a self-contained HTML report of runs"),
    ("runs", "runs", "list, show, export and delete stored runs, and a KPI's history"),
    ("calibrate", "calibrate", "measure this machine's ceilings (GEMM FLOP/s, memory bandwidth)"),
    ("zoo", "zoo", "list the built-in workloads"),
]


NEGATIVE_VALUE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d*\.?\d+(?:e-?\d+)?[a-zA-Z%µ]+$")
"""What argparse reads as a value although it starts with '-': a number, also with a unit or a suffix."""


def _load(name: str, module: str) -> object:
    """The command's module. Every row of COMMANDS names one that ships with dlperf: a missing one was skipped
    without a word, so a new command whose row misspelt its module was only an "invalid choice"."""
    try:
        return importlib.import_module(f"dlperf.cli.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"dlperf.cli.{module}":
            raise ModuleNotFoundError(f"COMMANDS row '{name}' names module 'dlperf.cli.{module}', which does not "
                                      f"exist: add src/dlperf/cli/{module}.py or fix the row", name=exc.name) from exc
        raise


class _Parser(argparse.ArgumentParser):
    """A bad value is refused on one line, `error: --concurrency: concurrency values must be positive, got '0'`, as
    the commands' own checks refuse theirs (`error: --warmup must be >= 0, got -3`): one that an option's `type` or
    `choices` refused came after argparse's usage block (`dlperf load URL --concurrency 0`, `dlperf optimize W
    --time-budget -5s`), another of the same command without it. A missing value, a missing or unknown option and
    an unknown command keep the usage."""

    _bad_value = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no prefix of an option stands for it: `dlperf bench W --batch-size 0` was taken as --batch-sizes and
        # refused as `error: --batch-sizes: ...`, naming an option not typed; a prefix is now an unknown option with
        # the nearest one named (`--batch-size: did you mean --batch-sizes?`). Subcommand parsers are of this class.
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        try:
            return super()._get_values(action, arg_strings)
        except argparse.ArgumentError:  # the value's type or choices refused it
            # (a mistyped command keeps the usage, which lists the commands)
            self._bad_value = not isinstance(action, argparse._SubParsersAction)
            raise

    def error(self, message: str) -> NoReturn:
        if self._bad_value:
            self.exit(2, f"error: {message.removeprefix('argument ')}\n")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    from dlperf import __version__

    parser = _Parser(
        prog="dlperf",
        description="Profile, don't guess; measure every change. Performance engineering for PyTorch models.",
    )
    parser.add_argument("--version", action="version", version=f"dlperf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands: dict[str, argparse.ArgumentParser] = {}
    for name, module_name, help_text in COMMANDS:
        module = _load(name, module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        # a negative number with a unit ('--min-duration -1s', '--max-metric-drop -1%') is a value, not an
        # option: argparse knew only bare numbers, answered "expected one argument" and never said it was negative
        p._negative_number_matcher = NEGATIVE_VALUE
        module.add_arguments(p)  # type: ignore[attr-defined]
        p.set_defaults(_run=module.run)  # type: ignore[attr-defined]
        commands[name] = p
    parser.set_defaults(_commands=commands)
    return parser


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> NoReturn:
    """Refuse arguments no option took, in the command's own usage and with the option nearest in spelling:
    `dlperf bench W --duration 3s` answered with the usage of `dlperf COMMAND` alone, not saying that bench's
    option is --min-duration (load's is --duration)."""
    command = args._commands.get(getattr(args, "command", None) or "")
    where: argparse.ArgumentParser = command or parser
    while True:  # down to the subcommand given (`dlperf runs list`, `dlperf baseline set`)
        chosen = next((a.choices.get(getattr(args, a.dest, None) or "") for a in where._actions
                       if isinstance(a, argparse._SubParsersAction)), None)
        if chosen is None:
            break
        where = chosen
    known = [o for action in where._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for extra in extras:
        name = extra.split("=", 1)[0]
        if name.startswith("--") and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            if close:
                hints.append(f"{name}: did you mean {close[0]}?")
    where.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")
                + (f"; `{where.prog} --help` lists its options" if command is not None else ""))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()  # imports every command's module: about 0.2 s
        args, extras = parser.parse_known_args(argv)
        if extras:
            _unrecognized(parser, args, extras)
    except KeyboardInterrupt:  # Ctrl-C (or `timeout -s INT`) this early printed a traceback
        print("interrupted before the command started", file=sys.stderr)
        return 130
    args._from_command_line = argv is None  # a command may restart itself (`serve --allocator`) only then
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    from dlperf._stdio import stdout_to_stderr
    from dlperf._thirdparty import quiet_third_party_logs
    from dlperf.cli.common import SIGTERM_EXIT, Terminated, sigterm_interrupts, warnings_as_lines
    from dlperf.errors import DlperfError

    quiet_third_party_logs()
    try:
        # SIGTERM (`timeout`, a cancelled CI job) ends a command as Ctrl-C does, so its run is recorded as
        # interrupted with what it finished (it stayed "running" in the store); serve and load handle it themselves
        with contextlib.nullcontext() if args.command in OWN_SIGTERM else sigterm_interrupts(), \
                stdout_to_stderr() if getattr(args, "json", False) else contextlib.nullcontext(), \
                warnings_as_lines():
            # with --json, what the workload (or anything else) prints goes to stderr: stdout is the JSON alone
            code = int(args._run(args) or 0)
            sys.stdout.flush()  # here, so that a reader gone away (`| head`) is a BrokenPipeError caught below
            return code
    except DlperfError as exc:
        from rich.markup import escape

        from dlperf.cli.common import error_console

        run = _run_behind(exc)
        finished = run is not None and _finished_behind(exc)
        if finished and getattr(args, "json", False):
            failed_json(exc)
        if finished and run is not None:  # the error alone did not say what it finished was kept
            # before the error, which stays the last line (where a CI log and the tests look for it)
            print(f"run {run} is kept in the store as failed, with what it finished (`dlperf runs show {run[:8]}`)",
                  file=sys.stderr)
        # the message escaped: as markup, 'pip install dlperf[zoo]' printed as 'pip install dlperf' (an unknown tag)
        error_console().print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, markup=True)
        if run is not None and not finished:
            # after the error, which stays a CI log's first line where nothing came before it; a script had no id
            print(f"run {run} is kept in the store as failed, with its error (it finished nothing) "
                  f"(`dlperf runs show {run[:8]}`)", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        if getattr(args, "json", False) and args.command not in OWN_INTERRUPT_JSON:
            interrupted_json(exc)
        print(interrupted_message(exc), file=sys.stderr)
        return SIGTERM_EXIT if isinstance(exc, Terminated) else 130
    except BrokenPipeError:  # `dlperf runs show ID --json | head`: the reader has what it wanted
        from dlperf._stdio import silence_stdout

        silence_stdout()
        return SIGPIPE_EXIT
    except ImportError as exc:  # Ctrl-C inside `import torch` can surface as an ImportError with a traceback
        interrupt = _interrupt_behind(exc)
        if interrupt is None:
            raise
        print(interrupted_message(interrupt), file=sys.stderr)
        return SIGTERM_EXIT if isinstance(interrupt, Terminated) else 130
    finally:
        if args._from_command_line:
            # The process ends next, and its last garbage collection went over every object torch and the workload
            # made (400k for MiniLM): 2 s on an idle 2-core machine, 7-20 s on a busy one, after Ctrl-C's or
            # SIGTERM's 'interrupted: ...' line had been printed. Frozen, they are left to the process's exit.
            gc.freeze()


SIGPIPE_EXIT = 128 + 13
"""The status of a command whose stdout reader went away, as a shell reports a process ended by SIGPIPE."""

OWN_SIGTERM = frozenset({"serve", "load"})
"""Commands that handle SIGTERM themselves (a server's drain, a load run's partial levels)."""

OWN_INTERRUPT_JSON = frozenset({"load"})
"""Commands that print their own --json document when interrupted (a load run's finished levels)."""


def interrupted_json(exc: KeyboardInterrupt) -> None:
    """With --json, the run an interrupted command kept, as the store holds it, on stdout: `"status":
    "interrupted"`, its reason, and the result it finished (bench's batch sizes, train's steps, ab's blocks and
    verdict). A CI job killed by SIGTERM got an empty stdout to parse, while the store had the partial run."""
    _kept_run_json(exc, interrupted=True, error_key="reason")


def failed_json(exc: BaseException) -> None:
    """With --json, the run a failed command kept with what it finished before the error (bench's batch 1 when
    batch 8 raised), as the store holds it, on stdout: `"status": "failed"` and its `error`, as an interrupted run's
    document (stdout was empty, though the store kept the partial run and Ctrl-C printed it). The exit code stays
    the error's; a run that failed before it finished anything prints nothing, as before."""
    _kept_run_json(next((e for e in _chain(exc) if isinstance(getattr(e, "dlperf_run", None), str)), exc),
                   interrupted=False, error_key="error")


def _kept_run_json(exc: BaseException, *, interrupted: bool, error_key: str) -> None:
    from dlperf.cli.common import print_json

    run, store = getattr(exc, "dlperf_run", None), getattr(exc, "dlperf_store", None)
    if run is None or store is None:
        return
    try:
        record = store.get(run)
    except Exception:  # the store went away meanwhile: the stderr line still names the run
        return
    print_json({"run_id": record.id, "store": store.shown_url, "kind": record.kind, "workload": record.workload,
                "status": record.status, "interrupted": interrupted, error_key: record.error, "config": record.config,
                "environment": record.environment, "result": record.result})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or while handling (its __cause__/__context__ chain), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        yield current
        seen.add(id(current))
        current = current.__cause__ or current.__context__


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM an exception was raised while handling (its __cause__/__context__ chain), if any."""
    return next((e for e in _chain(exc) if isinstance(e, KeyboardInterrupt)), None)


def _run_behind(exc: BaseException) -> str | None:
    """The run the store kept with a partial result when `exc` (or an exception it was raised from) went through
    its recording (`Store.recording`)."""
    runs = (getattr(e, "dlperf_run", None) for e in _chain(exc))
    return next((run for run in runs if isinstance(run, str)), None)


def _finished_behind(exc: BaseException) -> bool:
    """Whether the run `_run_behind` names was kept with something it finished (not its error alone)."""
    kept = next((e for e in _chain(exc) if isinstance(getattr(e, "dlperf_run", None), str)), None)
    return bool(getattr(kept, "dlperf_run_finished", True))


def interrupted_message(exc: KeyboardInterrupt) -> str:
    """What an interrupted command says: by what, the run the store kept with what was finished, and how to resume
    it where the command can (`dlperf_resume`, a template with `{run}`, set by optimize)."""
    what = str(exc) or "interrupted"
    run = getattr(exc, "dlperf_run", None)
    if run is None:
        return what
    resume = getattr(exc, "dlperf_resume", None)
    # stopped in the model's build, a run has nothing but its config: 'with what it finished' promised more
    finished = getattr(exc, "dlperf_run_finished", True)
    kept = "with what it finished" if finished else "with its config (it finished nothing)"
    return (f"{what}: run {run} is kept in the store as interrupted, {kept} "
            f"(`dlperf runs show {run[:8]}`)" + (f"; {resume.format(run=run[:8])}" if resume else ""))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
