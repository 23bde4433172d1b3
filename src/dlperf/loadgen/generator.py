"""Load generation against an OIP server: concurrency mode (closed loop) and request-rate mode (open loop).

Like perf_analyzer: each level runs a warm-up, then measurement windows until the last
`stable_windows` windows agree within `stability` on throughput and latency (the mean, or a percentile with
`stability_percentile`, perf_analyzer's --percentile), or until the
level's time or request bound; the report holds p50/p90/p95/p99/p99.9, throughput, errors by status,
and the server's own queue and compute time per request from its statistics endpoint. Rate mode sends
on a constant or Poisson schedule with no cap on outstanding requests but `max_outstanding`, times each
request from when it was due (so the generator's own lag behind its schedule is part of the latency, as a
user waiting on the service would see it), and reports and warns about that lag. `find_peak` searches the
highest rate whose latency percentile (p99 by default) meets an SLO (MLPerf LoadGen's server scenario with
FindPeakPerformance).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dlperf.errors import ConfigError, LoadGenError
from dlperf.loadgen.client import Endpoint, Sender, fetch, parse_url
from dlperf.loadgen.machine import LevelLoad, LevelMeter
from dlperf.loadgen.resources import Resources, Sample, parse_sample, summarize
from dlperf.loadgen.target import Target, error_of
from dlperf.measure.stats import (
    early_stopping_fails,
    early_stopping_min_count,
    early_stopping_passes,
    percentile,
    percentile_upper_bound,
)

ARRIVALS = ("constant", "poisson", "trace")
DEFAULT_STABILITY = 0.10
"""The last windows' throughputs and latencies agree when each is within this share of their mean."""
Record = tuple[int, int, str, int, int, int]
"""One request as the level loop keeps it: end (ns), latency (ns), status, client send and receive time (ns), and
when it was counted as sent (ns: the closed loop's send, the open loop's issue). Rate mode times the latency from
the request's scheduled time, which may be earlier than its issue (MLPerf LoadGen's server scenario, wrk2)."""

CONNECTION_ERROR = "conn"
"""The status key of requests that got no HTTP reply (refused, reset, closed)."""

CLIENT_TIMEOUT = "timeout"
"""The status key of requests whose reply did not come within `LoadConfig.request_timeout_s`."""

MISMATCH = "mismatch"
"""The status key of 200 replies whose outputs differ from the validation data (`--input-data`)."""

MAX_SECONDS = 1e6
"""The longest duration, window or warm-up taken (11.6 days): past it the event loop's timers overflow."""

FEW_FOR_P99 = 100
"""Below this many replies a level's p99 is its slowest one or two, and it says so."""

FEW_FOR_P999 = 1000
"""Below this many replies a level's p99.9 is its slowest one: the levels table shows '-' (--json keeps it)."""

STATS_TIMEOUT_S = 10.0
"""How long a level waits for the server's statistics (read before and after it measures, beside the load)."""

RECONNECT_DELAY_S = 0.05
"""A sender's pause after a request got no reply at all (refused, reset, no file descriptor left): a server
that is down is not hammered with reconnects, and a connect that fails at once still yields to the loop."""


@dataclass(frozen=True)
class Slo:
    """A latency SLO: the `percentile`-th percentile of the successful requests' latency within `bound_s`
    (`--p99-ms X`, or `--slo-ms X --slo-percentile Q` as perf_analyzer's --latency-threshold/--percentile)."""

    bound_s: float
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if not (self.bound_s > 0 and math.isfinite(self.bound_s)):
            raise ConfigError(f"the latency SLO must be a positive number of ms, got {self.bound_s * 1e3:g}")
        if not 0.0 < self.percentile < 100.0:
            raise ConfigError(f"--slo-percentile must be above 0 and below 100 (e.g. 95, 99, 99.9), got "
                              f"{self.percentile:g}")

    @property
    def name(self) -> str:
        """'p99', 'p95', 'p99.9'."""
        return f"p{self.percentile:g}"

    @property
    def share_over(self) -> float:
        """The share of requests the SLO lets exceed its bound: 0.01 for p99."""
        return 1.0 - self.percentile / 100.0

    @property
    def min_requests(self) -> int:
        """The fewest successful requests that can show the SLO met at 99% confidence (459 for p99)."""
        return early_stopping_min_count(self.percentile)

    def __str__(self) -> str:
        return f"{self.name} <= {self.bound_s * 1e3:g} ms"

    def to_dict(self) -> dict[str, float]:
        return {"bound_s": self.bound_s, "percentile": self.percentile}

    @classmethod
    def from_record(cls, data: Any) -> Slo | None:
        """The SLO a stored config or peak search recorded: {"slo": {"bound_s", "percentile"}}, or the
        "slo_p99_s" of runs recorded before SLOs had a percentile; None where it had none."""
        if not isinstance(data, dict):
            return None
        slo = data.get("slo")
        if isinstance(slo, dict) and isinstance(slo.get("bound_s"), (int, float)):
            return cls(float(slo["bound_s"]), float(slo.get("percentile", 99.0)))
        old = data.get("slo_p99_s")
        return cls(float(old)) if isinstance(old, (int, float)) else None


