"""Run records: what was run, its config, environment, result, status and error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
OK = "ok"
FAILED = "failed"
INTERRUPTED = "interrupted"
STATUSES = (RUNNING, OK, FAILED, INTERRUPTED)
KINDS = ("ab", "bench", "calibrate", "candidate", "check", "load", "optimize", "profile", "train", "train-trial")
"""The kinds of run dlperf records (a candidate is an optimize run's child, a train-trial a tune's)."""
SAMPLED_KINDS = ("bench", "check")
"""Kinds of run whose result holds per-batch-size points with their samples (a KPI's history, compare by batch)."""


@dataclass
class RunRecord:
    id: str
    kind: str
    workload: str
    status: str
    created_at: str
    config: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    finished_at: str | None = None
    parent_id: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # the default printed every stored sample: ~100 KB a bench run in `Store.list()`
        error = f", error {self.error[:80]!r}" if self.error else ""
        parent = f", parent {self.parent_id}" if self.parent_id else ""
        return (f"RunRecord({self.id!r}, {self.kind}, {self.workload!r}, {self.status}, created {self.created_at}"
                f"{parent}{error}; .config, .environment, .result)")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "workload": self.workload,
            "status": self.status,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "parent_id": self.parent_id,
            "config": self.config,
            "environment": self.environment,
            "result": self.result,
            "error": self.error,
            "tags": self.tags,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)
