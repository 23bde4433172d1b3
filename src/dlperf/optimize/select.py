"""Rank candidates that meet the constraints by the objective (latency, throughput, size, memory)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dlperf.errors import ConfigError
from dlperf.measure.ab import FASTER, SLOWER

OBJECTIVES = {
    # objective -> (result key, lower is better)
    "latency": ("p50_s", True),
    "throughput": ("throughput", False),
    "size": ("size_bytes", True),
    "memory": ("peak_rss_bytes", True),
}
SPEED_OBJECTIVES = ("latency", "throughput")
"""Objectives a time ratio speaks to (a paired gain applies to them, not to size or memory)."""


GPU_MEMORY = "gpu_memory_bytes"
"""The memory objective's figure on a GPU: the deployed process's GPU memory (`evaluate._gpu_memory`), not its host
RSS (a search on cuda ranked by the host's peak RSS, and a candidate's GPU peak was torch's allocator's alone)."""


def check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective '{objective}': choose one of {', '.join(OBJECTIVES)}")


def objective_key(objective: str, device: str = "cpu") -> tuple[str, bool]:
    """(the row's key, lower is better) that `objective` ranks by on `device`."""
    check_objective(objective)
    if objective == "memory" and device.startswith("cuda"):
        return GPU_MEMORY, True
    return OBJECTIVES[objective]


def _figure(row: dict[str, Any], key: str, lower: bool) -> float:
    """The row's figure; a missing one (a GPU candidate whose memory could not be read) as the worst there is."""
    value = row.get(key)
    return float(value) if value is not None else (math.inf if lower else -math.inf)


def objective_value(row: dict[str, Any], objective: str, device: str = "cpu") -> float:
    key, lower = objective_key(objective, device)
    return _figure(row, key, lower)


def gain(row: dict[str, Any], baseline: dict[str, Any], objective: str, device: str = "cpu") -> float:
    """How many times better than the baseline on the objective (>1 is better), from isolated measurements; 0 for a
    row without the figure."""
    key, lower = objective_key(objective, device)
    if row.get(key) is None:
        return 0.0
    a, b = _figure(baseline, key, lower), float(row[key])
    if lower:
        return a / b if b > 0 else math.inf
    return b / a if a > 0 else math.inf


def rank(rows: Sequence[dict[str, Any]], objective: str, higher_is_better_metric: bool = True,
         speed_gain: Callable[[dict[str, Any]], float] | None = None, device: str = "cpu") -> list[int]:
    """Indices of rows best-first by the objective on `device`; ties broken by the better metric, then fewer passes.

    `speed_gain`: for latency and throughput, rank by this gain over the baseline (higher first) instead of
    the rows' own values. The search passes the gain each candidate measured against the original model in
    its own process: p50s taken in different processes differ by more than many passes' effects here."""
    key, lower = objective_key(objective, device)
    sign = 1.0 if lower else -1.0
    msign = -1.0 if higher_is_better_metric else 1.0
    gain_of = speed_gain if objective in SPEED_OBJECTIVES else None

    def sort_key(i: int) -> tuple[float, float, int]:
        row = rows[i]
        primary = -gain_of(row) if gain_of is not None else sign * _figure(row, key, lower)
        return primary, msign * float(row.get("metric") or 0.0), len(row.get("pipeline", []))

    return sorted(range(len(rows)), key=sort_key)


def simpler(pick: dict[str, Any], other: dict[str, Any], absolute: bool = False) -> str | None:
    """Why `other` is the better choice than `pick` when the two are equally fast, or None: fewer passes (less
    to go wrong, to load and to keep working); with as many passes, a smaller metric drop, in the metric's units
    with `absolute` (the search's constraint was --max-metric-drop-abs), else relative to the baseline's metric."""
    n_pick, n_other = len(pick.get("pipeline", [])), len(other.get("pipeline", []))
    if n_other != n_pick:
        return f"fewer passes ({n_other} against {n_pick})" if n_other < n_pick else None
    drop_pick, drop_other = _drop(pick, absolute), _drop(other, absolute)
    if drop_other < drop_pick:
        if absolute:  # as the table's drop column shows it under --max-metric-drop-abs
            return f"a smaller metric drop ({drop_other:+.4g} against {drop_pick:+.4g})"
        return f"a smaller metric drop ({_percent(drop_other)} against {_percent(drop_pick)})"
    return None


def _percent(drop: float) -> str:
    """A relative drop as a signed percentage, with two significant digits where two decimals would show 0.00: the
    reason for keeping fp32 ONNX Runtime over its int8 read 'a smaller metric drop (-0.00% against +0.00%)' for
    fidelity drops of -2.3e-08 and 1.3e-05."""
    if drop != 0 and abs(drop) < 5e-5:
        return f"{drop * 100:+.2g}%"
    return f"{drop:+.2%}"


def _drop(row: dict[str, Any], absolute: bool = False) -> float:
    value = row.get("metric_drop" if absolute else "metric_drop_rel")
    return float(value) if value is not None and value == value else 0.0


def settle(verdict: str, pick: dict[str, Any], runner_up: dict[str, Any],
           absolute: bool = False) -> tuple[bool, str]:
    """Whether the runner-up should replace the pick, from their A/B in one process (B = the runner-up, so
    'faster' means the runner-up is), and why. Significantly faster wins; equally fast, the simpler one
    (`absolute`: metric drops in the metric's units, as --max-metric-drop-abs gives the budget)."""
    if verdict == FASTER:
        return True, f"{runner_up['label']} is faster"
    if verdict == SLOWER:
        return False, f"{pick['label']} is faster"
    why = simpler(pick, runner_up, absolute)
    if why is not None:
        return True, f"no significant difference, and {runner_up['label']} has {why}"
    return False, f"no significant difference, and {runner_up['label']} is not simpler"
