"""`dlperf serve --ray`: two replicas on the two-node cluster pass the same tritonclient tests as `dlperf serve`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.service import ServeConfig

from ..serve import test_server_tritonclient as single
from ..serve.helpers import free_port

# The single-process server's protocol tests, collected here again against the Ray Serve deployment. Not
# reused: the statistics and metrics tests (each replica counts its own requests) and those that start
# their own single-process server.
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


def test_requests_spread_over_both_replicas_each_batching_its_share(server: Any, reference: Any) -> None:
    assert server.replicas() == 2
    n = 24
    c = httpclient.InferenceServerClient(server.url, concurrency=n)
    before = c.get_inference_statistics("mlp")["model_stats"][0]["inference_count"]
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1 + i % 2, 64)).astype(np.float32) for i in range(n)]
    results = [p.get_result() for p in [c.async_infer("mlp", [single._input(x)], request_id=str(i))
                                        for i, x in enumerate(xs)]]
    for i, (x, r) in enumerate(zip(xs, results, strict=True)):
        assert r.get_response()["id"] == str(i)
        np.testing.assert_allclose(r.as_numpy("logits"), reference(x), rtol=1e-5, atol=1e-6)
    # each replica keeps its own statistics: a stats request lands on one of them, which saw only its share
    counted = c.get_inference_statistics("mlp")["model_stats"][0]["inference_count"] - before
    assert 0 <= counted < sum(x.shape[0] for x in xs)
    c.close()
