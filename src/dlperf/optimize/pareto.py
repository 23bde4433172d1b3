"""The Pareto frontier of candidates over latency, metric, size and memory (no candidate beats another on
every axis and strictly on one).

The latency axis is `paired_p50_s` (the baseline's p50 times the candidate/original ratio measured in the
candidate's own process, set by the search), the measure the ranking uses; a row without it falls back to its p50."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# (result key, True when lower is better)
AXES: tuple[tuple[str, bool], ...] = (
    ("paired_p50_s", True), ("metric", False), ("size_bytes", True), ("peak_rss_bytes", True),
)


def axes_for(device: str, objective: str = "memory") -> tuple[tuple[str, bool], ...]:
    """The axes of a search on `device` for `objective`: a memory search on a GPU has the GPU memory as its memory
    axis (`select.GPU_MEMORY`, what it ranks by there), not the host's peak RSS. Other searches on a GPU keep the peak
    RSS: they read no GPU memory for engine candidates (no deployed process), which would leave them worst there."""
    from dlperf.optimize.select import GPU_MEMORY

    if objective != "memory" or not device.startswith("cuda"):
        return AXES
    return tuple((GPU_MEMORY, True) if key == "peak_rss_bytes" else (key, lower) for key, lower in AXES)


FALLBACK = {"paired_p50_s": "p50_s"}
"""The key an axis reads when a row lacks its own."""
TOLERANCE = {"metric": 1e-6}
"""Differences on an axis up to this much are ties: a compiled candidate's metric of 0.9999999963 against the
baseline's 0.9999999925 (float rounding, shown as 1.0000 and "-0.00%") kept it on the frontier, 1.5x slower and
larger in memory."""


def _value(row: dict[str, Any], key: str, lower_better: bool, higher_is_better_metric: bool) -> float:
    found = row[key] if key in row or key not in FALLBACK else row[FALLBACK[key]]
    if found is None:  # a GPU candidate whose memory could not be read: the worst there is on that axis
        return math.inf
    v = float(found)
    if key == "metric":
        # Express every axis as "lower is better".
        return -v if higher_is_better_metric else v
    return v if lower_better else -v


def dominates(a: dict[str, Any], b: dict[str, Any], axes: Sequence[tuple[str, bool]] = AXES,
              higher_is_better_metric: bool = True) -> bool:
    va = [_value(a, k, lb, higher_is_better_metric) for k, lb in axes]
    vb = [_value(b, k, lb, higher_is_better_metric) for k, lb in axes]
    tol = [TOLERANCE.get(k, 0.0) for k, _ in axes]
    return (all(x <= y + t for x, y, t in zip(va, vb, tol, strict=False))
            and any(x < y - t for x, y, t in zip(va, vb, tol, strict=False)))


def pareto_front(rows: Sequence[dict[str, Any]], axes: Sequence[tuple[str, bool]] = AXES,
                 higher_is_better_metric: bool = True) -> list[int]:
    """Indices of the rows no other row dominates, in input order."""
    front = []
    for i, row in enumerate(rows):
        if not any(dominates(other, row, axes, higher_is_better_metric) for j, other in enumerate(rows) if j != i):
            front.append(i)
    return front
