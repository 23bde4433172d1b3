"""The gRPC endpoint (`dlperf serve --grpc-port`) on 127.0.0.1, driven by tritonclient[grpc] (and, where
tritonclient cannot send it, by the generated stub): the same models, batching, failures and counters as HTTP."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.errors import ServingError
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig

from .helpers import (
    BAD_MLP_INPUTS,
    MLP_MAX_BATCH,
    batching_mlp_server,
    gated_server,
    mlp_reference,
    server_metrics,
    wait_until,
)

pytestmark = pytest.mark.integration

grpcclient = pytest.importorskip("tritonclient.grpc")
import grpc  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

MAX_BATCH = MLP_MAX_BATCH


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = batching_mlp_server(grpc_port=0)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reference() -> Any:
    return mlp_reference()


def _client(running: Running) -> Any:
    assert running.grpc_url is not None
    return grpcclient.InferenceServerClient(running.grpc_url)


def _open_stream(c: Any) -> queue.Queue[tuple[Any, Any]]:
    """Start `c`'s ModelStreamInfer stream; its (result, error) pairs arrive on the queue returned."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    return answers


def _input(x: np.ndarray, name: str = "x", datatype: str = "FP32") -> Any:
    inp = grpcclient.InferInput(name, list(x.shape), datatype)
    inp.set_data_from_numpy(x)
    return inp


def test_health_metadata_and_config(server: Running) -> None:
    c = _client(server)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("mlp") and c.is_model_ready("mlp", "1")
    meta = c.get_server_metadata(as_json=True)
    assert meta["name"] == "dlperf" and "binary_tensor_data" in meta["extensions"]
    model = c.get_model_metadata("mlp", as_json=True)
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "64"]}]  # int64 as JSON strings
    assert model["outputs"][0]["name"] == "logits" and model["platform"] == "pytorch"
    config = c.get_model_config("mlp").config
    assert config.max_batch_size == MAX_BATCH and list(config.input[0].dims) == [64]
    assert config.dynamic_batching.max_queue_delay_microseconds == 50_000
    assert config.input[0].data_type == grpcclient.model_config_pb2.TYPE_FP32
    assert not c.is_model_ready("nope") and not c.is_model_ready("mlp", "7")  # as Triton: not ready, no error
    for call in (lambda: c.get_model_metadata("nope"), lambda: c.get_model_config("mlp", "7")):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert "unknown" in info.value.message()


def test_inference_gives_the_model_s_outputs_and_echoes_the_id(server: Running, reference: Any) -> None:
    c = _client(server)
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    result = c.infer("mlp", [_input(x)], outputs=[grpcclient.InferRequestedOutput("logits")], request_id="req-1",
                     model_version="1")
    assert result.get_response().id == "req-1"
    np.testing.assert_allclose(result.as_numpy("logits"), reference(x), rtol=1e-5, atol=1e-6)


def test_typed_contents_are_read_as_raw_bytes_are(server: Running, reference: Any) -> None:
    """tritonclient always sends raw_input_contents; other clients put the values in `contents`."""
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    assert server.grpc_url is not None
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="mlp")
        inp = request.inputs.add(name="x", datatype="FP32", shape=[2, 64])
        inp.contents.fp32_contents.extend(x.reshape(-1).tolist())
        reply = stub.ModelInfer(request)
        out = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(list(reply.outputs[0].shape))
        np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-6)
        inp.contents.fp32_contents.append(1.0)  # one element too many for the shape
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "129 elements in contents.fp32_contents for a shape of 128 elements" in str(info.value.details())
        huge = service_pb2.ModelInferRequest(model_name="mlp", raw_input_contents=[b""])
        huge.inputs.add(name="x", datatype="FP32", shape=[2**32, 2**32])  # 2**64 elements: wraps to 0 in int64
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(huge)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "for 18446744073709551616 FP32 elements" in str(info.value.details())


