"""Each replica's statistics, read through Ray, while some replicas of the deployment cannot start yet."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from dlperf.serve.service import ServeConfig

from ..serve.helpers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_replicas_waiting_for_a_cpu_are_left_out_of_the_statistics(ray_cluster: Any) -> None:
    """An autoscaled replica the cluster has no CPU for waits in PENDING_CREATION and never answers: asking it held
    `replica_stats` to its timeout, then failed it ('this Ray version may name or call replicas differently'), and
    `dlperf serve --ray` took its whole --exit-timeout-s to stop (36 s instead of 6 here, --autoscale 1:4 on 2 CPUs).
    Here three fixed replicas on the two-CPU cluster: two run, one waits."""
    from ray import serve
    from ray.serve.api import _run

    from dlperf.ray.serve import APP_NAME, RayServeOptions, build_application, deploy_status, replica_stats

    config = ServeConfig(model="zoo:mlp", port=free_port())
    serve.start(http_options={"host": config.host, "port": config.port})
    _run(build_application(config, RayServeOptions(replicas=3)), _blocking=False, name=APP_NAME, route_prefix="/")
    try:
        deadline = time.monotonic() + 180
        while not deploy_status().startswith("2 of 3 replicas running"):
            assert time.monotonic() < deadline, deploy_status()
            time.sleep(0.5)
        stats = replica_stats(timeout_s=20.0)
        assert len(stats) == 2 and len({s.pid for s in stats}) == 2, stats
        assert all(s.requests == 0 and s.in_flight == 0 and "mlp" in s.models for s in stats), stats
        assert deploy_status().startswith("2 of 3 replicas running")  # the third still waits: it was left out
    finally:
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        with contextlib.suppress(Exception):
            serve.shutdown()
