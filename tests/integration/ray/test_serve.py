"""`dlperf serve --ray`: two replicas on the two-node cluster pass the same tritonclient tests as `dlperf serve`.

How requests spread over the replicas, and the CLI path, are tested in test_serve_cli.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dlperf.serve.service import ServeConfig

from ..serve import test_server_tritonclient as single
from ..serve.helpers import free_port

# The single-process server's protocol tests, collected here again against the Ray Serve deployment. Not
# reused: the statistics and metrics tests (each replica counts its own requests; test_serve_cli.py reads
# each replica's statistics through Ray instead) and those that start their own single-process server.
test_health_and_metadata = single.test_health_and_metadata
test_binary_and_json_inference_give_the_models_outputs = single.test_binary_and_json_inference_give_the_models_outputs
test_gzip_and_deflate_both_ways = single.test_gzip_and_deflate_both_ways
test_bad_requests_are_400_with_an_error_message = single.test_bad_requests_are_400_with_an_error_message
test_unknown_model_and_version_are_404 = single.test_unknown_model_and_version_are_404
test_json_request_without_content_type_from_plain_http = single.test_json_request_without_content_type_from_plain_http
reference = single.reference
httpclient = single.httpclient
MAX_BATCH = single.MAX_BATCH

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(ray_cluster: Any) -> Iterator[Any]:
    from dlperf.ray.serve import RayServeOptions, start_on_ray

    # the same settings as the single-process server's tests
    config = ServeConfig(model="zoo:mlp", port=free_port(), max_batch_size=MAX_BATCH, max_queue_delay_s=0.05,
                         adaptive_wait=False)
    running = start_on_ray(config, RayServeOptions(replicas=2))
    try:
        yield running
    finally:
        running.stop()


def test_two_replicas_run_one_on_each_node(server: Any, ray_cluster: Any) -> None:
    import ray

    assert server.replicas() == 2
    stats = server.replica_stats()
    assert len(stats) == 2
    # each node offers one CPU and a replica asks for one: the deployment spans the cluster
    assert {s.node_id for s in stats} == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len({s.pid for s in stats}) == 2
