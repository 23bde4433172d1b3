"""A thread count torch cannot sensibly start is refused before anything runs: `dlperf profile --threads 999999`
started OpenMP threads until the machine's process table was full (every process on it then failed to fork)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from dlperf.cli.main import main
from dlperf.errors import DlperfError
from dlperf.measure import env
from dlperf.measure.env import check_threads, thread_limit

pytestmark = pytest.mark.unit


def test_the_limit_is_eight_per_usable_cpu_and_at_least_64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "usable_cores", lambda: 2)
    assert thread_limit() == 64
    check_threads(64)
    with pytest.raises(DlperfError, match=r"^--threads 65 is more than 64, the most accepted on this machine"):
        check_threads(65, "--threads")
    monkeypatch.setattr(env, "usable_cores", lambda: 16)
    assert thread_limit() == 128
    check_threads(128)
    with pytest.raises(DlperfError, match=r"more than 128, .* fits within 128 \(leave it out\)$"):
        check_threads(129, hint=" (leave it out)")
    with pytest.raises(DlperfError, match=r"^threads must be >= 1, got 0$"):
        check_threads(0)
    check_threads(None)


def _configs() -> list[tuple[str, Callable[[int], Any]]]:
    from dlperf.compare.settings import ABSettings
    from dlperf.measure.bench import BenchConfig
    from dlperf.optimize.search import OptimizeConfig
    from dlperf.passes.hygiene import HygieneConfig
    from dlperf.profile.capture import StepOptions
    from dlperf.serve.service import ServeConfig, build_state
    from dlperf.train.ddp import DdpConfig
    from dlperf.train.loop import StepConfig

    return [
        ("bench", lambda n: BenchConfig(threads=n)),
        ("profile", lambda n: StepOptions(threads=n)),
        ("train", lambda n: StepConfig(batch_size=8, threads=n)),
        ("ddp", lambda n: DdpConfig(nproc=2, threads_per_process=n)),
        ("ab", lambda n: ABSettings(threads=n)),
        ("hygiene", lambda n: HygieneConfig(threads=n)),
        ("optimize", lambda n: OptimizeConfig(threads=n)),
        ("serve", lambda n: build_state(ServeConfig(model="zoo:mlp", threads=n)) if n > thread_limit() else None),
    ]


@pytest.mark.parametrize(("what", "make"), _configs(), ids=[c[0] for c in _configs()])
def test_every_config_with_threads_refuses_too_many(what: str, make: Callable[[int], Any]) -> None:
    make(thread_limit())
    # optimize's names the field beside the option: "--threads (threads) 65 is more than 64"
    limit = thread_limit()
    with pytest.raises(DlperfError, match=rf"threads( \(threads\))? {limit + 1} is more than {limit}"):
        make(thread_limit() + 1)


@pytest.mark.parametrize("argv", [
    ["profile", "zoo:mlp", "--threads", "999999"],
    ["bench", "zoo:mlp", "--threads", "999999"],
    ["calibrate", "--threads", "999999"],
    ["serve", "zoo:mlp", "--threads", "999999", "--port", "0"],
    ["ab", "zoo:mlp", "--a", "threads=999999", "--b", "threads=1"],
])
def test_the_commands_refuse_it_before_starting_threads(argv: list[str], tmp_path: Any,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    before = torch.get_num_threads()
    store = [] if argv[0] == "serve" else ["--store", str(tmp_path / "runs.db")]
    assert main([*argv, *store]) == 2
    err = capsys.readouterr().err
    assert "999999 is more than" in err and "note: --threads" not in err
    assert torch.get_num_threads() == before
    assert "Traceback" not in err


def test_workers_and_instances_have_limits_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--num-workers 1000` would fork a thousand DataLoader processes, `serve --instances 100000` start that many
    model threads."""
    from dlperf.serve.service import ServeConfig, build_state
    from dlperf.train.loop import StepConfig

    monkeypatch.setattr(env, "usable_cores", lambda: 2)
    StepConfig(batch_size=8, num_workers=8)
    with pytest.raises(DlperfError, match=r"^num_workers 9 is more than 8, .*: each DataLoader worker is a process"):
        StepConfig(batch_size=8, num_workers=9)
    with pytest.raises(DlperfError, match=r"^--instances 65 is more than 64, .*: each instance is a thread"):
        build_state(ServeConfig(model="zoo:mlp", instances=65))
