"""Overload, timeouts and model failures on a real server whose model the test holds at a gate."""

from __future__ import annotations

import functools
import logging
import re
import socket
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.errors import ServingError
from dlperf.serve.instances import ServedModel
from dlperf.serve.protocol import Tensor, encode_request
from dlperf.serve.server import Running
from dlperf.serve.service import ServeConfig, build_state

from .helpers import SIG, Gate, gated_server, server_metrics, wait_until

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402


def _input(value: float, rows: int = 1) -> Any:
    x = np.full((rows, 4), value, np.float32)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


@pytest.fixture
def gated() -> Iterator[tuple[Running, Gate]]:
    with gated_server(ServeConfig(model="gated", port=0, max_batch_size=1, max_queue_size=2, instances=1)) as pair:
        yield pair



def test_full_queue_rejects_at_once_with_503_and_counters_add_up(gated: tuple[Running, Gate],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    running, gate = gated
    caplog.set_level(logging.WARNING, logger="dlperf.serve")
    c = httpclient.InferenceServerClient(running.url, concurrency=4)
    first = c.async_infer("gated", [_input(1.0)])
    assert gate.wait_entered()  # request 1 is executing, held at the gate
    queued = [c.async_infer("gated", [_input(2.0 + i)]) for i in range(2)]
    wait_until(lambda: server_metrics(running).pending_requests == 2, what="two queued requests")
    # the queue is full: the next request is refused while the model is still blocked
    with pytest.raises(InferenceServerException) as info:
        httpclient.InferenceServerClient(running.url).infer("gated", [_input(9.0)])
    assert info.value.status() == "503"
    assert "Exceeds maximum queue size" in info.value.message()
    gate.open.set()
    values = [float(r.get_result().as_numpy("y")[0, 0]) for r in [first, *queued]]
    assert values == [2.0, 4.0, 6.0]
    m = server_metrics(running)
    assert m.success_total == 3
    assert m.failure_total["REJECTED"] == 1
    assert m.requests_total == 4
    assert m.pending_requests == 0
    c.close()
    # the operator tailing the log sees the server shed load (only /metrics said so)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")] == [
        "refused 1 request: the queue was full (reason REJECTED; --max-queue-size bounds it) (model 'gated': 1)"]