def test_a_fault_in_an_infer_call_is_internal_and_counted(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unary and in a stream: INTERNAL (a stream's error_message), and each request counted once, as OTHER."""
    from dlperf.serve import grpc_service

    def broken(*args: Any) -> Any:
        raise KeyError("injected")

    monkeypatch.setattr(grpc_service, "decode_infer_request", broken)
    before = server_metrics(server).failure_total["OTHER"]
    c = _client(server)
    x = np.zeros((1, 64), np.float32)
    with pytest.raises(InferenceServerException) as info:
        c.infer("mlp", [_input(x)])
    assert info.value.status() == "StatusCode.INTERNAL" and "KeyError" in info.value.message()
    answers = _open_stream(c)
    try:
        c.async_stream_infer("mlp", [_input(x)], request_id="s1")
        _, error = answers.get(timeout=60)
    finally:
        c.stop_stream()
    assert error is not None and "internal server error: KeyError" in error.message()
    assert server_metrics(server).failure_total["OTHER"] - before == 2


def test_a_failed_stream_request_is_answered_with_its_id(server: Running) -> None:
    """Answers come in the order requests finish: an error must say which request it is (as Triton's does)."""
    assert server.grpc_url is not None
    good = service_pb2.ModelInferRequest(model_name="mlp", id="good-1", raw_input_contents=[b"\0" * 256])
    good.inputs.add(name="x", datatype="FP32", shape=[1, 64])
    bad = service_pb2.ModelInferRequest(model_name="mlp", id="bad-1", raw_input_contents=[b"\0" * 128])
    bad.inputs.add(name="x", datatype="FP32", shape=[1, 32])
    with grpc.insecure_channel(server.grpc_url) as channel:
        replies = list(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([good, bad])))
    by_id = {r.infer_response.id: r for r in replies}
    assert set(by_id) == {"good-1", "bad-1"}
    assert "shape" in by_id["bad-1"].error_message and by_id["bad-1"].infer_response.model_name == "mlp"
    assert by_id["good-1"].error_message == "" and len(by_id["good-1"].infer_response.outputs) == 1
    # the status a unary call's INVALID_ARGUMENT stands for, which the message alone does not give
    assert by_id["bad-1"].infer_response.parameters["dlperf_error_status"].int64_param == 400
    assert "dlperf_error_status" not in by_id["good-1"].infer_response.parameters


def test_a_bad_stream_request_counts_as_a_bad_request_in_the_load_generator_as_a_unary_one_does(
        server: Running) -> None:
    """`dlperf load --streaming` counted a bad request as 500 (a server fault), the same request unary as 400."""
    import asyncio

    from dlperf.loadgen.client import Endpoint
    from dlperf.loadgen.grpc_client import GrpcConnection, GrpcStreamConnection

    assert server.grpc_url is not None
    host, port = server.grpc_url.rsplit(":", 1)
    bad = service_pb2.ModelInferRequest(model_name="mlp", raw_input_contents=[b"\0" * 128])
    bad.inputs.add(name="x", datatype="FP32", shape=[1, 32])

    async def both() -> list[int]:
        statuses = []
        for conn in (GrpcConnection(Endpoint(host, int(port))), GrpcStreamConnection(Endpoint(host, int(port)))):
            statuses.append((await conn.send(bad.SerializeToString())).status)
            await conn.close()
        return statuses

    assert asyncio.run(both()) == [400, 400]


def test_a_failed_stream_request_s_error_names_its_id_for_tritonclient(server: Running) -> None:
    """tritonclient's stream callback gets an InferenceServerException made from `error_message` alone (the
    response's id is dropped), so with requests in flight the message itself must say which one failed."""
    c = _client(server)
    answers = _open_stream(c)
    try:
        c.async_stream_infer("mlp", [_input(np.zeros((1, 64), np.float32))], request_id="good-2")
        c.async_stream_infer("mlp", [_input(np.zeros((1, 32), np.float32))], request_id="bad-2")
        c.async_stream_infer("mlp", [_input(np.zeros((1, 32), np.float32))])  # no id: the message alone
        got = [answers.get(timeout=60) for _ in range(3)]
    finally:
        c.stop_stream()
    assert sorted(r.get_response().id for r, _ in got if r is not None) == ["good-2"]
    errors = sorted(e.message() for _, e in got if e is not None)
    assert errors[0].startswith("[request id: bad-2] input 'x' has shape [1, 32]")
    assert errors[1].startswith("input 'x' has shape [1, 32]")


def test_a_bug_in_a_call_is_internal_with_the_reason(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(server.state, "stats", broken)
    with pytest.raises(InferenceServerException) as info:
        _client(server).get_inference_statistics("mlp")
    assert info.value.status() == "StatusCode.INTERNAL"
    assert "internal server error: ZeroDivisionError: injected" in info.value.message()


@pytest.mark.parametrize("where", ["request", "input", "output"])
def test_a_parameter_with_no_value_is_invalid_argument_as_in_triton(server: Running, reference: Any,
                                                                    where: str) -> None:
    """An InferParameter whose oneof is unset was read as None, so `priority` or `timeout` sent that way was taken
    as absent; Triton refuses it ("invalid value type for 'priority' parameter, expected int64_param or
    uint64_param"), as dlperf's HTTP endpoint refuses a null parameter."""
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    assert server.grpc_url is not None
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="mlp", raw_input_contents=[x.tobytes()])
        inp = request.inputs.add(name="x", datatype="FP32", shape=[1, 64])
        out = request.outputs.add(name=_client(server).get_model_metadata("mlp").outputs[0].name)
        params = {"request": request.parameters, "input": inp.parameters, "output": out.parameters}[where]
        params["priority"].int64_param = 1
        reply = stub.ModelInfer(request)  # a value set: taken
        got = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(list(reply.outputs[0].shape))
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-6)
        params["priority"].ClearField("int64_param")  # the entry stays, with no value
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        named = {"request": "the request", "input": "input 0 'x'", "output": "output"}[where]
        details = str(info.value.details())
        assert named in details and "parameter 'priority' has no value" in details


