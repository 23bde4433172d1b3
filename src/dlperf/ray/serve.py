"""`dlperf serve --ray`: the same server (app, batcher, protocol) as replicas of a Ray Serve deployment.

Each replica builds its own `ServerState` from the same `ServeConfig` (model, batching, instances) and
serves the same Starlette app as `dlperf serve`, as the deployment's ASGI ingress; Ray Serve's HTTP proxy
spreads requests over the replicas, each of which batches its own share. The proxy prefers a replica on its
own node while that one has room (`max_ongoing_requests`); the others take the overflow.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from dlperf.errors import ConfigError, ServingError, require
from dlperf.serve.service import ServeConfig

APP_NAME = "dlperf"


@dataclass(frozen=True)
class RayServeOptions:
    """How many replicas (fixed, or autoscaled between MIN and MAX) and where the Ray cluster is."""

    replicas: int = 1
    autoscale: tuple[int, int] | None = None
    address: str | None = None
    """None: start a local Ray instance; else the address of a running cluster (HOST:PORT or 'auto')."""
    proxy_location: str = "HeadOnly"
    """'HeadOnly' (one HTTP proxy, on the head node) or 'EveryNode' (one per node, same port)."""

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be >= 1, got {self.replicas}")
        if self.autoscale is not None:
            low, high = self.autoscale
            if low < 0 or high < 1 or low > high:
                raise ConfigError(f"--autoscale {low}:{high}: give MIN:MAX with 0 <= MIN <= MAX and MAX >= 1")
        if self.proxy_location not in ("HeadOnly", "EveryNode"):
            raise ConfigError(f"unknown proxy location '{self.proxy_location}': use HeadOnly or EveryNode")


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
        "ray_actor_options": {"num_cpus": float(config.threads or 1)},
        "graceful_shutdown_timeout_s": config.exit_timeout_s,
        "health_check_period_s": 5.0,
    }


class _Replica:
    """One replica: the state `dlperf serve` builds, served by the same ASGI app."""

    def __init__(self, config: ServeConfig) -> None:
        from dlperf.serve.server import set_switch_interval
        from dlperf.serve.service import build_state

        set_switch_interval()
        self.config = config
        self.state = build_state(config)

    def __serve_build_asgi_app__(self) -> Any:
        from dlperf.serve.app import create_app

        return create_app(self.state)

    def check_health(self) -> None:
        if not self.state.ready and not self.state.draining:
            raise ServingError("the replica's model is not ready")

    def record_routing_stats(self) -> dict[str, Any]:
        """This replica's own counters (Ray Serve's hook for per-replica load; also read by
        `replica_stats`): requests in flight and queued, and since start the requests, items and batches served."""
        import ray

        served = self.state.stats(None, None)["model_stats"]
        return {
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


def _serve() -> Any:
    require("ray", "ray")
    return require("ray.serve", "ray")


def build_application(config: ServeConfig, options: RayServeOptions) -> Any:
    """The bound Ray Serve application (deployment with the ASGI ingress) for `config`."""
    serve = _serve()
    replica = serve.ingress()(_Replica)
    return serve.deployment(replica, **deployment_options(config, options)).bind(config)


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


REPLICA_ACTOR_PREFIX = f"SERVE_REPLICA::{APP_NAME}#{APP_NAME}#"
"""How Ray Serve names a replica actor of this deployment (namespace 'serve')."""


def replica_stats(timeout_s: float = 30.0) -> list[ReplicaStats]:
    """Every live replica's counters, asked of each replica actor through Ray, sorted by replica name.

    Uses the actor names Ray Serve gives replicas and its `record_routing_stats` actor method, which calls
    the replica's hook of that name: Ray Serve internals, so a Ray upgrade that changes them fails here,
    with this message, rather than giving wrong numbers."""
    import ray

    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "serve" and a["name"].startswith(REPLICA_ACTOR_PREFIX))
    out = []
    for name in names:
        try:
            actor = ray.get_actor(name, namespace="serve")
            raw = ray.get(actor.record_routing_stats.remote(), timeout=timeout_s)
        except ValueError:  # the replica stopped between listing and asking
            continue
        except Exception as exc:
            raise ServingError(f"cannot read the statistics of Ray Serve replica {name}: {type(exc).__name__}: "
                               f"{exc} (this Ray version may name or call replicas differently)") from exc
        out.append(ReplicaStats(name.removeprefix(REPLICA_ACTOR_PREFIX), str(raw["node_id"]), int(raw["pid"]),
                                int(raw["in_flight"]), int(raw["pending"]), int(raw["requests"]), int(raw["failed"]),
                                int(raw["items"]), int(raw["batches"])))
    return out


@dataclass
class RunningOnRay:
    """A deployment on Ray Serve; `url` is host:port of its HTTP proxy, no scheme."""

    host: str
    port: int
    owns_ray: bool

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
        """Delete the deployment; shut Ray Serve down too unless other applications still run on it."""
        serve = _serve()
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        others: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            others = dict(serve.status().applications)
        if not others:
            serve.shutdown()
        if self.owns_ray:
            import ray

            ray.shutdown()

    def __enter__(self) -> RunningOnRay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_on_ray(config: ServeConfig, options: RayServeOptions | None = None) -> RunningOnRay:
    """Deploy and return once every replica is ready (loaded and warmed up) and the proxy listens."""
    options = options or RayServeOptions()
    serve = _serve()
    import ray

    check_config(config)
    owns = False
    if not ray.is_initialized():
        try:
            ray.init(address=options.address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ServingError(f"cannot start or reach Ray at '{options.address or 'a new local instance'}': "
                               f"{exc}") from exc
        owns = True
    try:
        serve.start(http_options={"host": config.host, "port": config.port, "location": options.proxy_location})
        if APP_NAME in serve.status().applications:
            raise ServingError(f"an application named '{APP_NAME}' already runs on this Ray cluster: stop that "
                               f"`dlperf serve --ray` first (or `serve.delete('{APP_NAME}')`)")
        serve.run(build_application(config, options), name=APP_NAME, route_prefix="/", blocking=False)
    except Exception as exc:
        with contextlib.suppress(Exception):
            if not serve.status().applications:
                serve.shutdown()
        if owns:
            ray.shutdown()
        if isinstance(exc, ServingError):
            raise
        raise ServingError(f"the Ray Serve deployment of '{config.model or config.variants}' failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    return RunningOnRay(config.host, config.port, owns)


def serve_on_ray(config: ServeConfig, options: RayServeOptions,
                 on_ready: Callable[[RunningOnRay], None] | None = None) -> int:
    """Deploy, serve until SIGTERM/SIGINT, then delete the deployment (Ray Serve drains each replica)."""
    running = start_on_ray(config, options)
    stop = threading.Event()

    def handle(sig: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if on_ready is not None:
            on_ready(running)
        while not stop.wait(0.5):
            pass
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        running.stop()
    return 0


__all__ = ["RayServeOptions", "ReplicaStats", "RunningOnRay", "build_application", "check_config",
           "deployment_options", "parse_autoscale", "replica_stats", "serve_on_ray", "start_on_ray"]
