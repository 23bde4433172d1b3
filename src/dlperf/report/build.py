"""Gather what a report shows from the store (runs, their child runs, a workload's history), then render."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dlperf.compare.runs import RunComparison
from dlperf.errors import ConfigError
from dlperf.report.html import render_report
from dlperf.store.db import Store
from dlperf.store.records import SAMPLED_KINDS, RunRecord

HISTORY_METRICS = ("p50", "p90", "p95", "p99", "mean", "throughput")


def history_runs(store: Store, workload: str, limit: int = 200) -> list[RunRecord]:
    """Finished bench and check runs of `workload`, oldest first."""
    from dlperf.store.query import workload_runs

    runs = [r for kind in SAMPLED_KINDS for r in workload_runs(store, kind, workload, limit=limit, status="ok")]
    return sorted(runs, key=lambda r: r.created_at)[-limit:]


MAX_COMPARED = 10
"""Runs besides the first judged in a report's verdict table (the CDF draws as many in all: one colour a run)."""


def _sampled(records: Sequence[RunRecord]) -> list[RunRecord]:
    from dlperf.compare.records import has_samples

    return [r for r in records if r.kind in SAMPLED_KINDS and has_samples(r)]


def run_comparisons(records: Sequence[RunRecord]) -> list[RunComparison]:
    """Each later bench or check run with samples against the first (up to `MAX_COMPARED`), as `dlperf compare A B`
    judges it."""
    from dlperf.compare.runs import compare_records

    sampled = _sampled(records)
    return [compare_records(sampled[0], b) for b in sampled[1:MAX_COMPARED + 1]]


def uncompared_runs(records: Sequence[RunRecord]) -> list[str]:
    """The ids of the sampled runs past `MAX_COMPARED` that `run_comparisons` leaves out, for the report to name."""
    return [r.id for r in _sampled(records)[MAX_COMPARED + 1:]]


def build_report(store: Store | str | os.PathLike[str], run_ids: Sequence[str], *,
                 history_workload: str | None = None, history_metric: str = "p50", title: str | None = None) -> str:
    """The HTML report of `run_ids` (child runs of optimize runs included) and an optional history. `store`: a
    Store, or its path or URL, as `dlperf.bench(store=...)` takes (a path raised "'str' object has no attribute
    'get'"); a SQLite file that does not exist is refused, not made empty."""
    if not isinstance(store, Store):
        store = Store(store, create=False)
    if not run_ids and not history_workload:
        raise ConfigError("nothing to report: give run ids (`dlperf runs list`) and/or --history WORKLOAD")
    if history_metric not in HISTORY_METRICS:
        raise ConfigError(f"unknown history metric '{history_metric}': choose one of {', '.join(HISTORY_METRICS)}")
    # One section per run: a run named twice (its id and a prefix, or a shell glob) was rendered twice, with
    # the same element ids.
    records = list({r.id: r for r in (store.get(run_id) for run_id in run_ids)}.values())
    children = {r.id: store.list(parent_id=r.id, limit=500) for r in records if r.kind == "optimize"}
    history = None
    if history_workload:
        history = history_runs(store, history_workload)
        if not history:
            # the workloads --history would find (a failed run's workload was offered, and found nothing)
            known = sorted({r.workload for kind in SAMPLED_KINDS
                            for r in store.list(kind=kind, limit=500, status="ok")})
            raise ConfigError(f"no finished bench or check runs of workload '{history_workload}' in the store; "
                              f"workloads with finished ones: {', '.join(known) or 'none'}")
    return render_report(records, children=children, history=history, history_metric=history_metric,
                         history_workload=history_workload or "", title=title, comparisons=run_comparisons(records),
                         uncompared=uncompared_runs(records))


def check_output(path: Path) -> None:
    """Refuse an output path that cannot take the report, before the report is built (which reads the store)."""
    if path.is_dir():
        raise ConfigError(f"'{path}' is a folder: give the report a file name, e.g. -o {path / 'report.html'} "
                          f"(path={str(path / 'report.html')!r})")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write the report to '{path}': the folder '{path.parent}' does not exist; "
                          "create it or give another -o (path)")


def write_report(path: str | os.PathLike[str], text: str) -> None:
    """Write `build_report`'s HTML to `path`: a folder, or a file in a folder that does not exist, is refused first."""
    path = Path(path)
    check_output(path)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the report to '{path}': {exc.strerror or exc}; "
                          "give another -o (path)") from exc