def test_a_failing_batch_fails_only_its_requests_and_the_server_keeps_serving(gated: tuple[Running, Gate],
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    running, gate = gated
    gate.open.set()
    c = httpclient.InferenceServerClient(running.url)
    with caplog.at_level(logging.ERROR, logger="dlperf.serve"), pytest.raises(InferenceServerException) as info:
        c.infer("gated", [_input(-1.0)], request_id="order-7")
    # the server's log has it too, with the model's traceback (only the client heard of it before) and the
    # request's id, so that a client's "order-7 got a 500" leads to its line
    logged = [r for r in caplog.records if "model 'gated' failed on a batch" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert logged[0].getMessage().endswith("ValueError: poisoned input [request id: order-7]")
    assert "order-7" not in info.value.message()  # the ids of a batch are not told to its other clients
    assert "poisoned input" in "".join(traceback.format_exception(*logged[0].exc_info))
    assert info.value.status() == "500"
    assert "model 'gated' failed on a batch of 1 item (1 request;" in info.value.message()
    assert "ValueError: poisoned input" in info.value.message()
    assert float(c.infer("gated", [_input(3.0)]).as_numpy("y")[0, 0]) == 6.0
    m = server_metrics(running)
    assert m.failure_total["BACKEND"] == 1 and m.success_total == 1


def _pending_is(running: Running, n: int) -> bool:
    return bool(server_metrics(running).pending_requests == n)


def test_a_request_batched_with_one_the_model_fails_on_gets_its_answer(caplog: pytest.LogCaptureFixture) -> None:
    """A good request batched with one whose input made the model raise got the batch's 500, with the other
    input's error (a walk-through saw 23 of 190 good requests fail so): the batch's requests are run again one at
    a time, and only the one that fails alone gets a 500, its own."""
    config = ServeConfig(model="gated", port=0, max_batch_size=4, max_queue_size=8, instances=1)
    with gated_server(config) as (running, gate), caplog.at_level(logging.WARNING, logger="dlperf.serve"):
        c = httpclient.InferenceServerClient(running.url, concurrency=4)
        first = c.async_infer("gated", [_input(1.0)])
        assert gate.wait_entered()  # held at the gate: the next three queue, and go as one batch
        queued = []
        for i, value in enumerate((-1.0, 2.0, 3.0)):  # the poisoned one first: the gate's model checks x[0, 0]
            queued.append(c.async_infer("gated", [_input(value)], request_id=f"r{i}"))
            wait_until(functools.partial(_pending_is, running, i + 1), what=f"{i + 1} queued")
        gate.open.set()
        assert float(first.get_result().as_numpy("y")[0, 0]) == 2.0
        with pytest.raises(InferenceServerException) as info:
            queued[0].get_result()
        assert [float(r.get_result().as_numpy("y")[0, 0]) for r in queued[1:]] == [4.0, 6.0]
        m = server_metrics(running)
        c.close()
    assert info.value.status() == "500"
    assert ("model 'gated' failed on a batch of 1 item (1 request; first request: x[1, 4]): ValueError: poisoned "
            "input") in info.value.message()
    assert gate.batches == [1, 1, 1]  # the batch of 3 raised before the gate; then the good ones alone
    assert m.success_total == 3 and m.failure_total["BACKEND"] == 1
    assert m.batch_retry_total == 1 and m.exec_count_total == 3 and m.inference_count_total == 3
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if "failed on a batch" in r.getMessage()]
    assert [level for level, _ in logged] == ["WARNING", "ERROR"]
    assert logged[0][1].endswith("ValueError: poisoned input; its requests are run again one at a time "
                                 "[request ids: r0, r1, r2]")
    assert "batch of 3 items (3 requests;" in logged[0][1]
    assert logged[1][1].endswith("batch of 1 item (1 request; first request: x[1, 4]): ValueError: poisoned input "
                                 "[request id: r0]")


@pytest.mark.parametrize("sent", [1, 2], ids=["one", "pipelined"])
def test_a_client_gone_before_its_reply_counts_as_canceled_not_as_a_success(gated: tuple[Running, Gate],
                                                                             sent: int) -> None:
    """Pipelined: the request in the model is not the newest on its connection, which uvicorn alone would not
    mark disconnected (its reply was then written to the closed transport: an error logged, nothing counted)."""
    running, gate = gated
    connections = running.server.server_state.connections  # uvicorn's open connections
    with socket.create_connection((running.host, running.port), 10) as sock:
        sock.sendall(b"".join(_raw_request(1.0 + i) for i in range(sent)))
        assert gate.wait_entered()  # the model holds the request
    wait_until(lambda: not connections, what="the server to see the client go")
    gate.open.set()
    wait_until(lambda: server_metrics(running).failure_total["CANCELED"] == 1, what="the request counted as CANCELED")
    c = httpclient.InferenceServerClient(running.url)
    assert float(c.infer("gated", [_input(3.0)]).as_numpy("y")[0, 0]) == 6.0  # and serving goes on
    m = server_metrics(running)
    assert m.success_total == 1 and m.failure_total["CANCELED"] == 1 and m.requests_total == 2
    # its batch ran: its item counts among the inferences performed, as Triton's nv_inference_count counts them
    assert m.inference_count_total == 2 and _stats(running)["inference_count"] == 2


@pytest.mark.parametrize("sent", [1, 2], ids=["one", "pipelined"])
def test_a_client_gone_while_queued_leaves_the_queue_unrun(gated: tuple[Running, Gate], sent: int) -> None:
    """The client closes its connection while its request is queued: the request leaves the queue unrun, as
    CANCELED. Pipelined: a second request sent behind it (uvicorn holds that one until the first is answered,
    and on the close marks only that newest one disconnected) changes nothing."""
    running, gate = gated
    c = httpclient.InferenceServerClient(running.url)
    first = c.async_infer("gated", [_input(1.0)])
    assert gate.wait_entered()  # request 1 is in the model
    with socket.create_connection((running.host, running.port), 10) as sock:
        sock.sendall(b"".join(_raw_request(5.0 + i) for i in range(sent)))
        wait_until(lambda: server_metrics(running).pending_requests == 1, what="the second request queued")
    # the client has gone: the request leaves the queue at once, before any instance is free to run it
    wait_until(lambda: server_metrics(running).pending_requests == 0, 10, what="the queue emptied")  # the gate: 30 s
    assert server_metrics(running).failure_total["CANCELED"] == 1
    gate.open.set()
    assert float(first.get_result().as_numpy("y")[0, 0]) == 2.0
    assert float(c.infer("gated", [_input(3.0)]).as_numpy("y")[0, 0]) == 6.0
    assert [f[0] for f in gate.firsts] == [1.0, 3.0]  # the abandoned request never reached the model
    m = server_metrics(running)
    assert m.success_total == 2 and m.failure_total["CANCELED"] == 1 and m.requests_total == 3
    assert m.exec_count_total == 2
    # unrun, so not an inference: items counted = the successes' items, in /metrics and /stats alike
    stats = _stats(running)
    assert m.inference_count_total == 2 and stats["inference_count"] == 2
    assert stats["inference_stats"]["success"]["count"] == 2 and stats["inference_stats"]["fail"]["count"] == 1


def _stats(running: Running) -> Any:
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://{running.url}/v2/models/gated/stats", timeout=10) as reply:
        return json.loads(reply.read())["model_stats"][0]


def _raw_request(value: float) -> bytes:
    """An HTTP/1.1 binary infer request for the gated model, x full of `value`, to send on a raw socket."""
    body, header_length = encode_request([Tensor("x", "FP32", np.full((1, 4), value, np.float32))])
    return (f"POST /v2/models/gated/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: {header_length}"
            f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def test_a_full_queue_can_answer_429_with_retry_after() -> None:
    import json
    import urllib.error
    import urllib.request

    config = ServeConfig(model="gated", port=0, max_batch_size=1, max_queue_size=1, instances=1, reject_status=429)
    with gated_server(config) as (running, gate):
        c = httpclient.InferenceServerClient(running.url, concurrency=2)
        first = c.async_infer("gated", [_input(1.0)])
        assert gate.wait_entered()
        queued = c.async_infer("gated", [_input(2.0)])
        wait_until(lambda: server_metrics(running).pending_requests == 1, what="the queued request")
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]})
        request = urllib.request.Request(f"http://{running.url}/v2/models/gated/infer", data=body.encode())
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=10)
        assert info.value.code == 429 and info.value.headers["Retry-After"] == "1"
        assert "Exceeds maximum queue size" in json.loads(info.value.read())["error"]
        gate.open.set()
        assert [float(r.get_result().as_numpy("y")[0, 0]) for r in (first, queued)] == [2.0, 4.0]
        assert server_metrics(running).failure_total["REJECTED"] == 1
        c.close()