@pytest.mark.parametrize(("name", "shape", "datatype", "message"), BAD_MLP_INPUTS)
def test_bad_requests_are_invalid_argument_with_the_reason(server: Running, name: str, shape: tuple[int, ...],
                                                           datatype: str, message: str) -> None:
    x = np.zeros(shape, dtype=np.int64 if datatype == "INT64" else np.float32)
    with pytest.raises(InferenceServerException) as info:
        _client(server).infer("mlp", [_input(x, name=name, datatype=datatype)])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert message in info.value.message()


def test_concurrent_distinct_requests_are_batched_routed_back_and_counted(server: Running, reference: Any) -> None:
    c = _client(server)
    before = c.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    metrics_before = server_metrics(server)
    n = 24
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1 + i % 3, 64)).astype(np.float32) for i in range(n)]
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    for i, x in enumerate(xs):
        c.async_infer("mlp", [_input(x)], callback=lambda result, error: results.put((result, error)),
                      request_id=str(i))
    answers = [results.get(timeout=60) for _ in range(n)]
    assert [e for _, e in answers if e is not None] == []
    for result, _ in answers:
        i = int(result.get_response().id)
        np.testing.assert_allclose(result.as_numpy("logits"), reference(xs[i]), rtol=1e-5, atol=1e-6)
    after = c.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    items = int(after["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert items == sum(x.shape[0] for x in xs)
    assert executions < n  # gRPC requests share batches as HTTP ones do
    assert max(int(b["batch_size"]) for b in after["batch_stats"]) <= MAX_BATCH
    # the same counters as HTTP's; a success is counted once its call is over, just after the client has the reply
    wait_until(lambda: server_metrics(server).success_total - metrics_before.success_total == n,
               what=f"{n} successes counted")
    m = server_metrics(server)
    assert m.inference_count_total - metrics_before.inference_count_total == items


def test_a_stream_of_requests_is_batched_answered_by_id_and_a_bad_one_does_not_end_it(server: Running,
                                                                                       reference: Any) -> None:
    c = _client(server)
    before = c.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    metrics_before = server_metrics(server)
    rng = np.random.default_rng(5)
    xs = {str(i): rng.standard_normal((1 + i % 2, 64)).astype(np.float32) for i in range(12)}
    answers = _open_stream(c)
    try:
        for i, (rid, x) in enumerate(xs.items()):
            c.async_stream_infer("mlp", [_input(x)], request_id=rid)
            if i == 5:  # a bad request in the middle: answered with an error, and the stream goes on
                c.async_stream_infer("mlp", [_input(np.zeros((1, 63), np.float32))], request_id="bad")
        got = [answers.get(timeout=60) for _ in range(len(xs) + 1)]
    finally:
        c.stop_stream()
    errors = [e for _, e in got if e is not None]
    assert len(errors) == 1 and "shape" in errors[0].message()
    for result, error in got:
        if error is None:
            rid = result.get_response().id
            np.testing.assert_allclose(result.as_numpy("logits"), reference(xs[rid]), rtol=1e-5, atol=1e-6)
    assert sorted(r.get_response().id for r, e in got if e is None) == sorted(xs)
    after = c.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    items = int(after["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert items == sum(x.shape[0] for x in xs.values()) and executions < len(xs)  # a stream's requests batch
    wait_until(lambda: server_metrics(server).success_total - metrics_before.success_total == len(xs),
               what="the stream's successes counted")
    m = server_metrics(server)
    assert m.failure_total["INVALID"] - metrics_before.failure_total["INVALID"] == 1


def test_a_cancelled_stream_cancels_its_requests() -> None:
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, max_queue_delay_s=0.0)
    with gated_server(config) as (running, gate):
        c = _client(running)
        _open_stream(c)  # the answers of a cancelled stream are not waited for
        c.async_stream_infer("gated", [_input(np.full((1, 4), 1.0, np.float32))])
        assert gate.wait_entered()  # the first is in the model
        c.async_stream_infer("gated", [_input(np.full((1, 4), 2.0, np.float32))])
        wait_until(lambda: server_metrics(running).pending_requests == 1, what="the second queued")
        c.stop_stream(cancel_requests=True)
        wait_until(lambda: server_metrics(running).failure_total["CANCELED"] == 2, what="both canceled")
        assert server_metrics(running).pending_requests == 0
        gate.open.set()
        assert float(c.infer("gated", [_input(np.full((1, 4), 3.0, np.float32))]).as_numpy("y")[0, 0]) == 6.0
        assert [f[0] for f in gate.firsts] == [1.0, 3.0]  # the queued one never ran
        wait_until(lambda: server_metrics(running).success_total == 1, what="the unary call counted")
        assert server_metrics(running).requests_total == 3


def test_a_stream_is_read_no_further_than_its_window() -> None:
    """With a window of 2, a stream whose first request is held in the model and second queued is not read on:
    its other requests stay with the client until answers go out, then all are answered."""
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, max_queue_delay_s=0.0,
                         grpc_stream_window=2)
    with gated_server(config) as (running, gate):
        c = _client(running)
        answers = _open_stream(c)
        try:
            for i in range(5):
                c.async_stream_infer("gated", [_input(np.full((1, 4), float(i + 1), np.float32))], request_id=str(i))
            assert gate.wait_entered()  # the first is in the model
            wait_until(lambda: server_metrics(running).pending_requests >= 1, what="the second queued")
            time.sleep(0.5)  # room for the server to read a third, which it must not
            assert (running.state.received, server_metrics(running).pending_requests) == (2, 1)
            gate.open.set()
            got = [answers.get(timeout=30) for _ in range(5)]
        finally:
            gate.open.set()  # (a failed check above) before the stream is closed, which waits for its answers
            c.stop_stream()
        assert all(error is None for _, error in got)
        assert {r.get_response().id: float(r.as_numpy("y")[0, 0]) for r, _ in got} == {
            str(i): 2.0 * (i + 1) for i in range(5)}
        assert running.state.received == 5


def test_a_full_queue_is_unavailable_at_once_and_counted_as_rejected() -> None:
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, max_queue_size=1)
    with gated_server(config) as (running, gate):
        c = _client(running)
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()

        def send(value: float) -> None:
            c.async_infer("gated", [_input(np.full((1, 4), value, np.float32))],
                          callback=lambda result, error: answers.put((result, error)))

        send(1.0)
        assert gate.wait_entered()  # the first request is in the model, held at the gate
        send(2.0)
        wait_until(lambda: server_metrics(running).pending_requests == 1, what="one queued request")
        with pytest.raises(InferenceServerException) as info:
            c.infer("gated", [_input(np.full((1, 4), 9.0, np.float32))])
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert "Exceeds maximum queue size" in info.value.message()
        gate.open.set()
        values = sorted(float(answers.get(timeout=30)[0].as_numpy("y")[0, 0]) for _ in range(2))
        assert values == [2.0, 4.0]
        wait_until(lambda: server_metrics(running).success_total == 2, what="two successes counted")
        m = server_metrics(running)
        assert m.success_total == 2 and m.failure_total["REJECTED"] == 1 and m.requests_total == 3


def test_a_cancelled_call_is_counted_canceled_and_a_queued_one_never_runs() -> None:
    """A client deadline while queued: the request leaves the queue unrun; while in the model: its batch finishes,
    the reply is dropped. Both count as CANCELED, not as successes, and the counters add up."""
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, max_queue_delay_s=0.0)
    with gated_server(config) as (running, gate):
        c = _client(running)
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        c.async_infer("gated", [_input(np.full((1, 4), 1.0, np.float32))], client_timeout=5.0,
                      callback=lambda result, error: answers.put((result, error)))
        assert gate.wait_entered()  # held in the model
        queued: queue.Queue[tuple[Any, Any]] = queue.Queue()
        c.async_infer("gated", [_input(np.full((1, 4), 2.0, np.float32))], client_timeout=2.0,
                      callback=lambda result, error: queued.put((result, error)))
        # seen queued before its deadline: with a deadline of 0.3 s (and a blocking call) a loaded machine could
        # let it pass before the server ever ran the call's handler, which then counted nothing (CI failed so)
        wait_until(lambda: server_metrics(running).pending_requests == 1, what="the second one queued")
        _, error = queued.get(timeout=30)
        assert error is not None and error.status() == "StatusCode.DEADLINE_EXCEEDED"
        wait_until(lambda: server_metrics(running).failure_total.get("CANCELED", 0) >= 1,
                   what="the queued one canceled")
        assert server_metrics(running).pending_requests == 0  # out of the queue, not waiting for an instance
        _, error = answers.get(timeout=30)  # the held one's deadline passes too
        assert error is not None and error.status() == "StatusCode.DEADLINE_EXCEEDED"
        # the server's deadline passes too, while the model still holds the call: the gate opens after that. The
        # server's deadline is the client's timeout from when the server received the call, later than the
        # client's on a loaded machine: opening the gate at the client's error once let the reply go out within
        # the server's deadline, a success (a fresh clone's full run, 2026-12-07)
        wait_until(lambda: server_metrics(running).failure_total.get("CANCELED") == 2, what="the held one canceled")
        gate.open.set()
        result = c.infer("gated", [_input(np.full((1, 4), 3.0, np.float32))])
        assert float(result.as_numpy("y")[0, 0]) == 6.0
        wait_until(lambda: server_metrics(running).success_total == 1, what="the success counted")
        assert gate.batches == [1, 1]  # the queued request never reached the model
        m = server_metrics(running)
        assert m.success_total == 1 and m.requests_total == 3 and m.exec_count_total == 2
        # the items the model ran (the held one's too, as Triton's nv_inference_count), not the queued one's
        assert m.inference_count_total == 2


