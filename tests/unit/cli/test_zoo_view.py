"""`dlperf zoo`'s table: the summaries stay readable on a narrow console."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
from rich.console import Console

from dlperf.cli import common, zoo
from dlperf.workload.info import WorkloadInfo, ZooEntry

pytestmark = pytest.mark.unit

ENTRIES = [
    ZooEntry("zoo:mlp", "", WorkloadInfo("mlp", "zoo:mlp", "mlp", "tiny 3-layer MLP (64 -> 256 -> 256 -> 10), random "
                                         "weights; for fast tests", 85_000, 340_000, 169_000, None, None, ("x",),
                                         ("logits",))),
    ZooEntry("zoo:digits-cnn", "", WorkloadInfo("digits-cnn", "zoo:digits-cnn", "cnn", "small CNN on scikit-learn's "
                                                "8x8 digits (10 classes), trained and cached on first use; accuracy",
                                                38_300, 150_000, 675_000, "accuracy", True, ("x",), ("logits",))),
]


def _lines(monkeypatch: pytest.MonkeyPatch, width: int) -> list[str]:
    out = io.StringIO()
    monkeypatch.setattr("dlperf.workload.info.describe_zoo", lambda names: ENTRIES)
    monkeypatch.setattr(common, "console", lambda: Console(file=out, width=width, color_system=None))
    monkeypatch.setattr(zoo, "console", common.console)
    assert zoo.run(argparse.Namespace(names=[], json=False)) == 0
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_on_80_columns_the_summaries_come_under_the_table_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(monkeypatch, 80)
    text = "\n".join(lines)
    assert "accuracy ↑" in text and "…" not in text  # the metric read 'accuracy…' and the summary column was gone
    start = next(i for i, line in enumerate(lines) if line.startswith("zoo:digits-cnn: "))
    summary = " ".join(line.strip() for line in lines[start:start + 2]).removeprefix("zoo:digits-cnn: ")
    assert summary == "small CNN on scikit-learn's 8x8 digits (10 classes), trained and cached on first use; accuracy"
    assert lines[start + 1].startswith(" " * len("zoo:digits-cnn: "))


def test_a_wide_console_keeps_the_summary_column(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(monkeypatch, 200)
    assert lines[2].split() == ["workload", "kind", "params", "size", "FLOPs/sample", "metric", "summary"]
    assert any(line.strip().startswith("zoo:mlp") and line.rstrip().endswith("for fast tests") for line in lines)
    assert not any(line.startswith("zoo:mlp: ") for line in lines)


@pytest.mark.parametrize("argv", [["zoo", "mpl"], ["bench", "zoo:mpl"]])
def test_a_mistyped_zoo_name_is_answered_with_the_close_one(argv: list[str], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Both listed the zoo's names without the close match that `--passes hygeine` gets."""
    from dlperf.cli.main import main

    assert main([*argv, *(["--store", str(tmp_path / "runs.db")] if argv[0] == "bench" else [])]) == 2
    assert capsys.readouterr().err.strip() == ("error: no zoo workload 'mpl': did you mean mlp? choose one of mlp, "
                                               "digits-cnn, resnet18, minilm (`dlperf zoo` lists them)")
