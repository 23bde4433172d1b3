"""`dlperf serve`: serve a workload or an optimized artifact over KServe v2 / Open Inference Protocol."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from dlperf.cli.common import ALLOCATOR_CHOICES, TOKEN_FILE_HELP, WORKLOAD_HELP, bearer_token
from dlperf.errors import ConfigError, require_installed
from dlperf.optimize.artifact_notes import artifact_lines, batch_dependence_notes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", metavar="WORKLOAD_OR_ARTIFACT",
                        help=f"{WORKLOAD_HELP}, or a directory from `dlperf optimize --export`")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=DIR|WORKLOAD",
                        help="A/B: serve this artifact folder or workload (zoo:NAME, file.py:NAME) as variant NAME "
                             "(give two or more; replaces the target)")
    parser.add_argument("--split", default=None, metavar="W1:W2",
                        help="traffic weights of the variants, e.g. 90:10 (default equal); sticky per "
                             "routing_key parameter or X-Routing-Key header")
    parser.add_argument("--model-name", default=None, help="the name clients use (default: the workload's)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--grpc-port", type=int, default=None, metavar="PORT",
                        help="also serve the protocol over gRPC on PORT (Triton's 8001), for tritonclient.grpc and "
                             "perf_analyzer -i grpc: same models, batching, metrics (default: HTTP only)")
    parser.add_argument("--grpc-stream-window", type=int, default=None, metavar="N",
                        help="at most N requests of one gRPC stream (ModelStreamInfer) in the server, running or "
                             "answered and not yet written; past it the stream is read only as answers go out "
                             "(default: 1024, ServeConfig.grpc_stream_window)")
    parser.add_argument("--max-batch-size", type=int, default=32,
                        help="largest batch of items the dynamic batcher forms (0 disables batching)")
    parser.add_argument("--max-queue-delay-ms", type=float, default=5.0,
                        help="longest wait for a fuller batch after the oldest request arrived (default 5)")
    parser.add_argument("--fixed-wait", action="store_true",
                        help="always wait the full queue delay for a partial batch (Triton's behaviour) "
                             "instead of ending the wait when traffic shows it cannot fill the batch")
    parser.add_argument("--instances", type=int, default=1, help="model instances (threads) running batches")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default torch's); for an ONNX Runtime or OpenVINO artifact, its "
                             "threads per instance (default those it was exported with)")
    parser.add_argument("--max-queue-size", type=int, default=0,
                        help="queued requests beyond which new ones get 503 at once, per priority level with "
                             "--priority-levels (default 0 = unbounded)")
    parser.add_argument("--reject-status", type=int, default=503, choices=[429, 503],
                        help="HTTP status for a request refused by a full queue (default 503, as Triton; 429 Too "
                             "Many Requests for clients and gateways that retry on it); with Retry-After: 1")
    parser.add_argument("--timeout-ms", type=float, default=None,
                        help="per-request queue timeout; expired requests get 503 (a request's own "
                             "'timeout' parameter may shorten it)")
    parser.add_argument("--timeout-action", choices=["reject", "delay"], default="reject",
                        help="what a queue timeout does: reject (503, default) or delay: the request is served "
                             "after the queued requests of its level still within their timeout (Triton's "
                             "timeout_action)")
    parser.add_argument("--no-timeout-override", action="store_true",
                        help="ignore a request's own 'timeout' parameter: every request keeps the server's "
                             "(Triton's allow_timeout_override: false)")
    parser.add_argument("--priority-levels", type=int, default=0, metavar="N",
                        help="queue levels 1 (highest) .. N chosen by a request's 'priority' parameter; batches "
                             "are filled from the highest level down (default 0: one level, priority ignored)")
    parser.add_argument("--default-priority-level", type=int, default=0, metavar="L",
                        help="the level of a request without a priority in 1..N (default N, the lowest)")
    parser.add_argument("--priority-queue-policy", action="append", default=[],
                        metavar="L:KEY=VALUE[,KEY=VALUE]",
                        help="level L's own queue policy (Triton's priority_queue_policy; repeatable, one per "
                             "level), overriding the server-wide option there: max_queue_size=N "
                             "(--max-queue-size), timeout_ms=T (--timeout-ms), timeout_action=reject|delay "
                             "(--timeout-action), allow_timeout_override=true|false (--no-timeout-override); "
                             "e.g. 1:max_queue_size=4,timeout_ms=50")
    parser.add_argument("--max-request-mb", type=float, default=64.0,
                        help="larger request bodies are refused with 413 before they are read (default 64)")
    parser.add_argument("--exit-timeout-s", type=float, default=30.0,
                        help="on SIGTERM, how long in-flight requests may take to finish (default 30)")
    parser.add_argument("--body-timeout-s", type=float, default=60.0,
                        help="a request whose body has not all arrived this long after its headers is answered "
                             "408 (default 60; 0: no limit)")
    parser.add_argument("--token", default=None,
                        help="require 'Authorization: Bearer TOKEN' on everything but /v2/health/*; a command "
                             "line is visible to every user of the host (ps): prefer --token-file")
    parser.add_argument("--token-file", default=None, metavar="FILE",
                        help=TOKEN_FILE_HELP)
    parser.add_argument("--allow-client-shm", action="store_true",
                        help="let clients on this host pass tensors in system shared memory (Triton's "
                             "system_shared_memory extension and --allow-client-shm=true; tritonclient's "
                             "register_system_shared_memory): no tensor data crosses HTTP")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default cpu; an exported artifact's own "
                        "device)")
    parser.add_argument("--allocator", default="auto", choices=ALLOCATOR_CHOICES,
                        help="the heap allocator the server runs with, preloaded by restarting the command with "
                             "LD_PRELOAD. auto (default): jemalloc or tcmalloc if your LD_PRELOAD already names one, "
                             "else tcmalloc where it is installed, else glibc; auto never restarts a server started "
                             "in-process or with --ray. Interleaved on ResNet-18, tcmalloc kept RSS flat and was "
                             "4%% faster at c=1 than glibc, jemalloc 9%% slower (docs/serve.md, Memory)")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    ray = parser.add_argument_group("Ray Serve (scale out over replicas; see docs/ray.md)")
    ray.add_argument("--ray", action="store_true",
                     help="serve as a Ray Serve deployment: each replica runs this same server (model, batching, "
                          "protocol) and Ray's HTTP proxy listens on --host/--port")
    ray.add_argument("--replicas", type=int, default=None, metavar="N", help="with --ray: N replicas (default 1)")
    ray.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                     help="with --ray: let Ray Serve scale between MIN and MAX replicas with the load "
                          "(instead of --replicas)")
    ray.add_argument("--ray-address", default=None, metavar="ADDR",
                     help="with --ray: the running cluster to deploy to (HOST:PORT or 'auto'; default: start a "
                          "local Ray instance)")
    ray.add_argument("--deploy-timeout-s", type=float, default=None, metavar="S",
                     help="with --ray: remove the deployment again when its replicas are not all running (loaded "
                          "and warmed up) after S seconds (default 600), or sooner when a replica failed to start "
                          "with the same error three times")


def _variants(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        name, sep, target = item.partition("=")
        if not sep or not name or not target:
            raise ConfigError(f"--variant '{item}' is not NAME=DIR: write e.g. --variant a=runs/fp32")
        out.append((name, target))
    return tuple(out)


def _split(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(w) for w in text.split(":"))
    except ValueError as exc:
        raise ConfigError(f"--split '{text}' is not weights like 90:10") from exc


_POLICY_KEYS = ("max_queue_size", "timeout_ms", "timeout_action", "allow_timeout_override")
_BOOLEANS = {"true": True, "false": False}


def _policy_value(key: str, value: str) -> int | float | str | bool:
    """One --priority-queue-policy value as its key takes it; ValueError naming what it should be."""
    if key == "max_queue_size":
        try:
            return int(value)
        except ValueError:
            raise ValueError("a whole number") from None
    if key == "timeout_ms":
        try:
            return float(value)
        except ValueError:
            raise ValueError("a number of milliseconds") from None
    if key == "timeout_action":
        if value.lower() not in ("reject", "delay"):
            raise ValueError("reject or delay")
        return value.lower()
    if value.lower() not in _BOOLEANS:
        raise ValueError("true or false")
    return _BOOLEANS[value.lower()]


def _level_policies(items: list[str]) -> tuple[Any, ...]:
    """--priority-queue-policy values, `L:KEY=VALUE[,KEY=VALUE]` with the keys of `_POLICY_KEYS`."""
    from dlperf.serve.batcher import LevelPolicy

    out = []
    for item in items:
        example = "write e.g. --priority-queue-policy 1:max_queue_size=4,timeout_ms=50"
        level, sep, rest = item.partition(":")
        if not sep or not level.strip().isdigit() or not rest:
            raise ConfigError(f"--priority-queue-policy '{item}' is not LEVEL:KEY=VALUE[,KEY=VALUE]: {example}")
        values: dict[str, Any] = {}
        for pair in rest.split(","):
            key, eq, value = (part.strip() for part in pair.partition("="))
            key = key.replace("-", "_")
            if not eq or key not in _POLICY_KEYS:
                raise ConfigError(f"--priority-queue-policy '{item}': '{pair}' is not one of "
                                  f"{', '.join(k + '=VALUE' for k in _POLICY_KEYS)}; {example}")
            if key in values:
                raise ConfigError(f"--priority-queue-policy '{item}': {key} is given twice")
            try:
                values[key] = _policy_value(key, value)
            except ValueError as exc:
                raise ConfigError(f"--priority-queue-policy '{item}': {key}={value} is not {exc}") from None
        timeout_ms = values.get("timeout_ms")
        out.append(LevelPolicy(int(level), values.get("max_queue_size"),
                               None if timeout_ms is None else timeout_ms / 1000.0, values.get("timeout_action"),
                               values.get("allow_timeout_override")))
    return tuple(out)


def config_from_args(args: argparse.Namespace) -> Any:
    from dlperf.serve.service import ServeConfig

    if args.target and args.variant:
        raise ConfigError("give either WORKLOAD_OR_ARTIFACT or --variant NAME=DIR (two or more), not both")
    if not args.target and not args.variant:
        raise ConfigError("nothing to serve: give zoo:NAME, file.py[:name] or an exported directory, "
                          "or --variant a=DIR_A --variant b=DIR_B")
    if not 0 < args.max_request_mb < math.inf:
        raise ConfigError(f"--max-request-mb must be a positive number, got {args.max_request_mb:g}")
    token = bearer_token(args.token, args.token_file)
    if args.grpc_stream_window is not None and args.grpc_port is None:
        raise ConfigError("--grpc-stream-window bounds the requests of a gRPC stream: add --grpc-port PORT, or drop it")
    from dlperf.optimize.artifact import default_device

    return ServeConfig(
        model=args.target, variants=_variants(args.variant), split=_split(args.split), model_name=args.model_name,
        host=args.host, port=args.port, grpc_port=args.grpc_port,
        grpc_stream_window=(ServeConfig.grpc_stream_window if args.grpc_stream_window is None
                            else args.grpc_stream_window),
        max_batch_size=args.max_batch_size,
        max_queue_delay_s=args.max_queue_delay_ms / 1000.0, adaptive_wait=not args.fixed_wait,
        instances=args.instances, max_queue_size=args.max_queue_size, priority_levels=args.priority_levels,
        default_priority_level=args.default_priority_level,
        priority_queue_policy=_level_policies(args.priority_queue_policy), reject_status=args.reject_status,
        timeout_s=None if args.timeout_ms is None else args.timeout_ms / 1000.0, timeout_action=args.timeout_action,
        allow_timeout_override=not args.no_timeout_override, token=token, allow_client_shm=args.allow_client_shm,
        device=default_device(args.target, args.device), threads=args.threads,
        max_request_bytes=int(args.max_request_mb * 1024 * 1024),
        exit_timeout_s=args.exit_timeout_s, body_timeout_s=args.body_timeout_s, log_level=args.log_level,
    )


def ray_options_from_args(args: argparse.Namespace) -> Any:
    """The `RayServeOptions` of `--ray`, or None without it; Ray flags without `--ray` are errors."""
    if not args.ray:
        given = [flag for flag, value in (("--replicas", args.replicas), ("--autoscale", args.autoscale),
                                          ("--ray-address", args.ray_address),
                                          ("--deploy-timeout-s", args.deploy_timeout_s)) if value is not None]
        if given:
            raise ConfigError(f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} --ray: add --ray to "
                              "serve on Ray Serve")
        return None
    from dlperf._device import check_ray_device
    from dlperf.ray.serve import DEPLOY_TIMEOUT_S, RayServeOptions, parse_autoscale

    if args.grpc_port is not None:
        raise ConfigError("--grpc-port does not go with --ray: Ray Serve's proxy here speaks HTTP; serve without "
                          "--ray for gRPC")
    if args.allow_client_shm:
        raise ConfigError("--allow-client-shm does not go with --ray: Ray's proxy sends a region's registration "
                          "and the requests that use it to any replica; serve without --ray on the clients' host")

    check_ray_device(str(getattr(args, "device", "cpu") or "cpu"), "--ray", "replica")
    if args.replicas is not None and args.autoscale is not None:
        raise ConfigError("give either --replicas N (a fixed number) or --autoscale MIN:MAX, not both")
    autoscale = None if args.autoscale is None else parse_autoscale(args.autoscale)
    timeout = DEPLOY_TIMEOUT_S if args.deploy_timeout_s is None else args.deploy_timeout_s
    # here, not where Ray is imported: that came after "deploying on Ray Serve ..." (and the model's loading)
    require_installed("ray", "ray")
    return RayServeOptions(replicas=1 if args.replicas is None else args.replicas, autoscale=autoscale,
                           address=args.ray_address, deploy_timeout_s=timeout)


def _run_on_ray(config: Any, options: Any, err: Any) -> int:
    from dlperf.ray.serve import DeployInterrupted, RunningOnRay, serve_on_ray

    scale = (f"autoscaled {options.autoscale[0]}-{options.autoscale[1]} replicas" if options.autoscale
             else f"{options.replicas} replica{'s' * (options.replicas != 1)}")
    err.print(f"deploying on Ray Serve ({scale}, Ray at {options.address or 'a new local instance'}) ...",
              markup=False)

    def on_ready(running: RunningOnRay) -> None:
        stats = running.replica_stats()
        err.print(f"serving on Ray Serve at http://{running.url}/v2  [{running.replicas()} replica(s) running; "
                  "/metrics and statistics are per replica]", markup=False)
        for name, model in (stats[0].models if stats else {}).items():  # every replica serves the same
            _print_model(err, config, running.url, name, model, grpc_address=None, per_replica=True)
            _print_notes(err, config, model)

    try:
        return serve_on_ray(config, options, on_ready=on_ready,
                            on_wait=lambda text: err.print(f"  {text}", markup=False))
    except DeployInterrupted as exc:
        err.print(str(exc), markup=False)
        return 128 + exc.signum


def instance_threads(config: Any, torch_threads: int | None, engine: str | None, engine_threads: int | None) -> str:
    """'2 instances x 2 torch threads', or an engine artifact's threads and whose they are."""
    instances = f"{config.instances} instance{'s' * (config.instances != 1)}"
    if torch_threads is not None:
        instances += f" x {torch_threads} torch thread{'s' * (torch_threads != 1)}"
    elif engine is not None and engine_threads is not None:
        whose = "--threads" if config.threads else "the artifact's; --threads sets others"
        instances += f" x {engine_threads} {engine} thread{'s' * (engine_threads != 1)} ({whose})"
    return instances


