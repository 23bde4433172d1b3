"""The `dlperf ...` command lines shown in README.md and docs/*.md parse: a renamed or dropped option breaks
them here, as test_example_commands.py does for the examples' docstrings."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dlperf.cli.main import COMMANDS, build_parser

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
NAMES = {name for name, _, _ in COMMANDS}
# `dlperf profile NAME  (train, cpu, ...)` is the first line of profile's output, not a command
PROFILE_HEADER = re.compile(r"\((?:train|inference), (?:cpu|cuda)")


def _commands() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        in_code = False
        i = 0
        while i < len(lines):
            text = lines[i].strip()
            if text.startswith("```"):
                in_code = not in_code
            elif in_code:
                text = text.removeprefix("$ ")
                words = text.split()
                # a command, not an output line that starts with "dlperf" ("dlperf serve: ...")
                if (len(words) > 1 and words[0] == "dlperf" and words[1] in NAMES and ": " not in text
                        and not PROFILE_HEADER.search(text)):
                    while text.endswith("\\") and i + 1 < len(lines):
                        i += 1
                        text = text[:-1] + " " + lines[i].strip()
                    found.append((f"{path.name}:{i + 1}", text))
            i += 1
    return found


def _runnable(command: str) -> str | None:
    """The command without a trailing comment, pipe or redirection; None for a synopsis (`[--opt X]`, `A|B`)."""
    command = re.split(r"\s+#\s", command)[0]
    command = re.split(r"\s(?:>|2>|&&)\s", command)[0]
    if "[" in command or "|" in command or "..." in command:
        return None
    return command


def test_the_docs_show_commands() -> None:
    assert len([c for _, c in _commands() if _runnable(c)]) >= 40


@pytest.mark.parametrize(("where", "runnable"),
                         [(where, runnable) for where, command in _commands() if (runnable := _runnable(command))])
def test_a_documented_command_parses(where: str, runnable: str) -> None:
    # synopses (`[--opt X]`, `A|B`) are left out, not skipped: a skip would read as a test not run
    try:
        build_parser().parse_args(shlex.split(runnable)[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{runnable}` does not parse (exit {exc.code})")
