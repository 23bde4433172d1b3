"""Server metrics: Prometheus families (labelled model + variant), Triton-style statistics, and a parser.

Names follow Prometheus conventions (base units, `_total` on counters); docs/serve.md lists them.
`parse_variant_metrics(text)` turns a /metrics page back into per-variant counters and histograms,
for `dlperf compare --live` and the tests.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

PREFIX = "dlperf_inference_"

LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2,
    0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)

DEFAULT_VARIANT = "default"
"""The variant name of a model served without --variant (its metric series' `variant` label)."""

FAILURE_REASONS = ("REJECTED", "TIMEOUT", "BACKEND", "INVALID", "UNAVAILABLE", "CANCELED", "OTHER")
"""failure `reason` label values: REJECTED queue full; TIMEOUT request timeout expired in the queue;
BACKEND the model raised; INVALID a bad request (400, 413) or one whose body did not all arrive within the body
timeout (408: a client fault, not the queue's); UNAVAILABLE shutting down; CANCELED the client went
away before its reply was written (the work was done); OTHER anything else."""

METRIC_NAMES = (
    "dlperf_inference_request_success_total",
    "dlperf_inference_request_failure_total",
    "dlperf_inference_count_total",
    "dlperf_inference_exec_count_total",
    "dlperf_inference_batch_retry_total",
    "dlperf_inference_pending_requests",
    "dlperf_inference_request_duration_seconds",
    "dlperf_inference_queue_duration_seconds",
    "dlperf_inference_compute_duration_seconds",
    "dlperf_inference_batch_size",
    "dlperf_inference_instances",
    "dlperf_inference_queue_capacity",
    "dlperf_server_ready",
)
"""Every dlperf-specific metric family name the server exports (histograms add _bucket/_sum/_count)."""

PRIORITY_METRIC_NAMES = (
    "dlperf_inference_priority_request_duration_seconds",
    "dlperf_inference_priority_queue_duration_seconds",
    "dlperf_inference_priority_pending_requests",
    "dlperf_inference_priority_queue_capacity",
)
"""Exported too by a server with priority levels (`--priority-levels N`): one series per level 1..N."""

GPU_METRIC_NAMES = (
    "dlperf_gpu_utilization_ratio",
    "dlperf_gpu_memory_used_bytes",
    "dlperf_gpu_memory_total_bytes",
    "dlperf_gpu_power_watts",
)
"""NVML gauges, labelled gpu (index) and uuid; exported only where NVML finds a GPU."""

TRITON_GPU_METRIC_NAMES = (
    "nv_gpu_utilization",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_power_usage",
)
"""The same four readings under Triton's names with its one label, `gpu_uuid`, in its units (utilization
0-1, bytes, watts): `perf_analyzer --collect-metrics --metrics-url HOST:PORT/metrics` parses exactly
`nv_gpu_...{gpu_uuid="..."} value` lines, and Triton's dashboards use them."""


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, n: int = 1) -> None:
        self.count += n
        self.ns += ns

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class ModelStats:
    """Triton's statistics extension for one model (all variants summed in the endpoint)."""

    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    batch: dict[int, tuple[_Duration, _Duration, _Duration]] = field(default_factory=dict)

    def to_dict(self, name: str, version: str) -> dict[str, Any]:
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_dict(), "fail": self.fail.to_dict(), "queue": self.queue.to_dict(),
                "compute_input": self.compute_input.to_dict(), "compute_infer": self.compute_infer.to_dict(),
                "compute_output": self.compute_output.to_dict(),
            },
            "batch_stats": [
                {"batch_size": size, "compute_input": ci.to_dict(), "compute_infer": cf.to_dict(),
                 "compute_output": co.to_dict()}
                for size, (ci, cf, co) in sorted(self.batch.items())
            ],
        }


