"""`dlperf compare` refuses what it would otherwise ignore or misread: a significance level past 0.5, a third run,
and two runs given with --live. Each is exit 2 before any store is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("alpha", ["0.5", "0.7", "70%", "0"])
def test_an_alpha_outside_0_to_a_half_is_refused(alpha: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A significance level of 0.7 calls most noise a difference."""
    assert main(["compare", "a", "b", f"--alpha={alpha}", "--store", str(tmp_path / "none.db")]) == 2
    assert "--alpha must be in (0, 0.5)" in capsys.readouterr().err


@pytest.mark.parametrize("min_effect", ["5", "100%", "-1%"])
def test_a_min_effect_outside_0_to_1_is_refused(min_effect: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--min-effect 5 would be 500%: no run could ever be called slower."""
    assert main(["compare", "a", "b", f"--min-effect={min_effect}", "--store", str(tmp_path / "none.db")]) == 2
    assert "--min-effect must be a fraction in [0, 1)" in capsys.readouterr().err


def test_a_third_run_is_refused_not_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "a", "b", "c", "--store", str(tmp_path / "none.db")]) == 2
    assert "compare needs two runs (A then B), got 3" in capsys.readouterr().err


def test_runs_and_live_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The runs were dropped without a word and the server's variants compared instead."""
    assert main(["compare", "a", "b", "--live", "127.0.0.1:1"]) == 2
    assert "give either two runs or --live URL, not both" in capsys.readouterr().err


def test_live_compares_at_the_significance_level_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """--alpha 1% with --live: the variants' test ran at 0.05 whatever was asked."""
    from dlperf.compare import live

    asked: list[float] = []

    def compare_live_url(url: str, **options: object) -> object:
        asked.append(options["alpha"])  # type: ignore[arg-type]
        raise KeyboardInterrupt  # before any server is read

    monkeypatch.setattr(live, "compare_live_url", compare_live_url)
    assert main(["compare", "--live", "http://127.0.0.1:9", "--alpha", "1%"]) == 130
    assert asked == [pytest.approx(0.01)]
