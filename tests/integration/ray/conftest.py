"""A local Ray cluster of two nodes on this machine (one CPU and one timing slot each), shared by the module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dlperf.ray.trials import TIMING_RESOURCE

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "resources": {TIMING_RESOURCE: 1}, "object_store_memory": 80 * 2**20}
"""Each node of the test cluster: one CPU, one timing slot (a test that removes a node adds one like it back)."""


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[Any]:
    pytest.importorskip("ray")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    cluster.add_node(**NODE_ARGS)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
