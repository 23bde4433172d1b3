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


def test_metrics_through_the_proxy_name_the_replica_that_answered(server: Any) -> None:
    """/metrics through Ray Serve's proxy comes from whichever replica it picks: every sample now names that
    replica (as `replica_stats` names it), and its counters are that replica's."""
    import json
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from dlperf.serve.metrics import PREFIX

    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]})
    for _ in range(3):
        request = urllib.request.Request(f"http://127.0.0.1:{server.port}/v2/models/mlp/infer", body.encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    names = {s.replica: s for s in server.replica_stats()}
    assert sum(s.requests for s in names.values()) >= 3
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as response:
        text = response.read().decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert samples and {s.labels.get("replica") for s in samples} <= set(names), names
    (answered,) = {s.labels["replica"] for s in samples}
    served = sum(s.value for s in samples if s.name == PREFIX + "request_success_total")
    assert served == next(s for s in server.replica_stats() if s.replica == answered).requests
