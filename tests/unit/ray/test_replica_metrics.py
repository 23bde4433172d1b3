"""A Ray Serve replica's /metrics carries the replica's name on every sample (the proxy picks the replica)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dlperf.ray.serve import label_exposition, with_replica_label
from dlperf.serve.app import create_app
from dlperf.serve.metrics import parse_variant_metrics
from dlperf.serve.service import ServeConfig, build_state

pytestmark = pytest.mark.unit


def _get(app: Any, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
         root_path: str = "") -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": method, "path": root_path + path, "root_path": root_path,
             "query_string": b"", "headers": [(k.encode(), v.encode()) for k, v in
                                                {"content-length": str(len(body)), **(headers or {})}.items()]}
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return (start["status"], list(start.get("headers", [])),
            b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def _samples(text: str) -> list[Any]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_every_sample_of_a_replicas_metrics_names_the_replica_and_keeps_its_value() -> None:
    """Through Ray Serve's proxy, /metrics came from whichever replica answered, with nothing to tell which: one series
    whose counters jumped between replicas. Each replica's page now labels every sample with its name."""
    state = build_state(ServeConfig(model="zoo:mlp", port=0, token="s3cret"))
    try:
        app = with_replica_label(create_app(state), 'r1"x')
        auth = {"authorization": "Bearer s3cret"}
        request = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
                                          "data": [0.0] * 64}]}).encode()
        status, _, _ = _get(app, "POST", "/v2/models/mlp/infer", request,
                            {**auth, "content-type": "application/json"})
        assert status == 200
        plain = state.metrics.exposition()[0].decode()
        status, headers, body = _get(app, "GET", "/metrics", headers=auth, root_path="/dlperf")
        lengths = [v for k, v in headers if k.lower() == b"content-length"]
        assert status == 200 and lengths == [str(len(body)).encode()]  # the labelled body's, not the page's too
        labelled = _samples(body.decode())
        before = _samples(plain)
        assert len(labelled) == len(before) > 50
        for old, new in zip(before, labelled, strict=True):
            assert new.name == old.name and new.labels == {**old.labels, "replica": 'r1"x'}
            if not old.name.startswith("process_"):  # the process's own counters move between the two reads
                assert new.value == old.value
        # dlperf's own parser still reads the replica's counters
        metrics = parse_variant_metrics(body.decode())["default"]
        assert metrics.success_total == 1 and metrics.inference_count_total == 1
        # what the server refuses is passed on as it is
        status, _, body = _get(app, "GET", "/metrics")
        assert status == 401 and "replica" not in body.decode()
        # and every other route is the server's
        status, _, body = _get(app, "GET", "/v2/models/mlp/stats", headers=auth)
        assert status == 200 and "replica" not in body.decode()
    finally:
        state.close(5.0)


def test_a_sample_without_labels_gets_the_replica_label_alone() -> None:
    page = b'# HELP up x\n# TYPE up gauge\nup 1.0\nempty{} 2.0\nwith{a="b{ }"} 3.0 123\nspaced{ } 4.0\ntab\t5.0\n'
    labelled = label_exposition(page, "r2").decode()
    assert labelled.splitlines()[2:] == [
        'up{replica="r2"} 1.0', 'empty{replica="r2"} 2.0', 'with{replica="r2",a="b{ }"} 3.0 123',
        'spaced{replica="r2" } 4.0', 'tab{replica="r2"}\t5.0']
    assert labelled.endswith("5.0\n")  # the format's last line ends with a line feed, as the page's did


def test_a_replica_name_is_escaped_as_a_label_value() -> None:
    """A backslash, a double quote and a line feed in a label value are written \\\\, \\" and \\n (format 0.0.4)."""
    labelled = label_exposition(b"up 1.0\n", 'a\\b"c\nd').decode()
    assert labelled == 'up{replica="a\\\\b\\"c\\nd"} 1.0\n'
    (sample,) = _samples(labelled)
    assert sample.labels == {"replica": 'a\\b"c\nd'}


def test_a_replicas_routing_stats_count_its_requests_items_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `replica_stats` reads of each replica: requests that succeeded and failed, the items they carried, and
    the batches the model ran."""
    import ray

    from dlperf.ray.serve import _Replica

    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node-1"))
    state = build_state(ServeConfig(model="zoo:mlp", port=0, max_batch_size=4))
    replica: Any = _Replica.__new__(_Replica)  # the state `dlperf serve` builds, without Ray's drain watch
    replica.config, replica.state = state.config, state
    try:
        app = create_app(state)
        for rows, cols in ((3, 64), (1, 64), (1, 5)):  # two requests of 3 and 1 items, and one of the wrong shape
            request = json.dumps({"inputs": [{"name": "x", "shape": [rows, cols], "datatype": "FP32",
                                              "data": [0.0] * (rows * cols)}]}).encode()
            status, _, _ = _get(app, "POST", "/v2/models/mlp/infer", request, {"content-type": "application/json"})
            assert status == (200 if cols == 64 else 400)
        stats = replica.record_routing_stats()
        assert {k: v for k, v in stats.items() if k not in ("models", "pid")} == {
            "node_id": "node-1", "in_flight": 0, "pending": 0, "requests": 2, "failed": 1, "items": 4, "batches": 2}
        assert stats["models"]["mlp"]["max_batch_size"] == 4
    finally:
        replica.state = None  # closed here, not again when the replica is collected
        state.close(5.0)


WORKLOAD = """
import json
import torch

SCALE = json.load(open("settings.json"))["scale"]  # beside the workload, opened relative to the folder served from


def model():
    return torch.nn.Linear(4, 2).eval()


def inputs(batch_size):
    return (torch.randn(batch_size, 4) * SCALE,)
"""


def test_a_replica_runs_in_the_folder_dlperf_serve_ran_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica runs in its raylet's folder (where `ray start` ran): `dlperf serve wl.py --ray --ray-address auto` from
    the workload's folder failed every replica with "workload file 'wl.py' does not exist", as would a model opening a
    file relative to it. The single-process server runs in the folder it was started in, and so does a replica now."""
    from dlperf.ray import serve
    from dlperf.ray.serve import _Replica

    project, raylet = tmp_path / "project", tmp_path / "raylet"
    project.mkdir()
    raylet.mkdir()
    (project / "wl.py").write_text(WORKLOAD)
    (project / "settings.json").write_text('{"scale": 2.0}')
    monkeypatch.chdir(raylet)  # restored after the test
    monkeypatch.setattr(serve, "_drain_when_asked", lambda state: None)  # no Ray here to ask
    replica = _Replica(ServeConfig(model="wl.py", port=0), cwd=str(project))
    try:
        assert Path.cwd() == project and replica.state.ready
    finally:
        replica.state.close(5.0)
    # the driver binds its own folder to every replica
    bound: list[tuple[Any, ...]] = []
    deployment = SimpleNamespace(bind=lambda *args: bound.append(args))
    monkeypatch.setattr(serve, "_serve", lambda: SimpleNamespace(ingress=lambda: lambda cls: cls,
                                                                 deployment=lambda cls, **options: deployment))
    monkeypatch.chdir(project)
    config = ServeConfig(model="wl.py", port=8000)
    serve.build_application(config, serve.RayServeOptions())
    assert bound == [(config, str(project))]