def test_shutdown_drains_an_in_flight_grpc_request() -> None:
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, exit_timeout_s=30)
    with gated_server(config) as (running, gate):
        c = _client(running)
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        c.async_infer("gated", [_input(np.full((1, 4), 5.0, np.float32))],
                      callback=lambda result, error: answers.put((result, error)))
        assert gate.wait_entered()
        stopper = threading.Thread(target=running.stop)
        stopper.start()
        wait_until(lambda: running.state.draining, what="draining")
        assert not c.is_server_ready()  # readiness turns false while the request is held
        with pytest.raises(InferenceServerException) as info:
            c.infer("gated", [_input(np.full((1, 4), 1.0, np.float32))])
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        gate.open.set()
        result, error = answers.get(timeout=30)
        assert error is None and float(result.as_numpy("y")[0, 0]) == 10.0
        stopper.join(30)
        assert not stopper.is_alive()


def test_shutdown_answers_a_stream_s_in_flight_request_and_refuses_its_new_ones() -> None:
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, exit_timeout_s=30)
    with gated_server(config) as (running, gate):
        c = _client(running)
        answers = _open_stream(c)
        try:
            c.async_stream_infer("gated", [_input(np.full((1, 4), 5.0, np.float32))], request_id="held")
            assert gate.wait_entered()
            stopper = threading.Thread(target=running.stop)
            stopper.start()
            wait_until(lambda: running.state.draining, what="draining")
            c.async_stream_infer("gated", [_input(np.full((1, 4), 1.0, np.float32))], request_id="late")
            result, error = answers.get(timeout=30)  # the late one is refused on the stream at once
            assert result is None and "shutting down" in error.message()
            gate.open.set()
            result, error = answers.get(timeout=30)
            assert error is None and result.get_response().id == "held"
            assert float(result.as_numpy("y")[0, 0]) == 10.0
            stopper.join(30)
            assert not stopper.is_alive()
        finally:
            c.stop_stream()


