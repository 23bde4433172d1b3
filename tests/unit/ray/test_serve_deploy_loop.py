"""`serve --ray`'s deployment loop, its status line, its stop and its start checks, against a fake Ray Serve and a fake
clock: when the deployment counts as running, when it is given up, what a stop drains, deletes and shuts down."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Any

import pytest

from dlperf.errors import ServingError
from dlperf.ray import serve
from dlperf.ray.serve import APP_NAME, DeployInterrupted, RayServeOptions, RunningOnRay, deploy_status, start_on_ray
from dlperf.serve.service import ServeConfig

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.unit


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert self.now < 5000.0, "the loop never ended"
        self.now += seconds


def _status(app: str | None, proxies: dict[str, str] | None = None, replicas: dict[str, int] | None = None,
            message: str = "", others: tuple[str, ...] = ()) -> Any:
    """What `serve.status()` returns, with Ray Serve's own status enums."""
    from ray.serve.schema import ApplicationStatus, ProxyStatus, ReplicaState

    deployment = SimpleNamespace(replica_states={ReplicaState(k): v for k, v in (replicas or {}).items()},
                                 message=message)
    applications = {name: SimpleNamespace(status=ApplicationStatus.RUNNING, message="", deployments={})
                    for name in others}
    if app is not None:
        applications[APP_NAME] = SimpleNamespace(status=ApplicationStatus(app), message=message,
                                                 deployments={APP_NAME: deployment})
    return SimpleNamespace(applications=applications,
                           proxies={n: ProxyStatus(s) for n, s in (proxies or {}).items()})


