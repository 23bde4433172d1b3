"""`dlperf ab` on a real model: recorded run, JSON verdict, per-item ratios, and setting errors."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.compare.ab import run_ab
from dlperf.compare.settings import parse_settings
from dlperf.errors import ConfigError
from dlperf.store import Store

pytestmark = pytest.mark.integration


def test_ab_records_a_run_with_a_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    rc = main(["ab", "zoo:mlp", "--a", "threads=1", "--b", "threads=1,option.hidden=1024", "--batch-size", "16",
               "--blocks", "6", "--iters-per-block", "5", "--json", "--store", str(store)])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    # B has a 16x larger hidden layer: it is much slower, whatever else runs on the machine.
    assert data["verdict"] == "slower" and data["ratio"] > 1.5
    assert data["ci"][0] <= data["ratio"] <= data["ci"][1]
    assert len(data["block_ratios"]) == 6
    record = Store(store).get(data["run_id"])
    assert record.kind == "ab" and record.status == "ok"
    assert len(record.result["measurements"]["a"]["samples_ns"]) == 30
    assert record.config["b"]["options"] == {"hidden": "1024"}  # as typed; the loader reads it by the parameter


def test_ab_decides_at_the_confidence_and_min_effect_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    assert main(["ab", "zoo:mlp", "--blocks", "4", "--iters-per-block", "1", "--confidence", "80%",
                 "--min-effect", "3%", "--json", "--store", str(store)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["confidence"], data["min_effect"]) == (0.8, 0.03)
    assert Store(store).get(data["run_id"]).result["confidence"] == 0.8


def test_different_batch_sizes_compare_per_item() -> None:
    # One thread each: on an oversubscribed machine, multi-threaded calls can stall for 100 ms at a time.
    run = run_ab("zoo:mlp", parse_settings("threads=1,batch_size=1"), parse_settings("threads=1,batch_size=64"),
                 blocks=6, iters_per_block=10)
    assert run.per_item and run.batch_size_a == 1 and run.batch_size_b == 64
    # Per item, a batch of 64 costs far less than 64 single calls.
    assert run.result.ratio < 0.5
    assert run.result.b.items_per_call == 64
    # each side's block waits (untimed) for the other's threads to go idle: one wait per switch of side
    assert len(run.result.settle_waits_s) >= 6 and all(w >= 0 for w in run.result.settle_waits_s)


def test_channels_last_on_a_2d_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="channels_last=1 needs a 4-D"):
        run_ab("zoo:mlp", parse_settings(""), parse_settings("channels_last=1"), blocks=4, iters_per_block=1)


@pytest.mark.parametrize(("setting", "said"), [
    ("channels_last=1", "--b: channels_last=1 needs a 4-D (NCHW) input"),
    ("device=cuda", "--b: device=cuda asked for, but no CUDA device is available"),
])
def test_settings_the_workload_or_machine_cannot_take_record_no_run(
        setting: str, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """They were recorded as failed A/Bs: a `runs list` row with no headline for each mistyped setting."""
    import torch

    if setting.startswith("device") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    store = tmp_path / "r.db"
    assert main(["ab", "zoo:mlp", "--b", setting, "--blocks", "4", "--iters-per-block", "1",
                 "--store", str(store)]) == 2
    assert said in capsys.readouterr().err
    assert Store(store).list(kind="ab") == []


def test_a_gpu_the_machine_lacks_is_refused_before_the_a_b(monkeypatch: pytest.MonkeyPatch) -> None:
    """device=cuda:3 on a machine of one GPU failed inside torch once the A/B ran (checked with a faked count)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"--b: device=cuda:3: no such GPU \(1 visible: cuda:0 to cuda:0\)"):
        run_ab("zoo:mlp", parse_settings(""), parse_settings("device=cuda:3"), blocks=4, iters_per_block=1)


def test_unknown_setting_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["ab", "zoo:mlp", "--b", "thread=2", "--store", str(tmp_path / "r.db")]) == 2
    assert "unknown key 'thread'" in capsys.readouterr().err


