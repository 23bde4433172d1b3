"""Triton's system shared-memory extension on a real server through tritonclient: inputs read from and
outputs written to the client's POSIX shared memory, concurrent requests at their own offsets batched
together, every misuse a 400 naming the fix, and a server without --allow-client-shm refusing it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.metrics import parse_variant_metrics
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig

from .helpers import free_port, get_text, http_status, wait_until

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402

N, FEATURES = 4, 64


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=16, max_queue_delay_s=0.05,
                                          allow_client_shm=True))
    yield running
    running.stop()


@pytest.fixture
def regions() -> Iterator[dict[str, Any]]:
    """Two shared-memory objects for four requests of N x 64 inputs and their outputs, unlinked afterwards."""
    made: dict[str, Any] = {}

    def make(name: str, size: int) -> Any:
        made[name] = shm.create_shared_memory_region(name, f"/dlperf_test_{os.getpid()}_{name}", size)
        return made[name]

    yield {"make": make}
    for handle in made.values():
        shm.destroy_shared_memory_region(handle)


def _reference(server: Running, x: np.ndarray) -> np.ndarray:
    c = httpclient.InferenceServerClient(server.url)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return np.asarray(c.infer("mlp", [inp]).as_numpy("logits"))


def test_inputs_and_outputs_go_through_shared_memory(server: Running, regions: dict[str, Any]) -> None:
    c = httpclient.InferenceServerClient(server.url, concurrency=4)
    assert "system_shared_memory" in c.get_server_metadata()["extensions"]
    classes = int(c.get_model_metadata("mlp")["outputs"][0]["shape"][-1])
    xs = [np.random.default_rng(i).standard_normal((N, FEATURES)).astype(np.float32) for i in range(4)]
    in_bytes, out_bytes = xs[0].nbytes, N * classes * 4
    h_in = regions["make"]("in", 4 * in_bytes)
    h_out = regions["make"]("out", 4 * out_bytes)
    for k, x in enumerate(xs):
        shm.set_shared_memory_region(h_in, [x], offset=k * in_bytes)
    c.register_system_shared_memory("in", f"/dlperf_test_{os.getpid()}_in", 4 * in_bytes)
    c.register_system_shared_memory("out", f"/dlperf_test_{os.getpid()}_out", 4 * out_bytes)
    try:
        status = {r["name"]: r for r in c.get_system_shared_memory_status()}
        assert status["in"] == {"name": "in", "key": f"/dlperf_test_{os.getpid()}_in", "offset": 0,
                                "byte_size": 4 * in_bytes}
        # four concurrent requests, each reading its own span of "in" and writing its own span of "out"
        pending = []
        for k in range(4):
            inp = httpclient.InferInput("x", [N, FEATURES], "FP32")
            inp.set_shared_memory("in", in_bytes, offset=k * in_bytes)
            out = httpclient.InferRequestedOutput("logits")
            out.set_shared_memory("out", out_bytes, offset=k * out_bytes)
            pending.append(c.async_infer("mlp", [inp], outputs=[out]))
        for k, request in enumerate(pending):
            described = request.get_result().get_output("logits")
            assert described["shape"] == [N, classes] and "data" not in described
            assert described["parameters"]["shared_memory_region"] == "out"
            got = shm.get_contents_as_numpy(h_out, np.float32, [N, classes], offset=k * out_bytes)
            np.testing.assert_allclose(got, _reference(server, xs[k]), rtol=1e-5, atol=1e-6)
        stats = c.get_inference_statistics("mlp")["model_stats"][0]
        assert stats["execution_count"] < stats["inference_count"]  # they were batched
        # an input in shared memory, its output in the reply as usual
        inp = httpclient.InferInput("x", [N, FEATURES], "FP32")
        inp.set_shared_memory("in", in_bytes, offset=in_bytes)
        np.testing.assert_allclose(c.infer("mlp", [inp]).as_numpy("logits"), _reference(server, xs[1]), rtol=1e-5,
                                   atol=1e-6)
    finally:
        c.unregister_system_shared_memory()
    assert c.get_system_shared_memory_status() == []
    c.close()


def _status_and_message(call: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value.status()), str(info.value.message())


def test_every_misuse_of_shared_memory_is_a_400_that_says_why(server: Running, regions: dict[str, Any]) -> None:
    c = httpclient.InferenceServerClient(server.url)
    key = f"/dlperf_test_{os.getpid()}_small"
    regions["make"]("small", 256)
    status, message = _status_and_message(lambda: c.register_system_shared_memory("r", "/no_such_object_here", 64))
    assert status == "400" and "Unable to open shared memory region 'r'" in message
    status, message = _status_and_message(lambda: c.register_system_shared_memory("r", "../../etc/passwd", 64))
    assert status == "400" and "is not the name of a shared-memory object" in message
    link = f"/dev/shm/dlperf_test_{os.getpid()}_link"
    os.symlink(f"/dev/shm/dlperf_test_{os.getpid()}_small", link)
    try:  # a link in /dev/shm is not followed (it could aim the server's writes at any file)
        status, message = _status_and_message(
            lambda: c.register_system_shared_memory("r", f"/dlperf_test_{os.getpid()}_link", 64))
        assert status == "400" and "Unable to open shared memory region 'r'" in message
    finally:
        os.unlink(link)
    status, message = _status_and_message(lambda: c.register_system_shared_memory("r", key, 512))
    assert status == "400" and "beyond the 256 bytes" in message
    status, message = _status_and_message(lambda: c.register_system_shared_memory("r", key, 0))
    assert status == "400" and "byte_size must be positive" in message
    c.register_system_shared_memory("small", key, 256)
    try:
        status, message = _status_and_message(lambda: c.register_system_shared_memory("small", key, 256))
        assert status == "400" and "already registered" in message

        def infer(region: str, size: int, offset: int = 0, out: Any = None) -> Any:
            inp = httpclient.InferInput("x", [1, FEATURES], "FP32")
            inp.set_shared_memory(region, size, offset=offset)
            return lambda: c.infer("mlp", [inp], outputs=out)

        status, message = _status_and_message(infer("nothing", 256))
        assert status == "400" and "shared memory region 'nothing' is not registered" in message
        status, message = _status_and_message(infer("small", 128))  # 1 x 64 FP32 is 256 bytes
        assert status == "400" and "'x'" in message
        status, message = _status_and_message(infer("small", 256, offset=128))
        assert status == "400" and "beyond the 256 bytes of shared memory region 'small'" in message
        out = httpclient.InferRequestedOutput("logits")
        out.set_shared_memory("small", 8)  # too small for 1 x classes FP32
        status, message = _status_and_message(infer("small", 256, out=[out]))
        assert status == "400" and "shared_memory_byte_size 8 is too small for the result" in message
        status, message = _status_and_message(lambda: c.get_system_shared_memory_status("nothing"))
        assert status == "400" and "Unable to find system shared memory region: 'nothing'" in message
        # the client shrinks the object after registering it: refused, not a crash of the server (SIGBUS)
        os.truncate(f"/dev/shm/dlperf_test_{os.getpid()}_small", 64)
        status, message = _status_and_message(infer("small", 256))
        assert status == "400" and "is now smaller than when it was registered" in message
        assert c.is_server_live()
    finally:
        c.unregister_system_shared_memory("small")


def test_a_server_without_allow_client_shm_refuses_it(regions: dict[str, Any]) -> None:
    with start_in_thread(ServeConfig(model="zoo:mlp", port=0)) as running:
        c = httpclient.InferenceServerClient(running.url)
        assert "system_shared_memory" not in c.get_server_metadata()["extensions"]
        regions["make"]("off", 256)
        status, message = _status_and_message(
            lambda: c.register_system_shared_memory("off", f"/dlperf_test_{os.getpid()}_off", 256))
        assert status == "400" and "start it with --allow-client-shm" in message
        inp = httpclient.InferInput("x", [1, FEATURES], "FP32")
        inp.set_shared_memory("off", 256)
        status, message = _status_and_message(lambda: c.infer("mlp", [inp]))
        assert status == "400" and "start it with --allow-client-shm" in message


def _leftovers() -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"dlperf_load_{os.getpid()}_")]


def test_dlperf_load_sends_through_shared_memory_and_cleans_up(server: Running, tmp_path: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sklearn.datasets import load_digits

    from dlperf.cli.main import main

    common = ["--duration", "10s", "--window-s", "0.5", "--warmup-s", "0.2", "--json", "--store",
              str(tmp_path / "r.db")]
    code = main(["load", server.url, "--model", "mlp", "--shared-memory", "system", "--concurrency", "1,4",
                 "--requests", "60", "--batch-size", "2", *common])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for level in out["levels"]:
        assert level["errors"] == 0 and level["requests_ok"] > 0
    c = httpclient.InferenceServerClient(server.url)
    assert c.get_system_shared_memory_status() == [] and _leftovers() == []  # unregistered and unlinked
    # with validation data the outputs come back in the reply and every one is checked
    x = load_digits().data[:8].astype(np.float32)
    expected = np.concatenate([_reference(server, row[None]) for row in x])
    data = tmp_path / "digits.json"
    data.write_text(json.dumps({"data": [{"x": row.tolist()} for row in x],
                                "validation_data": [{"logits": row.tolist()} for row in expected]}))
    code = main(["load", server.url, "--model", "mlp", "--shared-memory", "system", "--input-data", str(data),
                 "--concurrency", "2", "--requests", "40", *common])
    assert code == 0
    level = json.loads(capsys.readouterr().out)["levels"][0]
    assert level["errors"] == 0 and level["statuses"] == {"200": level["requests_ok"]}
    assert c.get_system_shared_memory_status() == [] and _leftovers() == []
    # outputs larger than their regions: the test request says so before any load
    code = main(["load", server.url, "--model", "mlp", "--shared-memory", "system", "--output-shared-memory-size",
                 "8", *common])
    assert code == 2 and "shared_memory_byte_size 8 is too small for the result" in capsys.readouterr().err
    assert c.get_system_shared_memory_status() == [] and _leftovers() == []


def test_dlperf_load_with_shared_memory_needs_a_server_that_takes_it(capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    with start_in_thread(ServeConfig(model="zoo:mlp", port=0)) as running:
        assert main(["load", running.url, "--model", "mlp", "--shared-memory", "system"]) == 2
        assert "start dlperf serve with --allow-client-shm" in capsys.readouterr().err
    assert main(["load", "127.0.0.1:1", "--model", "mlp", "--output-shared-memory-size", "10"]) == 2
    assert "--output-shared-memory-size goes with --shared-memory system" in capsys.readouterr().err


def test_an_object_shrunk_while_its_request_waits_does_not_kill_the_server(tmp_path: Any) -> None:
    """The input was read from the mapping only when its batch ran: a client that truncated its object while the
    request waited in the queue (here a 2 s fixed wait) killed the server with SIGBUS (exit 135). The server
    keeps serving, and the request gets the data it had when it arrived."""
    port = free_port()
    with (tmp_path / "server.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", "serve", "zoo:mlp", "--port", str(port),
                                 "--allow-client-shm", "--max-queue-delay-ms", "2000", "--fixed-wait"],
                                stdout=log, stderr=subprocess.STDOUT)
    key = f"/dlperf_test_{os.getpid()}_shrunk"
    handle = None
    try:
        url = f"127.0.0.1:{port}"
        wait_until(lambda: http_status(f"http://{url}/v2/health/ready") == 200, 90, "the server to be ready")
        x = np.random.default_rng(0).standard_normal((1, FEATURES)).astype(np.float32)
        handle = shm.create_shared_memory_region("shrunk", key, x.nbytes)
        shm.set_shared_memory_region(handle, [x])
        c = httpclient.InferenceServerClient(url, network_timeout=30)
        c.register_system_shared_memory("shrunk", key, x.nbytes)
        inp = httpclient.InferInput("x", [1, FEATURES], "FP32")
        inp.set_shared_memory("shrunk", x.nbytes)
        pending = httpclient.InferenceServerClient(url, network_timeout=30).async_infer("mlp", [inp])
        wait_until(lambda: parse_variant_metrics(get_text(f"http://{url}/metrics"))["default"].pending_requests == 1,
                   10, "the request queued")
        fd = os.open(f"/dev/shm{key}", os.O_RDWR)
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        got = np.asarray(pending.get_result().as_numpy("logits"))
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        plain = httpclient.InferInput("x", [1, FEATURES], "FP32")
        plain.set_data_from_numpy(x)
        np.testing.assert_allclose(got, c.infer("mlp", [plain]).as_numpy("logits"), rtol=1e-5, atol=1e-6)
    finally:
        if handle is not None:
            shm.destroy_shared_memory_region(handle)
        proc.terminate()
        proc.wait(timeout=60)


def test_a_region_registered_at_an_offset_reads_and_writes_from_there(server: Running, regions: dict[str, Any]) -> None:
    """A region is a window of its object from its registered offset on: a request's offsets count from the
    region's start, not the object's, and the window must fit in the object. Every other test registers at
    offset 0, where reading from the object's start and adding the offset twice or not at all look the same: the
    model would read (and the output overwrite) the client's other data."""
    c = httpclient.InferenceServerClient(server.url)
    classes = int(c.get_model_metadata("mlp")["outputs"][0]["shape"][-1])
    x = np.random.default_rng(7).standard_normal((N, FEATURES)).astype(np.float32)
    head = 128
    in_bytes, out_bytes = x.nbytes, N * classes * 4
    key = f"/dlperf_test_{os.getpid()}_window"
    handle = regions["make"]("window", head + in_bytes + out_bytes)
    decoy = np.full(head // 4, 7.0, np.float32)
    shm.set_shared_memory_region(handle, [decoy])
    shm.set_shared_memory_region(handle, [x], offset=head)
    status, message = _status_and_message(
        lambda: c.register_system_shared_memory("window", key, in_bytes + out_bytes + 4, offset=head))
    assert status == "400" and f"offset {head} + byte_size {in_bytes + out_bytes + 4} is beyond" in message
    c.register_system_shared_memory("window", key, in_bytes + out_bytes, offset=head)
    try:
        assert c.get_system_shared_memory_status("window") == [
            {"name": "window", "key": key, "offset": head, "byte_size": in_bytes + out_bytes}]
        inp = httpclient.InferInput("x", [N, FEATURES], "FP32")
        inp.set_shared_memory("window", in_bytes)
        out = httpclient.InferRequestedOutput("logits")
        out.set_shared_memory("window", out_bytes, offset=in_bytes)
        described = c.infer("mlp", [inp], outputs=[out]).get_output("logits")
        assert described["parameters"] == {"shared_memory_region": "window", "shared_memory_byte_size": out_bytes,
                                           "shared_memory_offset": in_bytes}
        got = shm.get_contents_as_numpy(handle, np.float32, [N, classes], offset=head + in_bytes)
        np.testing.assert_allclose(got, _reference(server, x), rtol=1e-5, atol=1e-6)
        # the bytes before the window are the client's own: untouched
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [head // 4]), decoy)
        # the window's end is the limit, not the object's
        inp = httpclient.InferInput("x", [N, FEATURES], "FP32")
        inp.set_shared_memory("window", in_bytes, offset=out_bytes + 4)
        status, message = _status_and_message(lambda: c.infer("mlp", [inp]))
        assert status == "400" and "beyond the" in message
    finally:
        c.unregister_system_shared_memory("window")


def test_a_negative_offset_or_size_is_refused_at_register(server: Running, regions: dict[str, Any]) -> None:
    """Negative numbers would pass the bounds check (offset + byte_size within the object), and a negative offset
    then indexes the mapping from its end: the model would read, and the outputs overwrite, the wrong bytes.
    tritonclient never sends one; a hand-written client can."""
    import json

    from .helpers import post_json

    key = f"/dlperf_test_{os.getpid()}_negative"
    regions["make"]("negative", 256)
    url = f"http://{server.url}/v2/systemsharedmemory/region/negative/register"
    for offset, byte_size, field in ((-64, 128, "offset"), (0, -64, "byte_size"), (-128, 256, "offset")):
        status, reply = post_json(url, json.dumps({"key": key, "offset": offset, "byte_size": byte_size}).encode(),
                                  {"Content-Type": "application/json"})
        assert status == 400 and f"{field} must be a non-negative integer" in reply["error"], (offset, byte_size)
    assert httpclient.InferenceServerClient(server.url).get_system_shared_memory_status() == []
