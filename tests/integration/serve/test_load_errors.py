"""`dlperf load` against a server that fails most (not all) requests: the run must not exit 0 (CI reads `|| fail`),
unless --max-error-ratio allows that share."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.cli.main import main
from dlperf.serve.instances import ServedModel
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import SIG

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def flaky_server() -> Iterator[Running]:
    """A real server whose model answers every 10th batch (of one request) and fails the others with a 500,
    after the first few (the server's warm-up and the load's test request pass)."""
    calls = itertools.count()

    def runner(index: int) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            n = next(calls)
            if n > 5 and n % 10 != 0:
                raise ValueError("flaky model")
            return [arrays[0] * 2]

        return run

    config = ServeConfig(model="flaky", port=0, max_batch_size=1)
    running = start_in_thread(config, build_state(config, {"flaky": ServedModel("flaky", SIG, runner)}))
    try:
        yield running
    finally:
        running.stop()


def _load(tmp_path: Any, *extra: str) -> int:
    """`dlperf load --json` against a fresh flaky server (its first requests pass: the load's test request)."""
    with flaky_server() as running:
        return main(["load", running.url, "--model", "flaky", "--shape", "x=1,4", "--requests", "200", "--duration",
                     "20s", "--warmup-s", "0.1", "--window-s", "0.5", "--json", "--store", str(tmp_path / "runs.db"),
                     *extra])


def test_a_level_where_most_requests_failed_exits_1(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code = _load(tmp_path)
    out = capsys.readouterr()
    (level,) = json.loads(out.out)["levels"]
    assert 0 < level["requests_ok"] < level["errors"], level  # some answered: not the 'none succeeded' case
    assert code == 1, out.err  # exited 0 before
    assert "more requests failed than --max-error-ratio 0 allows at: concurrency 1 (" in out.err
    assert f"{level['errors']} of {level['errors'] + level['requests_ok']} requests" in out.err


def test_max_error_ratio_allows_a_share_of_failures(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert _load(tmp_path, "--max-error-ratio", "0.5") == 1  # about 90% failed
    assert "--max-error-ratio 0.5 allows" in capsys.readouterr().err
    assert _load(tmp_path, "--max-error-ratio", "0.99") == 0
    out = capsys.readouterr()
    assert "allows" not in out.err
    assert main(["runs", "show", json.loads(out.out)["run_id"], "--json", "--store", str(tmp_path / "runs.db")]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["max_error_ratio"] == 0.99


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "x"])
def test_a_max_error_ratio_outside_0_to_1_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["load", "127.0.0.1:1", "--model", "m", "--max-error-ratio", value])
    assert exc.value.code == 2
    assert "is not a share between 0 and 1" in capsys.readouterr().err


def test_max_error_ratio_is_refused_with_find_peak(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "127.0.0.1:1", "--model", "m", "--find-peak", "--p99-ms", "5", "--max-error-ratio",
                 "0.1"]) == 2
    assert "--find-peak fails any rate with a failed request" in capsys.readouterr().err