@pytest.mark.parametrize(("min_effect", "said"), [
    ("-1", "--min-effect must be a fraction in [0, 1)"), ("-5%", "--min-effect must be a fraction in [0, 1)"),
    ("100%", "--min-effect must be a fraction in [0, 1)"),
    ("1.5", "--min-effect must be a fraction in [0, 1)"),
])
def test_a_min_effect_outside_0_to_1_is_refused(min_effect: str, said: str, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    # With --min-effect -1 a B measured 15% slower (interval 0.99-1.54) was called "faster".
    store = tmp_path / "r.db"
    with contextlib.suppress(SystemExit):  # argparse's own refusal exits 2
        assert main(["ab", "zoo:mlp", "--blocks", "4", "--iters-per-block", "1", f"--min-effect={min_effect}",
                     "--store", str(store)]) == 2
    assert said in capsys.readouterr().err
    assert Store(store).list(kind="ab") == []  # refused before anything was measured


@pytest.mark.parametrize("batch_size", ["0", "-3"])
def test_a_batch_size_below_1_is_refused_before_anything_is_recorded(batch_size: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # 0 measured the workload's default batch instead; -3 recorded a failed run.
    store = tmp_path / "r.db"
    assert main(["ab", "zoo:mlp", "--blocks", "4", "--iters-per-block", "1", f"--batch-size={batch_size}",
                 "--store", str(store)]) == 2
    assert f"--batch-size must be an integer >= 1, got {batch_size}" in capsys.readouterr().err
    assert Store(store).list(kind="ab") == []


def test_a_bad_block_count_is_refused_before_the_models_are_built() -> None:
    with pytest.raises(ConfigError, match="at least 4 blocks"):
        run_ab("zoo:nosuchmodel", parse_settings(""), parse_settings(""), blocks=2)


FAILS_LATER = '''
import torch
import dlperf


class FailsLater(torch.nn.Module):
    calls = 0

    def forward(self, x):
        FailsLater.calls += 1
        if FailsLater.calls > 30:
            raise ValueError("out of memory at call 30")
        return x * 2


def workload():
    return dlperf.Workload(name="fails-later", make_model=FailsLater, make_inputs=lambda b: (torch.zeros(b, 4),))
'''


def test_a_model_that_raises_while_measured_is_one_error_line_and_a_failed_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It was a raw traceback with exit 1, which a CI job reads as a regression.
    model_file = tmp_path / "fails_later.py"
    model_file.write_text(FAILS_LATER)
    store = tmp_path / "r.db"
    assert main(["ab", f"{model_file}:workload", "--blocks", "4", "--iters-per-block", "10",
                 "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "error: a measured call raised ValueError: out of memory at call 30" in err
    assert f"{model_file}:12 in forward" in err and "Traceback" not in err
    (run,) = Store(store).list(kind="ab")
    assert run.status == "failed" and "out of memory at call 30" in (run.error or "")


def test_an_interrupted_ab_keeps_the_blocks_it_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """An interrupted `dlperf ab` said it was kept "with what it finished" and kept nothing."""
    from typing import Any

    import dlperf.measure.bench as bench

    real, calls = bench.make_call, [0]

    def make_call(*args: Any) -> Any:
        call = real(*args)

        def counted() -> Any:
            calls[0] += 1
            if calls[0] == 60:  # past both warm-ups and the first paired blocks of 3 + 3 calls
                raise KeyboardInterrupt
            return call()
        return counted

    monkeypatch.setattr(bench, "make_call", make_call)
    store = tmp_path / "runs.db"
    assert main(["ab", "zoo:mlp", "--a", "threads=1", "--b", "threads=1,option.hidden=1024", "--blocks", "40",
                 "--iters-per-block", "3", "--store", str(store)]) == 130
    (record,) = Store(store).list(kind="ab")
    assert record.status == "interrupted"
    blocks = len(record.result["block_ratios"])
    assert 2 <= blocks < 40 and len(record.result["measurements"]["a"]["samples_ns"]) == 3 * blocks
    assert record.result["partial"] == f"interrupted after {blocks} of 40 paired blocks: the verdict is of those"
    capsys.readouterr()
    assert main(["runs", "show", record.id, "--store", str(store)]) == 0
    assert f"note: interrupted after {blocks} of 40 paired blocks" in " ".join(capsys.readouterr().out.split())
