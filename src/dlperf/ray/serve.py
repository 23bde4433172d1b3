"""`dlperf serve --ray`: the same server (app, batcher, protocol) as replicas of a Ray Serve deployment.

Each replica builds its own `ServerState` from the same `ServeConfig` (model, batching, instances) and
serves the same Starlette app as `dlperf serve`, as the deployment's ASGI ingress; Ray Serve's HTTP proxy
spreads requests over the replicas, each of which batches its own share. The proxy prefers a replica on its
own node while that one has room (`max_ongoing_requests`); the others take the overflow.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Literal

from dlperf.errors import ConfigError, DlperfError, ServingError, require
from dlperf.ray.address import (
    address_shape_problem,
    cluster_address,
    init_error,
    shutdown_ray,
    start_ray,
    token_auth_problem,
    unreachable_reason,
)
from dlperf.serve.service import ServeConfig

APP_NAME = "dlperf"
DEPLOY_TIMEOUT_S = 600.0
"""How long `start_on_ray` waits for every replica to run (load and warm up) by default."""
REPORT_EVERY_S = 30.0
"""While deploying, how often to say what Ray Serve is waiting for."""
SAME_START_ERRORS = 3
"""Replica starts that failed with the same error before the deployment is given up. Ray Serve gives up after 3 a
replica (its MAX_PER_REPLICA_RETRY_COUNT) only while none has started; once one runs, it retries the others forever."""


@dataclass(frozen=True)
class RayServeOptions:
    """How many replicas (fixed, or autoscaled between MIN and MAX) and where the Ray cluster is."""

    replicas: int = 1
    autoscale: tuple[int, int] | None = None
    address: str | None = None
    """None: start a local Ray instance; else the address of a running cluster (HOST:PORT or 'auto')."""
    proxy_location: str = "HeadOnly"
    """'HeadOnly' (one HTTP proxy, on the head node) or 'EveryNode' (one per node, same port)."""
    deploy_timeout_s: float = DEPLOY_TIMEOUT_S
    """How long to wait for every replica to run before removing the deployment again."""

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be >= 1, got {self.replicas}")
        if self.autoscale is not None:
            low, high = self.autoscale
            if low < 0 or high < 1 or low > high:
                raise ConfigError(f"--autoscale {low}:{high}: give MIN:MAX with 0 <= MIN <= MAX and MAX >= 1")
        if self.proxy_location not in ("HeadOnly", "EveryNode"):
            raise ConfigError(f"unknown proxy location '{self.proxy_location}': use HeadOnly or EveryNode")
        if not self.deploy_timeout_s > 0:
            raise ConfigError(f"--deploy-timeout-s must be > 0, got {self.deploy_timeout_s:g}")
        problem = None if self.address is None else address_shape_problem(self.address)
        if problem is not None:
            raise ConfigError(f"--ray-address {self.address}: {problem}")


def parse_autoscale(text: str) -> tuple[int, int]:
    """'1:4' -> (1, 4)."""
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return int(low), int(high)
    except ValueError as exc:
        raise ConfigError(f"--autoscale '{text}' is not MIN:MAX, e.g. 1:4") from exc


def check_config(config: ServeConfig) -> None:
    """What `dlperf serve` accepts but a Ray Serve deployment cannot do; checked before Ray starts."""
    if config.port == 0:
        raise ConfigError("--port 0 is not supported with --ray: Ray Serve's HTTP proxy needs a fixed port "
                          "(give e.g. --port 8000)")


def initial_replicas(options: RayServeOptions) -> int:
    """The replicas Ray Serve starts the deployment with."""
    return options.replicas if options.autoscale is None else max(options.autoscale[0], 1)


def replica_cpus(config: ServeConfig) -> float:
    """The CPUs each replica reserves in Ray (its torch threads, --threads)."""
    return float(config.threads or 1)


def check_cpus(config: ServeConfig, options: RayServeOptions, cluster_cpus: float, local: bool) -> str | None:
    """Whether the replicas fit the cluster's CPUs: a ConfigError for a local instance they do not fit (Ray
    Serve would wait for them forever: 3 replicas on 2 CPUs sat at "deploying" without a word), a warning to
    print for a cluster (its autoscaler may add nodes), or for a local instance that `--autoscale`'s MAX
    replicas do not fit, else None."""
    n, each = initial_replicas(options), replica_cpus(config)
    need = n * each
    if need <= cluster_cpus:
        return _autoscale_past_cpus(options, each, cluster_cpus) if local else None
    asked = f"{n} replica{'s' * (n != 1)} x {each:g} CPU{'s' * (each != 1)} each (--threads) need {need:g} CPUs"
    if not local:
        return (f"{asked}; the Ray cluster has {cluster_cpus:g} now: the others wait for nodes to join (Ray's "
                "autoscaler), --deploy-timeout-s bounds that wait")
    fits = math.floor(cluster_cpus / each)
    if fits:
        fix = (f"give {'--autoscale with MIN' if options.autoscale else '--replicas'} {fits} or fewer"
               + (", or fewer --threads" if each > 1 else ""))
    else:
        fix = f"give --threads {math.floor(cluster_cpus)} or fewer"
    raise ConfigError(f"{asked}; the local Ray instance has {cluster_cpus:g} (this machine's): {fix}, or deploy to a "
                      "larger cluster with --ray-address")


def _autoscale_past_cpus(options: RayServeOptions, each: float, cpus: float) -> str | None:
    """What to know when `--autoscale`'s MAX replicas do not fit a local instance, whose CPUs never grow: a replica
    Ray Serve adds past them waits for a CPU forever (it did, without a word, and a stop waited for it)."""
    if options.autoscale is None:
        return None
    low, high = options.autoscale
    if high * each <= cpus:
        return None
    fits = math.floor(cpus / each)
    return (f"--autoscale {low}:{high}: the local Ray instance's {cpus:g} CPUs hold {fits} replica{'s' * (fits != 1)} "
            f"of {each:g} CPU{'s' * (each != 1)} (--threads), so at most {fits} run and those Ray Serve adds past them "
            f"wait for a CPU: give --autoscale {low}:{fits}, or deploy to a larger cluster with --ray-address")


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT address, or the RAY_ADDRESS that 'auto' joins, answers TCP within `timeout_s` (Ray itself retried an
    unreachable one for minutes); 'local' and ray:// client addresses are left to Ray."""
    reason = unreachable_reason(
        address, timeout_s,
        fix_auto=("correct RAY_ADDRESS or unset it (auto then joins a cluster `ray start` started on this machine), "
                  "or leave --ray-address out to start a local instance"),
        fix_address=("give the head node's address as `ray start --head` prints it (port 6379 by default), or leave "
                     "--ray-address out to start a local instance"))
    if reason is not None:
        raise ServingError(reason)