@dataclass(frozen=True)
class LoadConfig:
    concurrency: tuple[int, ...] = (1,)
    rate: float | tuple[float, ...] | None = None
    """Requests per second (open loop), or several rates, one level each; replaces concurrency mode when set."""
    arrivals: str = "constant"
    """constant, poisson, or trace: the gaps of `intervals_s` in turn (looped), scaled to `rate`."""
    intervals_s: tuple[float, ...] = ()
    """With arrivals 'trace': gaps between requests, e.g. a production log's (perf_analyzer's
    --request-intervals); their shape is kept and their mean rate (`trace_rate`) scaled to the level's."""
    duration_s: float = 30.0
    """The most one level may run (warm-up included)."""
    requests: int | None = None
    """The most requests one level sends after its warm-up (the measured ones)."""
    window_s: float = 2.0
    stable_windows: int = 3
    stability: float = DEFAULT_STABILITY
    stability_percentile: float | None = None
    """The latency percentile the windows must agree on (perf_analyzer's --percentile); None: the mean. A
    high percentile of a short window is its few slowest requests, so levels settle later (or not at all)."""
    warmup_s: float = 1.0
    max_outstanding: int = 1024
    request_timeout_s: float = 60.0
    seed: int = 0
    collect_metrics: bool = False
    """Read the server's Prometheus page during each level (perf_analyzer's --collect-metrics)."""
    metrics_url: str | None = None
    """Where that page is (default: /metrics of the target server)."""
    metrics_interval_s: float = 1.0
    slo: Slo | None = None
    """A latency SLO: a level keeps measuring after its windows agree until MLPerf's early-stopping test
    decides whether its percentile is within the bound (or the level's duration or request bound ends it)."""
    decide_within_s: float | None = None
    """With an SLO and no request bound: the most a level may run (warm-up included) when its SLO is still undecided
    at `duration_s`: it goes on for the requests the early-stopping test needs for the overs seen so far
    (`early_stopping_min_count`), sized again at each new bound. None: it ends at `duration_s`."""

    def __post_init__(self) -> None:
        if self.arrivals not in ARRIVALS:
            raise ConfigError(f"--arrivals must be one of {', '.join(ARRIVALS)}, got '{self.arrivals}'")
        if (self.arrivals == "trace") != bool(self.intervals_s):
            raise ConfigError("arrivals 'trace' goes with the request intervals (--request-intervals FILE), and "
                              "only with them")
        if self.intervals_s and (min(self.intervals_s) < 0 or sum(self.intervals_s) <= 0):
            raise ConfigError("request intervals must be >= 0 and not all 0")
        if self.rate is not None and (not self.rates or not all(0 < r < math.inf for r in self.rates)):
            raise ConfigError(f"--rate values must be positive and finite (requests per second), got {self.rate}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ConfigError(f"--concurrency values must be >= 1, got {self.concurrency}")
        for flag, value in (("--duration", self.duration_s), ("--window-s", self.window_s),
                            ("--warmup-s", self.warmup_s)):
            if not (math.isfinite(value) and value <= MAX_SECONDS):
                raise ConfigError(f"{flag} must be a number of seconds up to {MAX_SECONDS:g}, got {value:g}")
        bounds = (("--duration", self.duration_s, "positive"), ("--window-s", self.window_s, "positive"),
                  ("--warmup-s", self.warmup_s, ">= 0"))
        for flag, value, least in bounds:
            if value < 0 or (value == 0 and least == "positive"):  # the one message named all three options
                raise ConfigError(f"{flag} must be {least}, got {value:g}")
        if self.duration_s <= self.warmup_s:
            raise ConfigError(f"--duration ({self.duration_s:g} s) must be longer than --warmup-s "
                              f"({self.warmup_s:g} s): a level's warm-up is part of its duration, and nothing "
                              "would be left to measure")
        if self.max_outstanding < 1 or not self.request_timeout_s > 0:
            raise ConfigError(f"--max-outstanding must be >= 1 and --request-timeout-s positive, got "
                              f"{self.max_outstanding} and {self.request_timeout_s:g}")
        if self.decide_within_s is not None and not self.duration_s <= self.decide_within_s <= MAX_SECONDS:
            raise ConfigError(f"decide_within_s must be from --duration ({self.duration_s:g} s) to {MAX_SECONDS:g} s, "
                              f"got {self.decide_within_s:g}")
        if self.requests is not None and self.requests < 1:
            raise ConfigError(f"--requests must be >= 1, got {self.requests}")
        if not self.metrics_interval_s > 0:
            raise ConfigError(f"--metrics-interval-ms must be positive, got {self.metrics_interval_s * 1e3:g}")
        if self.stable_windows < 1:
            raise ConfigError(f"stable_windows must be >= 1, got {self.stable_windows}")
        if not 0 < self.stability < 1:
            raise ConfigError(f"--stability-percentage must be in (0, 100), got {self.stability * 100:g}")
        if self.stability_percentile is not None and not 0 < self.stability_percentile < 100:
            raise ConfigError(f"--stability-percentile must be in (0, 100), got {self.stability_percentile:g}")

    @property
    def mode(self) -> str:
        return "rate" if self.rate is not None else "concurrency"

    @property
    def rates(self) -> tuple[float, ...]:
        """The open-loop levels (empty in concurrency mode)."""
        if self.rate is None:
            return ()
        if isinstance(self.rate, (int, float)):
            return (float(self.rate),)
        return tuple(float(r) for r in self.rate)

    @property
    def trace_rate(self) -> float | None:
        """The request intervals' own mean rate (requests per second), None without them."""
        return mean_rate(self.intervals_s) if self.intervals_s else None

    def to_dict(self) -> dict[str, Any]:
        import dataclasses

        data = dataclasses.asdict(self)
        del data["intervals_s"]  # a trace may hold many thousands: its count and rate are kept
        data["intervals"] = len(self.intervals_s)
        data["trace_rate"] = self.trace_rate
        data["version"] = 1
        return data


def mean_rate(intervals_s: Sequence[float]) -> float:
    """Requests per second of a schedule of gaps between requests."""
    return len(intervals_s) / sum(intervals_s)


def arrival_gaps(config: LoadConfig, rate: float) -> Iterator[float]:
    """The open loop's gaps (s) between scheduled requests at `rate` requests per second: constant,
    exponential (Poisson arrivals, seeded), or the trace's intervals in turn, scaled to `rate`."""
    if config.arrivals == "poisson":
        rng = random.Random(config.seed)
        while True:
            yield rng.expovariate(rate)
    elif config.arrivals == "trace":
        scale = (config.trace_rate or rate) / rate
        for gap in itertools.cycle(config.intervals_s):
            yield gap * scale
    else:
        while True:
            yield 1.0 / rate


def read_request_intervals(path: str) -> tuple[float, ...]:
    """perf_analyzer's --request-intervals file: one gap between requests per line, in microseconds
    (blank lines and # comments skipped) -> seconds. ConfigError naming the file and line otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"--request-intervals {path}: cannot read it ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--request-intervals {path}: not a text file ({exc})") from exc
    out = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"--request-intervals {path}, line {number}: {line.strip()!r} is not a gap in "
                              "microseconds (one non-negative number per line)")
        out.append(value / 1e6)
    if not out or sum(out) <= 0:
        raise ConfigError(f"--request-intervals {path}: no intervals, or all 0 (one gap in microseconds per line)")
    return tuple(out)


@dataclass
class ServerSide:
    """Per-request averages from the server's statistics over the measured windows."""

    requests: int
    queue_s: float
    compute_input_s: float
    compute_infer_s: float
    compute_output_s: float
    average_batch_size: float

    @property
    def compute_s(self) -> float:
        return self.compute_input_s + self.compute_infer_s + self.compute_output_s

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "queue_s": self.queue_s, "compute_s": self.compute_s,
                "compute_input_s": self.compute_input_s, "compute_infer_s": self.compute_infer_s,
                "compute_output_s": self.compute_output_s, "average_batch_size": self.average_batch_size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSide:
        return cls(int(data["requests"]), float(data["queue_s"]), float(data["compute_input_s"]),
                   float(data["compute_infer_s"]), float(data["compute_output_s"]), float(data["average_batch_size"]))


@dataclass
class LevelResult:
    """One concurrency or rate level: every successful latency of the measured windows, and the rest."""

    mode: str
    level: float
    items_per_request: int
    latencies_ns: list[int]
    statuses: dict[str, int]
    measured_s: float
    stable: bool
    window_throughputs: list[float]
    scheduled: int = 0
    """Rate mode: the requests the open loop scheduled while the level measured, sent or dropped."""
    send_rate: float | None = None
    """Rate mode: the requests per second sent while the level measured (the dropped not counted)."""
    send_lag_p99_s: float | None = None
    """Rate mode: the p99 of how late the requests due while the level measured were written after their scheduled
    time (the generator's own share of their latencies, which count from that time)."""
    server: ServerSide | None = None
    warnings: list[str] = field(default_factory=list)
    client_send_s: float = 0.0
    """Mean time the generator took to hand a request to the socket (prebuilt: a write call)."""
    client_recv_s: float = 0.0
    """Mean time the generator took to parse a reply."""
    resources: Resources | None = None
    """What the server used while the level measured (`LoadConfig.collect_metrics`)."""
    machine: LevelLoad | None = None
    """A server on this machine: the cores it, this generator and other processes kept busy while the level ran,
    its warm-up included (`loadgen.machine`); None for a remote server or one this user cannot read."""
    sent_latencies_ns: list[int] | None = None
    """Rate mode: the latencies of the successful requests sent while the level measured, their replies after its
    end included and the warm-up's sends left out: what a latency SLO judges (`verdict`). None in closed-loop mode
    and in records from before 2026-12-07, whose verdict judges `latencies_ns`."""
    unanswered: int = 0
    """Rate mode: requests sent while the level measured with no reply even a request timeout after its end."""

    @property
    def ok(self) -> int:
        return len(self.latencies_ns)

    @property
    def unsuccessful(self) -> int:
        """Every request of the level that did not succeed, those the open loop did not send ('dropped') included;
        `failed` leaves them out, as the JSON's 'errors' and the exit status do (this was `errors`, a name the JSON
        gives the other count)."""
        return sum(n for s, n in self.statuses.items() if s != "200")

    @property
    def failed(self) -> int:
        """Requests sent that did not succeed: error statuses, timeouts, lost connections, mismatches; not those
        the open loop did not send ('dropped', which its own warning reports)."""
        return sum(n for s, n in self.statuses.items() if s not in ("200", "dropped"))

    @property
    def error_ratio(self) -> float:
        """The share of the level's sent requests that failed (0 where none ended)."""
        sent = self.ok + self.failed
        return self.failed / sent if sent else 0.0

    @property
    def throughput(self) -> float:
        """Successful requests per second over the measured windows."""
        return self.ok / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def item_throughput(self) -> float:
        return self.throughput * self.items_per_request

    def _sorted_s(self) -> list[float]:
        cached = self.__dict__.get("_sorted")
        if cached is None or len(cached) != len(self.latencies_ns):
            cached = self.__dict__["_sorted"] = sorted(v / 1e9 for v in self.latencies_ns)
        return cached

    def percentile_s(self, q: float) -> float:
        if not self.latencies_ns:
            return float("nan")
        return percentile(self._sorted_s(), q)

    def percentile_bound_s(self, q: float) -> float | None:
        """MLPerf's early-stopping estimate of the q-th percentile: a latency that q% of requests stay
        within, at 99% confidence; None below `early_stopping_min_count(q)` successful requests."""
        return percentile_upper_bound(self._sorted_s(), q)

    @property
    def p99_bound_s(self) -> float | None:
        """`percentile_bound_s(99)`: None below 459 successful requests."""
        return self.percentile_bound_s(99)

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "level": self.level, "items_per_request": self.items_per_request,
            # 'errors' counts the sent requests that failed, as `failed` and the exit status do ('dropped' apart, as
            # the errors column names it); until 2026-12-06 it counted the dropped too, and `compare` read them as
            # failed requests
            "requests_ok": self.ok, "errors": self.failed, "dropped": self.statuses.get("dropped", 0),
            "statuses": dict(self.statuses), "throughput_rps": self.throughput,
            "throughput_items_per_s": self.item_throughput, "measured_s": self.measured_s,
            "p50_s": self.percentile_s(50), "p90_s": self.percentile_s(90), "p95_s": self.percentile_s(95),
            "p97_s": self.percentile_s(97), "p99_s": self.percentile_s(99), "p999_s": self.percentile_s(99.9),
            "p99_bound_s": self.p99_bound_s,
            "mean_s": (sum(self.latencies_ns) / len(self.latencies_ns) / 1e9) if self.latencies_ns else None,
            "min_s": min(self.latencies_ns) / 1e9 if self.latencies_ns else None,
            "max_s": max(self.latencies_ns) / 1e9 if self.latencies_ns else None,
            "stable": self.stable, "window_throughputs": self.window_throughputs,
            "send_rate": self.send_rate, "send_lag_p99_s": self.send_lag_p99_s, "scheduled": self.scheduled,
            "client_send_s": self.client_send_s, "client_recv_s": self.client_recv_s,
            "server": self.server.to_dict() if self.server else None, "warnings": list(self.warnings),
            "resources": self.resources.to_dict() if self.resources else None,
            "machine": self.machine.to_dict() if self.machine else None,
            "unanswered": self.unanswered,
        }

    def to_dict(self) -> dict[str, Any]:
        data = self.summary()
        data["latencies_ns"] = list(self.latencies_ns)
        if self.sent_latencies_ns is not None:
            data["sent_latencies_ns"] = list(self.sent_latencies_ns)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelResult:
        """A stored level back (`to_dict`'s output, as `dlperf load` records it)."""
        server = data.get("server")
        return cls(
            mode=str(data["mode"]), level=float(data["level"]), items_per_request=_items_per_request(data),
            latencies_ns=[int(v) for v in data["latencies_ns"]], statuses=dict(data["statuses"]),
            measured_s=float(data["measured_s"]), stable=bool(data["stable"]),
            window_throughputs=list(data.get("window_throughputs", [])), scheduled=int(data.get("scheduled", 0)),
            send_rate=data.get("send_rate"), send_lag_p99_s=data.get("send_lag_p99_s"),
            server=ServerSide.from_dict(server) if server else None,
            warnings=list(data.get("warnings", [])), client_send_s=float(data.get("client_send_s", 0.0)),
            client_recv_s=float(data.get("client_recv_s", 0.0)),
            resources=Resources.from_dict(data["resources"]) if data.get("resources") else None,
            machine=LevelLoad.from_dict(data["machine"]) if data.get("machine") else None,
            sent_latencies_ns=([int(v) for v in data["sent_latencies_ns"]]
                               if data.get("sent_latencies_ns") is not None else None),
            unanswered=int(data.get("unanswered", 0)),
        )


