"""The serving logic behind the HTTP glue: models and their A/B variants, infer as decode -> batch -> encode.

`ServerState.infer()` takes a request body and headers and returns a `Reply`; `app.py` only moves bytes
between it and Starlette. Each variant has its own Batcher, InstancePool and metric Recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import hmac
import json
import math
import random
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dlperf.errors import ConfigError, ServingError
from dlperf.measure.env import MIN_THREAD_LIMIT, THREADS_PER_CPU, check_per_cpu, check_threads
from dlperf.serve.batcher import (
    TIMEOUT_ACTIONS,
    Batcher,
    BatchPolicy,
    LevelPolicy,
    Occupancy,
    QueueFull,
    ShuttingDown,
    Work,
)
from dlperf.serve.instances import (
    InstancePool,
    ServedModel,
    Signature,
    TensorSpec,
    load_served_model,
    per_item,
    validate_inputs,
    wire_shape,
)
from dlperf.serve.metrics import DEFAULT_VARIANT, Metrics, Recorder
from dlperf.serve.protocol import (
    MAX_PRIORITY,
    InferRequest,
    InferResponse,
    ProtocolError,
    Tensor,
    declared_datatypes,
    decode_request,
    encode_response,
    error_body,
    header_length_of,
    tensor_bytes,
)
from dlperf.serve.shm import SharedMemoryRegistry

MiB = 1024 * 1024
_MODEL_NAME = re.compile(r"[A-Za-z0-9._-]+")
SERVER_NAME = "dlperf"
EXTENSIONS = ("binary_tensor_data", "statistics", "model_configuration")
ROUTING_HEADER = "x-routing-key"
ROUTING_PARAMETER = "routing_key"
T = TypeVar("T")

# ServeConfig's fields checked for their type, and the `dlperf serve` option of each where its name differs in more
# than dashes: a message names both, as the CLI's user and a Python caller each wrote one of them
_INT_FIELDS = ("port", "grpc_port", "grpc_stream_window", "max_batch_size", "instances", "max_queue_size",
               "priority_levels", "default_priority_level", "reject_status", "threads", "max_request_bytes")
_NUMBER_FIELDS = ("max_queue_delay_s", "timeout_s", "exit_timeout_s", "body_timeout_s")
_OPTIONAL_FIELDS = frozenset({"grpc_port", "threads", "timeout_s"})
_OPTIONS = {"timeout_s": "--timeout-ms (timeout_s, in seconds)",
            "max_queue_delay_s": "--max-queue-delay-ms (max_queue_delay_s, in seconds)",
            "max_request_bytes": "--max-request-mb (max_request_bytes)"}


def _option(name: str) -> str:
    """How a message names ServeConfig's field `name`: the CLI's option and the field, e.g. '--port (port)'."""
    return _OPTIONS.get(name, f"--{name.replace('_', '-')} ({name})")


@dataclass(frozen=True)
class ServeConfig:
    """Everything `dlperf serve` takes. Exactly one of `model` and `variants` is set."""

    model: str | None = None
    variants: tuple[tuple[str, str], ...] = ()
    """(variant name, workload spec or artifact dir) for A/B serving."""
    split: tuple[int, ...] = ()
    """Traffic weights of the variants, e.g. (90, 10); default equal."""
    model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    grpc_port: int | None = None
    """Also serve the Open Inference Protocol over gRPC on this port (`serve.grpc_service`); None: HTTP only."""
    grpc_stream_window: int = 1024
    """At most this many requests of one ModelStreamInfer stream are in the server at a time, running or answered
    but not yet written; past it the server stops reading the stream until an answer is written (so a client that
    sends faster than it reads is held back by HTTP/2 flow control instead of filling the server's memory)."""
    max_batch_size: int = 32
    """Largest batch of items the dynamic batcher forms; 0 or 1: no batching, each request runs alone (as
    `--max-batch-size 0`). A negative value is refused."""
    max_queue_delay_s: float = 0.005
    adaptive_wait: bool = True
    instances: int = 1
    max_queue_size: int = 0
    timeout_s: float | None = None
    timeout_action: str = "reject"
    """What a queue timeout does: 'reject' (503) or 'delay' (served after the level's requests still in time)."""
    allow_timeout_override: bool = True
    """Whether a request's own 'timeout' parameter may shorten the server's (Triton's allow_timeout_override)."""
    priority_levels: int = 0
    default_priority_level: int = 0
    priority_queue_policy: tuple[LevelPolicy, ...] = ()
    """Levels with their own queue bound, timeout and timeout action (Triton's `priority_queue_policy`)."""
    reject_status: int = 503
    """The HTTP status of a request refused by a full queue: 503 (Triton's) or 429 (Too Many Requests)."""
    token: str | None = None
    allow_client_shm: bool = False
    """Take tensors in the clients' system shared memory (Triton's --allow-client-shm; `serve.shm`)."""
    device: str = "cpu"
    threads: int | None = None
    max_request_bytes: int = 64 * MiB
    exit_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    """A request whose body has not all arrived this long after its headers is answered 408 (0: no limit). A
    stalled client held its connection and handler for good, and the drain at exit for its whole timeout."""
    log_level: str = "warning"

    def __post_init__(self) -> None:
        # a Python caller's wrong type came out as a bare TypeError of a comparison ('<=' between int and str)
        for fields, kinds, word in ((_INT_FIELDS, int, "an integer"), (_NUMBER_FIELDS, (int, float), "a number")):
            for name in fields:
                value = getattr(self, name)
                if not (value is None and name in _OPTIONAL_FIELDS) and (
                        not isinstance(value, kinds) or isinstance(value, bool)):
                    raise ConfigError(f"{_option(name)} must be {word}, got {value!r}")
        if (self.model is None) == (not self.variants):
            # the CLI refuses both and neither itself, in its own words: this is a Python caller's
            raise ConfigError("ServeConfig serves either one model (model='zoo:NAME', a workload file or an exported "
                              "directory) or two or more variants (variants=(('a', DIR_A), ('b', DIR_B))), not both "
                              "and not neither")
        if self.variants:
            names = [n for n, _ in self.variants]
            if len(self.variants) < 2:
                raise ConfigError("A/B serving needs at least two --variant NAME=DIR (variants)")
            if len(set(names)) != len(names):
                raise ConfigError(f"variant names must be distinct, got {names}")
            if self.split and len(self.split) != len(self.variants):
                raise ConfigError(f"--split (split) has {len(self.split)} weights for {len(self.variants)} variants: "
                                  "give one weight per variant, e.g. --split 90:10")
            if self.split and (any(w < 0 for w in self.split) or sum(self.split) <= 0):
                raise ConfigError(f"--split (split) weights must be >= 0 and not all 0, got {self.split}")
        elif self.split:
            raise ConfigError("--split (split) only applies with --variant (variants)")
        if self.model_name is not None and (not _MODEL_NAME.fullmatch(self.model_name)
                                            or self.model_name in (".", "..")):
            raise ConfigError(f"--model-name (model_name) {self.model_name!r}: a model name is one URL path segment "
                              "(/v2/models/NAME): letters, digits and . _ - only, e.g. encoder-v2")
        for name, _ in self.variants:  # a '/' made the metrics' model/variant keys ambiguous
            if not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
                raise ConfigError(f"--variant {name!r}=...: a variant name is a label value and part of keys "
                                  "(model/variant): letters, digits and . _ - only, e.g. fp32")
        if self.token is not None and not self.token.strip():
            # `--token "$TOKEN"` with the variable unset served every request without one
            raise ConfigError("--token (token) is empty: give the bearer token, or leave --token out for a server "
                              "without one")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"{_option('port')} must be in 0-65535, got {self.port}")
        if self.grpc_port is not None and not 0 <= self.grpc_port <= 65535:
            raise ConfigError(f"{_option('grpc_port')} must be in 0-65535, got {self.grpc_port}")
        if self.grpc_stream_window < 1:
            raise ConfigError(f"{_option('grpc_stream_window')} must be at least 1, got {self.grpc_stream_window}")
        if self.grpc_port is not None and self.grpc_port == self.port != 0:
            raise ConfigError(f"--grpc-port {self.grpc_port} is also --port (grpc_port == port): give gRPC a port of "
                              "its own (Triton: 8001 beside HTTP's 8000)")
        if self.instances < 1:
            raise ConfigError(f"{_option('instances')} must be >= 1, got {self.instances}")
        if self.max_queue_size < 0:
            raise ConfigError(f"{_option('max_queue_size')} must be >= 0 (0 = unbounded), got {self.max_queue_size}")
        if self.reject_status not in (429, 503):
            raise ConfigError(f"{_option('reject_status')} must be 429 or 503, got {self.reject_status}")
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ConfigError(f"{_option('timeout_s')} must be a positive number, got {self.timeout_s * 1000:g} ms")
        if not 0 <= self.exit_timeout_s < math.inf:
            raise ConfigError(f"{_option('exit_timeout_s')} must be a number >= 0, got {self.exit_timeout_s:g}")
        if not 0 <= self.body_timeout_s < math.inf:
            raise ConfigError(f"{_option('body_timeout_s')} must be a number >= 0 (0: no limit), got "
                              f"{self.body_timeout_s:g}")
        if self.timeout_action not in TIMEOUT_ACTIONS:
            raise ConfigError(f"--timeout-action (timeout_action) must be reject or delay, got '{self.timeout_action}'")
        if self.max_request_bytes < 1024:
            raise ConfigError(f"{_option('max_request_bytes')} is too small ({self.max_request_bytes} bytes)")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"{_option('threads')} must be >= 1, got {self.threads}")
        BatchPolicy(self.max_batch_size, self.max_queue_delay_s, priority_levels=self.priority_levels,
                    default_priority_level=self.default_priority_level)  # validates
        levels = [p.level for p in self.priority_queue_policy]
        if levels and not self.priority_levels:
            raise ConfigError("--priority-queue-policy needs --priority-levels N (the levels it applies to)")
        for level in levels:
            if not 1 <= level <= self.priority_levels:
                raise ConfigError(f"--priority-queue-policy {level}: the level must be in 1..{self.priority_levels} "
                                  "(--priority-levels)")
            if levels.count(level) > 1:
                raise ConfigError(f"--priority-queue-policy {level} is given more than once: give each level once, "
                                  "with all its settings (e.g. 1:max_queue_size=4,timeout_ms=50)")

    def setting_of(self, level: int | None, name: str) -> Any:
        """A queue setting (`max_queue_size`, `timeout_s`, `timeout_action`, `allow_timeout_override`) of a
        priority level: its `--priority-queue-policy` value where it gives one, else the server-wide option's
        (also for `level` None)."""
        own = next((getattr(p, name) for p in self.priority_queue_policy if p.level == level), None)
        return getattr(self, name) if own is None else own

    def queue_size_of(self, level: int) -> int:
        """The queue bound of a priority level (0 = unbounded): its own, else --max-queue-size."""
        return int(self.setting_of(level, "max_queue_size"))

    def timeout_of(self, level: int) -> float | None:
        """The queue timeout of a priority level's requests (None = none): its own, else --timeout-ms."""
        value: float | None = self.setting_of(level, "timeout_s")
        return value

    def timeout_action_of(self, level: int) -> str:
        """'reject' or 'delay' for a priority level's timed-out requests: its own, else --timeout-action."""
        return str(self.setting_of(level, "timeout_action"))

    def allows_timeout_override(self, level: int) -> bool:
        """Whether a request at `level` may shorten its queue timeout: the level's own setting, else the server's."""
        return bool(self.setting_of(level, "allow_timeout_override"))

    @property
    def delayed_levels(self) -> frozenset[int]:
        """The levels whose timed-out requests are delayed, not failed (0 stands for the one level without
        --priority-levels)."""
        levels = range(1, self.priority_levels + 1) if self.priority_levels else (0,)
        return frozenset(level for level in levels if self.timeout_action_of(level) == "delay")

    @property
    def queue_capacity(self) -> int:
        """Requests the queue holds at most, all levels together (0 = unbounded): the value of the
        queue-capacity gauge, which the saturation alert compares with all pending requests."""
        if not self.priority_levels:
            return self.max_queue_size
        sizes = [self.queue_size_of(level) for level in range(1, self.priority_levels + 1)]
        return 0 if 0 in sizes else sum(sizes)

    def to_dict(self) -> dict[str, Any]:
        import dataclasses

        data = dataclasses.asdict(self)
        data["token"] = "***" if self.token else None
        data["version"] = 1
        return data


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    after: Callable[[], None] | None = None
    """Run once the reply is sent (bookkeeping kept off the request's latency); the HTTP layer calls it on
    the event loop right after writing the body, so before it serves any other request unless that write
    had to wait for a slow client. Not called if sending raises."""
    gone: Callable[[], None] | None = None
    """Run instead of `after` when the client went away before the reply could be written (the HTTP layer
    knows where its protocol says so: `app.CLIENT_GONE_KEY`; uvicorn's send to such a client returns
    quietly)."""


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, error_body(message), headers or {})


