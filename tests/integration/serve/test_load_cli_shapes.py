"""`dlperf load --shape/--batch-size/--priority` against a real zoo:mlp server on 127.0.0.1 (input x [-1, 64]):
the batch a request holds is the one reported, and options that cannot be meant are refused naming the fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dlperf.cli.main import main
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig

pytestmark = pytest.mark.integration

SHORT = ["--concurrency", "1", "--requests", "30", "--duration", "3s", "--window-s", "0.5", "--warmup-s", "0.1"]


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=16, grpc_port=0))
    yield running
    running.stop()


def _level(server: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["load", server.url, "--model", "mlp", *args, *SHORT, "--json", "--store",
                 str(tmp_path / "runs.db")]) == 0
    (level,) = json.loads(capsys.readouterr().out)["levels"]
    assert level["errors"] == 0 and level["requests_ok"] > 0
    return dict(level)


@pytest.mark.parametrize("args", [["--shape", "x=8,64"], ["--shape", "x=8,64", "--batch-size", "8"],
                                  ["--batch-size", "8"], ["--shape", "x=8,64", "--input-data", "zero"]])
def test_the_reported_batch_is_the_one_the_server_ran(server: Running, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    # --shape is the full shape, batch dimension first: x=8,64 sends batches of 8, with or without --batch-size 8
    level = _level(server, tmp_path, capsys, *args)
    assert level["items_per_request"] == 8
    assert level["server"]["average_batch_size"] == pytest.approx(8.0)  # concurrency 1: nothing joins
    assert level["throughput_items_per_s"] == pytest.approx(8 * level["throughput_rps"])


@pytest.mark.parametrize(("args", "message"), [
    (["--shape", "x=1,64", "--batch-size", "8"],
     "--shape x=1,64 sends batches of 1 (its first dimension is the batch dimension), --batch-size 8 asks for 8: "
     "write --shape x=8,64, or drop --batch-size"),
    (["--shape", "x=1,64", "--batch-size", "8", "--input-data", "zero"], "write --shape x=8,64, or drop --batch-size"),
    (["--shape", "y=64"], "--shape y=64: model 'mlp' has no input 'y'; its inputs: x [-1, 64]"),
    (["--shape", "x=-1"], "--shape x=-1: -1 is not a size: give every dimension as a number >= 1"),
    (["--shape", "x=4,0"], "--shape x=4,0: 0 is not a size"),
    (["--shape", "x=64"], "--shape x=64: input 'x' has 2 dimensions [-1, 64], the shape gives 1: give the full "
                          "shape, the batch dimension first (unlike perf_analyzer's --shape, which leaves it out), "
                          "e.g. --shape x=8,64"),
    (["--shape", "x=2,64", "--shape", "x=4,64"], "--shape gives input 'x' twice (x=2,64 and x=4,64)"),
    (["--shape", "x=2,64", "--workload", "zoo:mlp"], "--workload sends the workload's own example inputs"),
    (["--priority", str(2**64)], "--priority must be at most 2**64-1 = 18446744073709551615 (a priority is an "
                                 "unsigned 64-bit integer"),
])
def test_options_that_cannot_be_meant_are_refused(server: Running, args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", server.url, "--model", "mlp", *args, "--requests", "1"]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err


def test_a_priority_beyond_64_bits_is_refused_before_grpc_encodes_it(server: Running,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert server.grpc_url is not None
    assert main(["load", server.grpc_url, "--model", "mlp", "-i", "grpc", "--priority", "99999999999999999999",
                 "--requests", "1"]) == 2
    assert "--priority must be at most 2**64-1" in capsys.readouterr().err


def test_the_highest_priority_a_server_takes_is_sent(server: Running, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    level = _level(server, tmp_path, capsys, "--priority", str(2**64 - 1))
    assert level["statuses"] == {"200": level["requests_ok"]}