def test_token_protects_all_but_health_and_a_large_message_is_refused() -> None:
    config = ServeConfig(model="zoo:mlp", port=0, grpc_port=0, token="s3cret", max_request_bytes=64 * 1024)
    with start_in_thread(config) as running:
        c = _client(running)
        assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("mlp")
        x = np.zeros((1, 64), np.float32)
        for headers in (None, {"authorization": "Bearer wrong"}):
            with pytest.raises(InferenceServerException) as info:
                c.infer("mlp", [_input(x)], headers=headers)
            assert info.value.status() == "StatusCode.UNAUTHENTICATED"
        with pytest.raises(InferenceServerException):
            c.get_model_metadata("mlp")
        auth = {"authorization": "Bearer s3cret"}
        assert c.infer("mlp", [_input(x)], headers=auth).as_numpy("logits").shape == (1, 10)
        # the two refused inference calls are counted, as HTTP's 401s are
        stats = c.get_inference_statistics("mlp", headers=auth, as_json=True)["model_stats"][0]["inference_stats"]
        assert int(stats["fail"]["count"]) == 2  # (a success is counted once its call is over: not read here)
        assert c.get_model_metadata("mlp", headers=auth).name == "mlp"
        # gRPC's own message limit is 4 MiB at least; past it grpc refuses before the handler runs
        big = np.zeros((1, 64 * 20_000), np.float32)  # 5 MiB
        with pytest.raises(InferenceServerException) as info:
            c.infer("mlp", [_input(big)], headers=auth)
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"


def test_a_message_within_a_request_limit_above_grpc_s_floor_is_read() -> None:
    """gRPC's message limit is the server's --max-request-mb where that is above grpc's 4 MiB default: a 5 MiB
    message to a server with a 16 MiB limit reaches the handler (here refused for its shape, INVALID_ARGUMENT),
    where a limit kept at the floor refused it unread (RESOURCE_EXHAUSTED)."""
    config = ServeConfig(model="zoo:mlp", port=0, grpc_port=0, max_request_bytes=16 * 1024 * 1024)
    with start_in_thread(config) as running:
        c = _client(running)
        big = np.zeros((1, 64 * 20_000), np.float32)  # 5 MiB
        with pytest.raises(InferenceServerException) as info:
            c.infer("mlp", [_input(big)])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value.message()
        assert c.infer("mlp", [_input(np.zeros((1, 64), np.float32))]).as_numpy("logits").shape == (1, 10)