def internal_error(exc: Exception) -> str:
    """What a client is told of a fault in the server (HTTP's 500, gRPC's INTERNAL, a stream's error_message)."""
    return f"internal server error: {type(exc).__name__}: {exc}"


@dataclass
class Variant:
    name: str
    model: ServedModel
    batcher: Batcher
    pool: InstancePool
    recorder: Recorder
    policy: BatchPolicy


class ModelEntry:
    """One served model name: one variant, or several with traffic weights (sticky by routing key)."""

    def __init__(self, name: str, variants: list[Variant], weights: list[int]) -> None:
        self.name = name
        self.variants = variants
        self.weights = weights
        self._total = sum(weights)
        self._rng = random.Random()

    @property
    def signature(self) -> Signature:
        return self.variants[0].model.signature

    @property
    def model(self) -> ServedModel:
        return self.variants[0].model

    @property
    def policy(self) -> BatchPolicy:
        return self.variants[0].policy

    @property
    def batching(self) -> bool:
        """Whether requests carry a batch dimension first (the config's max_batch_size > 0)."""
        return self.model.batched and self.policy.max_batch_size > 0

    def choose(self, key: str | None) -> Variant:
        if len(self.variants) == 1:
            return self.variants[0]
        # a key always lands on the same variant (sticky); no key: a weighted draw
        point = zlib.crc32(key.encode()) % self._total if key is not None else int(self._rng.random() * self._total)
        for variant, weight in zip(self.variants, self.weights, strict=False):
            if point < weight:
                return variant
            point -= weight
        return self.variants[-1]


