"""A local Ray instance that dlperf starts keeps Ray's token authentication, without Ray's warning at every start
("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = """
import grpc, ray
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
from dlperf.ray.trials import RayExecutor

executor = RayExecutor(num_cpus=1)
gcs = ray.get_runtime_context().gcs_address
with grpc.insecure_channel(gcs) as channel:  # a request without the token
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(gcs_service_pb2.GetClusterIdRequest(),
                                                                          timeout=10)
        print("answer: OK")
    except grpc.RpcError as exc:
        print("answer:", exc.code().name)
executor.close()
"""


@pytest.mark.parametrize("mode", [None, "disabled"])
def test_a_local_instance_keeps_token_auth_without_rays_warning(mode: str | None) -> None:
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    if mode is not None:
        env["RAY_AUTH_MODE"] = mode
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert "Token authentication is enabled" not in done.stderr, done.stderr
    # a user's own mode is Ray's to follow: disabled stays disabled (Ray warns of that one, and should)
    expected = "answer: UNAUTHENTICATED" if mode is None else "answer: OK"
    assert expected in done.stdout, done.stdout + done.stderr
