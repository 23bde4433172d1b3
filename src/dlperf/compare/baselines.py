"""Named baselines: a name pointing at a stored run with raw samples, for `dlperf check`."""

from __future__ import annotations

import unicodedata

from dlperf.compare.records import point_measurements
from dlperf.errors import StoreError
from dlperf.measure.stats import min_samples_for_interval
from dlperf.store.db import Store
from dlperf.store.records import OK, RunRecord


def check_baseline_name(name: str) -> None:
    """Refuse a name that `dlperf check --baseline NAME` and the table cannot give back as typed: empty, with
    spaces at an end (a quoting slip, the baseline then found only with the spaces), or with a control character
    (a newline split the list's row in two)."""
    if not name.strip():
        raise StoreError("a baseline needs a non-empty name")
    if name != name.strip():
        raise StoreError(f"baseline name {name!r} has white space at an end, which `--baseline` would have to repeat "
                         f"exactly: use {name.strip()!r}")
    bad = sorted({c for c in name if unicodedata.category(c).startswith("C")})
    if bad:
        raise StoreError(f"baseline name {name!r} has control characters ({', '.join(repr(c) for c in bad)}): use "
                         "letters, digits and punctuation, e.g. main or resnet18-cpu")


def set_baseline(store: Store, name: str, run_id: str) -> RunRecord:
    """Point `name` at run `run_id`; the run must have finished ok and hold latency samples."""
    check_baseline_name(name)
    record = store.get(run_id)
    if record.status != OK:
        raise StoreError(f"run {record.id} has status '{record.status}': only a finished (ok) run can be a baseline")
    point_measurements(record)
    return store.set_baseline(name, record.id)


def baseline_caveats(record: RunRecord, confidence: float = 0.95) -> list[str]:
    """What makes a run a baseline that `dlperf check` cannot judge against: a batch size with fewer samples than a
    median's interval needs stays "too few to judge: inconclusive, pass" however long the check measures (a baseline
    of 4 calls passed a +32.7% regression, and `baseline set` said nothing)."""
    needed = min_samples_for_interval(confidence)
    short = {b: m.n for b, m in sorted(point_measurements(record).items()) if m.n < needed}
    if not short:
        return []
    where = ", ".join(f"{n} at batch {b}" for b, n in short.items())
    return [f"run {record.id} has too few samples for a check to judge ({where}; a {confidence:.0%} interval needs "
            f"{needed}): `dlperf check` against it passes those batch sizes as inconclusive, whatever it measures; "
            f"re-measure with `dlperf bench --min-iters {needed}` (or a longer --min-duration) and set that run"]


def baseline_rows(store: Store) -> list[tuple[str, str, str | None, str]]:
    """(name, run id, workload, set at) for each baseline; the workload of a run no longer in the store is None
    (the list prints '(run deleted)'; `--json` printed that text as the workload's name)."""
    rows = []
    for name, run_id, created_at in store.list_baselines():
        try:
            workload: str | None = store.get(run_id).workload
        except StoreError:
            workload = None
        rows.append((name, run_id, workload, created_at[:19]))
    return rows