class ServerState:
    """Models, metrics and the server's lifecycle (ready, draining, in-flight requests)."""

    def __init__(self, config: ServeConfig, models: dict[str, ModelEntry], metrics: Metrics) -> None:
        self.config = config
        self.models = models
        self.metrics = metrics
        self.ready = False
        self.draining = False
        self.in_flight = 0
        self.received = 0
        """Inference requests received so far (the memory trimmer's sign of activity)."""
        self.shm = SharedMemoryRegistry() if config.allow_client_shm else None
        """The clients' registered shared-memory regions (None: the extension is off)."""
        self.grpc_address: str | None = None
        """host:port of the gRPC endpoint once it listens (`--grpc-port`); None without one."""
        self._waiting: dict[asyncio.Future[Work], tuple[Batcher, Work]] = {}
        """The requests queued or in a running batch, by the future their handler awaits (`cut_waiting`)."""
        self.reading: dict[asyncio.Task[Any], tuple[int, str, str] | None] = {}
        """The HTTP handlers still reading their request's body, each with the status, failure reason and message
        `cut_reading` cancelled it with (None until then: the exit timeout's 503, the body timeout's 408), which the
        handler answers and counts (`app.infer_reply`)."""
        self._set_ready(False)

    def _set_ready(self, value: bool) -> None:
        self.ready = value
        self.metrics.ready.set(1 if value else 0)

    def mark_ready(self) -> None:
        self._set_ready(True)

    def served_models(self) -> dict[str, dict[str, Any]]:
        """The models as plain data, what `dlperf serve` prints once ready (also read from Ray replicas):
        {name: {variants: [(variant, weight)], max_batch_size, torch_threads, engine, engine_threads,
        variant_threads}}: torch_threads for a model torch runs, else the engine and its threads per instance (None:
        unknown), of the first variant; variant_threads: [(variant, torch_threads, engine, engine_threads)] of each
        (a workload and an engine artifact as two variants run on different threads)."""
        import torch

        def threads(model: ServedModel) -> tuple[int | None, str | None, int | None]:
            on_torch = model.platform in ("pytorch", "torch")
            return (torch.get_num_threads() if on_torch else None, None if on_torch else model.platform,
                    model.engine_threads)

        out = {}
        for name, entry in self.models.items():
            torch_threads, engine, engine_threads = threads(entry.model)
            out[name] = {"variants": [(v.name, w) for v, w in zip(entry.variants, entry.weights, strict=False)],
                         "max_batch_size": entry.policy.max_batch_size, "torch_threads": torch_threads,
                         "engine": engine, "engine_threads": engine_threads,
                         "variant_threads": [(v.name, *threads(v.model)) for v in entry.variants]}
        return out

    def begin_drain(self) -> None:
        """Readiness turns false; new inference requests get 503; in-flight ones finish."""
        self.draining = True
        self._set_ready(False)

    def cut_waiting(self, why: str | None = None) -> int:
        """The exit timeout is over (or a second signal came): every request still queued, in a running batch or
        still sending its body fails now with 503 (UNAVAILABLE; a queued one leaves the queue unrun), so its client
        gets dlperf's JSON error rather than uvicorn's plain-text 500 when uvicorn cancels the handler. `why`
        replaces the exit timeout's reason in the message. Runs on the event loop; how many it cut."""
        why = why or ("the request did not finish within the exit timeout "
                      f"(--exit-timeout-s {self.config.exit_timeout_s:g})")
        message = f"server is shutting down: {why}; send it again to another replica"
        cut = 0
        for future, (batcher, work) in list(self._waiting.items()):
            if not future.done():
                batcher.withdraw(work)
                future.set_exception(ShuttingDown(message))
                cut += 1
        # a client still sending its body: its handler waits in receive(), where uvicorn's own cut answered a
        # plain-text 500 and logged the CancelledError's traceback
        for task in list(self.reading):
            cut += self.cut_reading(task, 503, "UNAVAILABLE", f"{message} (its body was still arriving)")
        return cut

    def cut_reading(self, task: asyncio.Task[Any], status: int, reason: str, message: str) -> bool:
        """Cancel a handler still reading its request's body, to be answered `status` with `message` and counted as
        a failure for `reason` (the exit timeout's 503, the body timeout's 408); False where it has read it, or was
        cut already. Event loop only."""
        if task not in self.reading or self.reading[task] is not None or task.done():
            return False
        self.reading[task] = (status, reason, message)
        task.cancel()
        return True

    def close(self, timeout_s: float = 30.0) -> bool:
        """Stop the batchers and wait for the instances to finish what is queued; True if all stopped."""
        for entry in self.models.values():
            for v in entry.variants:
                v.batcher.close()
        deadline = time.monotonic() + timeout_s
        ok = True
        for entry in self.models.values():
            for v in entry.variants:
                ok = v.pool.join(max(0.0, deadline - time.monotonic())) and ok
        if self.shm is not None:
            self.shm.close()
        self.metrics.refusals.flush_all()  # the refusals counted since their last line, not lost at exit
        return ok

    def _to_shm(self, tensor: Tensor, span: tuple[str, int, int]) -> None:
        """Write `tensor` into its requested span of shared memory; the reply then only describes it."""
        region, offset, byte_size = span
        where = f"output '{tensor.name}'"
        data = tensor_bytes(tensor.data, tensor.datatype)
        if len(data) > byte_size:
            raise ProtocolError(f"{where}: shared_memory_byte_size {byte_size} is too small for the result, "
                                f"{len(data)} bytes")
        self.shm_registry().view(region, offset, len(data), where)[:] = data
        tensor.parameters = {"shared_memory_region": region, "shared_memory_byte_size": len(data)}
        if offset:
            tensor.parameters["shared_memory_offset"] = offset

    def shm_registry(self) -> SharedMemoryRegistry:
        """The registry, or ProtocolError (400) naming the option when the extension is off."""
        if self.shm is None:
            raise ProtocolError("this server takes no shared memory: start it with --allow-client-shm (Triton's "
                                "--allow-client-shm=true)")
        return self.shm

    def authorized(self, headers: Mapping[str, str]) -> bool:
        if not self.config.token:
            return True
        value = headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.config.token.encode())

    def note_unauthenticated(self) -> None:
        """A call refused for its token (401 / UNAUTHENTICATED), inference or not: a rate-limited log line (it
        showed only on /metrics, and there only for an inference request of a served model). No model is named:
        the name comes from a client the server does not know, and need not be one it serves."""
        self.metrics.refusals.note("UNAUTHENTICATED")

    # --- metadata ---------------------------------------------------------------------------------

    def entry(self, name: str, version: str | None) -> ModelEntry:
        entry = self.models.get(name)
        if entry is None:
            raise ProtocolError(f"unknown model '{name}': this server serves {', '.join(self.models)}", 404)
        if version not in (None, "", entry.model.version):
            raise ProtocolError(f"unknown version '{version}' of model '{name}': it has version "
                                f"{entry.model.version}", 404)
        return entry

    def server_metadata(self) -> dict[str, Any]:
        from dlperf import __version__

        extensions = [*EXTENSIONS, *(["system_shared_memory"] if self.shm is not None else [])]
        return {"name": SERVER_NAME, "version": __version__, "extensions": extensions}

    def model_metadata(self, entry: ModelEntry) -> dict[str, Any]:
        sig = entry.signature

        def described(spec: TensorSpec) -> dict[str, Any]:
            return {"name": spec.name, "datatype": spec.datatype, "shape": list(wire_shape(spec, entry.batching))}

        meta: dict[str, Any] = {
            "name": entry.name, "versions": [entry.model.version], "platform": entry.model.platform,
            "inputs": [described(s) for s in sig.inputs], "outputs": [described(s) for s in sig.outputs],
        }
        if len(entry.variants) > 1:
            meta["parameters"] = {"variants": [v.name for v in entry.variants], "split": entry.weights}
        return meta

    def model_config(self, entry: ModelEntry) -> dict[str, Any]:
        policy = entry.policy
        batched = entry.batching

        def tensor(spec: TensorSpec) -> dict[str, Any]:
            described: dict[str, Any] = {"name": spec.name, "data_type": f"TYPE_{_config_type(spec.datatype)}",
                                         "dims": list(spec.shape[1:] if batched else spec.shape)}
            if per_item(spec, batched):  # Triton's own config check refuses empty dims ("must specify 'dims'")
                described.update(dims=[1], reshape={"shape": []})
            return described

        config: dict[str, Any] = {
            "name": entry.name,
            "platform": entry.model.platform,
            "backend": "dlperf",
            "max_batch_size": policy.max_batch_size if batched else 0,
            "input": [tensor(s) for s in entry.signature.inputs],
            "output": [tensor(s) for s in entry.signature.outputs],
            "instance_group": [{"count": self.config.instances,
                                "kind": "KIND_GPU" if self.config.device.startswith("cuda") else "KIND_CPU"}],
            "model_transaction_policy": {"decoupled": False},
        }
        if batched:
            config["dynamic_batching"] = {
                "max_queue_delay_microseconds": int(policy.max_queue_delay_s * 1e6),
                "default_queue_policy": self._queue_policy(None),
            }
            # Triton's ModelConfig.parameters (name -> {string_value}); inside dynamic_batching, which has no such
            # field, a client parsing the config into Triton's ModelConfig message was refused
            config["parameters"] = {"adaptive_wait": {"string_value": str(self.config.adaptive_wait).lower()}}
            if policy.priority_levels:
                config["dynamic_batching"]["priority_levels"] = policy.priority_levels
                config["dynamic_batching"]["default_priority_level"] = policy.default_level
                if self.config.priority_queue_policy:
                    config["dynamic_batching"]["priority_queue_policy"] = {
                        str(p.level): self._queue_policy(p.level) for p in self.config.priority_queue_policy}
        return config

    def _queue_policy(self, level: int | None) -> dict[str, Any]:
        """Triton's ModelQueuePolicy of a priority level (None: the default one)."""
        of = self.config.setting_of
        return {"max_queue_size": of(level, "max_queue_size"),
                "default_timeout_microseconds": int((of(level, "timeout_s") or 0) * 1e6),
                "timeout_action": of(level, "timeout_action").upper(),
                "allow_timeout_override": of(level, "allow_timeout_override")}

    def stats(self, name: str | None, version: str | None) -> dict[str, Any]:
        names = [self.entry(name, version).name] if name else list(self.models)
        return {"model_stats": [self.metrics.stats_dict(n, self.models[n].model.version) for n in names]}

    # --- infer ------------------------------------------------------------------------------------

    def pick_variant(self, name: str, version: str | None, headers: Mapping[str, str]) -> tuple[ModelEntry, Variant]:
        entry = self.entry(name, version)
        return entry, entry.choose(headers.get(ROUTING_HEADER))

    def count_unauthorized(self, name: str, version: str | None, headers: Mapping[str, str]) -> None:
        """An inference request refused for its token (HTTP's 401, gRPC's UNAUTHENTICATED) counts as INVALID
        under its model, as every other refused request does, so a client with a wrong token shows on /metrics;
        an unknown model or version has no series to count it in."""
        try:
            _, variant = self.pick_variant(name, version, headers)
        except ProtocolError:
            return
        variant.recorder.failure("INVALID", 0)

    async def infer(self, entry: ModelEntry, variant: Variant, body: bytes | memoryview, headers: Mapping[str, str],
                    start_ns: int, watch: ClientWatch | None = None) -> Reply:
        """HTTP: decode the body, `execute`, encode the reply. Every failure becomes an error reply."""
        try:
            body = _decompress(body, headers.get("content-encoding"), self.config.max_request_bytes)
            request = decode_request(body, header_length_of(headers), None if self.shm is None else self.shm.view)
        except ProtocolError as exc:
            variant.recorder.failure("INVALID", time.monotonic_ns() - start_ns)
            return error_reply(exc.status, _datatype_first(entry, body, headers) or str(exc))
        outcome = await self.execute(entry, variant, request, start_ns, headers.get(ROUTING_HEADER) is not None,
                                     watch)
        if isinstance(outcome, Failed):
            return error_reply(outcome.status, outcome.message, outcome.headers)
        response = InferResponse(entry.name, outcome.tensors, outcome.variant.model.version, request.id)
        body_out, json_length = encode_response(response, outcome.binary)
        reply = Reply(200, body_out)
        if json_length is not None:
            reply.headers["Inference-Header-Content-Length"] = str(json_length)
            reply.content_type = "application/octet-stream"
        _compress(reply, headers.get("accept-encoding"))
        request_ns = time.monotonic_ns() - start_ns
        reply.after = functools.partial(outcome.record, request_ns)
        reply.gone = functools.partial(outcome.variant.recorder.failure, "CANCELED", request_ns)
        return reply

    async def execute(self, entry: ModelEntry, variant: Variant, request: InferRequest, start_ns: int,
                      routed: bool = False, watch: ClientWatch | None = None) -> Answered | Failed:
        """Validate a decoded request, queue it, await its batch: its output tensors, or why it failed (counted
        as a failure already). `routed`: the variant was chosen by the transport's routing key (HTTP's
        x-routing-key header), which the request's own routing_key parameter does not override. `watch`: the
        client's connection, whose loss takes a still-queued request out of the queue unrun (CANCELED)."""
        try:
            key = request.parameters.get(ROUTING_PARAMETER)
            if key is not None and not routed:
                variant = entry.choose(str(key))
            model = variant.model
            arrays, items, batch_key = validate_inputs(model, request.inputs, variant.policy.max_batch_size)
            outputs = _requested_outputs(entry, request.outputs, request.binary_output_default)
            level = variant.policy.level_of(_priority(request.parameters))
            timeout_s = _timeout(request.parameters, self.config.timeout_of(level),
                                 self.config.allows_timeout_override(level))
        except ProtocolError as exc:
            variant.recorder.failure("INVALID", time.monotonic_ns() - start_ns)
            return Failed(exc.status, str(exc))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Work] = loop.create_future()

        def on_done(work: Work) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed (a forced exit): no one waits for it
                loop.call_soon_threadsafe(_resolve, future, work)

        now = time.monotonic_ns()
        work = Work(arrays, items, batch_key, now, None if timeout_s is None else now + int(timeout_s * 1e9),
                    on_done, priority=level, request_id=request.id)
        try:
            variant.batcher.submit(work)
        except QueueFull as exc:
            variant.recorder.failure("REJECTED", time.monotonic_ns() - start_ns)
            return Failed(self.config.reject_status, str(exc), {"Retry-After": "1"})
        except ShuttingDown as exc:
            variant.recorder.failure("UNAVAILABLE", time.monotonic_ns() - start_ns)
            return Failed(503, str(exc))
        timer = None
        if work.deadline_ns is not None and level not in variant.policy.delayed_levels:
            # the deadline holds even while every instance is busy: the batcher fails the request if still queued
            # (1 ms late: uvloop's timers have millisecond resolution and would otherwise fire up to 1 ms early)
            timer = loop.call_later(max(0.0, (work.deadline_ns - time.monotonic_ns()) / 1e9) + 0.001,
                                    variant.batcher.expire, work)
        if watch is not None:
            watch.on_gone = functools.partial(_abandon, variant.batcher, work)
        self._waiting[future] = (variant.batcher, work)
        try:
            done = await future
        except ShuttingDown as exc:  # cut at the end of the exit timeout (`cut_waiting`)
            variant.recorder.failure("UNAVAILABLE", time.monotonic_ns() - start_ns)
            return Failed(503, str(exc))
        except asyncio.CancelledError:
            # the caller went away (a gRPC cancel or deadline; Ray Serve on a client disconnect): a request still
            # queued leaves the queue unrun, one in a running batch has its result dropped
            variant.batcher.withdraw(work)
            variant.recorder.failure("CANCELED", time.monotonic_ns() - start_ns)
            raise
        finally:
            del self._waiting[future]
            if timer is not None:
                timer.cancel()
            if watch is not None:
                watch.on_gone = None  # it holds the request's arrays
        if done.error is not None:
            variant.recorder.failure(done.error_reason or "OTHER", time.monotonic_ns() - start_ns)
            status = 503 if done.error_reason in ("TIMEOUT", "REJECTED", "UNAVAILABLE") else 500
            return Failed(status, str(done.error))
        assert done.result is not None
        sig = model.signature.outputs
        batching = model.batched and variant.policy.max_batch_size > 0
        # a per-item output goes out as [batch, 1], as its metadata ([-1, 1]) says and Triton reshapes it
        tensors = [Tensor(sig[i].name, sig[i].datatype,
                          done.result[i].reshape(-1, 1) if per_item(sig[i], batching) else done.result[i])
                   for i, _, _ in outputs]
        try:
            for tensor, (_, _, span) in zip(tensors, outputs, strict=True):
                if span is not None:
                    self._to_shm(tensor, span)
        except ProtocolError as exc:
            variant.recorder.failure("INVALID", time.monotonic_ns() - start_ns)
            return Failed(exc.status, str(exc))
        t = done.timings_ns
        return Answered(variant, tensors, [b for _, b, _ in outputs], t["start"] - done.arrival_ns,
                        (t["input"], t["infer"], t["output"]), done.priority)