class Metrics:
    """The Prometheus registry of one server plus the Triton-style statistics of its models."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
        from prometheus_client.process_collector import ProcessCollector

        disable_created_metrics()  # the *_created series double the page and no dashboard uses them

        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("model", "variant")
        r = self.registry
        self.success = Counter(PREFIX + "request_success", "Inference requests that succeeded", labels, registry=r)
        self.failure = Counter(PREFIX + "request_failure",
                               "Inference requests that failed, by reason (" + ", ".join(FAILURE_REASONS) + ")",
                               (*labels, "reason"), registry=r)
        self.count = Counter(PREFIX + "count", "Items inferred (a request's batch dimension counts)", labels,
                             registry=r)
        self.exec_count = Counter(PREFIX + "exec_count", "Model executions (batches); items / executions = "
                                  "average batch size", labels, registry=r)
        self.batch_retry = Counter(PREFIX + "batch_retry", "Batches of two or more requests that failed and whose "
                                   "requests were each run again alone (only those failing alone get the error)",
                                   labels, registry=r)
        self.pending = Gauge(PREFIX + "pending_requests", "Requests queued, not yet executing", labels, registry=r)
        # by outcome, so that a latency comparison can leave failures out (a variant failing fast looked faster
        # in `dlperf compare --live`); summing over it gives every request, as before
        self.request_duration = Histogram(PREFIX + "request_duration_seconds",
                                          "End-to-end request time in the server, receipt to response, by outcome "
                                          "(success, failure)", [*labels, "outcome"], buckets=LATENCY_BUCKETS_S,
                                          registry=r)
        self.queue_duration = Histogram(PREFIX + "queue_duration_seconds", "Time a request waited in the queue",
                                        labels, buckets=LATENCY_BUCKETS_S, registry=r)
        self.compute_duration = Histogram(PREFIX + "compute_duration_seconds",
                                          "Time of the batch execution a request was part of (input, infer, "
                                          "output)", labels, buckets=LATENCY_BUCKETS_S, registry=r)
        self.batch_size = Histogram(PREFIX + "batch_size", "Items per model execution", labels,
                                    buckets=BATCH_BUCKETS, registry=r)
        by_level = (*labels, "priority")
        self.priority_request_duration = Histogram(
            PRIORITY_METRIC_NAMES[0], "End-to-end time of answered requests by priority level "
            "(servers with --priority-levels; 1 is the highest)", by_level, buckets=LATENCY_BUCKETS_S, registry=r)
        self.priority_queue_duration = Histogram(
            PRIORITY_METRIC_NAMES[1], "Queue time of answered requests by priority level "
            "(servers with --priority-levels; 1 is the highest)", by_level, buckets=LATENCY_BUCKETS_S, registry=r)
        # each level's queue and bound, as the bound counts them: the all-levels gauges below add up bounds that
        # hold per level, so one full level (rejecting) could sit far below 80% of their sum
        self.priority_pending = Gauge(
            PRIORITY_METRIC_NAMES[2], "Requests queued at a priority level, as its queue bound counts them "
            "(servers with --priority-levels; 1 is the highest)", by_level, registry=r)
        self.priority_queue_capacity = Gauge(
            PRIORITY_METRIC_NAMES[3], "Requests a priority level's queue holds at most (its own "
            "--priority-queue-policy max_queue_size, else --max-queue-size; 0 = unbounded)", by_level, registry=r)
        self.instances = Gauge(PREFIX + "instances", "Model instances running", labels, registry=r)
        self.queue_capacity = Gauge(PREFIX + "queue_capacity", "Requests the queue holds at most, all "
                                    "priority levels together (--max-queue-size; 0 = unbounded)", labels, registry=r)
        self.traffic_weight = Gauge(PREFIX + "traffic_weight", "This variant's --split weight (1 without --split; 0: "
                                    "kept warm, sent only requests that name it)", labels, registry=r)
        self.ready = Gauge("dlperf_server_ready", "1 while the server is ready, 0 while starting or draining",
                           registry=r)
        ProcessCollector(registry=r)
        r.register(GpuCollector())
        self._stats: dict[str, ModelStats] = {}
        self._lock = threading.Lock()
        from dlperf.serve.refusals import RefusalLog

        self.refusals = RefusalLog()
        """Refused requests' rate-limited log lines (they showed on this page only)."""

    def recorder(self, model: str, variant: str, pending: Callable[[], float] | None = None,
                 priority_levels: int = 0, level_pending: Callable[[int], float] | None = None) -> Recorder:
        with self._lock:
            stats = self._stats.setdefault(model, ModelStats())
        return Recorder(self, model, variant, stats, self._lock, pending, priority_levels, level_pending)

    def stats(self, model: str) -> ModelStats:
        with self._lock:
            return self._stats.setdefault(model, ModelStats())

    def stats_dict(self, model: str, version: str) -> dict[str, Any]:
        with self._lock:
            return self._stats.setdefault(model, ModelStats()).to_dict(model, version)

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class Recorder:
    """Bound metric children for one (model, variant): cheap to call per request and per batch."""

    def __init__(self, metrics: Metrics, model: str, variant: str, stats: ModelStats, lock: threading.Lock,
                 pending: Callable[[], float] | None, priority_levels: int = 0,
                 level_pending: Callable[[int], float] | None = None) -> None:
        self.model = model
        self.variant = variant
        self._m = metrics
        self._stats = stats
        self._lock = lock
        self._success = metrics.success.labels(model, variant)
        self._count = metrics.count.labels(model, variant)
        self._exec = metrics.exec_count.labels(model, variant)
        self._batch_retry = metrics.batch_retry.labels(model, variant)
        self._request = metrics.request_duration.labels(model, variant, "success")
        self._request_failed = metrics.request_duration.labels(model, variant, "failure")
        self._queue = metrics.queue_duration.labels(model, variant)
        self._compute = metrics.compute_duration.labels(model, variant)
        self._batch = metrics.batch_size.labels(model, variant)
        self._instances = metrics.instances.labels(model, variant)
        self._capacity = metrics.queue_capacity.labels(model, variant)
        for reason in FAILURE_REASONS:  # export zeros so rates and ratios exist before the first failure
            metrics.failure.labels(model, variant, reason)
        self._by_level = {level: (metrics.priority_request_duration.labels(model, variant, str(level)),
                                  metrics.priority_queue_duration.labels(model, variant, str(level)))
                          for level in range(1, priority_levels + 1)}
        """Level -> its (request, queue) histograms; empty without priority levels (nothing exported)."""
        if pending is not None:
            metrics.pending.labels(model, variant).set_function(pending)
        if level_pending is not None:
            for level in self._by_level:
                metrics.priority_pending.labels(model, variant, str(level)).set_function(
                    functools.partial(level_pending, level))

    def set_instances(self, n: int) -> None:
        self._instances.set(n)

    def set_queue_capacity(self, n: int) -> None:
        self._capacity.set(n)

    def set_level_queue_capacity(self, level: int, n: int) -> None:
        """The queue bound of priority level `level` (0 = unbounded); exported with --priority-levels only."""
        if level in self._by_level:
            self._m.priority_queue_capacity.labels(self.model, self.variant, str(level)).set(n)

    def set_traffic_weight(self, weight: float) -> None:
        # exported only once set: a 0 left by default would take a variant out of the no-traffic alert
        self._m.traffic_weight.labels(self.model, self.variant).set(weight)

    def batch(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One model execution of `batch_size` items."""
        self._exec.inc()
        self._count.inc(batch_size)
        self._batch.observe(batch_size)
        with self._lock:
            s = self._stats
            s.execution_count += 1
            s.inference_count += batch_size
            s.last_inference_ms = int(time.time() * 1000)
            ci, cf, co = s.batch.setdefault(batch_size, (_Duration(), _Duration(), _Duration()))
            ci.add(input_ns)
            cf.add(infer_ns)
            co.add(output_ns)

    def batch_retried(self) -> None:
        """A batch of two or more requests failed; each is run again alone (each run that succeeds is a `batch`)."""
        self._batch_retry.inc()

    def success(self, request_ns: int, queue_ns: int, compute: tuple[int, int, int], priority: int = 0) -> None:
        """One request answered; `compute` = its batch's (input, infer, output) ns; `priority` its queue level."""
        self._success.inc()
        self._request.observe(request_ns / 1e9)
        self._queue.observe(queue_ns / 1e9)
        self._compute.observe(sum(compute) / 1e9)
        level = self._by_level.get(priority)
        if level is not None:
            level[0].observe(request_ns / 1e9)
            level[1].observe(queue_ns / 1e9)
        with self._lock:
            s = self._stats
            s.success.add(request_ns)
            s.queue.add(queue_ns)
            s.compute_input.add(compute[0])
            s.compute_infer.add(compute[1])
            s.compute_output.add(compute[2])

    def failure(self, reason: str, request_ns: int) -> None:
        self._m.failure.labels(self.model, self.variant, reason if reason in FAILURE_REASONS else "OTHER").inc()
        self._m.refusals.note(reason, self.model)  # REJECTED, TIMEOUT, CANCELED: a rate-limited log line
        self._request_failed.observe(request_ns / 1e9)
        with self._lock:
            self._stats.fail.add(request_ns)


class GpuCollector:
    """NVML gauges per GPU this process can use (those CUDA_VISIBLE_DEVICES names; it listed every GPU in the machine,
    each labelled with NVML's index): utilization (0-1), memory used/total (bytes), power (watts); `gpu` is the CUDA
    index (`--device cuda:N`'s N), `uuid` the GPU's."""

    def __init__(self) -> None:
        self._handles: list[tuple[str, str, Any]] | None = None
        self._nvml: Any = None

    def _init(self) -> list[tuple[str, str, Any]]:
        if self._handles is not None:
            return self._handles
        self._handles = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            from dlperf.measure.system import visible_nvml_indices

            for cuda_index, index in visible_nvml_indices(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                self._handles.append((str(cuda_index), uuid if isinstance(uuid, str) else uuid.decode(), handle))
        except Exception:  # no NVML library or no GPU: no GPU gauges
            self._handles = []
        return self._handles

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        handles = self._init()
        if not handles:
            return []
        nvml = self._nvml
        names = GPU_METRIC_NAMES
        util = GaugeMetricFamily(names[0], "GPU busy fraction (0-1)", labels=["gpu", "uuid"])
        used = GaugeMetricFamily(names[1], "GPU memory used", labels=["gpu", "uuid"])
        total = GaugeMetricFamily(names[2], "GPU memory total", labels=["gpu", "uuid"])
        power = GaugeMetricFamily(names[3], "GPU power draw", labels=["gpu", "uuid"])
        ours = (util, used, total, power)
        triton = tuple(GaugeMetricFamily(name, f"{family.documentation} (Triton's name)", labels=["gpu_uuid"])
                       for name, family in zip(TRITON_GPU_METRIC_NAMES, ours, strict=True))
        for index, uuid, handle in handles:
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                values = (rates.gpu / 100.0, float(mem.used), float(mem.total),
                          nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            except Exception:  # a GPU that fails to answer is skipped for this scrape
                continue
            for family, twin, value in zip(ours, triton, values, strict=True):
                family.add_metric([index, uuid], value)
                twin.add_metric([uuid], value)
        return [*ours, *triton]

    def describe(self) -> Iterable[Any]:
        return []


# --- parsing --------------------------------------------------------------------------------------


@dataclass
class HistogramData:
    """Cumulative buckets (upper bound, count), plus sum and count."""

    buckets: list[tuple[float, float]] = field(default_factory=list)
    sum: float = 0.0
    count: float = 0.0

    def quantile(self, q: float) -> float:
        """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q*count."""
        if self.count <= 0 or not self.buckets:
            return float("nan")
        rank = q * self.count
        prev_bound, prev_count = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if bound == float("inf"):
                    return prev_bound
                if cumulative == prev_count:
                    return bound
                return prev_bound + (bound - prev_bound) * (rank - prev_count) / (cumulative - prev_count)
            prev_bound, prev_count = bound, cumulative
        return prev_bound

    def add(self, suffix: str, value: float, le: float | None = None) -> None:
        """Add one sample of a series (`_bucket` with its `le`, `_sum`, `_count`): several series of one
        histogram (its outcomes) add up."""
        if suffix == "_bucket" and le is not None:
            for i, (bound, cumulative) in enumerate(self.buckets):
                if bound == le:
                    self.buckets[i] = (bound, cumulative + value)
                    return
            self.buckets.append((le, value))
        elif suffix == "_sum":
            self.sum += value
        elif suffix == "_count":
            self.count += value

    def minus(self, earlier: HistogramData) -> HistogramData:
        """The observations between two scrapes of the same histogram."""
        before = dict(earlier.buckets)
        return HistogramData([(b, c - before.get(b, 0.0)) for b, c in self.buckets], self.sum - earlier.sum,
                             self.count - earlier.count)


@dataclass
class VariantMetrics:
    model: str
    variant: str
    success_total: float = 0.0
    failure_total: dict[str, float] = field(default_factory=dict)
    inference_count_total: float = 0.0
    exec_count_total: float = 0.0
    batch_retry_total: float = 0.0
    """Failed batches of two or more requests whose requests were each run again alone."""
    pending_requests: float = 0.0
    request_duration: HistogramData = field(default_factory=HistogramData)
    """Every request, answered or failed."""
    success_duration: HistogramData = field(default_factory=HistogramData)
    """Answered requests only (the `outcome="success"` series; empty from a server without the label)."""
    queue_duration: HistogramData = field(default_factory=HistogramData)
    compute_duration: HistogramData = field(default_factory=HistogramData)
    batch_size: HistogramData = field(default_factory=HistogramData)

    @property
    def requests_total(self) -> float:
        return self.success_total + sum(self.failure_total.values())

    @property
    def average_batch_size(self) -> float:
        return self.inference_count_total / self.exec_count_total if self.exec_count_total else float("nan")


_HISTOGRAMS = {
    PREFIX + "request_duration_seconds": "request_duration",
    PREFIX + "queue_duration_seconds": "queue_duration",
    PREFIX + "compute_duration_seconds": "compute_duration",
    PREFIX + "batch_size": "batch_size",
}


def parse_variant_metrics(text: str) -> dict[str, VariantMetrics]:
    """Parse a /metrics page into {variant: VariantMetrics}; a page with several models keys 'model/variant'."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], VariantMetrics] = {}

    def entry(labels: dict[str, str]) -> VariantMetrics:
        k = (labels.get("model", ""), labels.get("variant", ""))
        if k not in out:
            out[k] = VariantMetrics(model=k[0], variant=k[1])
        return out[k]

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if "variant" not in labels:
                continue
            name = sample.name
            value = float(sample.value)
            if name == PREFIX + "request_success_total":
                entry(labels).success_total = value
            elif name == PREFIX + "request_failure_total":
                entry(labels).failure_total[labels.get("reason", "OTHER")] = value
            elif name == PREFIX + "count_total":
                entry(labels).inference_count_total = value
            elif name == PREFIX + "exec_count_total":
                entry(labels).exec_count_total = value
            elif name == PREFIX + "batch_retry_total":
                entry(labels).batch_retry_total = value
            elif name == PREFIX + "pending_requests":
                entry(labels).pending_requests = value
            else:
                for base, attr in _HISTOGRAMS.items():
                    if not name.startswith(base):
                        continue
                    suffix = name[len(base):]
                    le = float(labels["le"]) if "le" in labels else None
                    getattr(entry(labels), attr).add(suffix, value, le)
                    if attr == "request_duration" and labels.get("outcome") == "success":
                        entry(labels).success_duration.add(suffix, value, le)
    for vm in out.values():
        for attr in (*_HISTOGRAMS.values(), "success_duration"):
            getattr(vm, attr).buckets.sort()
    models = {m for m, _ in out}
    if len(models) <= 1:
        return {v: vm for (_, v), vm in out.items()}
    return {f"{m}/{v}": vm for (m, v), vm in out.items()}
