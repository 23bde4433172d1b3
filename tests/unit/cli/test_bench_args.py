"""`dlperf bench` arguments become a BenchConfig; bad values are ConfigErrors, not argparse exits."""

from __future__ import annotations

import argparse
import contextlib
import re
from pathlib import Path

import pytest

from dlperf.cli import bench
from dlperf.errors import ConfigError

pytestmark = pytest.mark.unit


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["zoo:mlp", *argv])


def test_defaults() -> None:
    config = bench.build_config(_args())
    assert config.batch_sizes is None and config.scenario == "offline" and config.device == "cpu"
    assert config.threads is None and config.precision == "fp32"
    assert (config.timer.min_duration_s, config.timer.min_iters, config.timer.warmup_iters) == (1.0, 10, 5)


def test_latency_scenarios_default_to_enough_calls_to_bound_their_headline() -> None:
    assert bench.build_config(_args("--scenario", "single-stream")).timer.min_iters == 44  # p90
    assert bench.build_config(_args("--scenario", "multi-stream")).timer.min_iters == 459  # p99
    assert bench.build_config(_args("--scenario", "multi-stream", "--min-iters", "5")).timer.min_iters == 5
    with pytest.raises(ConfigError, match="unknown scenario 'burst'"):
        bench.build_config(_args("--scenario", "burst"))


def test_values() -> None:
    config = bench.build_config(_args("--batch-sizes", "2,16", "--min-duration", "250ms", "--min-iters", "7",
                                      "--warmup", "0", "--threads", "3", "--precision", "bf16",
                                      "--scenario", "offline"))
    assert config.batch_sizes == (2, 16)
    assert config.timer.min_duration_s == pytest.approx(0.25)
    assert (config.timer.min_iters, config.timer.warmup_iters, config.threads) == (7, 0, 3)
    assert config.precision == "bf16" and config.scenario == "offline"
    assert bench.build_config(_args("--min-duration", "5m")).timer.max_duration_s == 300.0
    # above the 1,000,000-call cap: it failed with 'max_iters (1000000) is below min_iters', an option bench lacks
    many = bench.build_config(_args("--min-iters", "2000000")).timer
    assert (many.min_iters, many.max_iters) == (2_000_000, 2_000_000)
    assert bench.build_config(_args()).timer.max_iters == 1_000_000