def test_request_timeout_expires_in_the_queue_with_503(gated: tuple[Running, Gate]) -> None:
    running, gate = gated
    c = httpclient.InferenceServerClient(running.url, concurrency=2)
    first = c.async_infer("gated", [_input(1.0)])
    assert gate.wait_entered()
    late = c.async_infer("gated", [_input(2.0)], timeout=1_000_000)  # 1 s, in µs as Triton's parameter
    wait_until(lambda: server_metrics(running).pending_requests == 1, what="the queued request")
    # the request expires while the only instance is still busy: it is answered at its deadline, not when
    # the instance next looks at the queue
    with pytest.raises(InferenceServerException) as info:
        late.get_result()
    assert info.value.status() == "503"
    waited = re.search(r"Request timeout expired: waited ([0-9.]+) ms", info.value.message())
    assert waited is not None and float(waited.group(1)) >= 1000.0  # never before its deadline
    m = server_metrics(running)
    assert m.failure_total["TIMEOUT"] == 1 and m.pending_requests == 0 and not gate.open.is_set()
    gate.open.set()
    assert float(first.get_result().as_numpy("y")[0, 0]) == 2.0
    wait_until(lambda: server_metrics(running).success_total == 1, what="the first request counted")
    assert server_metrics(running).inference_count_total == 1 == _stats(running)["inference_count"]  # not the late one
    c.close()


def test_instances_warm_up_in_their_own_threads_and_a_failed_warm_up_stops_the_start() -> None:
    threads: list[str] = []

    def runner(index: int) -> Any:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            threads.append(threading.current_thread().name)
            if arrays[0].shape[0] == 2:
                raise RuntimeError("no batches of 2")
            return [arrays[0] * 2]

        return run

    config = ServeConfig(model="m", port=0, max_batch_size=4, instances=2)
    with pytest.raises(ServingError, match="failed its warm-up call at batch 2: RuntimeError: no batches of 2"):
        build_state(config, {"m": ServedModel("m", SIG, runner)})
    assert threads and all(name.startswith("dlperf-instance-m-") for name in threads)
    assert not any(t.name.startswith("dlperf-instance-m-") for t in threading.enumerate())


