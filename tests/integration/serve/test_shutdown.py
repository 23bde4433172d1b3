"""SIGTERM to a `dlperf serve` subprocess: readiness turns false, new requests get 503, the requests already
in the server (held by the model until the test lets them go) all finish, and the process exits with 0."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.serve.metrics import parse_variant_metrics

from .helpers import cli_process, free_port, get_text, http_status, wait_until
from .slow_workload import GATE_ENV, HELD, LOADING_ENV, entered

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

WORKLOAD = Path(__file__).with_name("slow_workload.py")


def _input(value: float) -> Any:
    x = np.full((1, 2), value, np.float32)
    inp = httpclient.InferInput("x", [1, 2], "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_sigterm_drains_in_flight_requests_then_exits_cleanly(tmp_path: Path) -> None:
    port = free_port()
    base = f"127.0.0.1:{port}"
    gate = tmp_path / "open"
    with cli_process(["serve", f"{WORKLOAD}:workload", "--port", str(port), "--max-batch-size", "1",
                      "--exit-timeout-s", "60"], tmp_path / "server.log", {**os.environ, GATE_ENV: str(gate)}) as proc:
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 200, 90, "the server to be ready")
        c = httpclient.InferenceServerClient(base, concurrency=3)
        in_flight = [c.async_infer("slow", [_input(HELD + i)]) for i in range(3)]

        def metrics() -> Any:
            return parse_variant_metrics(get_text(f"http://{base}/metrics"))["default"]

        wait_until(lambda: metrics().pending_requests == 2, 30, "one request held in the model and two queued")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 400, 30, "readiness to turn false")
        with pytest.raises(InferenceServerException) as info:
            httpclient.InferenceServerClient(base).infer("slow", [_input(0.0)])
        assert info.value.status() == "503"
        assert "shutting down" in info.value.message()
        m = metrics()
        assert m.failure_total["UNAVAILABLE"] == 1 and m.success_total == 0 and m.pending_requests == 2
        assert proc.poll() is None  # still draining: nothing has finished yet
        gate.touch()
        results = [r.get_result().as_numpy("y") for r in in_flight]
        for i, y in enumerate(results):
            np.testing.assert_array_equal(y, np.full((1, 2), HELD + 1 + i, np.float32))
        c.close()
        assert proc.wait(timeout=60) == 0
    # the drain's start and end in the server's log (it said nothing)
    text = (tmp_path / "server.log").read_text()
    assert ("shutting down: readiness is false and new inference requests get 503; waiting up to 60 s "
            "(--exit-timeout-s) for 3 request(s) in flight") in text
    assert "every request in flight finished; stopping" in text
    assert text.index("shutting down:") < text.index("drained in ")
    # the request refused while it drained has its line, as the other refusals have (it had none)
    assert ("refused 1 request: the server was shutting down (reason UNAVAILABLE: sent while it drained, or still "
            "in it when --exit-timeout-s ended) (model 'slow': 1)") in text


def test_a_drain_cut_off_by_the_exit_timeout_says_so_in_the_log(tmp_path: Path) -> None:
    port = free_port()
    base = f"127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    gate = tmp_path / "never"
    with cli_process(["serve", f"{WORKLOAD}:workload", "--port", str(port), "--max-batch-size", "1",
                      "--exit-timeout-s", "1"], log_path, {**os.environ, GATE_ENV: str(gate)}) as proc:
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 200, 90, "the server to be ready")
        c = httpclient.InferenceServerClient(base)
        held = c.async_infer("slow", [_input(HELD)])
        wait_until(lambda: entered(gate).exists(), 30, "the request to be in the model")
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(InferenceServerException) as info:
            held.get_result()
        assert info.value.status() == "503"
        assert proc.wait(timeout=30) == 1  # the instance was still in the model: not a clean exit
        c.close()
    text = log_path.read_text()
    assert "waiting up to 1 s (--exit-timeout-s) for 1 request(s) in flight" in text
    assert ("drain cut off after the exit timeout (--exit-timeout-s 1): 1 request(s) still in flight get a 503; "
            "stopping") in text
    assert "drained in" not in text


def test_the_drain_leaves_uvicorn_only_what_is_left_of_the_exit_timeout() -> None:
    """A request held past --exit-timeout-s: the drain gives up at the timeout, answers the held request with
    dlperf's 503 (uvicorn's own cut answered a plain-text 500), and uvicorn's own wait for its request tasks
    gets only the remainder (it waited a whole timeout again: a drain took twice as long)."""
    from dlperf.serve.service import ServeConfig

    from .helpers import gated_server

    with gated_server(ServeConfig(model="gated", port=0, max_batch_size=1, exit_timeout_s=1.0)) as (running, gate):
        c = httpclient.InferenceServerClient(running.url, concurrency=2)
        x = np.ones((1, 4), np.float32)
        held = c.async_infer("gated", [httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x)])
        assert gate.wait_entered()
        queued = c.async_infer("gated", [httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x)])
        wait_until(lambda: running.state.in_flight == 2, 30, "a second request queued behind the held one")
        running.server.begin_shutdown()
        for request in (held, queued):
            with pytest.raises(InferenceServerException) as info:
                request.get_result()
            assert info.value.status() == "503"
            assert "did not finish within the exit timeout (--exit-timeout-s 1)" in info.value.message()
        wait_until(lambda: running.server.should_exit, 30, "the drain to give up")
        assert running.server.config.timeout_graceful_shutdown < 0.5
        assert running.state.in_flight == 0
        counted = parse_variant_metrics(running.state.metrics.exposition()[0].decode())["default"]
        assert counted.failure_total["UNAVAILABLE"] == 2 and counted.success_total == 0
        gate.open.set()
        c.close()
    assert gate.batches == [1]  # the queued request left the queue unrun


def test_a_client_still_sending_its_body_when_the_exit_timeout_ends_gets_dlperfs_503() -> None:
    """It got uvicorn's plain-text 500, and the log a CancelledError traceback, when uvicorn cancelled its handler in
    receive(); the drain also waited half a second more for it after the cut."""
    import json
    import socket

    from dlperf.serve.service import ServeConfig

    from .helpers import gated_server, read_reply

    with gated_server(ServeConfig(model="gated", port=0, max_batch_size=1, exit_timeout_s=1.0)) as (running, gate):
        host, port = running.url.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /v2/models/gated/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 111\r\n\r\n" + b'{"inputs": [{"name"')  # and no more
            wait_until(lambda: running.state.in_flight == 1, 30, "the request's handler to read its body")
            running.server.begin_shutdown()
            head, body = read_reply(sock)
        assert head.startswith(b"HTTP/1.1 503"), head + body
        message = json.loads(body)["error"]
        assert "did not finish within the exit timeout (--exit-timeout-s 1)" in message
        assert "its body was still arriving" in message
        wait_until(lambda: running.server.should_exit, 30, "the drain to give up")
        assert running.state.in_flight == 0 and not running.state.reading
        counted = parse_variant_metrics(running.state.metrics.exposition()[0].decode())["default"]
        assert counted.failure_total["UNAVAILABLE"] == 1 and counted.success_total == 0
    assert gate.batches == []  # it never reached the model


def test_a_second_signal_exits_at_once_with_status_1_when_requests_are_dropped(tmp_path: Path) -> None:
    port = free_port()
    base = f"127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    with cli_process(["serve", f"{WORKLOAD}:workload", "--port", str(port), "--max-batch-size", "1",
                      "--exit-timeout-s", "60"], log_path, {**os.environ, GATE_ENV: str(tmp_path / "never")}) as proc:
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 200, 90, "the server to be ready")
        c = httpclient.InferenceServerClient(base, concurrency=2)
        held = c.async_infer("slow", [_input(HELD)])
        queued = c.async_infer("slow", [_input(HELD)])
        # the held one in the model and the other queued: pending 1 alone was also the held one still queued
        # before the other had arrived, which a loaded machine caught (the other then found the server gone)
        wait_until(lambda: entered(tmp_path / "never").exists() and parse_variant_metrics(
            get_text(f"http://{base}/metrics"))["default"].pending_requests == 1, 30, "one request in the model")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 400, 30, "readiness to turn false")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 1  # requests were dropped: not a clean exit
        for request in (held, queued):  # dlperf's 503, not uvicorn's plain-text 500 from cancelling the handler
            with pytest.raises(InferenceServerException) as info:
                request.get_result()
            assert info.value.status() == "503"
            assert "exited at a second signal; send it again to another replica" in info.value.message()
        c.close()
    text = log_path.read_text()
    assert "exited without waiting for 2 request(s) in flight" in text
    assert "Event loop is closed" not in text
    assert "Traceback" not in text


def test_a_second_signal_to_an_idle_server_still_exits_0(tmp_path: Path) -> None:
    port = free_port()
    with cli_process(["serve", "zoo:mlp", "--port", str(port)], tmp_path / "server.log") as proc:
        wait_until(lambda: http_status(f"http://127.0.0.1:{port}/v2/health/ready") == 200, 90, "ready")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: http_status(f"http://127.0.0.1:{port}/v2/health/ready") != 200, 30, "draining")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # nothing was dropped


def test_sigterm_while_the_model_loads_says_so_and_exits_143(tmp_path: Path) -> None:
    """Before the server listens SIGTERM is not uvicorn's yet: the process ended without a word after
    "loading ..."; now it says the server never listened (exit 143, as a shell reports SIGTERM)."""
    loading = tmp_path / "loading"
    log_path = tmp_path / "server.log"
    with cli_process(["serve", f"{WORKLOAD}:workload", "--port", str(free_port())], log_path,
                     {**os.environ, GATE_ENV: str(tmp_path / "never"), LOADING_ENV: str(loading)}) as proc:
        wait_until(loading.exists, 90, "the model's loading to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    text = log_path.read_text()
    assert "terminated by SIGTERM while loading and warming up the model: the server never listened" in text
    assert "Traceback" not in text


def test_closing_the_state_says_whether_every_instance_stopped_in_time() -> None:
    """`ServerState.close` is what `dlperf serve`'s exit status comes from (0 after a clean drain, 1 when an
    instance was still running at the exit timeout): an instance held in its batch past the timeout must make it
    False, one that finishes True; a close that always said True exited 0 with a batch abandoned mid-run."""
    from dlperf.serve.service import ServeConfig

    from .helpers import gated_server

    with gated_server(ServeConfig(model="gated", port=0, max_batch_size=1)) as (running, gate):
        c = httpclient.InferenceServerClient(running.url)
        x = np.ones((1, 4), np.float32)
        held = c.async_infer("gated", [httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x)])
        assert gate.wait_entered()
        assert running.state.close(0.2) is False  # the instance is still in its batch
        gate.open.set()
        np.testing.assert_array_equal(held.get_result().as_numpy("y"), x * 2)
        assert running.state.close(30.0) is True
        c.close()
