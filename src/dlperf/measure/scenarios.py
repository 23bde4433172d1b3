"""MLPerf-named scenarios: which batch sizes are run and which KPI is the headline.

- single-stream: one sample per query, queries back to back; headline: p90 latency.
- multi-stream: `samples_per_query` samples per query (default 8), back to back; headline: p99 latency.
- offline: throughput over a batch-size sweep; headline: the best items/s and its batch size.
The server scenario (Poisson arrivals against a latency bound) lives in `dlperf load --find-peak`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.errors import ConfigError
from dlperf.measure.stats import early_stopping_min_count

SCENARIOS = ("single-stream", "multi-stream", "offline")


@dataclass(frozen=True)
class Scenario:
    name: str
    headline: str  # "p90_s", "p99_s" or "throughput"
    samples_per_query: int = 1

    def __post_init__(self) -> None:
        if self.name not in SCENARIOS:
            raise ConfigError(f"unknown scenario '{self.name}': choose one of {', '.join(SCENARIOS)}")

    @property
    def headline_percentile(self) -> float | None:
        """90 or 99 for a p90/p99 headline, None for throughput."""
        return {"p90_s": 90.0, "p99_s": 99.0}.get(self.headline)

    @property
    def default_min_iters(self) -> int:
        """10 calls, or for a latency headline the fewest that let MLPerf's early stopping bound it at 99%
        confidence: 44 for single-stream's p90, 459 for multi-stream's p99 (LoadGen's own estimate, one sample
        higher, needs 64 and 662: docs/measure.md)."""
        q = self.headline_percentile
        return 10 if q is None else early_stopping_min_count(q)

    def batch_sizes(self, requested: tuple[int, ...] | None) -> tuple[int, ...]:
        if self.name == "single-stream":
            return (1,)
        if self.name == "multi-stream":
            return (self.samples_per_query,)
        return requested or (1, 8, 32)


def scenario(name: str, samples_per_query: int = 8) -> Scenario:
    headline = {"single-stream": "p90_s", "multi-stream": "p99_s", "offline": "throughput"}.get(name)
    if name == "server":  # MLPerf's fourth scenario: it needs a server and an arrival process, not a timed loop
        raise ConfigError("the server scenario (Poisson arrivals against a latency bound) is measured on a served "
                          "model: `dlperf serve WORKLOAD`, then `dlperf load HOST:PORT --model NAME --find-peak "
                          f"--p99-ms X` (docs/serve.md); bench's scenarios are {', '.join(SCENARIOS)}")
    if headline is None:
        raise ConfigError(f"unknown scenario '{name}': choose one of {', '.join(SCENARIOS)}")
    return Scenario(name, headline, samples_per_query if name == "multi-stream" else 1)
