"""Joining a Ray cluster that uses token authentication by its address: `ray.init(address=...)` sent no token, retried
"Authentication token is missing or incorrect" for 20 s and failed with "Failed to connect to Ray cluster", and
dlperf's advice was to check the address. A cluster started where a token exists (~/.ray/auth_token, which any
local `ray.init` writes) has token authentication on (Ray 2.59 and later). Now dlperf turns token authentication
on for itself where this machine has the token, and says at once what to do where it has none."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLUSTER = """
import sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                      "resources": {"dlperf_timing": 1}})
print(cluster.address, flush=True)
sys.stdin.read()  # until the test closes it
cluster.shutdown()
"""

JOIN = """
import sys
from dlperf.ray.address import token_auth_problem

problem = token_auth_problem(sys.argv[1])
print("problem:", problem, flush=True)
if problem is None:
    import ray

    ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False)
    print("joined:", ray.is_initialized(), flush=True)
    ray.shutdown()
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    return {**env, "HOME": str(home), **extra}


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("ray")
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(16))
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=_env(home, RAY_AUTH_MODE="token"))
    assert proc.stdout is not None and proc.stdin is not None
    address = proc.stdout.readline().strip()
    try:
        assert address, "the cluster did not start"
        yield address, home
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _join(address: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", JOIN, address], capture_output=True, text=True, timeout=120, env=env)
    return done.stdout + done.stderr


def test_the_token_here_is_used_to_join(token_cluster: tuple[str, Path]) -> None:
    address, home = token_cluster
    out = _join(address, _env(home))  # RAY_AUTH_MODE unset: Ray sent no token before
    assert "problem: None" in out and "joined: True" in out, out
    assert "Token authentication is enabled for this Ray cluster" not in out  # Ray's notice of a default, dropped


def test_no_token_here_or_auth_turned_off_is_said_at_once(token_cluster: tuple[str, Path], tmp_path: Path) -> None:
    address, home = token_cluster
    out = _join(address, _env(tmp_path))  # a home without a token
    assert f"problem: the Ray cluster at {address} asks for a token (Ray's token authentication), and this machine " \
           "has none: set RAY_AUTH_TOKEN" in out, out
    out = _join(address, _env(home, RAY_AUTH_MODE="disabled"))
    assert "and RAY_AUTH_MODE is 'disabled' here: unset RAY_AUTH_MODE, or set it to token" in out, out


EXECUTOR = """
from dlperf.ray.trials import RayExecutor

executor = RayExecutor("auto")
print("name:", executor.name, flush=True)
print("lost:", executor._all_nodes_lost(), flush=True)
executor.close()
"""


def test_a_cluster_joined_by_auto_is_recorded_by_its_address_not_as_a_local_instance(
        token_cluster: tuple[str, Path]) -> None:
    """`--executor ray:auto` was recorded as 'ray' (a local instance), and a lost node was "the local Ray instance
    this command started" though it started none: Ray had not been started by the caller here (the test that
    covered it had)."""
    address, home = token_cluster
    done = subprocess.run([sys.executable, "-c", EXECUTOR], capture_output=True, text=True, timeout=120,
                          env=_env(home, RAY_ADDRESS=address))
    out = done.stdout + done.stderr
    assert f"name: ray:{address}" in out, out
    assert "lost: every Ray node that ran trials has left the cluster" in out, out
