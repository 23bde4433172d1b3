"""`dlperf load` between its options and the load generator: the SLO and refusals it reads from the command line, the
load config and inputs it hands on, what it records, and its exit code, with the server's target and the
generator's levels stood in for (no server, no load)."""

from __future__ import annotations

import argparse
import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.cli.load import _concurrency_levels, _error_ratio, _shapes, _slo, add_arguments
from dlperf.cli.main import main
from dlperf.errors import ConfigError
from dlperf.loadgen.generator import LevelResult, PeakResult, Slo
from dlperf.store import Store

pytestmark = pytest.mark.unit

URL = "127.0.0.1:1"  # nothing listens there: a command that reached the network would fail


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([URL, "--model", "m", *argv])


def _level(statuses: dict[str, int], level: float = 1.0, mode: str = "concurrency") -> LevelResult:
    return LevelResult(mode, level, 1, [2_000_000] * statuses.get("200", 0), statuses, 1.0, True,
                       [float(statuses.get("200", 0))])


class Stand:
    """What `dlperf load` handed the target and the generator, and the levels the generator gives back."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, levels: list[LevelResult], *,
                 requests: tuple[bytes, ...] = (), expected: tuple[dict[str, Any], ...] = (),
                 interrupt: bool = False) -> None:
        self.target_kwargs: dict[str, Any] = {}
        self.config: Any = None
        self.target = types.SimpleNamespace(items_per_request=1, requests=requests, expected=expected,
                                            raw_request=b"x" * 100, tolerance=(1e-3, 1e-5), close=lambda: None)

        def oip_target(url: str, model: str, **kwargs: Any) -> Any:
            self.target_kwargs = kwargs
            return self.target

        def run_load(target: Any, config: Any, on_window: Any, on_level: Callable[[LevelResult], None]) -> None:
            self.config = config
            for r in levels:
                on_level(r)
            if interrupt:
                raise KeyboardInterrupt

        def find_peak(target: Any, config: Any, slo: Slo, *, on_step: Callable[[LevelResult, bool], None],
                      **kwargs: Any) -> PeakResult:
            self.config = config
            for r in levels:
                on_step(r, False)
            if interrupt:
                raise KeyboardInterrupt
            return PeakResult(slo, None, levels)

        monkeypatch.setattr("dlperf.loadgen.target.oip_target", oip_target)
        monkeypatch.setattr("dlperf.loadgen.generator.run_load", run_load)
        monkeypatch.setattr("dlperf.loadgen.generator.find_peak", find_peak)


def _load(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    """`dlperf load --json` against the stand-in; its exit code and the recorded config of its run."""
    store = tmp_path / "runs.db"
    code = main(["load", URL, "--model", "m", "--json", "--store", str(store), *argv])
    runs = Store(store).list(kind="load")  # newest first
    return code, (runs[0].config if runs else {})


def test_the_slo_options_give_the_bound_in_seconds_at_its_percentile() -> None:
    """--p99-ms 100 is a p99 bound of 0.1 s; --slo-ms alone bounds the p99 too; --p99-ms with --slo-percentile 99
    says the same twice and is taken."""
    assert _slo(_args("--p99-ms", "100")) == Slo(0.1, 99.0)
    assert _slo(_args("--slo-ms", "50")) == Slo(0.05, 99.0)
    assert _slo(_args("--slo-ms", "50", "--slo-percentile", "90")) == Slo(0.05, 90.0)
    assert _slo(_args("--p99-ms", "100", "--slo-percentile", "99")) == Slo(0.1, 99.0)
    assert _slo(_args()) is None


@pytest.mark.parametrize(("argv", "message"), [
    (["--p99-ms", "0"], "--p99-ms must be a positive number of milliseconds, got 0"),
    (["--slo-ms", "0", "--slo-percentile", "90"], "--slo-ms must be a positive number of milliseconds, got 0"),
    (["--slo-percentile", "90"], "--slo-percentile needs the bound it applies to: add --slo-ms X"),
])
def test_an_slo_that_bounds_nothing_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _slo(_args(*argv))


def test_a_range_may_be_one_level_or_as_many_as_the_cap_and_no_failure_share_is_a_share() -> None:
    """'4:4' is the one level 4 and '1:64' the 64 levels the cap allows; --max-error-ratio 0 (the default, written
    out) is a share."""
    assert _concurrency_levels("4:4") == (4,)
    assert len(_concurrency_levels("1:64")) == 64
    assert _error_ratio("0") == 0.0


def test_each_shape_names_one_input_once() -> None:
    assert _shapes(["x=1,64", "mask=1,8"]) == {"x": (1, 64), "mask": (1, 8)}
    with pytest.raises(ConfigError, match=r"--shape gives input 'x' twice \(x=1,64 and x=2,64\)"):
        _shapes(["x=1,64", "x=2,64"])
    with pytest.raises(ConfigError, match="--shape '=1,64' is not NAME=D1,D2"):
        _shapes(["=1,64"])
    with pytest.raises(ConfigError, match="--shape 'x' is not NAME=D1,D2"):
        _shapes(["x"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--priority", "-1"], "--priority must be >= 0 (1 is the highest level, 0 sends none), got -1"),
    (["--metrics-interval-ms", "250"], "--metrics-url and --metrics-interval-ms go with --collect-metrics: add it"),
    (["--protocol", "grpc", "--collect-metrics"], "with --protocol grpc, --collect-metrics needs --metrics-url"),
])
def test_options_that_would_change_nothing_or_cannot_be_sent_are_refused_before_any_request(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", URL, "--model", "m", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_load_config_and_the_inputs_follow_the_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's rates arrive evenly spaced (a peak search's as a Poisson process), levels last 30 s at most and are
    stable within 10%; a metrics interval in ms is read in seconds; priority 0 sends no parameter; a workload's
    example inputs are made at --batch-size."""
    stand = Stand(monkeypatch, [_level({"200": 10}, 20.0, "rate")])
    assert _load(tmp_path, "--rate", "20", "--collect-metrics", "--metrics-interval-ms", "250")[0] == 0
    config = stand.config
    assert (config.arrivals, config.duration_s, config.stability, config.metrics_interval_s) == (
        "constant", 30.0, 0.1, 0.25)
    assert stand.target_kwargs.get("parameters") is None and stand.target_kwargs.get("inputs") is None
    assert _load(tmp_path, "--priority", "2", "--workload", "zoo:mlp", "--batch-size", "4")[0] == 0
    assert stand.target_kwargs["parameters"] == {"priority": 2}
    assert [tuple(x.shape) for x in stand.target_kwargs["inputs"]] == [(4, 64)]
    _load(tmp_path, "--find-peak", "--p99-ms", "100")
    assert stand.config.arrivals == "poisson"


