"""Rank candidates that meet the constraints by the objective (latency, throughput, size, memory)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dlperf.errors import ConfigError

OBJECTIVES = {
    # objective -> (result key, lower is better)
    "latency": ("p50_s", True),
    "throughput": ("throughput", False),
    "size": ("size_bytes", True),
    "memory": ("peak_rss_bytes", True),
}
SPEED_OBJECTIVES = ("latency", "throughput")
"""Objectives a time ratio speaks to (a paired gain applies to them, not to size or memory)."""


def check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective '{objective}': choose one of {', '.join(OBJECTIVES)}")


def objective_value(row: dict[str, Any], objective: str) -> float:
    key, _ = OBJECTIVES[objective]
    return float(row[key])


def gain(row: dict[str, Any], baseline: dict[str, Any], objective: str) -> float:
    """How many times better than the baseline on the objective (>1 is better), from isolated measurements."""
    key, lower = OBJECTIVES[objective]
    a, b = float(baseline[key]), float(row[key])
    if lower:
        return a / b if b > 0 else float("inf")
    return b / a if a > 0 else float("inf")


def rank(rows: Sequence[dict[str, Any]], objective: str, higher_is_better_metric: bool = True,
         speed_gain: Callable[[dict[str, Any]], float] | None = None) -> list[int]:
    """Indices of rows best-first by the objective; ties broken by the better metric, then fewer passes.

    `speed_gain`: for latency and throughput, rank by this gain over the baseline (higher first) instead of
    the rows' own values. The search passes the gain each candidate measured against the original model in
    its own process: p50s taken in different processes differ by more than many passes' effects here."""
    check_objective(objective)
    key, lower = OBJECTIVES[objective]
    sign = 1.0 if lower else -1.0
    msign = -1.0 if higher_is_better_metric else 1.0
    gain_of = speed_gain if objective in SPEED_OBJECTIVES else None

    def sort_key(i: int) -> tuple[float, float, int]:
        row = rows[i]
        primary = -gain_of(row) if gain_of is not None else sign * float(row[key])
        return primary, msign * float(row.get("metric") or 0.0), len(row.get("pipeline", []))

    return sorted(range(len(rows)), key=sort_key)