def test_shared_memory_inputs_and_outputs_over_grpc(reference: Any) -> None:
    import tritonclient.utils.shared_memory as shm

    config = ServeConfig(model="zoo:mlp", port=0, grpc_port=0, allow_client_shm=True)
    with start_in_thread(config) as running:
        c = _client(running)
        x = np.random.default_rng(4).standard_normal((2, 64)).astype(np.float32)
        key = f"/dlperf_grpc_test_{threading.get_ident()}"
        handle = shm.create_shared_memory_region("grpc_in_out", key, x.nbytes + 2 * 10 * 4)
        try:
            shm.set_shared_memory_region(handle, [x])
            c.register_system_shared_memory("grpc_in_out", key, x.nbytes + 80)
            status = c.get_system_shared_memory_status(as_json=True)
            assert status["regions"]["grpc_in_out"]["key"] == key
            inp = grpcclient.InferInput("x", [2, 64], "FP32")
            inp.set_shared_memory("grpc_in_out", x.nbytes)
            out = grpcclient.InferRequestedOutput("logits")
            out.set_shared_memory("grpc_in_out", 80, offset=x.nbytes)
            result = c.infer("mlp", [inp], outputs=[out])
            spec = result.get_output("logits")
            assert spec.parameters["shared_memory_region"].string_param == "grpc_in_out"
            # the output is in shared memory only: its raw contents entry is empty, no tensor data crosses gRPC
            assert list(result.get_response().raw_output_contents) == [b""]
            y = shm.get_contents_as_numpy(handle, np.float32, [2, 10], offset=x.nbytes)
            np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
            c.unregister_system_shared_memory("grpc_in_out")
            assert c.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
            # an empty name stands for every region in status and unregister: it was registered, then could
            # not be named alone
            with pytest.raises(InferenceServerException) as info:
                c.register_system_shared_memory("", key, x.nbytes)
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "needs a name" in info.value.message()
            assert c.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
        finally:
            shm.destroy_shared_memory_region(handle)


