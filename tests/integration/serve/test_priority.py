"""Priority levels on a real server, through tritonclient's `priority` argument: a later high-priority request
overtakes queued low-priority ones and fills the batch first; the model config shows the levels; the queue
bound holds per level; a level's own queue policy bounds and times out that level only; a delayed request
waits behind its level's others; a level may ignore a request's own timeout."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dlperf.serve.batcher import LevelPolicy
from dlperf.serve.server import Running
from dlperf.serve.service import ServeConfig

from .helpers import Gate, gated_server, get_text, server_metrics, wait_until

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402


def _input(value: float) -> Any:
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.full((1, 4), value, np.float32))
    return inp


@pytest.fixture
def levels() -> Iterator[tuple[Running, Gate]]:
    with gated_server(ServeConfig(model="gated", port=0, max_batch_size=2, max_queue_delay_s=0.0, instances=1,
                                  priority_levels=2)) as pair:
        yield pair


def _pending(running: Running) -> int:
    return int(server_metrics(running).pending_requests)


def test_a_high_priority_request_overtakes_queued_low_priority_ones(levels: tuple[Running, Gate]) -> None:
    running, gate = levels
    c = httpclient.InferenceServerClient(running.url, concurrency=5)
    first = c.async_infer("gated", [_input(1.0)])
    assert gate.wait_entered()  # the instance holds request 1 at the gate
    # queued one at a time so that their arrival order is known: two without a priority (the default,
    # level 2), then one at level 1, then one asking for level 7 (no such level: the default)
    queued = []
    for n, (value, priority) in enumerate([(2.0, 0), (3.0, 0), (4.0, 1), (5.0, 7)], start=1):
        queued.append(c.async_infer("gated", [_input(value)], priority=priority))
        wait_until(lambda n=n: _pending(running) == n, what=f"{n} queued requests")  # type: ignore[misc]
    gate.open.set()
    results = [float(r.get_result().as_numpy("y")[0, 0]) for r in [first, *queued]]
    assert results == [2.0, 4.0, 6.0, 8.0, 10.0]  # every request got its own answer
    # batches of at most 2: the level-1 request first, joined by the oldest default-level one; then FIFO
    assert gate.firsts == [[1.0], [4.0, 2.0], [3.0, 5.0]]
    c.close()
    # the metrics by level: one answered request at level 1, four at the default level 2 (the one asking
    # for level 7 included); the level-1 request waited less than the level-2 one queued before it and
    # answered in the same batch, so less than all level-2 requests' queue time together
    wait_until(lambda: _by_level(running, "request_duration_seconds_count") == {"1": 1.0, "2": 4.0},
               what="every answer recorded")  # recorded after each reply is sent
    counts = _by_level(running, "queue_duration_seconds_count")
    sums = _by_level(running, "queue_duration_seconds_sum")
    assert counts == {"1": 1.0, "2": 4.0}
    assert 0 < sums["1"] < sums["2"]


def _by_level(running: Running, series: str) -> dict[str, float]:
    """{priority: value} of one dlperf_inference_priority_* series on /metrics."""
    out = {}
    for line in get_text(f"http://{running.url}/metrics").splitlines():
        if line.startswith(f"dlperf_inference_priority_{series}{{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('priority="')[1].split('"')[0]] = float(value)
    return out


def test_priority_levels_show_in_the_model_config_and_a_bad_priority_is_400(levels: tuple[Running, Gate]) -> None:
    running, gate = levels
    gate.open.set()
    c = httpclient.InferenceServerClient(running.url)
    batching = c.get_model_config("gated")["dynamic_batching"]
    assert batching["priority_levels"] == 2 and batching["default_priority_level"] == 2
    with pytest.raises(InferenceServerException) as info:
        c.infer("gated", [_input(1.0)], priority=-1)
    assert info.value.status() == "400"
    assert "parameter 'priority' must be an integer from 0 to 2**64-1" in info.value.message()
    assert float(c.infer("gated", [_input(1.0)], priority=1).as_numpy("y")[0, 0]) == 2.0


def test_the_queue_bound_holds_per_level_so_a_flood_does_not_lock_out_high_priority() -> None:
    config = ServeConfig(model="gated", port=0, max_batch_size=1, max_queue_size=1, instances=1, priority_levels=2)
    with gated_server(config) as (running, gate):
        c = httpclient.InferenceServerClient(running.url, concurrency=3)
        first = c.async_infer("gated", [_input(1.0)])
        assert gate.wait_entered()
        low = c.async_infer("gated", [_input(2.0)])
        wait_until(lambda: _pending(running) == 1, what="the queued default-level request")
        with pytest.raises(InferenceServerException) as info:  # level 2 is full
            httpclient.InferenceServerClient(running.url).infer("gated", [_input(3.0)])
        assert info.value.status() == "503"
        assert "1 requests are queued at priority level 2" in info.value.message()
        high = c.async_infer("gated", [_input(4.0)], priority=1)  # level 1 has room
        wait_until(lambda: _pending(running) == 2, what="the queued priority-1 request")
        gate.open.set()
        assert [float(r.get_result().as_numpy("y")[0, 0]) for r in (first, low, high)] == [2.0, 4.0, 8.0]
        assert gate.firsts == [[1.0], [4.0], [2.0]]
        assert server_metrics(running).failure_total["REJECTED"] == 1
        c.close()


def test_a_level_s_own_queue_policy_bounds_and_times_out_that_level_only() -> None:
    """Level 1 queues up to 2 requests for at most 1.5 s; level 2 keeps --max-queue-size 1 and no timeout."""
    config = ServeConfig(model="gated", port=0, max_batch_size=1, max_queue_size=1, instances=1, priority_levels=2,
                         priority_queue_policy=(LevelPolicy(1, max_queue_size=2, timeout_s=1.5),))
    with gated_server(config) as (running, gate):
        c = httpclient.InferenceServerClient(running.url, concurrency=4)
        batching = c.get_model_config("gated")["dynamic_batching"]
        assert batching["priority_queue_policy"] == {"1": {
            "max_queue_size": 2, "default_timeout_microseconds": 1_500_000, "timeout_action": "REJECT",
            "allow_timeout_override": True}}
        assert batching["default_queue_policy"]["max_queue_size"] == 1
        capacity = re.search(r'^dlperf_inference_queue_capacity\{[^}]*\} (\S+)$',
                             get_text(f"http://{running.url}/metrics"), re.M)
        assert capacity is not None and float(capacity.group(1)) == 3.0  # 2 + 1: what pending can reach

        first = c.async_infer("gated", [_input(1.0)])
        assert gate.wait_entered()
        low = c.async_infer("gated", [_input(2.0)])
        highs = [c.async_infer("gated", [_input(v)], priority=1) for v in (3.0, 4.0)]
        wait_until(lambda: _pending(running) == 3, what="one level-2 and two level-1 requests queued")
        with pytest.raises(InferenceServerException) as info:  # level 1 is full at its own bound
            httpclient.InferenceServerClient(running.url).infer("gated", [_input(5.0)], priority=1)
        assert info.value.status() == "503"
        assert "--priority-queue-policy 1:max_queue_size=2" in info.value.message()
        # level 1's requests expire after 1.5 s in the queue; level 2's has no timeout and waits on
        for high in highs:
            with pytest.raises(InferenceServerException) as info:
                high.get_result()
            assert info.value.status() == "503" and "Request timeout expired" in info.value.message()
        assert _pending(running) == 1
        gate.open.set()
        assert [float(r.get_result().as_numpy("y")[0, 0]) for r in (first, low)] == [2.0, 4.0]
        failures = server_metrics(running).failure_total
        assert failures["REJECTED"] == 1 and failures["TIMEOUT"] == 2
        c.close()


def test_a_delayed_request_is_served_after_its_level_s_others_and_a_level_can_ignore_request_timeouts() -> None:
    """Timeouts delay (server-wide); level 1 times out after 2 s; level 2 rejects on timeout (after 30 s) and
    ignores a request's own shorter timeout."""
    config = ServeConfig(model="gated", port=0, max_batch_size=1, instances=1, priority_levels=2, timeout_s=30.0,
                         timeout_action="delay",
                         priority_queue_policy=(LevelPolicy(1, timeout_s=2.0),
                                                LevelPolicy(2, timeout_action="reject", allow_timeout_override=False)))
    with gated_server(config) as (running, gate):
        c = httpclient.InferenceServerClient(running.url, concurrency=4)
        batching = c.get_model_config("gated")["dynamic_batching"]
        assert batching["default_queue_policy"]["timeout_action"] == "DELAY"
        assert batching["priority_queue_policy"] == {
            "1": {"max_queue_size": 0, "default_timeout_microseconds": 2_000_000, "timeout_action": "DELAY",
                  "allow_timeout_override": True},
            "2": {"max_queue_size": 0, "default_timeout_microseconds": 30_000_000, "timeout_action": "REJECT",
                  "allow_timeout_override": False}}
        first = c.async_infer("gated", [_input(1.0)])
        assert gate.wait_entered()
        late = c.async_infer("gated", [_input(2.0)], priority=1)
        wait_until(lambda: _pending(running) == 1, what="the first level-1 request queued")
        time.sleep(2.2)  # past its 2 s: delayed, still queued, not failed
        assert _pending(running) == 1
        fresh = c.async_infer("gated", [_input(3.0)], priority=1)
        # level 2 ignores the request's 1 ms timeout: it keeps the level's 30 s and is served
        low = c.async_infer("gated", [_input(4.0)], priority=2, timeout=1000)
        wait_until(lambda: _pending(running) == 3, what="three requests queued")
        time.sleep(0.1)  # a request 1 ms timeout, were it used, would have failed by now
        assert _pending(running) == 3
        gate.open.set()
        results = [float(r.get_result().as_numpy("y")[0, 0]) for r in (first, late, fresh, low)]
        assert results == [2.0, 4.0, 6.0, 8.0]
        # level 1's request still in time first, then level 1's delayed one, then level 2
        assert gate.firsts == [[1.0], [3.0], [2.0], [4.0]]
        counted = server_metrics(running)
        assert counted.success_total == 4 and counted.failure_total["TIMEOUT"] == 0
        c.close()