@pytest.mark.parametrize(("argv", "message"), [
    (("--batch-sizes", "0,1"), "positive integers"),
    (("--batch-sizes", "1,,8"), r"got '1,,8' \(an empty item\)"),  # measured 1 and 8 without a word
    (("--batch-sizes", "1,8,"), r"got '1,8,' \(an empty item\)"),
    (("--batch-sizes", "8,"), r"got '8,' \(an empty item\)"),
    (("--batch-sizes", ""), "expected positive integers"),  # an unset variable measured the defaults
    (("--batch-sizes", "1,8,1,8,32"), "batch sizes 1, 8 given more than once"),  # were measured twice each
    # a latency scenario runs its own batch: this measured batch 1 (8) after a note that it was ignored, where
    # dlperf.bench(batch_sizes=...) refuses it
    (("--batch-sizes", "4", "--scenario", "single-stream"),
     "--batch-sizes 4 is for the offline scenario; single-stream runs batch 1: leave --batch-sizes out, or use "
     "--scenario offline"),
    (("--batch-sizes", "1,4", "--scenario", "multi-stream"), "multi-stream runs batch 8"),
    (("--warmup", "-1"), "--warmup must be >= 0"),
    (("--threads", "0"), "--threads must be >= 1"),
    (("--device", "tpu"), "unknown device 'tpu'"),
])
def test_bad_values(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        bench.build_config(_args(*argv))


def test_fp16_on_a_cpu_without_native_fp16_gets_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.calibrate import kernels
    from dlperf.cli.bench import emulated_precision_note

    monkeypatch.setattr(kernels, "_cpu_flag_set", lambda: {"avx2", "fma"})
    note = emulated_precision_note("fp16", "cpu")
    assert note is not None and "no native support" in note and "slower than fp32" in note
    assert emulated_precision_note("bf16", "cpu") is not None
    assert emulated_precision_note("fp32", "cpu") is None
    monkeypatch.setattr(kernels, "_cpu_flag_set", lambda: {"avx2", "avx512_fp16", "avx512_bf16"})
    assert emulated_precision_note("fp16", "cpu") is None and emulated_precision_note("bf16", "cpu") is None


@pytest.mark.parametrize(("threads", "noted"), [(None, False), (2, False), (3, True), (64, True), (65, False)])
def test_threads_beyond_the_usable_cpus_get_a_note(threads: int | None, noted: bool, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`train --threads 99` on 2 CPUs measured 1.46 s steps (2 ms at 2 threads) with no word about it. Above the
    thread limit (64 here) the count is refused instead (`measure.env.check_threads`), with no note before it."""
    import os

    from dlperf.cli.common import note_oversubscribed

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    note_oversubscribed(threads)
    err = capsys.readouterr().err
    assert (f"note: --threads {threads} is more than the 2 CPUs this process may use" in err) is noted
    assert noted or err == ""


@pytest.mark.parametrize(("argv", "said"), [
    (["bench", "zoo:mlp", "--min-duration", "-1s"], "got '-1s'"),
    (["ab", "zoo:mlp", "--min-effect", "-1%"], "got -0.01"),
    (["optimize", "zoo:mlp", "--max-metric-drop", "-1%"], "got -0.01"),
    (["bench", "zoo:mlp", "--warmup", "-3"], "--warmup must be >= 0, got -3"),
])
def test_a_negative_value_with_a_unit_is_read_as_a_value(argv: list[str], said: str, tmp_path: object,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """argparse took '-1s' and '-1%' for options and answered "expected one argument", never saying why."""
    from dlperf.cli.main import main

    with contextlib.suppress(SystemExit):
        assert main([*argv, "--store", f"{tmp_path}/runs.db"]) == 2
    err = capsys.readouterr().err
    assert said in err and "expected one argument" not in err


@pytest.mark.parametrize(("edit", "said"), [
    ({"engine": "tensorflow"}, "is for engine 'tensorflow', which this dlperf cannot load (known: torch, onnxruntime"),
    ({"inputs": None}, "field 'inputs' is missing: the artifact is damaged or edited; export it again"),
])
def test_an_artifact_no_loader_takes_is_refused_before_a_run_is_recorded(
        edit: dict[str, object], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench recorded a failed run ("its model factory raised OptimizeError: ... engine 'tensorflow'") of an artifact
    that serve refused up front ("has no 'inputs' list"); read_manifest now refuses both for every command."""
    import json

    import torch

    from dlperf.cli.main import main
    from dlperf.serve.instances import load_served_model
    from dlperf.store.db import Store

    folder = tmp_path / "art"
    folder.mkdir()
    torch.save(torch.nn.Linear(2, 2).state_dict(), folder / "weights.pt")
    manifest = {"format_version": 1, "engine": "torch", "format": "dlperf-torch-recipe", "files": ["weights.pt"],
                "workload": "zoo:mlp", "recipe": [], "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 2]}],
                "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 2]}]}
    manifest.update(edit)
    (folder / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if v is not None}))
    store = tmp_path / "runs.db"
    assert main(["bench", str(folder), "--store", str(store)]) != 0
    assert said in capsys.readouterr().err
    assert not store.exists() or Store(str(store)).list() == []
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_served_model(str(folder))


@pytest.mark.parametrize(("argv", "said"), [
    (["load", "http://127.0.0.1:1/v2/models/m", "--concurrency", "0"],
     "error: --concurrency: concurrency values must be positive, got '0' in '0'"),
    (["optimize", "zoo:mlp", "--time-budget", "-5s"],
     "error: --time-budget: expected a duration like 30s, 10m or 1h, got '-5s'"),
    (["bench", "zoo:mlp", "--batch-sizes", "0"], "error: --batch-sizes: expected positive integers, got '0'"),
    (["bench", "zoo:mlp", "--allocator", "nope"], "error: --allocator: invalid choice: 'nope' (choose from"),
    (["train", "zoo:mlp", "--steps", "x"], "error: --steps: invalid int value: 'x'"),
    (["bench", "zoo:mlp", "--warmup", "-3"], "error: --warmup must be >= 0, got -3"),
    (["serve", "zoo:mlp", "--port", "-1"], "error: --port (port) must be in 0-65535, got -1"),
])
def test_a_bad_value_is_refused_on_one_line_in_every_command(argv: list[str], said: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A value an option's type refused came after argparse's usage block (`load --concurrency 0`, `optimize
    --time-budget -5s`), one a command's own check refused on one line (`bench --warmup -3`): now all on one."""
    from dlperf.cli.main import main

    with pytest.raises(SystemExit) as info:
        code = main(argv)
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1 and "usage:" not in err
