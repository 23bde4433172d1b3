"""What dlperf asks of a Ray address before `ray.init`: which addresses it checks, whether one answers TCP, whether
it is a Ray GCS (one gRPC request, here to a fake GCS in this process) and whether that GCS asks for a token."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import pytest

from dlperf.ray import address
from dlperf.ray.address import (
    TOKEN_AUTH_LOGGER,
    cluster_address,
    joined_by_auto,
    token_auth_notice_dropped,
    token_auth_problem,
    unreachable,
    why_not_gcs,
    why_unreachable,
)

grpc = pytest.importorskip("grpc")
pytestmark = pytest.mark.unit


@pytest.fixture
def gcs() -> Iterator[Callable[[Any], str]]:
    """`gcs(code)`: HOST:PORT of a gRPC server that answers Ray's GetClusterId as a GCS does (code None: the reply),
    or fails it with `code` (UNAUTHENTICATED: a GCS with token authentication)."""
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    servers = []

    def start(code: Any) -> str:
        class Gcs(gcs_service_pb2_grpc.NodeInfoGcsServiceServicer):
            def GetClusterId(self, request: Any, context: Any) -> Any:  # gRPC's name
                if code is not None:
                    context.abort(code, "Authentication token is missing or incorrect")
                return gcs_service_pb2.GetClusterIdReply()  # type: ignore[attr-defined]

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        gcs_service_pb2_grpc.add_NodeInfoGcsServiceServicer_to_server(Gcs(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0)


def _closed_port() -> int:
    with socket.socket() as sock:  # free a moment ago: nothing answers there
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_only_host_port_addresses_are_checked() -> None:
    for left_to_ray in ("auto", "local", "ray://127.0.0.1:1", "127.0.0.1:http", "6379"):
        assert why_unreachable(left_to_ray, timeout_s=1.0) is None
        assert address._gcs_answer(left_to_ray) is None


def test_an_ipv6_address_in_brackets_is_reached() -> None:
    with socket.socket(socket.AF_INET6) as sock:
        try:
            sock.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        sock.listen()
        assert why_unreachable(f"[::1]:{sock.getsockname()[1]}", timeout_s=5.0) is None
    assert why_unreachable(f"[::1]:{_closed_port()}", timeout_s=5.0) == "Connection refused"


def test_a_gcs_answers_the_probe_and_nothing_else_is_asked_under_tls(gcs: Callable[[Any], str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    at = gcs(None)
    assert address._gcs_answer(at) == (grpc.StatusCode.OK, "")
    assert why_not_gcs(at) is None and unreachable(at) is None
    refused = address._gcs_answer(f"127.0.0.1:{_closed_port()}")  # at once, not given up on at its deadline
    assert refused is not None and refused[0] == grpc.StatusCode.UNAVAILABLE
    monkeypatch.setenv("RAY_USE_TLS", " True ")  # Ray reads it so
    assert address._gcs_answer(at) is None


@pytest.mark.parametrize(("code", "details", "why"), [
    ("UNIMPLEMENTED", "Method not found!", "a gRPC server answers there, but not a Ray GCS (Ray's client server, on "
     "port 10001, is one: give it as ray://HOST:10001)"),
    ("UNAVAILABLE", "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:8265: Trying to "
     "connect an http1.x server (HTTP/2 expected)", "an HTTP server answers there, not a Ray GCS (Ray's dashboard, "
     "on port 8265, is one; the GCS listens on 6379 by default): Trying to connect an http1.x server (HTTP/2 "
     "expected)"),
    ("UNAVAILABLE", "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:22: Socket closed",
     "something answers TCP there, but not a Ray GCS: Socket closed"),
    ("UNAUTHENTICATED", "Authentication token is missing or incorrect", None),  # a GCS, with token authentication
    ("DEADLINE_EXCEEDED", "Deadline Exceeded", None),  # says nothing in time: left to Ray
])
def test_what_the_probes_answer_says_of_the_address(monkeypatch: pytest.MonkeyPatch, code: str, details: str,
                                                    why: str | None) -> None:
    monkeypatch.setattr(address, "_gcs_answer", lambda at, timeout_s=None: (getattr(grpc.StatusCode, code), details))
    assert why_not_gcs("10.0.0.5:6379") == why


def test_auto_is_checked_at_the_ray_address_it_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(address, "why_not_gcs", lambda at: f"not a GCS: {at}")
    monkeypatch.setattr(address, "why_unreachable", lambda at, timeout_s: None)
    monkeypatch.setenv("RAY_ADDRESS", " 10.0.0.5:6379 ")
    assert joined_by_auto(" AUTO ") == "10.0.0.5:6379"
    assert unreachable("auto") == ("10.0.0.5:6379 (RAY_ADDRESS, which auto joins)", "not a GCS: 10.0.0.5:6379")
    assert unreachable("10.0.0.9:6379") == ("10.0.0.9:6379", "not a GCS: 10.0.0.9:6379")
    for nothing_named in ("auto", "LOCAL", ""):
        monkeypatch.setenv("RAY_ADDRESS", nothing_named)
        assert joined_by_auto("auto") is None
    assert joined_by_auto("10.0.0.9:6379") is None


def test_local_is_a_new_local_instance_however_it_is_written() -> None:
    assert cluster_address(" Local ") is None and cluster_address(None) is None
    assert cluster_address("auto") == "auto" and cluster_address("10.0.0.5:6379") == "10.0.0.5:6379"


@pytest.fixture
def token_here(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether Ray finds a token on this machine (`maybe_enable_token_auth_if_token_available`), as a list to set."""
    from ray._private.authentication import authentication_token_setup

    found = [False]
    monkeypatch.setattr(authentication_token_setup, "maybe_enable_token_auth_if_token_available",
                        lambda warn_if_disabled: found[0])
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    return found