@dataclass
class Answered:
    """A request's batch ran: its output tensors (each with whether it goes as binary), for its protocol to
    encode; `record(request_ns)` counts the success once the reply is out. Holds the batch's timings, not
    its `Work`, so a reply waiting to be sent keeps no input arrays (views of the request body) alive."""

    variant: Variant
    tensors: list[Tensor]
    binary: list[bool]
    queue_ns: int
    compute_ns: tuple[int, int, int]
    """Input, infer and output time of the batch."""
    priority: int

    def record(self, request_ns: int) -> None:
        self.variant.recorder.success(request_ns, self.queue_ns, self.compute_ns, self.priority)


@dataclass
class Failed:
    """Why a request was not answered: the HTTP status (each protocol maps it), the message and extra headers."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


class ClientGone(ServingError):
    """The client closed its connection while its request waited in the queue."""


class ClientWatch:
    """One HTTP request's view of its client's connection, made by the HTTP protocol (`server.py`): calling it
    says whether the client has gone; `lost()`, called by the protocol the moment the connection closes before
    the reply is complete, marks it gone and runs `on_gone` (set by `ServerState.execute` while the request
    waits) once."""

    __slots__ = ("_gone", "closed", "on_gone")

    def __init__(self, gone: Callable[[], bool]) -> None:
        self._gone = gone
        self.on_gone: Callable[[], object] | None = None
        self.closed = False

    def __call__(self) -> bool:
        return self.closed or self._gone()

    def lost(self) -> None:
        self.closed = True
        on_gone, self.on_gone = self.on_gone, None
        if on_gone is not None:
            on_gone()


def _abandon(batcher: Batcher, work: Work) -> None:
    """The client of `work` has gone: if it is still queued, take it out unrun and fail it as CANCELED (a
    batch that took it already runs; its reply then finds the client gone)."""
    if batcher.withdraw(work):
        work.error = ClientGone("the client closed its connection while the request was queued")
        work.error_reason = "CANCELED"
        work.finish()


def _resolve(future: asyncio.Future[Work], work: Work) -> None:
    if not future.done():
        future.set_result(work)


def _config_type(datatype: str) -> str:
    return "STRING" if datatype == "BYTES" else datatype


def _requested_outputs(entry: ModelEntry, requested: Any,
                       default_binary: bool) -> list[tuple[int, bool, tuple[str, int, int] | None]]:
    """(output index, binary, shared-memory span or None) of each output the request asks for (all by default)."""
    names = [s.name for s in entry.signature.outputs]
    if requested is None:
        return [(i, default_binary, None) for i in range(len(names))]
    out: list[tuple[int, bool, tuple[str, int, int] | None]] = []
    for r in requested:
        if r.name not in names:
            raise ProtocolError(f"unknown output '{r.name}' of model '{entry.name}': "
                                f"its outputs are {', '.join(names)}")
        index = names.index(r.name)
        if any(i == index for i, _, _ in out):  # Triton: "output '...' already exists in request"
            raise ProtocolError(f"the request names output '{r.name}' twice")
        out.append((index, default_binary if r.binary is None else r.binary, r.shm))
    return out


def _timeout(parameters: Mapping[str, Any], server_timeout_s: float | None,
             allow_override: bool = True) -> float | None:
    """The request's timeout: its `timeout` parameter (µs, Triton's) may only shorten the server's, and is
    checked but not used where the level does not allow the override (as Triton ignores it there). An integer
    only, as Triton takes it (gRPC's int64_param, a JSON integer over HTTP): a double (2.5, meant as seconds?)
    was read as 2.5 µs."""
    value = parameters.get("timeout")
    if isinstance(value, float):
        raise ProtocolError(f"parameter 'timeout' must be an integer number of microseconds (gRPC: int64_param, as "
                            f"Triton takes it; JSON: an integer), got the double {value!r}: e.g. 2500000 for 2.5 s")
    if value is None or value == 0:
        return server_timeout_s
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ProtocolError(f"parameter 'timeout' must be a non-negative number of microseconds, got {value!r}")
    if not allow_override:
        return server_timeout_s
    requested = value / 1e6
    return requested if server_timeout_s is None else min(requested, server_timeout_s)


def _priority(parameters: Mapping[str, Any]) -> int:
    """The request's `priority` parameter (Triton's; tritonclient sends it only when non-zero), 0 if none."""
    value = parameters.get("priority", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_PRIORITY:
        raise ProtocolError(f"parameter 'priority' must be an integer from 0 to 2**64-1 (1 is the highest level), "
                            f"got {value!r}")
    return value


def _datatype_first(entry: ModelEntry, body: bytes | memoryview, headers: Mapping[str, str]) -> str | None:
    """For a request that could not be decoded: the first input whose declared datatype is not the model's, said as
    validation would say it, else None. An FP32 input sent as INT64 with float data was told "INT64 data must be
    integers", and learned that the model takes FP32 only once it had fixed the data."""
    try:
        declared = declared_datatypes(body, header_length_of(headers))
    except ProtocolError:
        return None
    for spec in entry.signature.inputs:
        given = declared.get(spec.name)
        if given is not None and given != spec.datatype:
            return f"input '{spec.name}' has datatype {given}, model '{entry.name}' expects {spec.datatype}"
    return None


