"""What the zoo workloads share about their options (`zoo:NAME?key=value&...`): checking an integer option
and the suffix that names the non-default ones, so that a workload's `source` rebuilds the same model
(`load_workload(w.source)`: optimize's child processes and stored runs do)."""

from __future__ import annotations

from typing import Any

from dlperf.errors import WorkloadError


def positive_ints(workload: str, options: list[tuple[str, Any, int]]) -> str:
    """The `suffix` of the (key, value, default) options of `zoo:workload`, each of which must be a positive
    integer; WorkloadError naming the first that is not (the default as the example)."""
    for key, value, default in options:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise WorkloadError(f"zoo:{workload} option {key}={value!r} is not a positive integer "
                                f"(e.g. zoo:{workload}?{key}={default})")
    return suffix(options)


def suffix(options: list[tuple[str, Any, Any]]) -> str:
    """'?key=value&...' for the (key, value, default) options whose value is not the default; '' if none."""
    given = [f"{key}={value}" for key, value, default in options if value != default]
    return "?" + "&".join(given) if given else ""