def test_a_sweep_records_what_it_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random inputs: one request, its bytes, nothing checked; a rate sweep has no concurrency and no peak
    search's settings."""
    Stand(monkeypatch, [_level({"200": 10}, 20.0, "rate")])
    code, config = _load(tmp_path, "--rate", "20")
    assert code == 0
    assert (config["distinct_requests"], config["request_bytes"], config["validated"], config["tolerance"]) == (
        1, 100, False, None)
    assert (config["concurrency"], config["max_error_ratio"], config["duration_fitted"], config["start_rate"],
            config["max_steps"]) == (None, 0.0, False, None, None)


def test_a_sweep_with_validation_data_records_its_requests_and_tolerance(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    Stand(monkeypatch, [_level({"200": 10})], requests=(b"a" * 10, b"b" * 30), expected=({"y": 1}, {}))
    code, config = _load(tmp_path)
    assert code == 0
    assert (config["distinct_requests"], config["request_bytes"], config["validated"], config["tolerance"]) == (
        2, 40, True, [1e-3, 1e-5])


def test_a_peak_search_records_where_it_started_and_how_far_it_could_go(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    Stand(monkeypatch, [_level({"200": 10}, 20.0, "rate")])
    code, config = _load(tmp_path, "--find-peak", "--p99-ms", "100", "--rate", "20", "--max-steps", "3")
    assert code == 1  # no rate passed
    assert (config["start_rate"], config["max_steps"], config["duration_fitted"], config["max_error_ratio"]) == (
        20.0, 3, True, None)


@pytest.mark.parametrize(("statuses", "argv", "code"), [
    ({"200": 99, "503": 1}, [], 1),  # any failed request fails a sweep by default
    ({"200": 90, "503": 10}, ["--max-error-ratio", "0.1"], 0),  # a share of 0.1 is allowed 0.1
    ({"200": 89, "503": 11}, ["--max-error-ratio", "0.1"], 1),
    ({"timeout": 30}, ["--max-error-ratio", "1"], 1),  # none succeeded: nothing was measured
])
def test_the_exit_code_follows_the_failed_share(statuses: dict[str, int], argv: list[str], code: int,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Stand(monkeypatch, [_level(statuses)])
    assert _load(tmp_path, *argv)[0] == code


def test_a_level_the_slo_could_not_decide_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """100 replies of 2 ms are too few for the early-stopping test to show p99 <= 100 ms: undecided, which does
    not pass the CI gate."""
    Stand(monkeypatch, [_level({"200": 100})])
    assert _load(tmp_path, "--p99-ms", "100")[0] == 1
    assert "SLO p99 <= 100 ms not met at: concurrency 1 (undecided)" in capsys.readouterr().err


def test_each_finished_level_s_line_gives_the_slo_s_percentile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    Stand(monkeypatch, [_level({"200": 100})])
    main(["load", URL, "--model", "m", "--slo-ms", "100", "--slo-percentile", "90", "--store",
          str(tmp_path / "runs.db")])
    assert "  concurrency 1: 100.0 req/s, p90 2 ms" in capsys.readouterr().err


def test_an_interrupted_peak_search_gives_its_steps_as_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    Stand(monkeypatch, [_level({"200": 10}, 20.0, "rate")], interrupt=True)
    assert main(["load", URL, "--model", "m", "--find-peak", "--p99-ms", "100", "--json", "--store",
                 str(tmp_path / "runs.db")]) == 130
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "interrupted" and [s["level"] for s in out["steps"]] == [20.0]


def test_a_failed_share_never_reads_as_none_or_all() -> None:
    """1 failed request of 3000 is '0.03333%', not '0.0%'; 2999 of 3000 is '99.97%', not '100.0%'."""
    from dlperf.loadgen.render import _share

    assert [_share(1 / 3000), _share(2999 / 3000), _share(0.25), _share(0.0)] == ["0.03333%", "99.97%", "25.0%", "0.0%"]


def test_the_level_timing_and_seed_options_reach_the_generator_and_the_record(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--duration, --warmup-s and --seed go to the generator; the recorded batch size is what each request holds (a
    --shape's first dimension here, no --batch-size given) and the inputs 'random' when none were named."""
    stand = Stand(monkeypatch, [_level({"200": 10})])
    stand.target.items_per_request = 8
    code, config = _load(tmp_path, "--duration", "5s", "--warmup-s", "0.25", "--seed", "7")
    assert code == 0
    assert (stand.config.duration_s, stand.config.warmup_s, stand.config.seed) == (5.0, 0.25, 7)
    assert (config["batch_size"], config["input_data"]) == (8, ["random"])
