"""The `dlperf ...` command lines in the examples' docstrings parse: a renamed option breaks them here."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from dlperf.cli.main import build_parser

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _commands() -> list[tuple[str, str]]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        # the indented lines: a command shown as code, not prose that starts with "dlperf"
        found += [(path.name, line.strip()) for line in doc.splitlines() if line.startswith("    dlperf ")]
    return found


def test_the_examples_show_commands() -> None:
    assert len(_commands()) >= 8


@pytest.mark.parametrize(("example", "command"), _commands())
def test_an_examples_command_parses(example: str, command: str) -> None:
    argv = shlex.split(command)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{example}: `{command}` does not parse (exit {exc.code})")
