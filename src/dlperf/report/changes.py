"""What changed between consecutive runs of a KPI's history (measuring settings, machine), in a few words each, so a
step in a trend that a new runner or another precision made is not read as a change of the code."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.store.records import RunRecord


def _setting(config: Mapping[str, Any], key: str) -> Any:
    head, _, sub = key.partition(".")
    value = config.get(head)
    if sub:
        value = value.get(sub) if isinstance(value, Mapping) else None
    return value


def run_changes(before: RunRecord, after: RunRecord) -> list[str]:
    """'precision fp32 -> bf16', 'cpu_model: AMD EPYC vs Intel Xeon', ...: what `after` was measured with that
    `before` was not (a setting or machine field one of them lacks, an older record, is left out)."""
    from dlperf.compare.runs import SETTING_KEYS
    from dlperf.measure.env import environment_differences

    config_a = before.config if isinstance(before.config, Mapping) else {}
    config_b = after.config if isinstance(after.config, Mapping) else {}
    env_a = before.environment if isinstance(before.environment, Mapping) else {}
    env_b = after.environment if isinstance(after.environment, Mapping) else {}
    out = []
    for key in SETTING_KEYS:
        a, b = _setting(config_a, key), _setting(config_b, key)
        if key == "threads":  # a check pins the baseline's threads, a bench keeps torch's: the same count, said twice
            a = a if a is not None else env_a.get("torch_threads")
            b = b if b is not None else env_b.get("torch_threads")
        if a is not None and b is not None and a != b:
            out.append(f"{key.removeprefix('timer.')} {a} -> {b}")
    if env_a and env_b:
        said = {change.split()[0] for change in out}
        # torch's thread count is the threads setting where a run gave none: 'threads 2 -> 1' was followed by
        # 'torch_threads: 2 vs 1'
        out += [d for d in environment_differences(dict(env_a), dict(env_b))
                if not (d.startswith("torch_threads:") and "threads" in said)]
    return out


def history_changes(records: Sequence[RunRecord]) -> dict[str, list[str]]:
    """Run id -> what differs from the run before it in `records` (in their order); runs with no change left out."""
    return {after.id: changes for before, after in itertools.pairwise(records)
            if (changes := run_changes(before, after))}
