"""SIGTERM to a `dlperf serve` subprocess: readiness turns false, in-flight requests finish, exit code 0."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.serve.metrics import parse_variant_metrics

from .helpers import free_port, get_text, http_status, wait_until

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

WORKLOAD = Path(__file__).with_name("slow_workload.py")


def _input(seconds: float) -> Any:
    x = np.full((1, 2), seconds, np.float32)
    inp = httpclient.InferInput("x", [1, 2], "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_sigterm_drains_in_flight_requests_then_exits_cleanly(tmp_path: Path) -> None:
    port = free_port()
    base = f"127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf.cli.main", "serve", f"{WORKLOAD}:workload", "--port", str(port),
         "--max-batch-size", "1", "--exit-timeout-s", "30"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 200, 90, "the server to be ready")
        c = httpclient.InferenceServerClient(base, concurrency=3)
        in_flight = [c.async_infer("slow", [_input(0.6)]) for _ in range(3)]

        def queued() -> float:
            return parse_variant_metrics(get_text(f"http://{base}/metrics"))["default"].pending_requests

        wait_until(lambda: queued() == 2, 30, "one request executing and two queued")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: http_status(f"http://{base}/v2/health/ready") == 400, 10, "readiness to turn false")
        with pytest.raises(InferenceServerException) as info:
            httpclient.InferenceServerClient(base).infer("slow", [_input(0.0)])
        assert info.value.status() == "503"
        results = [r.get_result().as_numpy("y") for r in in_flight]
        for y in results:
            np.testing.assert_allclose(y, np.full((1, 2), 1.6, np.float32))
        c.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