def settings_line(config: Any, max_batch_size: int, torch_threads: int | None, engine: str | None = None,
                  engine_threads: int | None = None) -> str:
    """What the server runs with, in one line under its address: batching, instances and threads, the queue.
    `max_batch_size` is the model's own (0 when it has no batch dimension); `torch_threads` None for a model
    that torch does not run, `engine` and `engine_threads` (per instance) for an engine's artifact."""
    if max_batch_size > 1:
        wait = "adaptive" if config.adaptive_wait else "fixed"
        batching = f"max batch {max_batch_size}, queue delay {config.max_queue_delay_s * 1e3:g} ms ({wait})"
    else:
        batching = "off" if max_batch_size == 0 else "max batch 1"
    instances = instance_threads(config, torch_threads, engine, engine_threads)

    def queue(size: int, timeout_s: float | None, action: str, override: bool) -> str:
        bound = f"at most {size} queued" if size else "unbounded"
        timeout = f"timeout {timeout_s * 1e3:g} ms" if timeout_s else "no timeout"
        if action == "delay" and timeout_s:
            timeout += " (then delayed)"
        elif action == "delay" and override:  # only a request's own timeout can run out
            timeout += " (a request's own timeout delays it)"
        return f"{bound}, {timeout}" + ("" if override else ", requests' own timeouts ignored")

    text = (f"batching: {batching}; {instances}; queue: "
            f"{queue(config.max_queue_size, config.timeout_s, config.timeout_action, config.allow_timeout_override)}")
    if config.priority_levels:
        per_level = "".join(f"; level {p.level}: " + queue(config.queue_size_of(p.level), config.timeout_of(p.level),
                                                          config.timeout_action_of(p.level),
                                                          config.allows_timeout_override(p.level))
                            for p in config.priority_queue_policy)
        text += (f" per level; priority levels 1-{config.priority_levels} "
                 f"(default {config.default_priority_level or config.priority_levels}){per_level}")
    if config.reject_status != 503:
        text += f"; a full queue answers {config.reject_status}"
    if config.allow_client_shm:
        text += "; clients' system shared memory allowed"
    if config.token:  # whether, never which
        text += "; bearer token required (all but /v2/health/*)"
    return text