def test_load_over_grpc_through_shared_memory_checks_replies_and_cleans_up(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import os

    from sklearn.datasets import load_digits

    from dlperf.cli.main import main
    from dlperf.loadgen.target import oip_target

    def leftovers() -> list[str]:
        return [n for n in os.listdir("/dev/shm") if n.startswith(f"dlperf_load_{os.getpid()}_")]

    config = ServeConfig(model="zoo:mlp", port=0, grpc_port=0, allow_client_shm=True)
    with start_in_thread(config) as running:
        assert running.grpc_url is not None
        c = _client(running)
        # the requests carry descriptions only: no raw contents, the inputs and outputs named by region
        target = oip_target(running.grpc_url, "mlp", batch_size=4, protocol="grpc", shared_memory="system")
        try:
            request = service_pb2.ModelInferRequest.FromString(target.raw_request)
            assert len(request.raw_input_contents) == 0 and len(target.raw_request) < 4 * 64 * 4
            assert request.inputs[0].parameters["shared_memory_region"].string_param.endswith("_in")
            assert request.outputs[0].parameters["shared_memory_byte_size"].int64_param == 102400
            assert len(c.get_system_shared_memory_status(as_json=True)["regions"]) == 2  # input, output
        finally:
            target.close()
        assert c.get_system_shared_memory_status(as_json=True).get("regions", {}) == {} and leftovers() == []
        common = ["load", running.grpc_url, "--model", "mlp", "-i", "grpc", "--shared-memory", "system",
                  "--duration", "10s", "--window-s", "0.5", "--warmup-s", "0.2", "--json", "--store",
                  str(tmp_path / "r.db")]
        before = server_metrics(running).success_total
        assert main([*common, "--concurrency", "1,4", "--requests", "40", "--batch-size", "2"]) == 0
        levels = json.loads(capsys.readouterr().out)["levels"]
        assert all(lv["errors"] == 0 and lv["requests_ok"] > 0 for lv in levels)
        wait_until(lambda: server_metrics(running).success_total - before >= sum(lv["requests_ok"] for lv in levels),
                   what="the server to count the load's requests")
        assert c.get_system_shared_memory_status(as_json=True).get("regions", {}) == {} and leftovers() == []
        # validation data: the inputs still in shared memory, the outputs in the reply, each one checked
        x = load_digits().data[:6].astype(np.float32)
        expected = c.infer("mlp", [_input(x)]).as_numpy("logits")
        data = tmp_path / "digits.json"
        data.write_text(json.dumps({"data": [{"x": row.tolist()} for row in x],
                                    "validation_data": [{"logits": row.tolist()} for row in expected]}))
        assert main([*common, "--input-data", str(data), "--concurrency", "2", "--requests", "30"]) == 0
        level = json.loads(capsys.readouterr().out)["levels"][0]
        assert level["errors"] == 0 and level["statuses"] == {"200": level["requests_ok"]}
        wrong = tmp_path / "wrong.json"
        wrong.write_text(json.dumps({"data": [{"x": x[0].tolist()}], "validation_data": [{"logits": [0.0] * 10}]}))
        assert main([*common, "--input-data", str(wrong)]) == 2
        assert "did not match its validation data" in capsys.readouterr().err
        # an output region too small: the test request says so, before any load, and nothing is left behind
        assert main([*common, "--output-shared-memory-size", "8"]) == 2
        assert "too small for the result" in capsys.readouterr().err
        assert c.get_system_shared_memory_status(as_json=True).get("regions", {}) == {} and leftovers() == []
    with start_in_thread(ServeConfig(model="zoo:mlp", port=0, grpc_port=0)) as plain:  # no --allow-client-shm
        assert plain.grpc_url is not None
        assert main(["load", plain.grpc_url, "--model", "mlp", "-i", "grpc", "--shared-memory", "system"]) == 2
        assert "start dlperf serve with --allow-client-shm" in capsys.readouterr().err


def test_a_grpc_port_in_use_fails_the_start_and_one_port_for_both_is_refused(
        capfd: pytest.CaptureFixture[str]) -> None:
    from dlperf.errors import ConfigError

    with pytest.raises(ConfigError, match="--grpc-port 8000 is also --port"):
        ServeConfig(model="zoo:mlp", port=8000, grpc_port=8000)
    config = ServeConfig(model="zoo:mlp", port=0, grpc_port=0)
    with start_in_thread(config) as running:
        assert running.grpc_url is not None
        taken = int(running.grpc_url.rsplit(":", 1)[1])
        capfd.readouterr()
        with pytest.raises(ServingError, match=f"^cannot listen for gRPC on 127.0.0.1:{taken}: Address already in "
                                               "use; pick another --grpc-port or stop what uses it$"):
            start_in_thread(ServeConfig(model="zoo:mlp", port=0, grpc_port=taken), ready_timeout_s=30)
        assert "Failed to add port" not in capfd.readouterr().err  # grpc's C-core line no longer comes first


def test_load_over_grpc_measures_levels_with_the_server_s_statistics(server: Running, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dlperf.cli.main import main
    from dlperf.store import Store

    assert server.grpc_url is not None
    store = tmp_path / "runs.db"
    code = main(["load", server.grpc_url, "--model", "mlp", "--protocol", "grpc", "--concurrency", "1,4",
                 "--requests", "40", "--duration", "20s", "--window-s", "0.5", "--warmup-s", "0.2", "--batch-size",
                 "2", "--json", "--store", str(store)])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for lv in out["levels"]:
        assert lv["errors"] == 0 and lv["statuses"] == {"200": lv["requests_ok"]}
        assert 0 < lv["requests_ok"] <= 40 + lv["level"]  # the bound, or fewer once the windows agree
        assert lv["throughput_items_per_s"] == pytest.approx(2 * lv["throughput_rps"])
        server_side = lv["server"]  # read through gRPC's ModelStatistics
        assert server_side is not None and server_side["requests"] >= lv["requests_ok"] - 4
        assert server_side["compute_s"] > 0 and server_side["average_batch_size"] >= 1
    assert Store(store).get(out["run_id"]).config["protocol"] == "grpc"


def test_load_over_grpc_streams_checks_replies_and_counts_a_stream_s_errors(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio
    import json

    from dlperf.cli.main import main
    from dlperf.loadgen.target import oip_target

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"data": [{"x": [1, 2, 3, 4]}, {"x": [0, 0, 0, 1]}],
                                "validation_data": [{"y": [2, 4, 6, 8]}, {"y": [0, 0, 0, 2]}]}))
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=1, max_queue_size=1)
    with gated_server(config) as (running, gate):
        gate.open.set()
        assert running.grpc_url is not None
        common = ["load", running.grpc_url, "--model", "gated", "-i", "grpc", "--streaming", "--duration", "10s",
                  "--window-s", "0.5", "--warmup-s", "0.1", "--store", str(tmp_path / "runs.db")]
        before = server_metrics(running).success_total
        assert main([*common, "--input-data", str(good), "--requests", "30", "--concurrency", "1,2"]) == 0
        out = capsys.readouterr().out
        assert "transport: gRPC streams (inference.GRPCInferenceService/ModelStreamInfer" in out
        # every request went on a stream: the server counted them (as successes, once written)
        stats = _client(running).get_inference_statistics("gated", as_json=True)["model_stats"][0]
        assert int(stats["inference_count"]) >= 30
        wait_until(lambda: server_metrics(running).success_total - before >= 30, what="the stream requests counted")
        # a full queue under a held model: on a stream the refusal is an error_message, counted as a 503 (its
        # words are Triton's for a full queue), and the stream goes on
        target = oip_target(running.grpc_url, "gated", protocol="grpc", streaming=True)
        gate.arm()  # closed, and the load's passes through `entered` forgotten

        async def four() -> list[Any]:
            conns = [target.connect(30) for _ in range(4)]
            first = asyncio.ensure_future(conns[0].send(target.raw_request))
            await asyncio.to_thread(gate.wait_entered)
            second = asyncio.ensure_future(conns[1].send(target.raw_request))
            await asyncio.to_thread(wait_until, lambda: server_metrics(running).pending_requests == 1)
            refused = [await c.send(target.raw_request) for c in conns[2:]]
            gate.open.set()
            replies = [await first, await second, *refused, await conns[2].send(target.raw_request)]
            for c in conns:
                await c.close()
            return replies

        replies = asyncio.run(four())
        assert [r.status for r in replies] == [200, 200, 503, 503, 200]
        assert b"Exceeds maximum queue size" in replies[2].body
    assert main(["load", "127.0.0.1:1", "--model", "m", "--streaming"]) == 2
    assert "--streaming sends gRPC streams (ModelStreamInfer): add --protocol grpc" in capsys.readouterr().err


