"""How a command's process ends: what the command-line entry does on its way out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def test_a_command_from_the_command_line_leaves_its_objects_to_the_exit_not_a_last_collection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After 'interrupted: run ... is kept' the process took 7-20 s more to end on a busy machine (2 s idle): the
    interpreter's last garbage collection over the 400k objects torch and MiniLM had made. The command-line entry
    freezes them; a caller of main(argv) (a test, a script) keeps its collector as it was."""
    import gc

    from dlperf.cli.main import main

    store = str(tmp_path / "runs.db")
    gc.unfreeze()
    try:
        code = main(["runs", "list", "--store", store])
        assert gc.get_freeze_count() == 0
        monkeypatch.setattr(sys, "argv", ["dlperf", "runs", "list", "--store", store])
        assert main() == code
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_dlperf_without_a_command_prints_its_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dlperf") and "check" in out


@pytest.mark.parametrize(("argv", "said"), [
    # bench's option is --min-duration, load's --duration: the error was the usage of `dlperf COMMAND` alone
    (["bench", "zoo:mlp", "--duration", "3s"], "dlperf bench: error: unrecognized arguments: --duration 3s "
     "(--duration: did you mean --min-duration?); `dlperf bench --help` lists its options"),
    (["runs", "list", "--kindd=bench"], "dlperf runs list: error: unrecognized arguments: --kindd=bench (--kindd: did "
     "you mean --kind?); `dlperf runs list --help` lists its options"),
    (["bench", "zoo:mlp", "zoo:digits-cnn"], "dlperf bench: error: unrecognized arguments: zoo:digits-cnn; "
     "`dlperf bench --help` lists its options"),
    (["--verison"], "dlperf: error: unrecognized arguments: --verison (--verison: did you mean --version?)"),
    # a prefix stood for the option: `--batch-size 0` answered "error: --batch-sizes: expected positive integers",
    # naming an option not typed (ab and load have --batch-size; bench's is --batch-sizes)
    (["bench", "zoo:mlp", "--batch-size", "0"], "dlperf bench: error: unrecognized arguments: --batch-size 0 "
     "(--batch-size: did you mean --batch-sizes?); `dlperf bench --help` lists its options"),
    (["runs", "list", "--lim", "2"], "dlperf runs list: error: unrecognized arguments: --lim 2 (--lim: did you mean "
     "--limit?); `dlperf runs list --help` lists its options"),
])
def test_an_unknown_option_is_refused_in_its_command_s_usage_with_the_nearest_option(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(said), err
    assert err.startswith("usage: " + said.split(":")[0])