def test_each_level_s_queue_is_exported_against_its_own_bound_for_the_saturation_alert() -> None:
    """Level 1 holds 2, level 2 10: level 1 full (rejecting) was 2 of 12 in the all-levels gauges that
    DlperfQueueSaturated compared, far from its 80%; the per-level gauges show it at its bound."""
    config = ServeConfig(model="gated", port=0, max_batch_size=1, max_queue_size=10, instances=1, priority_levels=2,
                         priority_queue_policy=(LevelPolicy(1, max_queue_size=2),))
    with gated_server(config) as (running, gate):
        c = httpclient.InferenceServerClient(running.url, concurrency=3)
        first = c.async_infer("gated", [_input(1.0)])
        assert gate.wait_entered()
        highs = [c.async_infer("gated", [_input(v)], priority=1) for v in (2.0, 3.0)]
        wait_until(lambda: _pending(running) == 2, what="two level-1 requests queued")
        with pytest.raises(InferenceServerException):  # level 1 is full
            httpclient.InferenceServerClient(running.url).infer("gated", [_input(4.0)], priority=1)
        text = get_text(f"http://{running.url}/metrics")

        def gauge(name: str, level: str | None = None) -> float:
            labels = r'\{[^}]*\}' if level is None else r'\{[^}]*priority="' + level + r'"[^}]*\}'
            found = re.search(rf"^{name}{labels} (\S+)$", text, re.M)
            assert found is not None, name
            return float(found.group(1))

        assert gauge("dlperf_inference_pending_requests") / gauge("dlperf_inference_queue_capacity") < 0.8
        pending, capacity = "dlperf_inference_priority_pending_requests", "dlperf_inference_priority_queue_capacity"
        assert gauge(pending, "1") == 2 and gauge(capacity, "1") == 2  # full: the alert's per-level ratio is 1
        assert gauge(pending, "2") == 0 and gauge(capacity, "2") == 10
        gate.open.set()
        assert [float(r.get_result().as_numpy("y")[0, 0]) for r in (first, *highs)] == [2.0, 4.0, 6.0]
        c.close()