def _decompress(body: bytes | memoryview, encoding: str | None, limit: int) -> bytes | memoryview:
    """The body under its Content-Encoding (gzip or deflate, names in any case; identity or none: as it is).
    Every member of a gzip body is read (RFC 1952 allows several); a stream that ends early or bytes after a
    deflate stream are refused with 400, a body that inflates past `limit` with 413 before it is inflated whole."""
    codings = [c for c in (part.strip().lower() for part in (encoding or "").split(",")) if c and c != "identity"]
    if not codings:
        return body
    if len(codings) > 1 or codings[0] not in ("gzip", "deflate"):
        raise ProtocolError(f"unsupported Content-Encoding '{encoding}': send gzip, deflate or none (one coding)", 415)
    coding = codings[0]
    parts: list[bytes] = []
    size = 0
    data: bytes | memoryview = body
    while True:
        d = zlib.decompressobj(zlib.MAX_WBITS | 32)  # accepts gzip and zlib headers
        try:
            out = d.decompress(data, limit + 1 - size)
        except zlib.error as exc:
            raise ProtocolError(f"the {coding} body does not decompress: {exc}") from exc
        size += len(out)
        parts.append(out)
        if size > limit or d.unconsumed_tail:
            raise ProtocolError(f"the request decompresses to more than {limit} bytes, the server's limit "
                                "(--max-request-mb)", 413)
        if not d.eof:
            raise ProtocolError(f"the {coding} body is truncated: its compressed stream ends before its end marker")
        data = d.unused_data.lstrip(b"\0") if coding == "gzip" else d.unused_data  # gzip may pad with zeros
        if not data:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if coding != "gzip":
            raise ProtocolError(f"the deflate body has {len(data)} bytes after the end of its compressed stream")


