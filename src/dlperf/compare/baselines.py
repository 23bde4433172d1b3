"""Named baselines: a name pointing at a stored run with raw samples, for `dlperf check`."""

from __future__ import annotations

from dlperf.compare.records import point_measurements
from dlperf.errors import StoreError
from dlperf.store.db import Store
from dlperf.store.records import OK, RunRecord


def set_baseline(store: Store, name: str, run_id: str) -> RunRecord:
    """Point `name` at run `run_id`; the run must have finished ok and hold latency samples."""
    if not name.strip():
        raise StoreError("a baseline needs a non-empty name")
    record = store.get(run_id)
    if record.status != OK:
        raise StoreError(f"run {record.id} has status '{record.status}': only a finished (ok) run can be a baseline")
    point_measurements(record)
    return store.set_baseline(name, record.id)


def baseline_rows(store: Store) -> list[tuple[str, str, str, str]]:
    """(name, run id, workload, set at) for each baseline; a missing run shows as '(deleted)'."""
    rows = []
    for name, run_id, created_at in store.list_baselines():
        try:
            workload = store.get(run_id).workload
        except StoreError:
            workload = "(run deleted)"
        rows.append((name, run_id, workload, created_at[:19]))
    return rows
