"""Whether an address that answers TCP is a Ray GCS, asked with one GCS request before `ray.init`: an HTTP server there
(Ray's dashboard port, `python -m http.server`) held `ray.init` for minutes, retrying it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from dlperf.ray.address import why_not_gcs

from .refusal import refusal_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def http_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_server_is_not_a_gcs(http_server: str) -> None:
    why = why_not_gcs(http_server)
    assert why is not None and why.startswith("an HTTP server answers there, not a Ray GCS"), why
    assert "Failed parsing HTTP/2" in why, why


def test_a_grpc_server_of_another_service_is_not_a_gcs() -> None:
    grpc = pytest.importorskip("grpc")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        why = why_not_gcs(f"127.0.0.1:{port}")
    finally:
        server.stop(0)
    assert why is not None and why.startswith("a gRPC server answers there, but not a Ray GCS"), why


def test_a_ray_cluster_is_a_gcs(ray_cluster: Any) -> None:
    assert why_not_gcs(ray_cluster.address) is None


def test_the_cli_refuses_an_http_server_in_one_line_without_ray(tmp_path: Path, http_server: str) -> None:
    """`ray.init` retried it for minutes ('Failed to connect to GCS at address ... within 5 seconds', again and
    again)."""
    line = refusal_line(http_server, tmp_path)
    assert line.startswith(f"error: --executor ray:{http_server}: cannot reach Ray at {http_server}: an HTTP "
                           "server answers there, not a Ray GCS"), line
    assert "plain ray for a new local instance" in line
