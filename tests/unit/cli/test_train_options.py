"""`dlperf train`'s tuning and DDP options reach what they configure: the knobs --skip leaves out, the memory
budget and its margin, --timeout per launch, and the mode the run records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.cli.main import build_parser, main
from dlperf.cli.train import _tune_config
from dlperf.errors import ConfigError
from dlperf.store import Store
from dlperf.train.knobs import DEFAULT_KNOBS
from dlperf.train.tune import TuneConfig

pytestmark = pytest.mark.unit


def _config(*options: str) -> Any:
    return _tune_config(build_parser().parse_args(["train", "zoo:mlp", "--tune", *options]))


def test_skipped_knobs_are_not_tried() -> None:
    assert _config("--skip", "threads,compile").knobs == tuple(k for k in DEFAULT_KNOBS
                                                              if k not in ("threads", "compile"))
    assert _config("--knobs", "threads,workers,batch", "--skip", "workers").knobs == ("threads", "batch")


def test_an_unknown_knob_to_skip_is_refused_by_name() -> None:
    """`--skip treads` (a typo) tried the knob it meant to skip without a word."""
    with pytest.raises(ConfigError, match="unknown knob\\(s\\) treads: choose from threads"):
        _config("--skip", "treads")


def test_a_mistyped_knob_names_the_knob_it_is_closest_to() -> None:
    """`--knobs thread` and `--skip compil` listed every knob without saying which was meant, where optimize's
    `--passes` names the closest pass."""
    with pytest.raises(ConfigError, match=r"unknown knob\(s\) thread: .*, compile; did you mean threads\?$"):
        _config("--knobs", "thread")
    with pytest.raises(ConfigError, match=r"unknown knob\(s\) compil, prefech: .*; did you mean compile for compil, "
                                          r"prefetch for prefech\?$"):
        _config("--skip", "prefech,compil")
    with pytest.raises(ConfigError, match=r"unknown knob\(s\) warp-drive: choose from .*, compile$"):
        TuneConfig(knobs=("warp-drive",))  # nothing close: no guess
    with pytest.raises(ConfigError, match=r"unknown knob\(s\) batchsize: .*; did you mean batch\?$"):
        TuneConfig(knobs=("batchsize",))


def test_the_memory_budget_and_its_margin_reach_the_tuner() -> None:
    config = _config("--memory-budget", "2GiB", "--margin", "25%")
    assert config.memory_budget_bytes == 2 * 2**30
    assert config.safety_margin == pytest.approx(0.25)


def _record(db: Path) -> Any:
    (record,) = Store(db).list()
    return record


def test_the_time_budget_s_help_says_a_trial_much_longer_than_the_mean_can_overrun_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With --time-budget 2.5s the tuning ran 10 s: compile's trial (~6 s) was expected at the mean of the 0.1 s ones
    before it, and --help promised that no trial starts that would end past the budget."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "as long as its own earlier ones, its first the mean of all so far" in text
    assert "overrun a small budget: the result (an interrupted tuning's too) says by how much, and which trial" in text


def test_the_time_budget_is_parsed_as_optimize_s_and_needs_tune() -> None:
    from dlperf.cli.train import _check_modes

    assert _config("--time-budget", "10m").time_budget_s == 600.0
    assert _config().time_budget_s is None
    with pytest.raises(ConfigError, match=r"--time-budget must be a positive number, got 0\.0"):
        _config("--time-budget", "0")
    with pytest.raises(ConfigError, match="--time-budget only applies with --tune"):
        _check_modes(build_parser().parse_args(["train", "zoo:mlp", "--time-budget", "90s"]))


def test_a_tune_run_records_its_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any) -> Any:  # stopped in its first trial: the run is kept as interrupted
        raise KeyboardInterrupt

    monkeypatch.setattr("dlperf.cli.train._tune", interrupted)
    db = tmp_path / "runs.db"
    assert main(["train", "zoo:mlp", "--tune", "--no-mfu", "--store", str(db)]) == 130
    assert _record(db).config["mode"] == "tune"


def test_an_interrupted_tune_run_keeps_its_time_against_the_budget(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.train.tune import BudgetUse, Tuner

    def stopped(self: Tuner) -> Any:  # stopped in a trial, as Tuner.run leaves it
        self.time_budget = BudgetUse(5.0, 7.5,
                                     "compile: torch.compile(model) (started at 2.0s, interrupted after 5.5s)")
        raise KeyboardInterrupt

    monkeypatch.setattr(Tuner, "run", stopped)
    db = tmp_path / "runs.db"
    assert main(["train", "zoo:mlp", "--tune", "--time-budget", "5s", "--no-mfu", "--store", str(db)]) == 130
    assert _record(db).result["time_budget"] == {
        "budget_s": 5.0, "spent_s": 7.5, "overrun_s": 2.5,
        "overrun_by": "compile: torch.compile(model) (started at 2.0s, interrupted after 5.5s)"}


def test_timeout_is_the_limit_of_each_ddp_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[Any] = []

    def run_ddp(workload: str, step: Any, ddp: Any, *args: Any) -> Any:
        launched.append(ddp)
        raise KeyboardInterrupt  # before torchrun: only the configuration is looked at

    monkeypatch.setattr("dlperf.train.ddp.run_ddp", run_ddp)
    db = tmp_path / "runs.db"
    assert main(["train", "zoo:mlp", "--nproc", "2", "--steps", "4", "--timeout", "45", "--store", str(db)]) == 130
    assert [d.timeout_s for d in launched] == [45.0]
    assert _record(db).config["mode"] == "ddp"