def _items_per_request(data: dict[str, Any]) -> int:
    if "items_per_request" in data:
        return int(data["items_per_request"])
    rps = data.get("throughput_rps") or 0.0  # runs recorded before the key: from the two throughputs
    return max(1, round(data.get("throughput_items_per_s", 0.0) / rps)) if rps else 1


# --- one level ----------------------------------------------------------------------------------------


def _new_loop_runner() -> Any:
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)  # type: ignore[attr-defined,unused-ignore]
    except (ImportError, AttributeError):
        return asyncio.Runner() if hasattr(asyncio, "Runner") else None  # type: ignore[attr-defined,unused-ignore]


def run_sync(coro: Any) -> Any:
    runner = _new_loop_runner()
    if runner is None:  # Python 3.10
        return asyncio.run(coro)
    with runner:
        return runner.run(coro)


def run_level(target: Target, config: LoadConfig, level: float,
              on_window: Callable[[int, float], None] | None = None) -> LevelResult:
    """Run one concurrency level (config.mode 'concurrency') or rate level ('rate') and measure it."""
    result: LevelResult = run_sync(_run_level(target, config, level, on_window))
    return result


async def _server_stats(target: Target, timeout_s: float = 30.0, why: list[str] | None = None) -> dict[str, Any] | None:
    """The model's statistics from the server, None when it has none or does not answer within `timeout_s`;
    then the reason, in words that follow "the server's statistics ...", is appended to `why`."""
    if target.stats_path is None:
        return None
    why = [] if why is None else why
    try:
        if target.protocol == "grpc":
            from dlperf.loadgen.grpc_client import model_stats

            found = await asyncio.wait_for(model_stats(target.endpoint, target.model, target.headers), timeout_s)
        else:
            reply = await fetch(target.endpoint, target.stats_path, target.headers, timeout_s=timeout_s)
            if reply.status != 200:
                why.append(f"answered HTTP {reply.status} ({error_of(reply.body)})")
                return None
            parsed = json.loads(reply.body)
            entries = parsed.get("model_stats") if isinstance(parsed, dict) else None
            found = entries[0] if isinstance(entries, list) and entries and isinstance(entries[0], dict) else None
    except asyncio.TimeoutError:
        why.append(f"did not answer within {timeout_s:g} s")
        return None
    except LoadGenError as exc:  # refused, reset, not HTTP, a failed gRPC call
        why.append(f"could not be read: {exc}")
        return None
    except ValueError as exc:  # a 200 whose body is not the statistics' JSON
        why.append(f"are not the statistics extension's JSON: {exc}")
        return None
    if found is None:
        why.append(f"have no entry for model '{target.model}'")
    return found


def _server_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> ServerSide | None:
    if not before or not after:
        return None
    a, b = after["inference_stats"], before["inference_stats"]

    def diff(key: str) -> tuple[int, int]:
        return a[key]["count"] - b[key]["count"], a[key]["ns"] - b[key]["ns"]

    n, _ = diff("success")
    if n <= 0:
        return None
    per = {k: diff(k)[1] / max(1, diff(k)[0]) / 1e9
           for k in ("queue", "compute_input", "compute_infer", "compute_output")}
    execs = after["execution_count"] - before["execution_count"]
    items = after["inference_count"] - before["inference_count"]
    return ServerSide(n, per["queue"], per["compute_input"], per["compute_infer"], per["compute_output"],
                      items / execs if execs else float("nan"))


def _one_source(before: dict[str, Any], after: dict[str, Any], requests: int, succeeded: int) -> bool:
    """Whether two statistics reads can be one server's: no counter went back, and it counted at least most
    of the `succeeded` requests answered between them. Behind Ray Serve's proxy the two reads may be answered
    by different replicas, and their difference gave negative compute times and half the requests.
    `requests`: the successes it counted between the reads."""
    a, b = after["inference_stats"], before["inference_stats"]
    back = any(a[k][f] < b[k][f] for k in a if k in b for f in ("count", "ns"))
    back = back or after["execution_count"] < before["execution_count"]
    return not back and requests >= 0.8 * succeeded - 2


def _shared(counted: int, ours: int) -> bool:
    """Whether the server answered clearly more of the model's requests between two statistics reads (`counted`)
    than this load got replies in that time (`ours`): other clients' traffic is in its statistics. The margin
    covers replies written by the server but not yet read here when the second read came back."""
    return counted > 1.5 * ours + 10


def metrics_source(target: Target, config: LoadConfig) -> tuple[Endpoint, str]:
    """Where --collect-metrics reads: --metrics-url (/metrics of it when it is HOST:PORT alone, as `dlperf compare
    --live` takes it), or /metrics of the target server."""
    if config.metrics_url:
        endpoint = parse_url(config.metrics_url)
        # with no path the request line was "GET  HTTP/1.1", which the server refused with a 400
        return endpoint, "" if endpoint.base_path else "/metrics"
    return target.endpoint, "/metrics"


async def _sample_metrics(target: Target, config: LoadConfig, clock: Callable[[], int], done: asyncio.Event,
                          samples: list[Sample], problems: list[str]) -> None:
    """Read the metrics page now, then every interval until `done` is set, and once more then. Stops at the
    first failure, saying why in `problems`."""
    try:
        endpoint, path = metrics_source(target, config)
    except LoadGenError as exc:
        problems.append(str(exc))
        return
    where = f"http://{endpoint.authority}{endpoint.base_path}{path}"
    while True:
        t0 = clock()
        try:
            reply = await fetch(endpoint, path, target.headers, timeout_s=max(5.0, 2 * config.metrics_interval_s))
            if reply.status != 200:
                problems.append(f"{where} answered {reply.status}; give the server's metrics page with --metrics-url")
                return
            samples.append(parse_sample(reply.body.decode("utf-8"), (t0 + clock()) / 2e9))
        except LoadGenError as exc:
            problems.append(str(exc))
            return
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(f"{where} is not a Prometheus text page ({exc})")
            return
        if done.is_set():
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), config.metrics_interval_s)


