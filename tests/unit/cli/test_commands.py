"""The COMMANDS table of `dlperf`: every row's module exists and is the command's; a misspelt row is an error."""

from __future__ import annotations

import pytest

from dlperf.cli import main

pytestmark = pytest.mark.unit


def test_every_row_of_commands_is_a_command_of_the_parser() -> None:
    commands = main.build_parser().get_default("_commands")
    assert sorted(commands) == sorted(name for name, _, _ in main.COMMANDS)


def test_a_row_naming_a_missing_module_is_refused_not_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # the row was dropped without a word: `dlperf sort-zoo` then answered "invalid choice: 'sort-zoo'"
    monkeypatch.setattr(main, "COMMANDS", [*main.COMMANDS, ("sort-zoo", "zoo_sort", "the zoo, sorted")])
    with pytest.raises(ModuleNotFoundError, match=r"COMMANDS row 'sort-zoo' names module 'dlperf.cli.zoo_sort'.*"
                                                  r"add src/dlperf/cli/zoo_sort.py or fix the row"):
        main.build_parser()