def test_load_over_grpc_checks_replies_and_counts_failures_by_status(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dlperf.cli.main import main

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"data": [{"x": [1, 2, 3, 4]}, {"x": [0, 0, 0, 1]}],
                                "validation_data": [{"y": [2, 4, 6, 8]}, {"y": [0, 0, 0, 2]}]}))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"data": [{"x": [1, 2, 3, 4]}], "validation_data": [{"y": [2, 4, 6, 9]}]}))
    config = ServeConfig(model="gated", port=0, grpc_port=0, max_batch_size=4, token="t0k")
    with gated_server(config) as (running, gate):
        gate.open.set()
        assert running.grpc_url is not None
        common = ["load", running.grpc_url, "--model", "gated", "-i", "grpc", "--requests", "20", "--duration",
                  "10s", "--window-s", "0.5", "--warmup-s", "0.1", "--store", str(tmp_path / "runs.db")]
        assert main([*common, "--input-data", str(good), "--token", "t0k", "--json"]) == 0
        level = json.loads(capsys.readouterr().out)["levels"][0]
        assert level["errors"] == 0 and 0 < level["requests_ok"] <= 21
        # the first request is the check: a reply that does not match stops the run before any load
        assert main([*common, "--input-data", str(wrong), "--token", "t0k"]) != 0
        assert "element 3 is 8, expected 9" in capsys.readouterr().err
        assert main([*common, "--token", "wrong"]) != 0  # the metadata call is refused first
        err = " ".join(capsys.readouterr().err.split())
        # the server's message says a token was missing or wrong, the client's which; no port or model hint then
        assert "UNAUTHENTICATED: missing or wrong bearer token" in err
        assert "the --token given is not the server's" in err
        assert "gRPC port" not in err
        assert main(common) != 0  # no --token at all
        err = " ".join(capsys.readouterr().err.split())
        assert "the server requires a token: give it with --token-file FILE (or --token)" in err
        assert main(["load", running.url, "--model", "gated", "--token", "wrong"]) != 0  # HTTP says it too
        err = " ".join(capsys.readouterr().err.split())
        assert "answered 401: missing or wrong bearer token" in err and "the --token given is not the server's" in err
        assert main(["load", running.grpc_url, "--model", "nosuch", "-i", "grpc", "--token", "t0k"]) != 0
        err = " ".join(capsys.readouterr().err.split())
        assert "NOT_FOUND: unknown model 'nosuch': this server serves gated" in err and "gRPC port" not in err
        assert main([*common, "--collect-metrics"]) == 2
        assert "--collect-metrics needs --metrics-url" in capsys.readouterr().err


def test_calls_it_does_not_offer_answer_unimplemented_saying_why(server: Running) -> None:
    """grpcio's default said only "Unexpected <class 'NotImplementedError'>: Method not implemented!"."""
    c = _client(server)
    for call, says in ((c.get_model_repository_index, "no model repository to index, load or unload"),
                       (lambda: c.load_model("mlp"), "restart it to change them"),
                       (lambda: c.unload_model("mlp"), "restart it to change them"),
                       (c.get_cuda_shared_memory_status, "system shared memory only"),
                       (lambda: c.unregister_cuda_shared_memory("r"), "not CUDA shared memory"),
                       (c.get_trace_settings, "no request tracing"),
                       (c.get_log_settings, "give --log-level there")):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert info.value.status() == "StatusCode.UNIMPLEMENTED" and says in info.value.message()
