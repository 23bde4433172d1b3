"""`dlperf serve --ray`: the same server (app, batcher, protocol) as replicas of a Ray Serve deployment.

Each replica builds its own `ServerState` from the same `ServeConfig` (model, batching, instances) and
serves the same Starlette app as `dlperf serve`, as the deployment's ASGI ingress; Ray Serve's HTTP proxy
spreads requests over the replicas, each of which batches its own share.
"""

from __future__ import annotations

import contextlib
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


def max_ongoing_requests(config: ServeConfig) -> int:
    """Requests Ray Serve lets into one replica at once: enough to fill a batch on every instance, and the
    queue behind them (Ray's default of 5 would cap every batch at 5)."""
    batch = max(1, config.max_batch_size)
    queue = config.max_queue_size or batch * config.instances
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
    return {
        "name": APP_NAME,
        **scaling,
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

    def stop(self) -> None:
        serve = _serve()
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
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

    if config.port == 0:
        raise ConfigError("--port 0 is not supported with --ray: Ray Serve's proxy needs a fixed port")
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
        serve.run(build_application(config, options), name=APP_NAME, route_prefix="/", blocking=False)
    except Exception as exc:
        with contextlib.suppress(Exception):
            serve.shutdown()
        if owns:
            ray.shutdown()
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


__all__ = ["RayServeOptions", "RunningOnRay", "build_application", "deployment_options", "parse_autoscale",
           "serve_on_ray", "start_on_ray"]