def test_a_max_batch_whose_inputs_outgrow_the_memory_is_refused_before_the_warm_up() -> None:
    """`--max-batch-size 100000` was taken and the warm-up ran at it (ResNet-18: 60 GB of images). Now a max batch
    whose inputs alone need more than the available memory is refused before any instance starts; one that fits
    but fails its warm-up for memory says to lower it."""
    import psutil

    from dlperf.errors import ConfigError
    from dlperf.serve.instances import Signature, TensorSpec

    calls: list[int] = []

    def runner(index: int) -> Any:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            calls.append(arrays[0].shape[0])
            if arrays[0].shape[0] == 3:
                raise MemoryError("could not allocate the activations")
            return [arrays[0][:, :4]]

        return run

    wide = Signature((TensorSpec("x", "FP32", (-1, 1 << 20)),), (TensorSpec("y", "FP32", (-1, 4)),))  # 4 MiB an item
    too_many = psutil.virtual_memory().available // (4 << 20) + 16
    config = ServeConfig(model="m", port=0, max_batch_size=too_many, instances=1)
    with pytest.raises(ConfigError, match=rf"--max-batch-size {too_many}: the inputs of one batch of model 'm' take "
                                          r"[0-9.]+ GiB alone, .* lower --max-batch-size"):
        build_state(config, {"m": ServedModel("m", wide, runner)})
    assert calls == []
    config = ServeConfig(model="m", port=0, max_batch_size=4, instances=1)
    with pytest.raises(ServingError, match=r"failed its warm-up call at batch 3: MemoryError: could not allocate the "
                                           r"activations \(the warm-up runs the batch sizes up to the max batch "
                                           r"size, 4, .* lower --max-batch-size\)"):
        build_state(config, {"m": ServedModel("m", wide, runner)})
    assert calls == [1, 2, 3]


def test_the_warm_up_reports_every_call_of_every_instance() -> None:
    def runner(index: int) -> Any:
        return lambda arrays: [arrays[0] * 2]

    seen: list[tuple[str, int, int, str]] = []
    config = ServeConfig(model="m", port=0, max_batch_size=4, instances=2)
    state = build_state(config, {"m": ServedModel("m", SIG, runner)},
                        on_warmup=lambda v, done, total: seen.append((v, done, total, threading.current_thread().name)))
    try:
        # batch sizes 1..4 on each of 2 instances, counted in order from their threads
        assert [(v, done, total) for v, done, total, _ in seen] == [("default", i, 8) for i in range(1, 9)]
        assert {name for *_, name in seen} == {"dlperf-instance-m-0", "dlperf-instance-m-1"}
    finally:
        state.close()


def test_the_load_generator_caps_outstanding_requests_and_times_out_its_own(gated: tuple[Running, Gate]) -> None:
    """Against a server held at its gate, an open loop sends until --max-outstanding requests are in flight,
    counts the scheduled ones beyond as 'dropped', and each request without a reply after
    --request-timeout-s as 'timeout' (not as a connection error)."""
    from dlperf.loadgen.generator import CLIENT_TIMEOUT, LoadConfig, run_load
    from dlperf.loadgen.target import oip_target

    running, gate = gated
    target = oip_target(running.url, "gated", check=False)  # a test request would wait at the gate
    config = LoadConfig(rate=40.0, max_outstanding=3, request_timeout_s=0.4, duration_s=1.5, window_s=0.5,
                        warmup_s=0.0)
    (level,) = run_load(target, config)
    gate.open.set()
    assert level.statuses.get("200", 0) == 0
    assert level.statuses[CLIENT_TIMEOUT] >= 3 and "conn" not in level.statuses
    assert level.statuses["dropped"] > 0
    assert any("--max-outstanding sets the cap" in w for w in level.warnings)
    # the rate sent leaves the dropped out (it counted them as sent); the loop itself kept its schedule
    sent = level.scheduled - level.statuses["dropped"]
    assert level.send_rate is not None and level.send_rate < 40.0 * sent / level.scheduled * 1.06
    assert not any("could not send" in w for w in level.warnings)