def _compress(reply: Reply, accept: str | None) -> None:
    """Compress the reply with the coding the client's Accept-Encoding weighs highest (gzip on a tie), none when
    it accepts neither gzip nor deflate (a q of 0 refuses a coding, RFC 9110 12.5.3)."""
    coding = _preferred_coding(accept)
    if coding == "gzip":
        reply.body = gzip.compress(reply.body, compresslevel=1)
        reply.headers["Content-Encoding"] = "gzip"
    elif coding == "deflate":
        reply.body = zlib.compress(reply.body, 1)
        reply.headers["Content-Encoding"] = "deflate"


def _preferred_coding(accept: str | None) -> str | None:
    """gzip, deflate or None from an Accept-Encoding value with optional q-values (`*` stands for any coding
    not named); an unreadable q counts as 0."""
    if not accept:
        return None
    weights: dict[str, float] = {}
    for entry in accept.split(","):
        name, _, params = entry.partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        weights[name.strip().lower()] = q
    best, best_q = None, 0.0
    for coding in ("gzip", "deflate"):
        q = weights.get(coding, weights.get("*", 0.0))
        if q > best_q:
            best, best_q = coding, q
    return best


# --- building ---------------------------------------------------------------------------------------


def build_state(config: ServeConfig, served: dict[str, ServedModel] | None = None,
                on_warmup: Callable[[str, int, int], None] | None = None) -> ServerState:
    """Load the model(s), start their instances (warmed up), and return the state, marked ready.

    `served` maps a spec to an already built ServedModel (tests, embedding), used instead of loading it.
    `on_warmup(variant, done, total)` after each warm-up call (`InstancePool.start`), for a progress display.
    """
    if config.threads is not None:
        import torch

        check_threads(config.threads, "--threads")  # here, on the machine that starts them (a Ray replica's node)
        torch.set_num_threads(config.threads)
    check_per_cpu(config.instances, "--instances", THREADS_PER_CPU, MIN_THREAD_LIMIT,
                  "each instance is a thread running the model")
    metrics = Metrics()
    specs = list(config.variants) if config.variants else [(DEFAULT_VARIANT, config.model or "")]
    weights = list(config.split) if config.split else [1] * len(specs)
    variants: list[Variant] = []
    started: list[Variant] = []
    # the variants' clients are one closed loop: the adaptive wait counts their requests together
    occupancy = Occupancy() if len(specs) > 1 else None
    try:
        for (vname, spec), weight in zip(specs, weights, strict=True):
            model = (served or {}).get(spec) or _in_fresh_thread(
                functools.partial(load_served_model, spec, config.model_name, config.device, config.threads))
            differs = _signature_difference((variants[0].name, variants[0].model), (vname, model)) if variants else None
            if differs is not None:
                raise ConfigError(
                    f"variant '{vname}' ({spec}) has another signature than variant '{variants[0].name}' ({differs}; "
                    "shapes past the batch dimension): A/B variants must be artifacts of the same model"
                )
            if variants:
                model.name = variants[0].model.name
            max_batch = config.max_batch_size if model.batched else 0
            policy = BatchPolicy(max_batch, config.max_queue_delay_s, config.adaptive_wait, config.priority_levels,
                                 config.default_priority_level, config.delayed_levels)
            batcher = Batcher(policy, config.max_queue_size, level_queue_sizes={
                p.level: p.max_queue_size for p in config.priority_queue_policy if p.max_queue_size is not None},
                occupancy=occupancy)
            recorder = metrics.recorder(model.name, vname, pending=_pending_of(batcher),
                                        priority_levels=policy.priority_levels,
                                        level_pending=_level_pending_of(batcher))
            recorder.set_queue_capacity(config.queue_capacity)
            for level in range(1, policy.priority_levels + 1):
                recorder.set_level_queue_capacity(level, config.queue_size_of(level))
            recorder.set_traffic_weight(weight)  # the no-traffic alert leaves a 0-weight variant out
            pool = InstancePool(model, batcher, recorder, config.instances)
            variant = Variant(vname, model, batcher, pool, recorder, policy)
            variants.append(variant)
        for variant in variants:
            check_batch_range(variant.model, variant.policy.max_batch_size)
            check_batch_memory(variant.model, variant.policy.max_batch_size)
            variant.pool.start(warmup_sizes(variant.policy.max_batch_size),
                               None if on_warmup is None else functools.partial(on_warmup, variant.name))
            started.append(variant)
    except BaseException:
        for v in started:
            v.batcher.close()
        raise
    name = variants[0].model.name
    state = ServerState(config, {name: ModelEntry(name, variants, weights)}, metrics)
    state.mark_ready()
    return state