class _Serve:
    """Ray Serve as the driver sees it: `status()` goes through `statuses` (the last one stays)."""

    def __init__(self, *statuses: Any) -> None:
        self.statuses = list(statuses)
        self.polls = 0
        self.calls: list[str] = []

    def status(self) -> Any:
        self.polls += 1
        return self.statuses[min(self.polls, len(self.statuses)) - 1]

    def delete(self, name: str) -> None:
        self.calls.append(f"delete {name}")
        self.statuses = [_status(None, others=tuple(n for n in self.statuses[-1].applications if n != name))]

    def shutdown(self) -> None:
        self.calls.append("serve.shutdown")

    def start(self, http_options: dict[str, Any]) -> None:
        self.calls.append("serve.start")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(serve, "time", SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


def _deploy_on(monkeypatch: pytest.MonkeyPatch, fake: _Serve) -> None:
    import ray.serve.api

    monkeypatch.setattr(serve, "_serve", lambda: fake)
    monkeypatch.setattr(ray.serve.api, "_run", lambda app, **kwargs: None)


def test_the_deployment_runs_once_the_application_runs_and_every_proxy_is_healthy(
        monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    fake = _Serve(_status(None), _status("DEPLOYING"), _status("RUNNING"),
                  _status("RUNNING", {"head": "HEALTHY", "node-2": "STARTING"}),
                  _status("RUNNING", {"head": "HEALTHY", "node-2": "HEALTHY"}))
    _deploy_on(monkeypatch, fake)
    serve._deploy("app", 60.0, None, None)
    assert fake.polls == 5 and fake.calls == []  # a proxy still starting (or none yet) cannot route requests


def test_a_failed_deployment_raises_ray_serves_message(monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    fake = _Serve(_status("DEPLOYING"), _status("DEPLOY_FAILED", message="the replica's constructor raised"))
    _deploy_on(monkeypatch, fake)
    with pytest.raises(RuntimeError, match="deploying application dlperf failed: the replica's constructor raised"):
        serve._deploy("app", 60.0, None, None)


REPLICA_FAILED = (
    "The deployment failed to start 3 times in a row. This may be due to a problem with its constructor or initial "
    "health check failing. See controller logs for details. Error:\n"
    "\x1b[36mray::ServeReplica:dlperf:dlperf.initialize_and_get_metadata()\x1b[39m (pid=3324, ip=192.0.2.2)\n"
    '  File "ray/serve/_private/replica.py", line 1928, in initialize\n'
    "    raise RuntimeError(traceback.format_exc()) from None\n"
    "RuntimeError: Traceback (most recent call last):\n"
    '  File "/w/badrep.py", line 10, in model\n'
    '    raise FileNotFoundError("weights.pt not found on this node")\n'
    "FileNotFoundError: weights.pt not found on this node\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    '  File "dlperf/workload/base.py", line 183, in build_model\n'
    "    raise WorkloadError(\n"
    "dlperf.errors.WorkloadError: workload 'badrep': its model factory raised FileNotFoundError: weights.pt not "
    "found on this node\n"
    '  File "/w/badrep.py", line 10, in model\n'
    '    raise FileNotFoundError("weights.pt not found on this node")')


def test_a_replica_that_raised_as_it_started_is_named_with_its_error(monkeypatch: pytest.MonkeyPatch,
                                                                     clock: _Clock) -> None:
    """A workload whose model() raised in the replica (its weights missing on that node): the error said only
    "deploying application dlperf failed: Failed to update the deployments ['dlperf']."; the replica's exception,
    with the user's file and line, was in the deployment's message, behind 100 lines of Ray's traceback."""
    from ray.serve.schema import ApplicationStatus

    failed = _status("DEPLOY_FAILED", message=REPLICA_FAILED)
    failed.applications[APP_NAME].message = "Failed to update the deployments ['dlperf']."
    fake = _Serve(_status("DEPLOYING"), failed)
    _deploy_on(monkeypatch, fake)
    with pytest.raises(serve.DeployFailed) as caught:
        serve._deploy("app", 60.0, None, None)
    assert str(caught.value) == (
        "a replica failed to start: WorkloadError: workload 'badrep': its model factory raised FileNotFoundError: "
        'weights.pt not found on this node\n  File "/w/badrep.py", line 10, in model\n    raise '
        'FileNotFoundError("weights.pt not found on this node")')
    assert failed.applications[APP_NAME].status == ApplicationStatus.DEPLOY_FAILED
    assert serve.replica_error("Deployment is waiting for resources") is None

    # through start_on_ray: dlperf's error, without "RuntimeError:", and Serve stopped with the local instance
    fake = _Serve(_status(None))
    happened = _start_without_ray(monkeypatch, fake, cpus=8.0)
    import dlperf.serve.server

    monkeypatch.setattr(dlperf.serve.server, "listening_socket", lambda config: SimpleNamespace(close=lambda: None))

    def deploy(app: Any, timeout_s: float, on_wait: Any, stop: Any) -> None:
        raise caught.value

    monkeypatch.setattr(serve, "_deploy", deploy)
    with pytest.raises(ServingError) as error:
        start_on_ray(ServeConfig(model="badrep.py", port=8000), RayServeOptions())
    assert str(error.value).startswith("the Ray Serve deployment of 'badrep.py' failed: a replica failed to start: "
                                       "WorkloadError: workload 'badrep': its model factory raised FileNotFoundError")
    # Ray's own shutdown stops Serve on the instance: serve.shutdown() printed Ray's "(raylet) Task
    # ServeController.graceful_shutdown failed ... killed by ray.kill" under the error
    assert fake.calls == ["serve.start", f"delete {APP_NAME}"] and happened == ["ray.init local=True", "shutdown_ray"]


def test_a_deployment_not_running_by_its_deadline_is_removed_after_reports_every_30_s(
        monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    fake = _Serve(_status("DEPLOYING", replicas={"RUNNING": 1, "STARTING": 2}, message="waits for CPUs"))
    _deploy_on(monkeypatch, fake)
    heard: list[str] = []
    start = clock.now
    with pytest.raises(ServingError) as caught:
        serve._deploy("app", 70.0, heard.append, None)
    assert str(caught.value).startswith("the deployment was not running after 70 s (1 of 3 replicas running; Ray "
                                        "Serve says: waits for CPUs), so it was removed")
    assert 70.0 < clock.now - start <= 70.5 and fake.calls == [f"delete {APP_NAME}"]
    assert heard == ["still deploying after 30 s: 1 of 3 replicas running; Ray Serve says: waits for CPUs",
                     "still deploying after 60 s: 1 of 3 replicas running; Ray Serve says: waits for CPUs"]


def _retrying(pid: int, error: str = "ConfigError: 'win' does not exist: give an artifact folder") -> str:
    """Ray Serve's message after a replica's failed start, while another replica runs (it retries forever)."""
    return ("A replica failed to start with exception. Retrying. Error:\n"
            "\x1b[36mray::ServeReplica:dlperf:dlperf.initialize_and_get_metadata()\x1b[39m "
            f"(pid={pid}, ip=192.0.2.2, actor_id=b533befc0b8b7ad8f7b403cf01000000, repr=<ray.serve...>)\n"
            '  File "dlperf/serve/instances.py", line 130, in load_served_model\n'
            f"dlperf.errors.{error}\n")


def test_a_replica_failing_to_start_the_same_way_three_times_is_given_up_before_the_deadline(
        monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    """`dlperf serve win --ray --replicas 2` on a cluster whose second node lacked the artifact: Ray Serve retried
    that replica forever (one replica ran), and the command waited out --deploy-timeout-s (600 s by default)."""
    replicas = {"RUNNING": 1, "STARTING": 1}
    fake = _Serve(*[_status("DEPLOYING", replicas=replicas, message=m) for m in (
        "", _retrying(101), _retrying(101), _retrying(102, "WorkloadError: another error"), _retrying(103),
        _retrying(103), _retrying(104), _retrying(105))])
    _deploy_on(monkeypatch, fake)
    start = clock.now
    with pytest.raises(serve.DeployFailed) as caught:
        serve._deploy("app", 600.0, None, None)
    # the same message read twice is one failure; another error is counted apart
    assert fake.polls == 7 and clock.now - start < 2.0 and fake.calls == [f"delete {APP_NAME}"]
    assert str(caught.value) == ("a replica failed to start 3 times with the same error on node 192.0.2.2, so the "
                                 "deployment was removed: ConfigError: 'win' does not exist: give an artifact folder")


def test_a_signal_while_deploying_removes_the_deployment(monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    fake = _Serve(_status("DEPLOYING"))
    _deploy_on(monkeypatch, fake)
    asked = iter([None, None, signal.SIGTERM])
    with pytest.raises(DeployInterrupted, match="interrupted by SIGTERM while deploying") as caught:
        serve._deploy("app", 60.0, None, lambda: next(asked))
    assert caught.value.signum == signal.SIGTERM and fake.calls == [f"delete {APP_NAME}"]


def test_the_deploy_status_counts_every_replica_state(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _Serve(_status("DEPLOYING", replicas={"RUNNING": 2, "STARTING": 3, "RECOVERING": 1}))
    monkeypatch.setattr(serve, "_serve", lambda: fake)
    assert deploy_status() == "2 of 6 replicas running"
    # a replica on a node without the artifact (dlperf serve win --ray --ray-address ... on a cluster whose second
    # node did not mount the folder): the report and the timeout's error carried Ray's 40-line traceback
    fake.statuses = [_status("DEPLOYING", replicas={"RUNNING": 1, "STARTING": 1}, message=(
        "A replica failed to start with exception. Retrying. Error:\n"
        "\x1b[36mray::ServeReplica:dlperf:dlperf.initialize_and_get_metadata()\x1b[39m (pid=17420, ip=192.0.2.2)\n"
        '  File "/work/walk-w2/src/dlperf/serve/instances.py", line 130, in load_served_model\n'
        "    raise ConfigError(f\"'{spec}' does not exist: ...\n"
        "dlperf.errors.ConfigError: 'win' does not exist: give an artifact folder written by `dlperf optimize "
        "--export DIR`\n"))]
    assert deploy_status() == ("1 of 2 replicas running; Ray Serve says: A replica failed to start with exception. "
                               "Retrying. ConfigError: 'win' does not exist: give an artifact folder written by "
                               "`dlperf optimize --export DIR`")
    fake.statuses = [_status(None)]
    assert deploy_status() == "the application is not created yet"

    def unreadable() -> Any:
        raise ConnectionError("GCS gone")

    monkeypatch.setattr(serve, "_serve", lambda: SimpleNamespace(status=unreadable))
    assert deploy_status() == "Ray Serve's status could not be read: ConnectionError: GCS gone"


def test_the_replicas_said_to_run_are_those_ray_serve_counts_running(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _Serve(_status("RUNNING", replicas={"RUNNING": 2, "STARTING": 1, "STOPPING": 1}))
    monkeypatch.setattr(serve, "_serve", lambda: fake)
    assert RunningOnRay("127.0.0.1", 8000, owns_ray=False).replicas() == 2


@pytest.mark.parametrize(("owns_ray", "local_instance", "others", "after"), [
    (True, True, (), ["shutdown_ray"]),  # Ray's own shutdown stops Serve with the local instance
    (True, False, (), ["serve.shutdown", "shutdown_ray"]),  # a cluster this command joined
    (False, False, (), ["serve.shutdown"]),  # Ray started by the caller stays
    (True, False, ("theirs",), ["shutdown_ray"]),  # another application still runs on the cluster's Serve
])
def test_a_stop_deletes_the_deployment_and_shuts_down_only_what_is_its_own(
        monkeypatch: pytest.MonkeyPatch, owns_ray: bool, local_instance: bool, others: tuple[str, ...],
        after: list[str]) -> None:
    fake = _Serve(_status("RUNNING", others=others))
    monkeypatch.setattr(serve, "_serve", lambda: fake)
    monkeypatch.setattr(serve, "shutdown_ray", lambda: fake.calls.append("shutdown_ray"))
    RunningOnRay("127.0.0.1", 8000, owns_ray, control=None, local_instance=local_instance).stop()
    assert fake.calls == [f"delete {APP_NAME}", *after]


def test_a_stop_deletes_once_the_replicas_hold_nothing_two_reads_in_a_row(monkeypatch: pytest.MonkeyPatch,
                                                                           clock: _Clock) -> None:
    """The proxy may be handing a request over between two reads: one idle read is not enough."""
    fake = _Serve(_status("RUNNING"))
    held = iter([(1, 1), (0, 0), (0, 1), (0, 0), (0, 0), (5, 5)])
    reads: list[tuple[int, int]] = []

    def stats(timeout_s: float) -> list[Any]:
        reads.append(next(held))
        fake.calls.append("replica_stats")
        return [SimpleNamespace(in_flight=reads[-1][0], pending=0), SimpleNamespace(in_flight=0, pending=reads[-1][1])]

    monkeypatch.setattr(serve, "_serve", lambda: fake)
    monkeypatch.setattr(serve, "replica_stats", stats)
    monkeypatch.setattr(serve, "shutdown_ray", lambda: None)
    monkeypatch.setattr(ray, "get", lambda ref, timeout: fake.calls.append(f"{ref} (timeout {timeout})"))
    monkeypatch.setattr(ray, "kill", lambda actor: fake.calls.append("kill control"))
    control = SimpleNamespace(drain=SimpleNamespace(remote=lambda: "drain"))
    RunningOnRay("127.0.0.1", 8000, owns_ray=True, control=control, exit_timeout_s=30.0, local_instance=True).stop()
    assert reads == [(1, 1), (0, 0), (0, 1), (0, 0), (0, 0)]
    assert fake.calls == ["drain (timeout 10)", *["replica_stats"] * 5, f"delete {APP_NAME}", "kill control"]


def _start_without_ray(monkeypatch: pytest.MonkeyPatch, fake: _Serve, cpus: float) -> list[str]:
    """`start_on_ray` up to Ray Serve, with Ray's start, the address checks and the deployment itself left out;
    the list it returns hears what happened to Ray."""
    happened: list[str] = []
    monkeypatch.setattr(serve, "_serve", lambda: fake)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": cpus})
    monkeypatch.setattr(serve, "check_reachable", lambda address: None)
    monkeypatch.setattr(serve, "token_auth_problem", lambda address: None)

    def start_ray(init: Any, local: bool, refused: Any) -> list[int]:
        happened.append(f"ray.init local={local}")
        return []

    monkeypatch.setattr(serve, "start_ray", start_ray)
    monkeypatch.setattr(serve, "shutdown_ray", lambda: happened.append("shutdown_ray"))
    monkeypatch.setattr(serve, "_start_control", lambda: "control")
    monkeypatch.setattr(serve, "build_application", lambda config, options: "app")
    monkeypatch.setattr(serve, "_deploy", lambda app, timeout_s, on_wait, stop: happened.append("deployed"))
    return happened


def test_replicas_past_a_joined_clusters_cpus_are_deployed_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster joined by its address may grow (Ray's autoscaler): only a local instance of this command's own
    refuses replicas it has no CPUs for."""
    fake = _Serve(_status(None))
    happened = _start_without_ray(monkeypatch, fake, cpus=2.0)
    heard: list[str] = []
    running = start_on_ray(ServeConfig(model="zoo:mlp", port=8000),
                           RayServeOptions(replicas=3, address="10.0.0.5:6379"), on_wait=heard.append)
    assert happened == ["ray.init local=False", "deployed"]
    assert (running.owns_ray, running.local_instance) == (True, False)
    assert len(heard) == 1 and heard[0].startswith("3 replicas x 1 CPU each (--threads) need 3 CPUs; the Ray "
                                                   "cluster has 2 now")


def test_an_application_of_the_same_name_on_the_cluster_is_refused_and_left_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another `dlperf serve --ray` on the cluster: this one stops, and Ray Serve, which runs the other, stays."""
    fake = _Serve(_status("RUNNING", {"head": "HEALTHY"}))
    happened = _start_without_ray(monkeypatch, fake, cpus=8.0)
    with pytest.raises(ServingError, match=f"an application named '{APP_NAME}' already runs on this Ray cluster"):
        start_on_ray(ServeConfig(model="zoo:mlp", port=8000), RayServeOptions(address="10.0.0.5:6379"))
    assert fake.calls == ["serve.start"]  # neither deleted nor shut down
    assert happened == ["ray.init local=False", "shutdown_ray"]  # this command's connection to Ray is closed


def test_a_deployment_whose_proxy_failed_to_bind_is_deleted_though_its_status_cannot_be_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh clone's Ray tests: Ray Serve's proxy failed to bind its port mid-deployment, serve.status() then
    raised too, the clean-up asked it before deleting and gave up, and every later `serve --ray` on the cluster was
    refused: "an application named 'dlperf' already runs"."""
    failure = RuntimeError("ray::ProxyActor.ready() ... RuntimeError: Failed to bind to address '127.0.0.1:38753'.")

    class Unreadable(_Serve):
        def status(self) -> Any:
            if self.calls and self.calls[-1] == "deployed":
                raise failure
            return super().status()

    fake = Unreadable(_status(None))
    happened = _start_without_ray(monkeypatch, fake, cpus=8.0)

    def deploy(app: Any, timeout_s: float, on_wait: Any, stop: Any) -> None:
        fake.calls.append("deployed")
        raise failure

    monkeypatch.setattr(serve, "_deploy", deploy)
    with pytest.raises(ServingError, match=r"failed: RuntimeError: .*Failed to bind to address '127.0.0.1:38753'.*"
                                           r"; hint: Ray Serve's HTTP proxy could not listen there .*: pick another "
                                           r"--port$"):
        start_on_ray(ServeConfig(model="zoo:mlp", port=8000), RayServeOptions(address="10.0.0.5:6379"))
    assert fake.calls == ["serve.start", "deployed", f"delete {APP_NAME}", "serve.shutdown"]
    assert happened[-1] == "shutdown_ray"