def run(args: argparse.Namespace) -> int:
    from dlperf.cli.common import SIGTERM_EXIT, Terminated, error_console, sigterm_interrupts, use_allocator
    from dlperf.cli.progress import warmup_progress
    from dlperf.serve.server import serve
    from dlperf.serve.service import build_state

    config = config_from_args(args)
    ray_options = ray_options_from_args(args)
    err = error_console()
    use_allocator(args, "serve", on_ray=ray_options is not None, specs=_specs(config))
    if ray_options is not None:
        from dlperf.ray.serve import check_config

        check_config(config)
        return _run_on_ray(config, ray_options, err)
    err.print(f"loading {config.model or ', '.join(f'{n}={t}' for n, t in config.variants)} ...", markup=False)
    try:
        # SIGTERM while loading and warming up, before the server takes the signal over to drain: say so and
        # exit 143 (it ended the process without a word after "loading ...")
        with sigterm_interrupts(), warmup_progress() as on_warmup:
            state = build_state(config, on_warmup=on_warmup)
    except Terminated as exc:
        err.print(f"{exc} while loading and warming up the model: the server never listened", markup=False)
        return SIGTERM_EXIT
    return serve(config, on_ready=lambda ready, url: _print_ready(err, config, ready, url), state=state)


def _specs(config: Any) -> list[str]:
    """The workloads or artifact folders the server loads."""
    return [config.model] if config.model else [spec for _, spec in config.variants]