def test_a_cluster_asking_for_a_token_is_joined_with_the_one_here_or_refused_saying_how_to_get_one(
        gcs: Callable[[Any], str], token_here: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    at = gcs(grpc.StatusCode.UNAUTHENTICATED)
    problem = token_auth_problem(at)
    assert problem is not None and problem.startswith(
        f"the Ray cluster at {at} asks for a token (Ray's token authentication), and this machine has none: set "
        "RAY_AUTH_TOKEN to the cluster's token")
    monkeypatch.setenv("RAY_ADDRESS", at)
    assert token_auth_problem("auto") == problem  # auto joins it
    token_here[0] = True
    assert token_auth_problem(at) is None


def test_a_cluster_without_token_authentication_asks_nothing(gcs: Callable[[Any], str],
                                                             token_here: list[bool]) -> None:
    assert token_auth_problem(gcs(None)) is None


@pytest.mark.parametrize(("mode", "problem"), [
    ("disabled", "RAY_AUTH_MODE is 'disabled' here: unset RAY_AUTH_MODE, or set it to token"),
    (" Token ", None),  # Ray loads the token itself
    ("token", None),
])
def test_ray_auth_mode_here_decides_for_a_cluster_asking_for_a_token(
        gcs: Callable[[Any], str], token_here: list[bool], monkeypatch: pytest.MonkeyPatch, mode: str,
        problem: str | None) -> None:
    at = gcs(grpc.StatusCode.UNAUTHENTICATED)
    monkeypatch.setenv("RAY_AUTH_MODE", mode)
    said = token_auth_problem(at)
    assert said == problem or (problem is not None and said is not None and said.endswith(problem)), said


def test_rays_token_authentication_notice_is_dropped_while_a_local_instance_starts(
        caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger(TOKEN_AUTH_LOGGER)
    notice = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out."
    with caplog.at_level(logging.INFO, logger=TOKEN_AUTH_LOGGER):
        with token_auth_notice_dropped():
            log.info(notice)
            log.info("Generated a new authentication token and saved it to ~/.ray/auth_token")
        log.info(notice)
    assert [r.getMessage() for r in caplog.records] == [
        "Generated a new authentication token and saved it to ~/.ray/auth_token", notice]