def _in_fresh_thread(fn: Callable[[], T]) -> T:
    """`fn()` in a short-lived thread (its exception re-raised here).

    Loading a workload runs the model (its checks), which makes the calling thread an OpenMP master with a
    team of torch threads that outlives the call. libgomp counts those threads: once a process has more of
    them than CPUs, every team spins only ~100 iterations before sleeping on a futex, so each of the
    model's parallel regions in the instance threads pays a wake-up (measured with
    benchmarks/serve_vs_offline.py: ResNet-18 at batch 1 ran 10-30 ms slower in the server than the same
    call in a process with one master). A thread that exits frees its team."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller, KeyboardInterrupt included
            box["error"] = exc

    thread = threading.Thread(target=run, name="dlperf-load", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


FULL_WARMUP_MAX_BATCH = 64
"""Up to this max batch size every batch size is warmed up; above it, powers of two and the max."""


def check_batch_range(model: ServedModel, max_batch: int) -> None:
    """Refuse to batch beyond what the model's engine was built for (a TensorRT artifact's `batch_range`): the
    warm-up failed at the first other batch size, and the server never became ready."""
    if model.batch_range is None or not model.batched:
        return
    lo, hi = model.batch_range
    if lo > 1:
        raise ConfigError(f"model '{model.name}' ({model.source}) runs batch {lo} only (its {model.platform} engine "
                          "was built for that size), and dynamic batching makes batches of 1 up to --max-batch-size: "
                          "export it again with a batch range (tensorrt's max_batch_size), or serve the workload")
    if max_batch > hi:
        raise ConfigError(f"--max-batch-size {max_batch}: model '{model.name}' ({model.source}) runs batches up to "
                          f"{hi} (its {model.platform} engine was built for 1 to {hi}): give --max-batch-size {hi} or "
                          "less")


def check_batch_memory(model: ServedModel, max_batch: int) -> None:
    """Refuse a max batch size whose inputs alone need more memory than the machine has available: the warm-up
    runs it before the server is ready (`--max-batch-size 100000` on ResNet-18: 60 GB of images)."""
    import psutil

    if max_batch <= 1:
        return
    need = sum(a.nbytes for a in model.random_arrays(1)) * max_batch  # not the workload's: on this thread
    available = psutil.virtual_memory().available
    if need > available:
        raise ConfigError(
            f"--max-batch-size {max_batch}: the inputs of one batch of model '{model.name}' take {need / 2**30:.1f} "
            f"GiB alone, and {available / 2**30:.1f} GiB of memory is available; the warm-up runs every batch size up "
            "to it before the server is ready: lower --max-batch-size"
        )


def warmup_sizes(max_batch: int) -> tuple[int, ...]:
    """The batch sizes each instance runs before the server is ready: every size from 1 to the max.

    The first batch of each size allocates for good: oneDNN creates and caches its kernels (primitives) per
    input shape, batch dimension included. Warming only 1, 2, 4, ... and the max let ResNet-18's RSS grow
    by about 70 MiB during a 2-minute load (benchmarks/serve_vs_offline.py) as the other sizes turned up;
    doing them all before readiness keeps that out of user requests and keeps memory flat afterwards.
    Above FULL_WARMUP_MAX_BATCH that would take too long: powers of two and the max."""
    limit = max(1, max_batch)
    if limit <= FULL_WARMUP_MAX_BATCH:
        return tuple(range(1, limit + 1))
    sizes = []
    b = 1
    while b < limit:
        sizes.append(b)
        b *= 2
    sizes.append(limit)
    return tuple(sizes)


def _pending_of(batcher: Batcher) -> Any:
    return lambda: float(batcher.pending_count)


def _level_pending_of(batcher: Batcher) -> Any:
    return lambda level: float(batcher.queued_at(level))


def _signature_difference(a: tuple[str, ServedModel], b: tuple[str, ServedModel]) -> str | None:
    """What differs between two (variant name, model) signatures (inputs: names, datatypes, shapes past the
    batch dimension; outputs: names, datatypes), or None when they agree."""
    def text(model: ServedModel, kind: str) -> str:
        return ", ".join(f"{s.name} {s.datatype}" + (f" {list(s.shape[1:])}" if kind == "inputs" else "")
                         for s in getattr(model.signature, kind))

    for kind in ("inputs", "outputs"):
        ta, tb = text(a[1], kind), text(b[1], kind)
        if ta != tb:
            return f"{kind}: '{a[0]}' {ta}; '{b[0]}' {tb}"
    return None


def json_reply(obj: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(obj).encode())


__all__ = ["Reply", "ServeConfig", "ServerState", "ServingError", "build_state", "error_reply", "json_reply"]