def _print_ready(err: Any, config: Any, state: Any, url: str) -> None:
    """Where the server listens, for each model, and the settings it runs with."""
    for name, model in state.served_models().items():
        _print_model(err, config, url, name, model, state.grpc_address, per_replica=False)
        _print_notes(err, config, model)
    err.print("  " + memory_line(_specs(config)), markup=False)


def _print_notes(err: Any, config: Any, model: dict[str, Any]) -> None:
    for line in artifact_lines(_specs(config)):
        err.print(f"  {line}", markup=False)
    if model["max_batch_size"] > 1:
        for note in batch_dependence_notes(_specs(config)):
            err.print(f"  note: {note}", markup=False)


def _print_model(err: Any, config: Any, url: str, name: str, model: dict[str, Any], grpc_address: str | None,
                 per_replica: bool) -> None:
    """One served model's address and settings (`served_models` data): a workload, or an exported artifact
    that runs on torch, takes torch's threads."""
    variants = ", ".join(f"{v} ({w})" for v, w in model["variants"])
    where = "each replica serves" if per_replica else "serving"
    err.print(f"{'  ' * per_replica}{where} model '{name}' at http://{url}/v2/models/{name}  [variants: {variants}]  "
              f"metrics at http://{url}/metrics", markup=False)
    if grpc_address is not None:
        err.print(f"  and over gRPC at {grpc_address} (inference.GRPCInferenceService)", markup=False)
    err.print("  " + settings_line(config, model["max_batch_size"], model["torch_threads"], model.get("engine"),
                                   model.get("engine_threads")), markup=False)
    per_variant = [tuple(v) for v in model.get("variant_threads") or []]
    if len({v[1:] for v in per_variant}) > 1:  # the line above is the first variant's: say each one's
        err.print("  threads per variant: " + "; ".join(
            f"{v}: {instance_threads(config, torch_threads, engine, engine_threads)}"
            for v, torch_threads, engine, engine_threads in per_variant), markup=False)


def memory_line(specs: Sequence[str] = ()) -> str:
    """Which allocator the server runs with (and why, when an artifact's engine decided it) and when it returns
    freed memory."""
    from dlperf.cli.common import artifact_engines
    from dlperf.measure.allocator import GLIBC_ONLY_ENGINES, active_allocator
    from dlperf.serve.server import IDLE_TRIM_S

    current = active_allocator()
    why = "".join(f" ({e} artifact: {GLIBC_ONLY_ENGINES[e].split(' (')[0]})"
                  for e in sorted(artifact_engines(specs)) if e in GLIBC_ONLY_ENGINES and current == "glibc")
    return (f"memory: {current} malloc{why}; freed memory goes back to the OS after {IDLE_TRIM_S:g} s "
            "without requests")
