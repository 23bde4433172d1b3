"""Shared pieces of the serving integration tests: a gated model the test releases, free ports, polling."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.metrics import parse_variant_metrics
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state

SIG = Signature((TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1, 4)),))


class Gate:
    """A model y = 2x that blocks each batch until the test opens the gate (or raises on a marker value)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Semaphore(0)
        self.batches: list[int] = []
        self.firsts: list[list[float]] = []
        """Each batch's x[:, 0], in the order the batches ran."""
        self.armed = False
        """False during the warm-up: the poisoned marker value only fails once the test arms the gate."""

    def runner(self, index: int) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            x = arrays[0]
            if self.armed and x[0, 0] == -1.0:
                raise ValueError("poisoned input")
            self.batches.append(int(x.shape[0]))
            self.firsts.append([float(v) for v in x[:, 0]])
            self.entered.release()
            if not self.open.wait(30):
                raise TimeoutError("gate never opened")
            return [x * 2]

        return run

    def model(self) -> ServedModel:
        return ServedModel("gated", SIG, self.runner)

    def arm(self) -> None:
        """After the warm-up: close the gate, forget the warm-up's batches (and its passes through
        `entered`), and let the poisoned marker fail."""
        self.open.clear()
        self.batches.clear()
        self.firsts.clear()
        while self.entered.acquire(blocking=False):
            pass
        self.armed = True

    def wait_entered(self, timeout_s: float = 30.0) -> bool:
        """Whether a batch reached the model within `timeout_s`, yielding to gevent meanwhile (see
        `yield_to_clients`)."""
        deadline = time.monotonic() + timeout_s
        while not self.entered.acquire(timeout=0.01):
            if time.monotonic() > deadline:
                return False
            yield_to_clients(0.01)
        return True


def yield_to_clients(seconds: float) -> None:
    """Sleep so that tritonclient's `async_infer` requests make progress: each runs in a gevent greenlet
    that `async_infer` lets run for only 10 ms, and a request not sent whole by then (a new connection on
    a busy machine) waits for this thread's next gevent switch. A plain `time.sleep` never makes one."""
    if "gevent" in sys.modules:
        import gevent

        gevent.sleep(seconds)
    else:
        time.sleep(seconds)


@contextlib.contextmanager
def gated_server(config: ServeConfig) -> Iterator[tuple[Running, Gate]]:
    """A real server on 127.0.0.1 serving a `Gate` model as "gated", the gate closed once warm-up is done."""
    gate = Gate()
    gate.open.set()  # warm-up passes
    state = build_state(config, {"gated": gate.model()})
    gate.arm()
    running = start_in_thread(config, state)
    try:
        yield running, gate
    finally:
        gate.open.set()
        running.stop()


@contextlib.contextmanager
def cli_process(argv: list[str], log: Path, env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`dlperf ARGV` in a subprocess, stdout and stderr into `log`; killed if the block leaves it running."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli.main", *argv], stdout=out,
                                stderr=subprocess.STDOUT, env=None if env is None else dict(env))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def server_metrics(running: Running) -> Any:
    """The default variant's metrics, parsed from the server's /metrics."""
    return parse_variant_metrics(get_text(f"http://{running.url}/metrics"))["default"]


def free_port() -> int:
    """A port free now, below Linux's ephemeral range (32768-60999) and above Ray's worker ports (10002-19999): the
    kernel's port 0 gave one of the ephemeral range, which an outgoing connection (Ray opens many) could take before
    the server bound it ("Failed to bind to address '127.0.0.1:38753'" in a fresh clone's Ray tests)."""
    pick = random.Random()  # not the tests' seeded generator: two workers must not pick alike
    for _ in range(100):
        port = pick.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_reply(sock: socket.socket) -> tuple[bytes, bytes]:
    """(status line and headers, body) of one HTTP reply read from a raw socket, the body by its Content-Length."""
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < int(
            reply.lower().partition(b"content-length:")[2].split(b"\r\n")[0] or b"1000000"):
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed after {reply!r}"
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return head, body


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        yield_to_clients(0.02)


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return -1


def get_text(url: str, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode())


def get_json(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """GET `url` and return the status and the JSON reply, an error's (4xx/5xx) as well."""
    return _json_reply(urllib.request.Request(url, headers=headers or {}))


def post_json(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """POST `body` and return the status and the JSON reply, an error's (4xx/5xx) as well."""
    return _json_reply(urllib.request.Request(url, data=body, method="POST", headers=headers or {}))


def _json_reply(request: urllib.request.Request) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return int(reply.status), dict(json.loads(reply.read()))
    except urllib.error.HTTPError as exc:
        return int(exc.code), dict(json.loads(exc.read()))


MLP_MAX_BATCH = 8


def batching_mlp_server(**config: Any) -> Running:
    """zoo:mlp with max batch `MLP_MAX_BATCH` and a long fixed wait (50 ms), so that concurrent requests meet in
    one batch whatever the machine's load; `config` adds ServeConfig fields (e.g. grpc_port=0)."""
    return start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=MLP_MAX_BATCH, max_queue_delay_s=0.05,
                                       adaptive_wait=False, **config))


def mlp_reference() -> Callable[[np.ndarray], np.ndarray]:
    """zoo:mlp's own outputs, computed in the test's process."""
    import torch

    from dlperf.workload import zoo

    model = zoo.get("mlp").build_model().eval()

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(model(torch.from_numpy(x)).numpy())

    return predict


BAD_MLP_INPUTS = [
    ("nope", (1, 64), "FP32", "unknown input 'nope'"),
    ("x", (1, 63), "FP32", "expects [-1, 64]"),
    ("x", (1, 64), "INT64", "expects FP32"),
    ("x", (MLP_MAX_BATCH + 1, 64), "FP32", "above the server's max batch size"),
]
"""(input name, shape, datatype, what the error says) of requests zoo:mlp's server refuses, over any protocol."""