async def _run_level(target: Target, config: LoadConfig, level: float,
                     on_window: Callable[[int, float], None] | None) -> LevelResult:
    clock = time.perf_counter_ns
    records: list[Record] = []
    stop = asyncio.Event()
    sent = 0
    issued = 0  # requests handed to a connection, warm-up included: picks each one's input data
    mismatches: list[str] = []
    first_errors: dict[str, str] = {}  # HTTP status -> the server's message in the first such reply
    limit = config.requests
    measuring = False

    def may_send() -> bool:
        return not stop.is_set() and (limit is None or not measuring or sent < limit)

    async def one(conn: Sender, counted_ns: int | None = None, due_ns: int | None = None) -> None:
        """Send one request and record it; `counted_ns`: when the open loop issued it (its task starts later),
        `due_ns`: when its schedule said to send it, from which its latency counts: a generator behind its schedule
        delays the request for its user as a slow server would (MLPerf LoadGen's server scenario, wrk2)."""
        nonlocal issued
        raw, expected = target.request(issued)
        issued += 1
        if counted_ns is None:
            counted_ns = clock()
        t0 = counted_ns if due_ns is None else min(due_ns, counted_ns)
        try:
            reply = await conn.send(raw)
            status = str(reply.status)
        except asyncio.TimeoutError:
            status = CLIENT_TIMEOUT
            await conn.close()
        except (OSError, ValueError):
            status = CONNECTION_ERROR
            await conn.close()
        t1 = clock()
        if status.isdigit() and status != "200" and status not in first_errors:
            message = error_of(reply.body)
            first_errors[status] = message if len(message) <= 200 else message[:200] + "..."
        if expected is not None and status == "200":
            why = target.mismatch(reply.headers, reply.body, expected)
            if why is not None:
                status = MISMATCH
                mismatches.append(why)
        records.append((t1, t1 - t0, status, conn.send_ns, conn.recv_ns, counted_ns))
        if status == CONNECTION_ERROR:
            await asyncio.sleep(RECONNECT_DELAY_S)

    tasks: list[asyncio.Task[Any]] = []
    issued_at: dict[asyncio.Task[Any], int] = {}  # rate mode: each request's task -> when the open loop issued it
    scheduled = 0
    # each request the open loop came to: (due, when it went out) in perf_counter s; out means written to its
    # connection, or, for one dropped at the cap, when the loop came to it
    reached: list[tuple[float, float]] = []
    unsent_due_s: float | None = None  # when the open loop stopped: the time its next request was due (it was not sent)
    connections: list[Sender] = []

    async def closed_loop_worker() -> None:
        nonlocal sent
        conn = target.connect(config.request_timeout_s)
        connections.append(conn)
        while may_send():
            sent += 1
            await one(conn)

    async def open_loop() -> None:
        nonlocal sent, scheduled, unsent_due_s
        gaps = arrival_gaps(config, level)
        idle: list[Sender] = []
        outstanding = 0

        async def fire(conn: Sender, counted_ns: int, due_s: float) -> None:
            nonlocal outstanding
            try:
                await one(conn, counted_ns, int(due_s * 1e9))
            finally:
                outstanding -= 1
                idle.append(conn)
                # when it was written, not when the loop issued it: its task starts behind the reply callbacks,
                # and a new connection's connect later still (10000 req/s read as kept at 3198 where 2644 went out)
                reached.append((due_s, conn.written_ns / 1e9 if conn.written_ns else time.perf_counter()))

        t_next = time.perf_counter()
        while may_send():
            t_next += next(gaps)
            unsent_due_s = t_next
            delay = t_next - time.perf_counter()
            if delay > 0.05:  # a long gap (a low rate) ends with the level, not after it
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            elif delay > 0:
                await asyncio.sleep(delay)
            else:  # behind: let the requests already issued, and the level's timers, run between sends (a burst
                # of thousands without a yield starved them: the warm-up's timer fired past the level's end)
                await asyncio.sleep(0)
            if not may_send():
                break
            if measuring:  # the warm-up's own were counted too: 690 'scheduled' beside 500 measured (--requests 500)
                scheduled += 1
            unsent_due_s = None
            if outstanding >= config.max_outstanding:
                now_ns = clock()
                records.append((now_ns, 0, "dropped", 0, 0, now_ns))
                reached.append((t_next, time.perf_counter()))
                continue
            conn = idle.pop() if idle else target.connect(config.request_timeout_s)
            if conn not in connections:
                connections.append(conn)
            outstanding += 1
            sent += 1
            # timed from here, where it is counted: a task started after the warm-up ended counted a warm-up
            # request as measured (--requests 50 measured 51)
            counted_ns = clock()
            task = asyncio.ensure_future(fire(conn, counted_ns, t_next))
            tasks.append(task)
            issued_at[task] = counted_ns
            if len(tasks) > 4096:
                tasks[:] = [t for t in tasks if not t.done()]
                for t in [t for t in issued_at if t.done()]:
                    del issued_at[t]

    # a local server's process and the machine's CPU, read as the level begins (in a thread: the lookup scans every
    # process's sockets) and after its last measured reply; not at the windows' start, where a reading would hold
    # the event loop, and the replies in flight with it
    meter = LevelMeter(target.endpoint.host, target.endpoint.port)
    meter.start()
    start = clock()
    if config.mode == "rate":
        drivers = [asyncio.ensure_future(open_loop())]
    else:
        drivers = [asyncio.ensure_future(closed_loop_worker()) for _ in range(int(level))]

    def done_all() -> bool:
        """Every request the level will send is sent and answered (a request bound was reached). In rate mode
        the driver ends at its last send, before that request's reply: its task is waited for too."""
        return all(d.done() for d in drivers) and (config.mode != "rate" or all(t.done() for t in tasks))

    # warm-up, then windows until stable or a bound is hit
    warm_end = start + int(config.warmup_s * 1e9)
    end_bound = start + int(config.duration_s * 1e9)
    await _sleep_until(min(warm_end, end_bound), clock, done_all)
    woke = clock()
    late_ns = 0 if done_all() else woke - min(warm_end, end_bound)  # how late the event loop came to its timers
    sent = 0  # the request bound counts from the end of the warm-up
    measuring = True
    # read beside the load: an overloaded server may take seconds to answer, which must not eat the level
    stats_why: list[str] = []  # why a read of the server's statistics came back empty
    before_task = asyncio.ensure_future(_server_stats(target, STATS_TIMEOUT_S, stats_why))
    before_read: list[int] = []  # when that read came back: the replies after it, the server must count
    before_task.add_done_callback(lambda _: before_read.append(clock()))
    window_ns = int(config.window_s * 1e9)
    # from the warm-up's end as scheduled, where the loop came late to it: a generator stalled past the level's end
    # measured 0.00015 s of a 3 s level and threw its replies away (with a --requests bound, from when it counts)
    measure_start = woke if limit is not None else min(woke, warm_end)
    metrics_done = asyncio.Event()
    samples: list[Sample] = []
    problems: list[str] = []
    sampler = (asyncio.ensure_future(_sample_metrics(target, config, clock, metrics_done, samples, problems))
               if config.collect_metrics else None)
    # the replies since `measure_start` (records are appended as replies come, in time order)
    first_record = bisect.bisect_left(records, measure_start, key=lambda r: r[0])

    def judged_so_far(now: int) -> list[Record]:
        """What an SLO judges so far: the replies since the warm-up's end; in rate mode the requests sent since
        then (a server behind its schedule answers the warm-up's sends in the windows) and up to one SLO bound
        before `now` (`_sent_cut_ns`), each with no reply yet as over it. The replies so far alone leave out
        exactly the slow requests, still in flight: at 200 req/s with one request in 300 delayed 300 ms, 853
        replies, 2 over 200 ms, stopped the level on a pass that its verdict, with the late third, made undecided."""
        since = records[first_record:]
        if config.mode != "rate":
            return since
        cut = now if done_all() else _sent_cut_ns(now, config.slo)  # every request answered: none in flight
        judged = [r for r in since if measure_start <= r[5] <= cut]
        answered = {r[5] for r in judged}
        waiting = [at for t, at in issued_at.items()
                   if not t.done() and measure_start <= at <= cut and at not in answered]
        failed_since = [r for r in since if r[5] > cut and r[2] != "200"]  # a failure fails it whenever it was sent
        return judged + [(now, now - at, "200", 0, 0, at) for at in waiting] + failed_since

    windows: list[tuple[float, float]] = []  # (throughput, latency s: mean or the stability percentile)
    decision: str | None = None  # the SLO's in-level decision at the last look
    stable = False
    slo_failed = False
    cursor = first_record
    w_start = measure_start
    while True:
        w_end = min(w_start + window_ns, end_bound)
        await _sleep_until(w_end, clock, done_all)
        now = clock()
        finished = done_all()
        if not finished:
            late_ns = max(late_ns, now - w_end)
        decision = None if config.slo is None else _slo_decided(judged_so_far(now), config.slo)
        if now >= end_bound and not finished and not slo_failed and decision is None:
            # undecided at its bound: on for the requests the early-stopping test needs for the overs seen (a
            # trial sized for none over ended undecided near the edge: 50.1 req/s, 147 requests short)
            grown = _decision_bound_ns(judged_so_far(now), config, now, measure_start, start)
            if grown > end_bound:
                end_bound = grown
                if windows and now - w_start < window_ns / 2:
                    continue  # a sliver of a window before the old bound: it goes into the next one
        window = [r for r in records[cursor:] if r[2] == "200"]
        cursor = len(records)
        span = max(1, now - w_start) / 1e9
        if windows and (finished or now >= end_bound) and span < config.window_s / 2:
            # the level's tail after its last whole window (--requests ended it 0.15 s into a 2 s window): its
            # replies count, but a sliver of a window is no window, and it made "stable: yes" of two real ones
            break
        windows.append((len(window) / span, _window_latency_s(window, config.stability_percentile)))
        if on_window is not None:
            on_window(len(windows), len(window) / span)
        w_start = now
        if len(windows) >= config.stable_windows and _agree(windows[-config.stable_windows:], config.stability):
            stable = True
            if config.slo is None or decision:
                break
        elif decision == "fail":
            slo_failed = True
            break  # a failure needs no stable windows (an overloaded level never settles)
        if now >= end_bound or finished:
            break
    ended_by_count = limit is not None and done_all()
    stop.set()
    measure_end = clock()
    machine = meter.stop()
    metrics_done.set()
    before = await before_task
    after = await _server_stats(target, STATS_TIMEOUT_S, stats_why) if before is not None else None
    after_read = clock()
    if sampler is not None:
        await asyncio.wait([sampler], timeout=max(5.0, 2 * config.metrics_interval_s))
        sampler.cancel()
    pending = [*drivers, *tasks]
    never = 0  # requests without a reply even after the request timeout past the level (cancelled here)
    never_measured = 0  # those of them sent while the level measured, up to `judged_end`
    # the sends an SLO verdict judges end where the in-level decision's did: it saw those sent later only as far
    # as they had replied, and a verdict that added their late overs could reverse the decision that ended the level
    # (at its bound too: at 200 req/s a stable level ended with 853 replies judged, 2 over 200 ms, a pass, and a
    # verdict of 854, 3 over, undecided); with every request answered the decision judged them all
    decided_cut = measure_end if decision is None or finished else _sent_cut_ns(now, config.slo)
    judged_end = measure_end if config.mode != "rate" else decided_cut
    if pending:
        _, still = await asyncio.wait(pending, timeout=config.request_timeout_s)
        never = sum(1 for t in still if t in tasks)
        never_measured = sum(1 for t in still if measure_start <= issued_at.get(t, -1) <= judged_end)
        for t in still:
            t.cancel()
    for conn in connections:
        await conn.close()
    measured = [r for r in records[first_record:] if r[0] <= measure_end]
    if limit is not None:  # the N requests sent after the warm-up, not those the warm-up left in flight
        measured = [r for r in measured if r[5] >= measure_start]
        if ended_by_count and measured:
            # at its last reply, not when the windows' loop next looked (every 50 ms): --requests 3 at
            # concurrency 8 read 60 req/s where the slowest request took 9 ms
            measure_end = max(measure_start + 1, max(r[0] for r in measured))
    succeeded = [r for r in measured if r[2] == "200"]
    statuses: dict[str, int] = {}
    for r in measured:
        statuses[r[2]] = statuses.get(r[2], 0) + 1
    result = LevelResult(
        mode=config.mode, level=level, items_per_request=target.items_per_request,
        latencies_ns=[r[1] for r in succeeded], statuses=statuses,
        measured_s=(measure_end - measure_start) / 1e9, stable=stable,
        window_throughputs=[w[0] for w in windows], scheduled=scheduled,
        client_send_s=sum(r[3] for r in succeeded) / len(succeeded) / 1e9 if succeeded else 0.0,
        client_recv_s=sum(r[4] for r in succeeded) / len(succeeded) / 1e9 if succeeded else 0.0,
        machine=machine,
    )
    if machine is not None and machine.warning:
        result.warnings.append(machine.warning)
    server = _server_delta(before, after)
    since = sum(1 for r in succeeded if before_read and r[0] >= before_read[0])  # answered after the first read
    counted = server.requests if server is not None else 0
    # every answer this load got between the two reads, also after the windows (the server counted them too), and
    # those that did not match their validation data (the server answered them)
    between = sum(1 for r in records[first_record:] if r[2] in ("200", MISMATCH) and before_read
                  and before_read[0] <= r[0] <= after_read)
    if before and after and not _one_source(before, after, counted, since):
        result.warnings.append(
            "the server's statistics before and after the level do not come from one process (counters went "
            f"back, or it counted {counted} requests where {since} succeeded here between its reads: a Ray "
            "Serve deployment answers them per replica): no server-side queue and compute times for it")
    elif before and after and server is not None and _shared(counted, between):
        # the statistics are the model's, every client's: a --priority 1 probe beside a flood showed the flood's
        # 141 ms mean queue time as its own, above its own p99 of 102 ms
        result.warnings.append(
            f"the server answered {counted} requests of model '{target.model}' between its statistics reads, this "
            f"load {between}: other clients share the model (a flood beside a --priority probe, another load "
            "generator; or, behind Ray Serve, the two reads came from different replicas), and its queue and compute "
            "means are not this load's: not shown for it")
    elif target.stats_path is not None and server is None and result.ok:
        when = "before" if before is None else "after"
        if stats_why:
            what = f"{when} the level {stats_why[0]}"
        elif before and after and since == 0:  # both reads answered after the level's replies (an overload)
            what = (f"read before the level came back only after all {len(succeeded)} of its measured replies (the "
                    "server, or this generator, was too busy to answer or read it in time), so its reads cover none "
                    "of them")
        else:
            what = "counted no successful request between its reads before and after the level"
        result.warnings.append(f"the server's statistics {what}: no server-side queue and compute times for it")
    else:
        result.server = server
    if config.mode == "rate":
        pace = None
        if reached and measure_end > measure_start:
            # the schedule the sends kept while the level measured, the requests dropped included: the rate less
            # the delay they gained behind it in that time (the warm-up's faster start made 5210 of 4257 req/s)
            gained = (_send_lag_s(reached, unsent_due_s, measure_end / 1e9)
                      - _send_lag_s(reached, unsent_due_s, measure_start / 1e9))
            pace = level * min(1.0, max(0.0, 1 - gained / ((measure_end - measure_start) / 1e9)))
            # what went out: the dropped ones were not sent (find-peak's 'sent 40.0 req/s' beside 12 of 40 dropped)
            dropped = statuses.get("dropped", 0)
            result.send_rate = pace * max(0.0, 1 - dropped / scheduled) if scheduled else pace
        # how late each request due, or gone out (written, or dropped), while the level measured went out: its
        # latency holds that. By due time alone, --rate 1e9 reported no lag ("send_lag_p99_s": null) 2 s behind its
        # schedule: every request the level sent or dropped was due in the warm-up's first millisecond
        lags_s = sorted(max(0.0, out - due) for due, out in reached
                        if measure_start <= due * 1e9 <= measure_end or measure_start <= out * 1e9 <= measure_end)
        result.send_lag_p99_s = percentile(lags_s, 99) if lags_s else None
        _rate_warnings(result, level, lags_s, statuses, (measure_end - measure_start) / 1e9, slo_failed, pace)
        unanswered = _unanswered_warning(records[first_record:], measure_start, measure_end, never)
        if unanswered is not None:
            result.warnings.append(unanswered)
        # what an SLO judges: the requests sent while the level measured, with their late replies (the replies in
        # the measured time were the warm-up's sends against a server that fell behind: "4 of 4 over" of 41 sent)
        result.sent_latencies_ns = [r[1] for r in records[first_record:]
                                    if r[2] == "200" and measure_start <= r[5] <= judged_end]
        # and those whose request timeout (or connection) failed them after the level's end: no reply before the
        # timeout, as those cancelled here (one sent 0.2 s before a 3 s level's end, timing out 1.5 s later, left
        # the verdict: "0 of 498 requests sent ... over", a pass, where with it 1 over of 500 needs 662)
        late_failed = sum(1 for r in records[first_record:] if r[0] > measure_end and r[2] not in ("200", "dropped")
                          and measure_start <= r[5] <= judged_end)
        result.unanswered = never_measured + late_failed
        backlog = sum(1 for r in succeeded if r[5] < measure_start)
        if backlog > 0.05 * len(succeeded):
            result.warnings.append(
                f"{backlog} of the {len(succeeded)} replies measured answered requests sent during the warm-up (a "
                "backlog at the server): req/s counts them, so it can exceed the rate; a longer --duration dilutes "
                "them")
    stalled = late_ns > max(0.25, 0.1 * config.window_s) * 1e9
    if stalled:
        # its timers fired that late: the load it made was not the one asked (bursts, sends and reads delayed)
        drive = f"{level:g} req/s" if config.mode == "rate" else f"concurrency {level:g}"
        result.warnings.append(
            f"the load generator's event loop ran up to {late_ns / 1e9:.2f} s behind its timers: it could not drive "
            f"{drive} itself, so this level's figures describe the generator as much as the server; lower "
            + ("--rate or --max-outstanding" if config.mode == "rate" else "--concurrency")
            + ", or run the generator on another machine")
    if limit is not None and config.mode == "concurrency" and limit < level:
        result.warnings.append(
            f"--requests {limit} is below the concurrency {level:g}: at most {limit} of the measured requests were "
            f"outstanding at once, and the server's figures include the requests the warm-up left in flight")
    _error_warnings(result, first_errors, config.window_s, stalled)
    if config.collect_metrics:
        result.resources = summarize(samples, config.metrics_interval_s) if samples else None
        result.warnings += [f"--collect-metrics: {p}" for p in problems]
    if statuses.get(MISMATCH):
        result.warnings.append(f"{statuses[MISMATCH]} replies did not match the validation data (counted as "
                               f"errors); the first: {mismatches[0]}")
    if 0 < result.ok < FEW_FOR_P99 and not slo_failed:
        # bench says so of its samples; a level of --requests 10 printed a p99 and a p99.9 without a word
        result.warnings.append(
            f"only {result.ok} replies measured: its p99 and p99.9 are little more than the slowest of them; "
            f"{FEW_FOR_P99} or more for a p99 ({early_stopping_min_count(99)} for its 99%-confidence bound)")
    windows_possible = int((config.duration_s - config.warmup_s) // config.window_s)
    if not stable and not slo_failed and windows_possible < config.stable_windows:
        # fewer windows than the check compares: "did not agree" was said of a single one on every short run
        needed = config.warmup_s + config.stable_windows * config.window_s
        result.warnings.append(
            f"the level was too short to check stability: {config.stable_windows} windows of {config.window_s:g} s "
            f"after the {config.warmup_s:g} s warm-up need --duration {needed:g}s or more"
        )
    elif not stable and not slo_failed and limit is not None and len(windows) < config.stable_windows:
        # --requests ended the level first: "the last 3 windows did not agree" was said of the one it measured
        per_s = len(measured) / result.measured_s if result.measured_s > 0 else 0.0
        more = f" (about {math.ceil(per_s * config.stable_windows * config.window_s)} at this rate)" if per_s else ""
        result.warnings.append(
            f"the level was too short to check stability: its {limit} requests took {len(windows)} window"
            f"{'' if len(windows) == 1 else 's'} of {config.window_s:g} s, and the check compares "
            f"{config.stable_windows}: give more --requests{more}, or leave it out"
        )
    elif not stable and not slo_failed:  # a level the SLO failed early needs no stable windows
        result.warnings.append(
            f"the last {config.stable_windows} windows of {config.window_s:g} s did not agree within "
            f"{config.stability:.0%} on throughput and {_latency_name(config.stability_percentile)} latency "
            f"before the level's bound ({config.duration_s:g} s"
            + (f", {config.requests} requests" if config.requests else "") + "): results may be unstable"
            + (_poisson_note(level, config) if config.mode == "rate" and config.arrivals == "poisson" else "")
        )
    return result


def _poisson_note(rate: float, config: LoadConfig) -> str:
    """What Poisson arrivals do to the stability check: a window of `window_s` holds rate x window_s requests on
    average, give or take its square root, so windows of an unchanging server differ by that much (three 2 s windows
    at 50-90 req/s agreed within 10% on throughput 56-77% of the time from the arrivals alone). Names the window
    that brings one standard deviation to a third of the tolerance."""
    expected = rate * config.window_s
    spread = 1 / math.sqrt(expected) if expected > 0 else math.inf
    window = 9 / (config.stability ** 2 * rate)
    return (f"; with Poisson arrivals a {config.window_s:g} s window holds {expected:.0f} requests give or take "
            f"{spread:.0%} (one standard deviation) from the arrivals alone, so its windows disagree on throughput "
            f"without any change in the server: --window-s {math.ceil(window):g} brings that to "
            f"{config.stability / 3:.1%}, or --arrivals constant")


def _send_lag_s(reached: Sequence[tuple[float, float]], unsent_due_s: float | None, at_s: float) -> float:
    """How far behind its schedule the open loop's sends were at `at_s` (perf_counter s), by count: the n
    requests out by then (`reached`: due and out times) against the schedule's first n, the n-th out that much
    after the n-th due, or, where the next one (or `unsent_due_s`, the one the loop stopped before) was due and
    not out, since it was due. By count, one request stuck connecting for seconds is not the whole schedule's delay,
    and an on-time schedule's gap to its next request, or Poisson's spread, is no delay."""
    dues = sorted(due for due, _ in reached) + ([] if unsent_due_s is None else [unsent_due_s])
    outs = sorted(out for _, out in reached)
    n = bisect.bisect_right(outs, at_s)
    lag = outs[n - 1] - dues[n - 1] if n else 0.0
    if n < len(dues) and dues[n] <= at_s:
        lag = max(lag, at_s - dues[n])
    return max(0.0, lag)


UNANSWERED_P99_TOLERANCE = 0.10
"""How much higher the p99 of the requests sent while a level measured may read counting the replies that came after
its end than without them, before the level says its percentiles left out a server falling behind."""


def _unanswered_warning(records: Sequence[Record], measure_start: int, measure_end: int, never: int) -> str | None:
    """Say so when the requests the open loop sent while the level measured and that had no reply when it ended
    change its tail: the percentiles hold the replies in the measured time only, so a server falling ever further
    behind read as a p99 bounded by the level's length (rate 800 against a 350 req/s server: p99 2.97 s, while the
    requests sent in those seconds took up to 7.7 s). `records`: replies, also those after the level's end;
    `never`: requests still without one when the generator stopped waiting.

    Some are always in flight at the end (about rate x latency: 4-6 of 150 at 100 req/s with 20-70 ms batches), and
    their late replies are no slower than the rest, so their count alone is no sign: said where over 1% of the sends
    had none and either some got none at all, or counting their late replies puts the p99 of the level's sends over
    `UNANSWERED_P99_TOLERANCE` above the p99 of those answered in time."""
    sent = [r for r in records if r[2] != "dropped" and measure_start <= r[5] <= measure_end]
    late = [r for r in sent if r[0] > measure_end]
    missing = len(late) + never
    if missing <= 0.01 * (len(sent) + never):
        return None
    everyone = sorted(r[1] / 1e9 for r in sent)
    in_time = sorted(r[1] / 1e9 for r in sent if r[0] <= measure_end)
    if (not never and in_time
            and percentile(everyone, 99) <= (1 + UNANSWERED_P99_TOLERANCE) * percentile(in_time, 99)):
        return None  # normal in-flight work: leaving it out does not move the tail
    with_late = (f"; counting their late replies, the p99 of the requests sent while it measured is "
                 f"{percentile(everyone, 99) * 1e3:.4g} ms") if everyone and not never else ""
    gone = f", {never} of them none at all before the request timeout" if never else ""
    return (f"{missing} of the {len(sent) + never} requests sent while the level measured had no reply when it "
            f"ended (the server fell behind{gone}): its percentiles, of the replies in the measured time, leave them "
            f"out{with_late}; a lower --rate, or a --p99-ms verdict, judges such a level")


def _slo_decided(records: Sequence[Record], slo: Slo) -> str | None:
    """'pass' or 'fail' once the measured requests so far settle the SLO at 99% confidence: 'fail' when one
    failed or the mirror of the early-stopping test says more than the SLO's share (1% for p99) are over
    (`early_stopping_fails`), 'pass' when MLPerf's test passes; None in between (the level measures on to
    its bound, where `verdict` calls it undecided)."""
    if any(r[2] != "200" for r in records):
        return "fail"
    slo_ns = slo.bound_s * 1e9
    over = sum(1 for r in records if r[1] > slo_ns)
    if early_stopping_fails(len(records), over, slo.percentile):
        return "fail"
    return "pass" if early_stopping_passes(len(records), over, slo.percentile) else None


def _sent_cut_ns(now: int, slo: Slo | None) -> int:
    """The last send time whose request an SLO can judge at `now` without a bias: one sent earlier has replied or
    is already over the bound; of those sent later only the fast have replied, and judging those favours a pass."""
    return now if slo is None else now - int(slo.bound_s * 1e9) - 1


def _decision_bound_ns(judged: Sequence[Record], config: LoadConfig, now: int, measure_start: int,
                       start: int) -> int:
    """Where a level whose SLO is undecided at `now` should end to measure the requests MLPerf's early-stopping
    test needs for the overs seen (`early_stopping_min_count`), at the pace its replies came so far, 10% more and
    at least a window further; at most `config.decide_within_s` after the level's `start`. `now` (no later bound)
    without an SLO, with a request bound, or when the SLO is decided (or failed)."""
    slo = config.slo
    if slo is None or config.decide_within_s is None or config.requests is not None:
        return now
    if not judged or _slo_decided(judged, slo) is not None:
        return now
    over = sum(1 for r in judged if r[1] > slo.bound_s * 1e9)
    needed = early_stopping_min_count(slo.percentile, over)
    per_s = len(judged) / max(1e-9, (now - measure_start) / 1e9)
    more_s = max(config.window_s, 1.1 * max(0, needed - len(judged)) / per_s)
    return min(start + int(config.decide_within_s * 1e9), now + int(more_s * 1e9))


def _rate_warnings(result: LevelResult, rate: float, lags_s: list[float], statuses: dict[str, int],
                   measured_s: float, slo_failed: bool = False, pace: float | None = None) -> None:
    """`pace`: the rate at which the open loop came to its requests, sent or dropped (`result.send_rate` counts
    the sent only); below the rate, the generator itself could not keep up. The dropped have a warning of their
    own, whose cause is the server."""
    pace = result.send_rate if pace is None else pace
    if statuses.get("dropped"):
        result.warnings.append(f"{statuses['dropped']} requests due while the level measured were not sent: the "
                               "outstanding-request cap was reached (the server is far behind; "
                               "--max-outstanding sets the cap)")
    expected = rate * measured_s
    if expected < 10 and slo_failed:
        return  # ended early, the SLO failed: not for want of a longer --duration
    if expected < 10:
        result.warnings.append(f"at {rate:g} req/s, {measured_s:.3g} s of measurement hold about {expected:.1f} "
                               "requests: too few to measure; give a longer --duration (or a higher --rate)")
        return  # a sparse schedule says nothing about the generator keeping up
    lags = sorted(lags_s)
    if pace is not None and pace < 0.95 * rate:
        # the pace counts the requests dropped at the cap: --rate 1e9 "kept up with 572611.7 req/s" where 739 a
        # second were sent
        sent = (f"it came to {pace:.1f} req/s of its schedule and sent {result.send_rate:.1f} req/s of them (the "
                "rest were dropped at the outstanding-request cap, above)"
                if statuses.get("dropped") and result.send_rate is not None else f"it kept up with {pace:.1f} req/s")
        result.warnings.append(
            f"the load generator could not send {rate:g} req/s itself: {sent}; "
            "use fewer CPU-heavy requests, another machine for the generator, or a lower --rate"
        )
    elif lags and percentile(lags, 99) > max(0.002, 2.0 / rate):
        result.warnings.append(
            f"the load generator fell behind its schedule (p99 send lag {percentile(lags, 99) * 1e3:.1f} ms): "
            "latencies count from each request's scheduled time, so they include that lag and the bursts it made"
        )


def _error_warnings(result: LevelResult, first_errors: dict[str, str] | None = None, window_s: float = 2.0,
                    stalled: bool = False) -> None:
    """Say so when a level measured failures more than answers: its latencies then describe few requests. The
    server's own message of the most frequent HTTP error status is quoted (`first_errors`: status -> message).
    `stalled`: the generator's own event loop stalled (warned about already), which explains a level without
    replies better than a server that is down."""
    failed = {s: n for s, n in result.statuses.items() if s not in ("200", "dropped")}
    total = sum(failed.values())
    quoted = sorted(((n, s) for s, n in failed.items() if s in (first_errors or {})), reverse=True)
    said = f"; the server's {quoted[0][1]} said: {(first_errors or {})[quoted[0][1]]}" if quoted else ""
    if result.ok == 0:
        seen = ", ".join(f"{s}: {n}" for s, n in sorted(result.statuses.items())) or "none ended in the windows"
        # a server answering every request with an error is up: the question is for connection errors and timeouts
        why = said or (": the generator's event loop stalled (above)" if stalled and not result.statuses else
                       ": is the server up, and does it answer within --request-timeout-s?")
        result.warnings.append(f"no request succeeded while the level measured ({seen}){why}")
    elif total > result.ok:
        seen = ", ".join(f"{s}: {n}" for s, n in sorted(failed.items()))
        result.warnings.append(f"most requests failed ({total} against {result.ok} answered; {seen}){said}")
    if result.ok and result.statuses.get(CONNECTION_ERROR):
        # a server restarted mid-level: exit 0, a blended rate and 'stable', with 357 refused connections unsaid
        result.warnings.append(f"{result.statuses[CONNECTION_ERROR]} requests could not connect or lost their "
                               "connection (the server went away, restarted or refused them): the level's figures "
                               "blend the time it answered with the time it did not")
    empty = [i + 1 for i, w in enumerate(result.window_throughputs) if w == 0]
    answered = [w for w in result.window_throughputs if w > 0]
    # only where a window normally holds replies: at 0.3 req/s, or with calls longer than a window, most are empty
    if result.ok and empty and answered and min(answered) * window_s >= 5:
        result.warnings.append(f"window{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))} of "
                               f"{len(result.window_throughputs)} had no replies: an outage inside the level")


def _window_latency_s(window: Sequence[Record], q: float | None) -> float:
    """A window's latency for the stability rule: the mean of its requests' latencies, or their q-th
    percentile; NaN for a window without completions."""
    if not window:
        return float("nan")
    if q is None:
        return sum(r[1] for r in window) / len(window) / 1e9
    return percentile(sorted(r[1] for r in window), q) / 1e9


def _latency_name(q: float | None) -> str:
    return "mean" if q is None else f"p{q:g}"


def _agree(windows: Sequence[tuple[float, float]], tolerance: float) -> bool:
    for i in (0, 1):
        values = [w[i] for w in windows]
        if any(v != v for v in values):  # NaN: a window without completions
            return False
        mean = sum(values) / len(values)
        if mean <= 0 or any(abs(v - mean) > tolerance * mean for v in values):
            return False
    return True


async def _sleep_until(t_ns: int, clock: Callable[[], int], finished: Callable[[], bool]) -> None:
    """Sleep until `t_ns`, or until `finished()` (a request bound reached and every reply in). It returns at
    once only when the caller's loop ends on it: returning early while a reply is still due made the
    windows' loop spin without yielding, so the reply was never read and the level ran to its time bound."""
    while True:
        remaining = (t_ns - clock()) / 1e9
        if remaining <= 0 or finished():
            return
        await asyncio.sleep(min(remaining, 0.05))


# --- sweeps and the peak ----------------------------------------------------------------------------------


def _level_windows(on_window: Callable[[float, int, float], None] | None,
                   level: float) -> Callable[[int, float], None] | None:
    if on_window is None:
        return None
    return lambda n, throughput: on_window(level, n, throughput)


def ensure_open_files(config: LoadConfig) -> None:
    """Make room for the connections the config opens: raise this process's soft limit on open files towards
    its hard limit where needed; ConfigError when a concurrency level needs more than the hard limit allows (a
    connect would fail with EMFILE on every try). Rate mode opens at most `max_outstanding` connections and
    only as many as requests are outstanding, so it gets what the limit allows."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    spare = 64  # the event loop, the statistics and metrics fetches, the store
    needed = spare + (config.max_outstanding if config.mode == "rate" else max(config.concurrency))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if config.mode != "rate" and soft < needed:
        raise ConfigError(f"--concurrency {max(config.concurrency)} needs {needed} open files (a connection each), "
                          f"but this process may open {soft} (ulimit -n): raise the limit or lower the concurrency")


def run_load(target: Target, config: LoadConfig,
             on_level: Callable[[LevelResult], None] | None = None,
             on_window: Callable[[float, int, float], None] | None = None) -> list[LevelResult]:
    """Every level of the config: each concurrency, or each rate. `on_window(level, windows, req/s)` after
    each measurement window, `on_level(result)` after each level."""
    ensure_open_files(config)
    levels: list[float] = list(config.rates) or [float(c) for c in config.concurrency]
    results = []
    for level in levels:
        result = run_level(target, config, level, _level_windows(on_window, level))
        results.append(result)
        if on_level is not None:
            on_level(result)
    return results


@dataclass
class PeakResult:
    slo: Slo
    peak_rate: float | None
    """The highest tried rate that passed (None: none did)."""
    steps: list[LevelResult]
    undecided_at: LevelResult | None = None
    """The trial the search stopped at: undecided, and kept as short by the user's --duration or --requests
    at every lower rate (None: the search ended as it does)."""

    def passed(self, step: LevelResult) -> bool:
        return passes(step, self.slo)

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo.to_dict(), "peak_rate": self.peak_rate,
                "undecided_at": None if self.undecided_at is None else self.undecided_at.level,
                "steps": [{**s.summary(), **verdict_dict(s, self.slo)} for s in self.steps]}


class Verdict(NamedTuple):
    """A level judged against a latency SLO: `status` 'pass', 'fail' or 'undecided' (too few requests for
    the early-stopping test to say either), and why."""

    status: str
    reason: str

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def _verdict_ms(seconds: float) -> str:
    """A latency in a verdict, in ms: 3 significant digits below 100 ms, whole ms from there ('sample p99 1.37e+03 ms'
    was printed for a 1366 ms p99, the table's 1366)."""
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def verdict(step: LevelResult, slo: Slo) -> Verdict:
    """VALID in MLPerf's sense, and why: no errors, the rate really generated, and the SLO's percentile
    within its bound by MLPerf's early-stopping test (at 99% confidence, so for p99 at least 459 requests,
    more if any were over). 'fail' when a request failed, the rate was not sent, or the mirror test shows the
    percentile over its bound at 99% confidence (`early_stopping_fails`, as `_slo_decided` during the level);
    'undecided' in between."""
    slo_ms, name = slo.bound_s * 1e3, slo.name
    dropped = step.statuses.get("dropped", 0)  # due, but not sent: 'failed' they were not
    if step.sent_latencies_ns is not None and not step.sent_latencies_ns:
        out = max(0, step.scheduled - dropped)
        gone = f", {step.unanswered} none at all before the request timeout" if step.unanswered else ""
        return Verdict("fail", f"none of the {out} requests sent while the level measured had a successful reply"
                               f"{gone}" + (f" (the {step.ok} in its time answered the warm-up's)" if step.ok else ""))
    if step.ok == 0:
        return Verdict("fail", "no request succeeded")
    if step.failed or dropped:
        sent = " sent" if dropped else ""
        why = [f"{step.failed} of {step.ok + step.failed} requests{sent} failed"] if step.failed else []
        if dropped:
            why.append(f"{dropped} of {step.ok + step.failed + dropped} requests due were not sent: the "
                       "outstanding-request cap was reached (--max-outstanding)")
        return Verdict("fail", "; ".join(why))
    if step.send_rate is not None and step.send_rate < 0.95 * step.level:
        return Verdict("fail", f"only {step.send_rate:.1f} of {step.level:g} req/s were sent")
    judged = _judged_s(step)
    n = len(judged)
    over = sum(1 for v in judged if v > slo.bound_s)
    # rate mode: the sends of the measured time, their replies after it counted ("late") and none as over
    what = "" if step.sent_latencies_ns is None else (
        " sent while it measured" + (f" ({step.unanswered} with no reply)" if step.unanswered else ""))
    bound = percentile_upper_bound(judged, slo.percentile)
    if bound is not None and bound <= slo.bound_s:
        return Verdict("pass", f"{name} <= {_verdict_ms(bound)} ms at 99% confidence "
                               f"({over} of {n} requests{what} over {slo_ms:g} ms)")
    answered = [v for v in judged if v != math.inf]
    sample = f"sample {name} {_verdict_ms(percentile(answered, slo.percentile))} ms" + (
        " of those answered" if step.unanswered else "")
    if early_stopping_fails(n, over, slo.percentile):
        return Verdict("fail", f"{name} over {slo_ms:g} ms at 99% confidence: {over} of {n} requests{what} over "
                               f"({sample})")
    # neither shown: a share over the SLO's in the sample is not a failure by itself (2 of 150 over happen 44%
    # of the time at a true p99 right at the bound), nor is a sample p99 within it a pass
    needed = early_stopping_min_count(slo.percentile, over)
    return Verdict("undecided", f"{n} requests{what}, {over} over {slo_ms:g} ms ({sample}); MLPerf's early-stopping "
                                f"test needs at least {needed} to say {name} <= {slo_ms:g} ms at 99% confidence "
                                "(a longer level: --duration, --requests)")


VERDICT_KEYS = ("passed", "verdict", "verdict_reason", "slo_bound_s")
"""What `verdict_dict` adds to a level's stored summary."""


def _judged_s(step: LevelResult) -> list[float]:
    """The latencies (s, sorted) a latency SLO judges: in rate mode those of the requests sent while the level
    measured, late replies included, and one `inf` for each with no reply at all; else the measured replies'."""
    if step.sent_latencies_ns is None:
        return step._sorted_s()
    return sorted(v / 1e9 for v in step.sent_latencies_ns) + [math.inf] * step.unanswered


def verdict_dict(step: LevelResult, slo: Slo) -> dict[str, Any]:
    """The verdict as stored, with the early-stopping estimate at the SLO's percentile (`slo_bound_s`) of the
    requests it judged (None where that is a request with no reply)."""
    judged = verdict(step, slo)
    bound = percentile_upper_bound(_judged_s(step), slo.percentile)
    return dict(zip(VERDICT_KEYS, (judged.passed, judged.status, judged.reason,
                                   bound if bound is not None and bound != math.inf else None), strict=True))


def passes(step: LevelResult, slo: Slo) -> bool:
    return verdict(step, slo).passed


def decision_duration_s(config: LoadConfig, rate: float, slo: Slo) -> float:
    """A level long enough at `rate` for the early-stopping test to pass with a few requests over the SLO:
    the warm-up, 1.5 x the fewest requests that can pass (459 for p99), and two windows."""
    return config.warmup_s + 1.5 * slo.min_requests / rate + 2 * config.window_s


MAX_FITTED_TRIAL_S = 900.0
"""The longest a fitted trial (`decision_duration_s`) may be: a --rate whose first trial would run longer is refused,
and the search halves no lower than a rate whose trial fits. 15 minutes holds the trial at 1 req/s, the lowest start
the probe gives (694 s for p99); --rate 0.1 asked for a first trial of 6890 s, printed as its bound and nothing else."""


EXTEND_FITTED_TRIAL = 3.0
"""How much longer than its fitted duration a trial undecided there may run for the requests the early-stopping test
needs for the overs it saw (within `MAX_FITTED_TRIAL_S`): 3 x 30 s at 50 req/s holds about 4400 requests, which decide
up to 29 over (0.66%) where 459 x 1.5 decide 4."""


def lowest_fitted_rate(config: LoadConfig, slo: Slo) -> float:
    """The lowest rate whose fitted trial (`decision_duration_s`) fits in `MAX_FITTED_TRIAL_S`."""
    return 1.5 * slo.min_requests / max(1e-9, MAX_FITTED_TRIAL_S - config.warmup_s - 2 * config.window_s)


def check_start_rate(config: LoadConfig, slo: Slo, rate: float) -> None:
    """ConfigError when a search's first fitted trial at `rate` would run longer than `MAX_FITTED_TRIAL_S`, naming
    the lowest start rate that fits and the --duration that bounds each trial instead."""
    needed = decision_duration_s(config, rate, slo)
    if needed > MAX_FITTED_TRIAL_S:
        raise ConfigError(
            f"--rate {rate:g}: the search's first trial would run up to {needed:.0f} s (1.5 x the "
            f"{slo.min_requests} requests that can show {slo.name} <= {slo.bound_s * 1e3:g} ms at 99% confidence, at "
            f"{rate:g} req/s), over the {MAX_FITTED_TRIAL_S / 60:g} minutes a trial may take: start at --rate "
            f"{math.ceil(lowest_fitted_rate(config, slo) * 100) / 100:g} or higher, or give --duration to bound "
            "each trial (an undecided trial then stops the search)")


def find_peak(target: Target, config: LoadConfig, slo: Slo, start_rate: float | None = None,
              max_steps: int = 10, tolerance: float = 0.05,
              on_step: Callable[[LevelResult, bool], None] | None = None, fit_duration: bool = False,
              on_trial: Callable[[float, float], None] | None = None,
              on_window: Callable[[float, int, float], None] | None = None,
              on_probe: Callable[[float], None] | None = None) -> PeakResult:
    """Highest passing rate (`verdict`): from `start_rate` (default: measured closed-loop throughput at
    concurrency 4), double up or halve down to bracket the edge, then bisect until within `tolerance` or
    `max_steps`. Each trial measures until the SLO is decided or its bound; `fit_duration` raises a trial's
    duration bound to `decision_duration_s` where `config.duration_s` is shorter. `on_trial(rate, bound_s)`
    runs before each trial, `on_step(step, passed)` after, `on_probe(start_rate)` after the probe."""
    import dataclasses

    if fit_duration and start_rate is not None:
        check_start_rate(config, slo, start_rate)
    ensure_open_files(dataclasses.replace(config, rate=start_rate or 1.0))
    steps: list[LevelResult] = []
    # an undecided trial did not show its rate to miss the SLO; one the user's --duration or --requests kept
    # too short would stay so at every lower rate (fewer requests in the same time): the search stops there
    fixed = not fit_duration or config.requests is not None
    stopped: list[LevelResult] = []

    def trial(rate: float) -> bool | None:
        """True: passed; False: failed, or undecided where no other rate would decide (`stopped`); None:
        undecided with no request over the SLO in a --duration-bound trial, where a higher rate measures more
        requests in the same time (the search gave up at its first trial, which 300 requests left undecided)."""
        cfg = dataclasses.replace(config, rate=rate, slo=slo)
        if fit_duration:
            fitted = max(config.duration_s, decision_duration_s(config, rate, slo))
            # sized for none over: near the edge it may go on, within EXTEND_FITTED_TRIAL x that, for the overs seen
            cfg = dataclasses.replace(cfg, duration_s=fitted, decide_within_s=None if config.requests is not None
                                      else max(fitted, min(MAX_FITTED_TRIAL_S, EXTEND_FITTED_TRIAL * fitted)))
        if on_trial is not None:
            on_trial(rate, cfg.decide_within_s or cfg.duration_s)
        step = run_level(target, cfg, rate, _level_windows(on_window, rate))
        steps.append(step)
        judged = verdict(step, slo)
        if on_step is not None:
            on_step(step, judged.passed)
        if fixed and judged.status == "undecided":
            if config.requests is None and not any(v > slo.bound_s for v in _judged_s(step)):
                return None
            stopped.append(step)
        return judged.passed

    if start_rate is None:
        probe = run_level(target, dataclasses.replace(config, rate=None, concurrency=(4,)), 4.0)
        if probe.ok == 0:  # it started at 1 req/s without a word, against a server failing every request
            seen = ", ".join(f"{k}: {v}" for k, v in sorted(probe.statuses.items())) or "no reply"
            raise LoadGenError(f"the start-rate probe (closed loop at concurrency 4) got no successful reply ({seen}): "
                               "check the server, or give --rate to start the search there")
        start_rate = max(1.0, probe.throughput)
        if on_probe is not None:
            on_probe(start_rate)
    lo: float | None = None
    hi: float | None = None
    rate = start_rate
    while len(steps) < max_steps:
        passed = trial(rate)
        if passed is None:  # undecided but clean: up while no rate failed, else no other rate decides it
            if hi is not None:
                stopped.append(steps[-1])
                break
            rate *= 2
            if len(steps) == max_steps:
                stopped.append(steps[-1])
            continue
        if passed:
            lo = rate
            if hi is not None:
                break
            rate *= 2
        else:
            hi = rate
            if lo is not None or stopped:
                break
            rate /= 2
            if rate < 0.5 or (fit_duration and decision_duration_s(config, rate, slo) > MAX_FITTED_TRIAL_S):
                break
    while (lo is not None and hi is not None and not stopped and len(steps) < max_steps
           and (hi - lo) > tolerance * lo):
        mid = (lo + hi) / 2
        passed = trial(mid)
        if passed is None:  # between a passing and a failing rate: as undecided as any would be
            stopped.append(steps[-1])
        elif passed:
            lo = mid
        else:
            hi = mid
    return PeakResult(slo, lo, steps, stopped[0] if stopped else None)