InterruptedWhen = Literal["deploying", "starting", "start failed"]
_INTERRUPTED: dict[InterruptedWhen, str] = {
    "deploying": "while deploying on Ray Serve: the deployment was removed",
    "starting": "while Ray was starting: nothing was deployed",
    "start failed": "while Ray was starting (it failed to): nothing was deployed"}


class DeployInterrupted(ServingError):
    """SIGINT or SIGTERM while deploying: the deployment was removed again (`when` "deploying"); or while Ray started
    ("starting": Ray was shut down again before Serve started) or started and failed to ("start failed"): nothing was
    deployed."""

    def __init__(self, signum: int, when: InterruptedWhen = "deploying") -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name} {_INTERRUPTED[when]}")
        self.signum = signum


def max_ongoing_requests(config: ServeConfig) -> int:
    """Requests Ray Serve lets into one replica at once: enough to fill a batch on every instance, and the
    queue behind them (Ray's default of 5 would cap every batch at 5): all priority levels' bounds together,
    so that a full low level does not keep a high-priority request out of the replica."""
    batch = max(1, config.max_batch_size)
    queue = config.queue_capacity or batch * config.instances
    return batch * config.instances + queue


def deployment_options(config: ServeConfig, options: RayServeOptions) -> dict[str, Any]:
    """The Ray Serve deployment options for `config`, as plain data (tested without Ray)."""
    scaling: dict[str, Any]
    if options.autoscale is not None:
        low, high = options.autoscale
        # a replica asks for help when it holds more than a full batch per instance
        scaling = {"autoscaling_config": {"min_replicas": low, "max_replicas": high, "initial_replicas": max(low, 1),
                                          "target_ongoing_requests": max(1, config.max_batch_size) * config.instances}}
    else:
        scaling = {"num_replicas": options.replicas}
    # a bounded queue bounds the proxy's too: Ray's proxy held requests beyond what the replicas admit with no
    # limit, where --max-queue-size never answered 503 (6 at once to a 0.3 s model with --max-queue-size 1:
    # 4 immediate 503s without Ray, none with it); past it Ray's proxy answers 503 itself
    queued = {"max_queued_requests": config.queue_capacity} if config.queue_capacity else {}
    return {
        "name": APP_NAME,
        **scaling,
        **queued,
        "max_ongoing_requests": max_ongoing_requests(config),
        # a replica on a GPU asks Ray for one, which Ray shows it as cuda:0: asking for none, every replica saw every
        # GPU and ran on cuda:0 (Ray before ~2.47 hid them all instead)
        "ray_actor_options": {"num_cpus": float(config.threads or 1),
                              **({"num_gpus": 1.0} if config.device.startswith("cuda") else {})},
        "graceful_shutdown_timeout_s": config.exit_timeout_s,
        "health_check_period_s": 5.0,
    }


