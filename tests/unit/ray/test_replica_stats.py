"""`replica_stats`: each running replica's counters, asked of its actor through Ray, here against a fake cluster whose
replicas run, load their model, wait for a CPU, stop, or do not answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dlperf.errors import ServingError
from dlperf.ray import serve
from dlperf.ray.serve import REPLICA_ACTOR_PREFIX, STILL_STARTING, ReplicaStats, replica_stats

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.unit

P = REPLICA_ACTOR_PREFIX


def _raw(node: str, pid: int, in_flight: int, pending: int, requests: int, failed: int, items: int,
         batches: int) -> dict[str, Any]:
    return {"models": {"mlp": {"max_batch_size": 8}}, "node_id": node, "pid": pid, "in_flight": in_flight,
            "pending": pending, "requests": requests, "failed": failed, "items": items, "batches": batches}


class _Cluster:
    """Ray as `replica_stats` sees it: named actors, which of them are ALIVE, and what each replica answers. Every
    answer read takes 5 s of a fake clock."""

    def __init__(self, answers: dict[str, Any], alive: set[str], others: list[dict[str, str]]) -> None:
        self.answers = answers
        self.alive = alive
        self.others = others
        self.now = 1000.0
        self.reads: list[tuple[str, float]] = []
        """(replica actor, the timeout it was read with), in order."""

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from ray._private import state

        names = [{"name": n, "namespace": "serve"} for n in self.answers] + self.others
        monkeypatch.setattr(ray.util, "list_named_actors", lambda all_namespaces: names)
        monkeypatch.setattr(state, "actors", lambda actor_state_name: {
            i: {"Name": n} for i, n in enumerate(sorted(self.alive))} if actor_state_name == "ALIVE" else {})
        monkeypatch.setattr(ray, "get_actor", self.get_actor)
        monkeypatch.setattr(ray, "get", self.get)
        monkeypatch.setattr(serve, "time", SimpleNamespace(monotonic=lambda: self.now))

    def get_actor(self, name: str, namespace: str) -> Any:
        if namespace != "serve" or name not in self.answers:
            raise ValueError(f"Failed to look up actor with name '{name}'")
        return SimpleNamespace(record_routing_stats=SimpleNamespace(remote=lambda: name))

    def get(self, ref: str, timeout: float) -> Any:
        self.reads.append((ref, timeout))
        self.now += 5.0
        answer = self.answers[ref]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_running_replicas_report_and_loading_waiting_or_stopped_ones_are_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {P + "b": _raw("node-b", 22, 0, 0, 7, 0, 7, 7),
               P + "a": _raw("node-a", 11, 2, 1, 5, 1, 9, 4),
               P + "gone": ray.exceptions.RayActorError(),  # scaled down after it was listed
               P + "loading": RuntimeError(f"{STILL_STARTING} the replica is used"),  # still building its server
               P + "waiting": AssertionError("a replica waiting for a CPU is never asked: it never answers")}
    cluster = _Cluster(answers, alive={P + "a", P + "b", P + "gone", P + "loading"},
                       others=[{"name": "SERVE_CONTROLLER_ACTOR", "namespace": "serve"},
                               {"name": "dlperf-control", "namespace": "dlperf"}])
    cluster.install(monkeypatch)
    stats = replica_stats(timeout_s=30.0)
    assert stats == [ReplicaStats("a", "node-a", 11, 2, 1, 5, 1, 9, 4, {"mlp": {"max_batch_size": 8}}),
                     ReplicaStats("b", "node-b", 22, 0, 0, 7, 0, 7, 7, {"mlp": {"max_batch_size": 8}})]
    # asked all at once, read in turn within one deadline: each read gets what is left of the 30 s
    assert cluster.reads == [(P + "a", 30.0), (P + "b", 25.0), (P + "gone", 20.0), (P + "loading", 15.0)]


def test_a_replica_that_does_not_answer_in_time_fails_the_statistics_saying_which(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster({P + "a": _raw("n", 1, 0, 0, 0, 0, 0, 0), P + "stuck": ray.exceptions.GetTimeoutError("x")},
                       alive={P + "a", P + "stuck"}, others=[])
    cluster.install(monkeypatch)
    with pytest.raises(ServingError, match=f"Ray Serve replica {P}stuck did not report its statistics within 12 s: "
                                           "it is busy or stuck"):
        replica_stats(timeout_s=12.0)


def test_a_replica_that_answers_with_an_error_fails_the_statistics_as_a_ray_difference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster({P + "a": AttributeError("'_Replica' has no attribute 'record_routing_stats'")},
                       alive={P + "a"}, others=[])
    cluster.install(monkeypatch)
    with pytest.raises(ServingError, match="cannot read the statistics of Ray Serve replica .*: AttributeError: .* "
                                           r"\(this Ray version may name or call replicas differently\)"):
        replica_stats()


def test_a_replica_is_healthy_while_ready_or_draining_and_not_while_loading() -> None:
    """Ray Serve restarts a replica whose health check fails: one draining for a stop (readiness false) must pass,
    or its held requests were cut by the restart."""
    from dlperf.ray.serve import _Replica

    def replica(ready: bool, draining: bool) -> _Replica:
        made: Any = _Replica.__new__(_Replica)  # its state alone: no model loaded, no drain watch
        made.config = SimpleNamespace(exit_timeout_s=1.0)
        made.state = SimpleNamespace(ready=ready, draining=draining, begin_drain=lambda: None,
                                     close=lambda timeout_s: None)
        return made

    replica(ready=True, draining=False).check_health()
    replica(ready=False, draining=True).check_health()
    with pytest.raises(ServingError, match="the replica's model is not ready"):
        replica(ready=False, draining=False).check_health()
