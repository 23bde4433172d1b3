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
    caveats = []
    if short:
        where = ", ".join(f"{n} at batch {b}" for b, n in short.items())
        caveats.append(f"run {record.id} has too few samples for a check to judge ({where}; a {confidence:.0%} "
                       f"interval needs {needed}): `dlperf check` against it passes those batch sizes as "
                       "inconclusive, whatever it measures; re-measure with `dlperf bench --min-iters "
                       f"{needed}` (or a longer --min-duration) and set that run")
    busy = contended_points(record)
    if busy:
        # A CI bench on main beside 1.4 busy cores of 2 (p50 38 ms at batch 8 where a quiet run takes 0.073 ms)
        # became the baseline in silence, and every check then read "-99.8% better": a slowdown up to 500x passed.
        where = "; ".join(f"batch {b}: {said.split(': expect')[0]}" for b, said in busy.items())  # not the advice
        caveats.append(f"run {record.id} was measured beside other busy processes ({where}): its times may be slower "
                       "than the code's, and a check judged against them can pass a slowdown as no regression or as "
                       "'better'; re-measure on a quiet machine and set that run")
    return caveats


def contended_points(record: RunRecord) -> dict[int, str]:
    """Batch size -> the contention warning bench recorded for it (other processes busy while it measured)."""
    points = record.result.get("points") if isinstance(record.result, dict) else None
    return {int(p["batch_size"]): p["contention_warning"] for p in points or []
            if isinstance(p, dict) and isinstance(p.get("batch_size"), int)
            and isinstance(p.get("contention_warning"), str) and p["contention_warning"]}


def baseline_rows(store: Store) -> list[tuple[str, str, str | None, str, str | None, bool | None]]:
    """(name, run id, workload, set at, git commit, dirty) for each baseline; the workload of a run no longer in the
    store is None (the list prints '(run deleted)'; `--json` printed that text as the workload's name), and so are
    the commit and dirty flag of a run that recorded none."""
    rows = []
    for name, run_id, created_at in store.list_baselines():
        try:
            record: RunRecord | None = store.get(run_id)
        except StoreError:
            record = None
        commit, dirty = run_commit(record) if record is not None else (None, None)
        rows.append((name, run_id, record.workload if record is not None else None, created_at[:19], commit, dirty))
    return rows


def run_commit(record: RunRecord) -> tuple[str | None, bool | None]:
    """(git commit, dirty) a run recorded in its environment, (None, None) where it recorded none."""
    env = record.environment if isinstance(record.environment, dict) else {}
    commit, dirty = env.get("git_commit"), env.get("git_dirty")
    return (commit, dirty if isinstance(dirty, bool) else None) if isinstance(commit, str) and commit else (None, None)


def commit_text(commit: str | None, dirty: bool | None) -> str:
    """'f9075f5ceb36', 'f9075f5ceb36+' where the checkout had uncommitted changes, '-' for none (as `runs history`)."""
    return f"{commit[:12]}{'+' if dirty else ''}" if commit else "-"