class _Replica:
    """One replica: the state `dlperf serve` builds, served by the same ASGI app."""

    def __init__(self, config: ServeConfig, cwd: str | None = None) -> None:
        from dlperf.serve.server import set_switch_interval
        from dlperf.serve.service import build_state

        # the folder `dlperf serve` ran in, where this node has it, as the single-process server runs there: a replica
        # runs in its raylet's (where `ray start` ran), and a relative workload ('wl.py', 'runs/int8') or a file the
        # model opens relative to it ('settings.json') was not found there ("workload file 'wl.py' does not exist")
        if cwd is not None and os.path.isdir(cwd):
            os.chdir(cwd)
        set_switch_interval()
        self.config = config
        self.state = build_state(config)
        threading.Thread(target=_drain_when_asked, args=(self.state,), name="dlperf-drain-watch", daemon=True).start()

    def __serve_build_asgi_app__(self) -> Any:
        from ray import serve

        from dlperf.serve.app import create_app

        return with_replica_label(create_app(self.state), serve.get_replica_context().replica_id.unique_id)

    def check_health(self) -> None:
        if not self.state.ready and not self.state.draining:
            raise ServingError("the replica's model is not ready")

    def record_routing_stats(self) -> dict[str, Any]:
        """This replica's own counters (Ray Serve's hook for per-replica load; also read by
        `replica_stats`): requests in flight and queued, and since start the requests, items and batches served."""
        import ray

        served = self.state.stats(None, None)["model_stats"]
        return {
            "models": self.state.served_models(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "in_flight": self.state.in_flight,
            "pending": sum(v.batcher.pending_count for e in self.state.models.values() for v in e.variants),
            "requests": sum(s["inference_stats"]["success"]["count"] for s in served),
            "failed": sum(s["inference_stats"]["fail"]["count"] for s in served),
            "items": sum(s["inference_count"] for s in served),
            "batches": sum(s["execution_count"] for s in served),
        }

    def __del__(self) -> None:
        state = getattr(self, "state", None)
        if state is not None:
            state.begin_drain()
            state.close(self.config.exit_timeout_s)


REPLICA_LABEL = "replica"
"""The label every sample of a replica's /metrics carries: the replica's name, as `replica_stats` gives it."""


def label_exposition(text: bytes, replica: str) -> bytes:
    """A Prometheus text page (format 0.0.4) with `replica="NAME"` added to every sample.

    The label goes right after the sample's name, so label values (which may hold any character) are never parsed."""
    value = replica.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    out = []
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            cut = next((i for i, c in enumerate(line) if c in "{ \t"), len(line))
            name, rest = line[:cut], line[cut:]
            if rest.startswith("{"):
                inner = rest[1:]
                line = f'{name}{{{REPLICA_LABEL}="{value}"{"" if inner.lstrip().startswith("}") else ","}{inner}'
            else:
                line = f'{name}{{{REPLICA_LABEL}="{value}"}}{rest}'
        out.append(line)
    return ("\n".join(out) + "\n").encode() if out else text


def with_replica_label(app: Any, replica: str) -> Any:
    """The replica's ASGI app, its /metrics page labelled with the replica that answered (`label_exposition`).

    Ray Serve's proxy hands each scrape to whichever replica it picks, and every replica's page had the same series:
    a scrape of /metrics through the proxy saw one replica's counters, the next another's, as one series that jumped
    up and down (Prometheus read each drop as a counter reset). Labelled, each replica's counters are series of their
    own, which only grow; a scrape still sees the replica that answered it (sum over `replica` for the deployment)."""

    async def labelled(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if scope.get("type") != "http" or (path[len(root):] if root and path.startswith(root) else path) != "/metrics":
            await app(scope, receive, send)
            return
        messages: list[dict[str, Any]] = []

        async def hold(message: dict[str, Any]) -> None:
            messages.append(message)

        await app(scope, receive, hold)
        start = next((m for m in messages if m["type"] == "http.response.start"), None)
        if start is None or start.get("status") != 200:
            for message in messages:
                await send(message)
            return
        body = label_exposition(b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body"),
                                replica)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return labelled


CONTROL_NAME = f"{APP_NAME}-control"
CONTROL_NAMESPACE = "dlperf"
"""The named actor through which `RunningOnRay.stop` tells every replica to drain."""


class _Control:
    """Holds the deployment's drain flag; each replica waits on `wait_drain` (one pending call, no polling)."""

    def __init__(self) -> None:
        import asyncio

        self._drain = asyncio.Event()

    async def wait_drain(self) -> None:
        await self._drain.wait()

    async def drain(self) -> None:
        self._drain.set()

    async def ready(self) -> bool:
        return True


def _drain_when_asked(state: Any) -> None:
    """In a replica: turn to draining (readiness false, new requests 503 with dlperf's JSON error) when the
    driver asks, before it deletes the deployment. A replica that cannot reach the control actor (the driver
    is gone) is left to Ray Serve's own shutdown."""
    import ray

    try:
        control = ray.get_actor(CONTROL_NAME, namespace=CONTROL_NAMESPACE)
        ray.get(control.wait_drain.remote())
    except Exception:
        return
    state.begin_drain()


def _start_control() -> Any:
    """The control actor, up and named before any replica looks for it."""
    import ray

    control: Any = ray.remote(_Control).options(name=CONTROL_NAME, namespace=CONTROL_NAMESPACE, num_cpus=0,
                                                max_concurrency=1000).remote()
    ray.get(control.ready.remote(), timeout=60)
    return control


def _kill(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.kill(actor)


def _serve() -> Any:
    require("ray", "ray")
    return require("ray.serve", "ray")


def build_application(config: ServeConfig, options: RayServeOptions) -> Any:
    """The bound Ray Serve application (deployment with the ASGI ingress) for `config`."""
    serve = _serve()
    replica = serve.ingress()(_Replica)
    return serve.deployment(replica, **deployment_options(config, options)).bind(config, os.getcwd())


@dataclass(frozen=True)
class ReplicaStats:
    """One replica's own counters, read through Ray (not through the HTTP proxy, which picks a replica)."""

    replica: str
    node_id: str
    pid: int
    in_flight: int
    pending: int
    """Requests queued in the replica's batchers, not yet in a batch."""
    requests: int
    failed: int
    items: int
    batches: int
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What the replica serves (`ServerState.served_models`): its models' names, variants and batching."""


REPLICA_ACTOR_PREFIX = f"SERVE_REPLICA::{APP_NAME}#{APP_NAME}#"
"""How Ray Serve names a replica actor of this deployment (namespace 'serve')."""


STILL_STARTING = "`initialize_callable` must be called before"
"""Ray Serve's error for a replica asked for its statistics before it has built the server (loading the model)."""


def _started(names: list[str]) -> list[str]:
    """Those of the replica actors `names` that have started (ALIVE). One that waits for resources (PENDING_CREATION:
    an autoscaled replica the cluster has no CPU for) never answers: asking it held `replica_stats` until its timeout,
    then failed it with a false 'this Ray version may name or call replicas differently', and a stop waited
    --exit-timeout-s for it. Ray's actor table is Ray internals: where it cannot be read, every replica is asked."""
    try:
        from ray._private import state

        alive = {a.get("Name") for a in state.actors(actor_state_name="ALIVE").values()}
    except Exception:
        return names
    return [n for n in names if n in alive]


def replica_stats(timeout_s: float = 30.0) -> list[ReplicaStats]:
    """Every running replica's counters, asked of each replica actor through Ray, sorted by replica name; replicas
    still waiting for resources or loading their model (they hold no requests) and those that stopped meanwhile are
    left out.

    Uses the actor names Ray Serve gives replicas and its `record_routing_stats` actor method, which calls
    the replica's hook of that name: Ray Serve internals, so a Ray upgrade that changes them fails here,
    with this message, rather than giving wrong numbers."""
    import ray

    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "serve" and a["name"].startswith(REPLICA_ACTOR_PREFIX))
    asked = {}
    for name in _started(names):
        try:
            asked[name] = ray.get_actor(name, namespace="serve").record_routing_stats.remote()
        except ValueError:  # the replica stopped between listing and asking
            continue
    deadline = time.monotonic() + timeout_s
    out = []
    for name, ref in asked.items():  # asked all at once, read in turn: one slow replica costs the timeout once
        try:
            raw = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.RayActorError:  # it stopped meanwhile (scaled down, or the deployment deleted)
            continue
        except ray.exceptions.GetTimeoutError as exc:
            raise ServingError(f"Ray Serve replica {name} did not report its statistics within {timeout_s:g} s: it "
                               "is busy or stuck") from exc
        except Exception as exc:
            if STILL_STARTING in str(exc):
                continue
            raise ServingError(f"cannot read the statistics of Ray Serve replica {name}: {type(exc).__name__}: "
                               f"{exc} (this Ray version may name or call replicas differently)") from exc
        out.append(ReplicaStats(name.removeprefix(REPLICA_ACTOR_PREFIX), str(raw["node_id"]), int(raw["pid"]),
                                int(raw["in_flight"]), int(raw["pending"]), int(raw["requests"]), int(raw["failed"]),
                                int(raw["items"]), int(raw["batches"]), dict(raw.get("models") or {})))
    return out


@dataclass
class RunningOnRay:
    """A deployment on Ray Serve; `url` is host:port of its HTTP proxy, no scheme."""

    host: str
    port: int
    owns_ray: bool
    control: Any = None
    """The actor that tells the replicas to drain (`_Control`); None: delete without draining first."""
    exit_timeout_s: float = 30.0
    """How long `stop` waits for the replicas to finish what they hold before deleting the deployment."""
    local_instance: bool = False
    """Whether Ray is a local instance this process started (its shutdown stops every Ray process, Serve's too)."""

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def replicas(self) -> int:
        """Running replicas of the deployment."""
        serve = _serve()
        status = serve.status().applications[APP_NAME].deployments[APP_NAME]
        return int(status.replica_states.get("RUNNING", 0))

    def replica_stats(self) -> list[ReplicaStats]:
        """Each replica's own counters (see `replica_stats`)."""
        return replica_stats()

    def stop(self) -> None:
        """Drain the replicas, delete the deployment, and shut Ray Serve down too unless other applications
        still run on it.

        Deleting at once (as before) removed the route first: new requests got Ray's plain-text 404, and those
        waiting in Ray's proxy for a replica had their connections closed unanswered. Now every replica first
        turns to draining, as `dlperf serve` does on SIGTERM: readiness false, new requests 503 with dlperf's
        JSON error (also those the proxy still held, as they reach a replica), while the requests a replica
        already holds finish; the deployment is deleted once no replica holds any, or after the exit timeout."""
        serve = _serve()
        if self.control is not None:
            self._drain()
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        if self.control is not None:
            _kill(self.control)
        others: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            others = dict(serve.status().applications)
        if not others and not self.local_instance:
            # on a local instance of its own, Ray's shutdown stops Serve's controller and proxy with every process:
            # serve.shutdown() there only added Ray's '(raylet) Task ServeController.graceful_shutdown failed ...
            # killed by `ray.kill`' line to every stop
            serve.shutdown()
        if self.owns_ray:
            shutdown_ray()

    def _drain(self) -> None:
        import ray

        try:
            ray.get(self.control.drain.remote(), timeout=10)
        except Exception:
            return  # no control actor: delete as Ray Serve would
        deadline = time.monotonic() + self.exit_timeout_s
        idle = 0
        while idle < 2 and time.monotonic() < deadline:  # two reads in a row: the proxy may be handing one over
            try:
                held = sum(s.in_flight + s.pending for s in replica_stats(max(1.0, deadline - time.monotonic())))
            except ServingError:
                return
            idle = idle + 1 if held == 0 else 0
            time.sleep(0.1)

    def __enter__(self) -> RunningOnRay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _NoReconnectNotice(logging.Filter):
    """Drops the line Ray Serve logs when `serve.run` finds the Serve instance `serve.start` started, that its
    http_options "will not be applied": they were, by `serve.start`, and the line said otherwise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Connecting to existing Serve app")


def _quiet_serve_logs() -> None:
    serve_log = logging.getLogger("ray.serve")
    if not any(isinstance(f, _NoReconnectNotice) for f in serve_log.filters):
        serve_log.addFilter(_NoReconnectNotice())


def start_on_ray(config: ServeConfig, options: RayServeOptions | None = None, *,
                 on_wait: Callable[[str], None] | None = None,
                 stop: Callable[[], int | None] | None = None,
                 after_init: Callable[[], None] | None = None) -> RunningOnRay:
    """Deploy and return once every replica is ready (loaded and warmed up) and the proxy listens.

    `on_wait(text)` hears what the deployment waits for: CPUs a cluster lacks, and every `REPORT_EVERY_S` what
    Ray Serve says. When `stop()` returns a signal number (a handler got it) the deployment is removed again and
    `DeployInterrupted` raised; after `options.deploy_timeout_s` the same with a ServingError. `after_init` runs right
    after this call starts or joins Ray (`ray.init` sets its own SIGTERM handler: put yours back there)."""
    options = options or RayServeOptions()
    serve = _serve()
    import ray

    from dlperf.serve.server import listening_socket

    check_config(config)
    options = replace(options, address=cluster_address(options.address))
    owns = False
    held: list[int] = []
    if not ray.is_initialized():
        if options.address is None:
            # the local instance's proxy listens here: a port in use came out as Ray's traceback
            listening_socket(config).close()
        else:
            check_reachable(options.address)
            problem = token_auth_problem(options.address)
            if problem is not None:
                raise ServingError(f"--ray-address {options.address}: {problem}")
        option = f"--ray-address {options.address}" if options.address else "--ray (a new local Ray instance)"

        def refused(exc: BaseException) -> Exception:
            return ServingError(init_error(exc, option, "leave out --ray-address for a new local instance"))

        try:
            # "local": a new instance, as the option says, not a cluster `ray start` left on this machine; Ray's token
            # authentication notice is dropped on a local instance, an existing cluster's are Ray's to print
            held = start_ray(lambda: ray.init(address=options.address or "local", include_dashboard=False,
                                              log_to_driver=False), local=options.address is None, refused=refused)
        except ServingError:
            # a signal held while Ray failed to start went to the caller's handler first: serve_on_ray's notes it
            signum = None if stop is None else stop()
            if signum is not None:
                raise DeployInterrupted(signum, "start failed") from None
            raise
        owns = True
        if after_init is not None:
            after_init()
    _quiet_serve_logs()
    started = deployed = False
    control = None
    try:
        for signum in held:  # Ctrl-C or SIGTERM while Ray started: to the caller's handlers, as if they came now
            signal.raise_signal(signum)
        # a handler that only notes it (serve_on_ray's): stop before Serve starts, not after its controller, proxy
        # and the control actor did (seconds) and the deployment loop looked
        signum = None if stop is None or not held else stop()
        if signum is not None:
            raise DeployInterrupted(signum, "starting")
        warning = check_cpus(config, options, float(ray.cluster_resources().get("CPU", 0.0)),
                             local=owns and options.address is None)
        if warning is not None and on_wait is not None:
            on_wait(warning)
        serve.start(http_options={"host": config.host, "port": config.port, "location": options.proxy_location})
        started = True
        if APP_NAME in serve.status().applications:
            raise ServingError(f"an application named '{APP_NAME}' already runs on this Ray cluster: stop that "
                               f"`dlperf serve --ray` first (or `serve.delete('{APP_NAME}')`)")
        control = _start_control()
        deployed = True
        _deploy(build_application(config, options), options.deploy_timeout_s, on_wait, stop)
    except BaseException as exc:
        if control is not None:
            _kill(control)
        # deleted without asking serve.status() first: a proxy that failed to bind failed the status read too, the
        # deployment stayed, and every later `dlperf serve --ray` on the cluster was refused "already runs"
        if deployed:
            with contextlib.suppress(Exception):
                serve.delete(APP_NAME)
        # on a local instance of this command's own, stopping Ray stops Serve with it, as RunningOnRay.stop does:
        # serve.shutdown() there only printed Ray's "(raylet) Task ServeController.graceful_shutdown failed ..."
        local_instance = owns and options.address is None
        with contextlib.suppress(Exception):
            if started and not local_instance and not serve.status().applications:
                serve.shutdown()
        if owns:
            shutdown_ray()
        if isinstance(exc, DlperfError) or not isinstance(exc, Exception):
            raise
        kind = "" if isinstance(exc, DeployFailed) else f"{type(exc).__name__}: "
        raise ServingError(f"the Ray Serve deployment of '{config.model or config.variants}' failed: "
                           f"{kind}{exc}{_deploy_hint(exc)}") from exc
    return RunningOnRay(config.host, config.port, owns, control, config.exit_timeout_s,
                        local_instance=owns and options.address is None)


def _deploy_hint(exc: BaseException) -> str:
    """What to do about a deployment error whose cause Ray's own text leaves to the reader ("" for the others). On
    the 2-CPU test machine beside two busy loops, Ray Serve's controller killed its HTTP proxy actor before the
    actor had started, and the user read only Ray's ActorDiedError."""
    text = str(exc)
    if "Failed to bind to address" in text:
        return ("; hint: Ray Serve's HTTP proxy could not listen there (another process took the port after dlperf "
                "checked it, or another proxy on this machine holds it): pick another --port")
    if "class_name: ProxyActor" in text:
        return ("; hint: Ray Serve's HTTP proxy did not come up (its controller gives up on a proxy that does not "
                "start in time, as on a machine whose CPUs are all busy): deploy again when the machine is less "
                "busy, or give Ray Serve a node with CPUs to spare")
    return ""


def _deploy(app: Any, timeout_s: float, on_wait: Callable[[str], None] | None,
            stop: Callable[[], int | None] | None) -> None:
    """Deploy `app` and wait, here, until it runs and the proxies serve it. `serve.run` waits for every replica
    with no bound and no word (3 replicas on a 2-CPU instance waited forever), a signal could not end it
    cleanly, and its wait never ends once the application is deleted (Ray 2.60), so the deployment is started
    with Ray Serve's non-waiting `_run` (a developer API; `serve.run` calls it) and watched from this loop."""
    from ray.serve.api import _run

    serve = _serve()

    def removed(exc: BaseException) -> BaseException:
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        return exc

    start = time.monotonic()
    report_at = start + REPORT_EVERY_S
    failures: dict[str, set[str]] = {}  # a replica's error -> Ray Serve's messages with it (one a failed start)
    _run(app, _blocking=False, name=APP_NAME, route_prefix="/")
    while True:
        status = serve.status()
        application = status.applications.get(APP_NAME)
        state = "" if application is None else _status_name(application.status)
        deployment = None if application is None else application.deployments.get(APP_NAME)
        message = str(getattr(deployment, "message", "") or "")
        cause = replica_error(message)
        if state == "DEPLOY_FAILED":
            if cause is not None:
                raise DeployFailed(f"a replica failed to start: {cause}")
            raise RuntimeError(f"deploying application {APP_NAME} failed: {application.message}")
        if cause is not None and state != "RUNNING":
            # each failed start rewrites the message, with the failed replica's pid: a new text is a new failure
            seen = failures.setdefault(cause, set())
            seen.add(message)
            if len(seen) >= SAME_START_ERRORS:
                raise removed(DeployFailed(f"a replica failed to start {len(seen)} times with the same error"
                                           f"{_failed_nodes(seen)}, so the deployment was removed: {cause}"))
        if state == "RUNNING" and status.proxies and all(_status_name(p) == "HEALTHY"
                                                         for p in status.proxies.values()):
            return
        signum = None if stop is None else stop()
        if signum is not None:
            raise removed(DeployInterrupted(signum))
        now = time.monotonic()
        if now - start > timeout_s:
            raise removed(ServingError(f"the deployment was not running after {timeout_s:g} s ({deploy_status()}), so "
                                       "it was removed: give the replicas what they wait for, or more time with "
                                       "--deploy-timeout-s"))
        if on_wait is not None and now >= report_at:
            on_wait(f"still deploying after {now - start:.0f} s: {deploy_status()}")
            report_at += REPORT_EVERY_S
        time.sleep(0.25)


class DeployFailed(RuntimeError):
    """Ray Serve gave up on the deployment, and its message says what a replica raised."""


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*): ")


def replica_error(message: str) -> str | None:
    """What a replica raised as it started, from Ray Serve's deployment message ("The deployment failed to start 3
    times in a row ... Error:" and the replica's traceback, 100 lines of Ray's frames): its last exception line and
    the lines after it (dlperf's WorkloadError adds the user's file and line there), None where there is none. The
    error said only "deploying application dlperf failed: Failed to update the deployments ['dlperf']."."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", message).rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        found = _EXCEPTION_LINE.match(lines[i])
        if found:
            name = found.group(1).rsplit(".", 1)[-1]  # dlperf.errors.WorkloadError: WorkloadError
            return "\n".join([name + lines[i][len(found.group(1)):], *lines[i + 1:]])
    return None


_REPLICA_NODE = re.compile(r"\(pid=\d+, ip=([^,)\s]+)")  # "(pid=4433, ip=192.0.2.2, actor_id=...)" (Ray 2.60)


def _failed_nodes(messages: set[str]) -> str:
    """' on node 192.0.2.2' (nodes, by their IP) where Ray Serve's messages name the failed replicas' nodes."""
    ips = sorted({found.group(1) for m in messages for found in _REPLICA_NODE.finditer(m)})
    return f" on node{'s' if len(ips) > 1 else ''} {', '.join(ips)}" if ips else ""


def _status_name(status: Any) -> str:
    """'RUNNING' of a Ray Serve status enum (a str enum, or its str 'ApplicationStatus.RUNNING')."""
    return str(getattr(status, "value", status)).rsplit(".", 1)[-1]


def deploy_status() -> str:
    """Where the deployment stands, in Ray Serve's words: replicas running of those asked, and its message."""
    try:
        app = _serve().status().applications.get(APP_NAME)
    except Exception as exc:
        return f"Ray Serve's status could not be read: {type(exc).__name__}: {exc}"
    deployment = None if app is None else app.deployments.get(APP_NAME)
    if deployment is None:
        return "the application is not created yet"
    states = {_status_name(k): int(v) for k, v in deployment.replica_states.items()}
    text = f"{states.get('RUNNING', 0)} of {sum(states.values())} replicas running"
    message = str(deployment.message or "")
    raised = replica_error(message)
    if raised is not None:
        # a replica that raised as it started, retried: Ray's message and 40 lines of its frames, twice (the 30 s
        # report and the timeout's error), with the replica's own error at the very end
        said = re.sub(r"\x1b\[[0-9;]*m", "", message).strip().splitlines()[0].strip()
        message = f"{said.removesuffix('Error:').strip()} {raised}"
    return text + (f"; Ray Serve says: {message}" if message else "")


def serve_on_ray(config: ServeConfig, options: RayServeOptions,
                 on_ready: Callable[[RunningOnRay], None] | None = None, *,
                 on_wait: Callable[[str], None] | None = None) -> int:
    """Deploy, serve until SIGTERM/SIGINT, then delete the deployment (Ray Serve drains each replica). A signal
    while deploying removes the deployment and raises `DeployInterrupted`."""
    received: list[int] = []
    stopped = threading.Event()

    def handle(sig: int, frame: FrameType | None) -> None:
        received.append(sig)
        stopped.set()

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, handle) for s in signals}

    def take_signals() -> None:  # again: ray.init set its own SIGTERM handler
        for s in signals:
            signal.signal(s, handle)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    try:
        running = start_on_ray(config, options, on_wait=on_wait,
                               stop=lambda: received[0] if received else None, after_init=take_signals)
    except BaseException:
        restore()
        raise
    try:
        if on_ready is not None:
            on_ready(running)
        while not stopped.wait(0.5):
            pass
    finally:
        restore()
        running.stop()
    return 0


__all__ = ["DEPLOY_TIMEOUT_S", "DeployInterrupted", "RayServeOptions", "ReplicaStats", "RunningOnRay",
           "build_application", "check_config", "check_cpus", "check_reachable", "deploy_status", "deployment_options",
           "parse_autoscale", "replica_stats", "serve_on_ray", "start_on_ray"]
