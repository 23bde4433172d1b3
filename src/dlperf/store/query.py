"""Questions asked of stored runs: a KPI's series over time for one workload, a bench run's point at a batch size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.errors import ConfigError, StoreError
from dlperf.store.records import OK, RunRecord

# CLI metric name -> (key in a bench point's summary, unit, higher is better)
METRICS: dict[str, tuple[str, str, bool]] = {
    "p50": ("p50_s", "s", False),
    "p90": ("p90_s", "s", False),
    "p95": ("p95_s", "s", False),
    "p99": ("p99_s", "s", False),
    "mean": ("mean_s", "s", False),
    "throughput": ("throughput", "items/s", True),
}


def workload_runs(store: Any, kind: str, workload: str, limit: int | None = None,
                  status: str | None = None) -> list[RunRecord]:
    """The runs of `kind` that measured `workload`, newest first, for a history: matched by the spec's meaning as
    `runs_of_workload` matches them ('wl.py' typed in its folder and 'p/wl.py' typed above it are one history, two
    'wl.py' of two folders are two), and a plain 'wl.py' with 'wl.py:NAME' while the file's runs name no other
    workload. When they do, a plain 'wl.py' run could be of either: it is left out of a named history, and a plain
    'wl.py' is refused (StoreError) rather than mixing two models in one series."""
    from dlperf.workload.loader import canonical_spec, split_canonical

    # the file's runs under any name, narrowed by the database: reading every run of the kind took ~270 ms on a store
    # of 5000 for a history of a few
    records = store.list(kind=kind, workload=workload, limit=None, same_file=True)
    found = matching_runs(records, workload)
    given = split_canonical(canonical_spec(workload))
    if given is not None:
        path, attr, options = given
        splits = {r.id: _recorded_split(r) for r in records}
        names = {rec[1] for rec in splits.values() if rec is not None and rec[0] == path and rec[2] == options} - {""}
        if attr and names - {attr}:
            found = [r for r in found if (rec := splits[r.id]) is not None and rec[1] == attr]
        elif not attr and len(names) > 1:
            raise StoreError(f"the {kind} runs of '{workload}' measured {len(names)} of its workloads "
                             f"({', '.join(sorted(names))}): name one, e.g. '{workload}:{min(names)}'")
    if status is not None:
        found = [r for r in found if r.status == status]
    return found if limit is None else found[:limit]


def runs_of_workload(store: Any, workload: str, kind: str | None = None, limit: int | None = None) -> list[RunRecord]:
    """Runs of every kind that measured `workload` as the user names it (`runs list --workload`), newest first:
    by its `workload_key` (bench, train, ab, check: the spec made absolute), as typed for a run recorded before the
    key, or, as profile and optimize record a file workload, by its absolute path with the workload's name after a
    colon ('wl.py' names the file's one workload, so it matches 'ABS/wl.py:workload', and 'wl.py:workload' the
    runs of 'wl.py'). Two 'wl.py' in two folders are two workloads."""
    return store.list(kind=kind, workload=workload, limit=limit)


def _recorded_split(record: RunRecord) -> tuple[str, str, dict[str, Any]] | None:
    """(path, attribute, options) of the file workload a run recorded (its `workload_key`, else its spec made
    absolute); None for a zoo spec."""
    from dlperf.workload.loader import canonical_spec, split_canonical

    return split_canonical(str(record.config.get("workload_key") or canonical_spec(record.workload)))


def matching_runs(records: Sequence[RunRecord], workload: str) -> list[RunRecord]:
    """The records that measured `workload` as `runs_of_workload` (and `Store.list(workload=...)`) matches them, in
    their order."""
    matches = workload_matcher(workload)
    return [r for r in records if matches(r)]


def workload_matcher(workload: str) -> Callable[[RunRecord], bool]:
    """Whether a record measured `workload`, by the spec's meaning (`matching_runs`)."""
    from dlperf.workload.loader import canonical_spec, split_canonical

    key = canonical_spec(workload)
    given = split_canonical(key)
    names = recorded_names(workload)

    def matches(record: RunRecord) -> bool:
        recorded_key = record.config.get("workload_key")
        # as typed only for a run recorded without the key: 'wl.py' of another folder is another workload (it
        # matched by its spelling, as `runs history` did not)
        if not recorded_key and record.workload in names:
            return True
        recorded = _recorded_split(record)
        if given is None or recorded is None:
            return bool(recorded_key) and recorded_key == key  # a zoo spec, by its key
        (path, attr, options), (r_path, r_attr, r_options) = given, recorded
        # a plain 'wl.py' names the file's one workload, whatever it is called: it matches 'wl.py:workload' both
        # ways (typed 'wl.py:workload', the bench and check runs of 'wl.py' were left out)
        return path == r_path and options == r_options and (attr == r_attr or not attr or not r_attr)

    return matches


def recorded_names(workload: str) -> tuple[str, ...]:
    """The workload columns a run of `workload` (a zoo spec or a bare name; a file's runs are matched by the file)
    may hold: the spec itself, and for a bare name the `python:NAME` under which `dlperf.bench` records a `Workload`
    built in code (`api.recorded_name`): until 2026-12-07 `list(workload="digits-mlp")` found none of its runs."""
    from dlperf.workload.loader import split_canonical

    if ":" in workload or split_canonical(workload) is not None:
        return (workload,)
    return (workload, f"python:{workload}")


def workload_file_name(workload: str) -> str | None:
    """The file's name ('wl.py') of a file workload, which the workload column of every run `workload_matcher`
    matches holds, however it was spelled (relative, absolute, with a name or options after it): a store narrows
    its runs by it before reading them. None for a zoo spec or another that names no file: its runs are recorded
    by the spec itself (a run's `workload_key` is its workload column made canonical, and a zoo spec's is itself)."""
    from dlperf.workload.loader import split_canonical

    given = split_canonical(workload)
    if given is None:
        return None
    path = given[0]
    return path[max(path.rfind("/"), path.rfind("\\")) + 1:]


@dataclass(frozen=True)
class HistoryPoint:
    run_id: str
    created_at: str
    value: float
    noise_warning: str | None = None
    git_commit: str | None = None
    """The commit the run was taken in (its environment's), None where not recorded."""
    git_dirty: bool | None = None
    """Whether that checkout had uncommitted changes."""


@dataclass(frozen=True)
class History:
    """One KPI of one workload at one batch size, oldest run first."""

    workload: str
    metric: str
    unit: str
    higher_is_better: bool
    batch_size: int
    points: list[HistoryPoint]
    skipped: int = 0
    """Runs of the workload that had no point at this batch size, or were not ok."""

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    @property
    def change(self) -> float | None:
        """Last value relative to the first (0.05 = 5% higher), None with fewer than two points."""
        if len(self.points) < 2 or self.points[0].value == 0:
            return None
        return self.points[-1].value / self.points[0].value - 1.0

    @property
    def best(self) -> HistoryPoint | None:
        if not self.points:
            return None
        pick = max if self.higher_is_better else min
        return pick(self.points, key=lambda p: p.value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "batch_size": self.batch_size,
            "change": self.change,
            "skipped": self.skipped,
            "points": [
                {"run_id": p.run_id, "created_at": p.created_at, "value": p.value, "noise_warning": p.noise_warning,
                 "git_commit": p.git_commit, "git_dirty": p.git_dirty}
                for p in self.points
            ],
        }


def bench_points(record: RunRecord) -> list[dict[str, Any]]:
    """The per-batch-size points of a bench-like record's result (empty when it has none)."""
    points = record.result.get("points") if isinstance(record.result, dict) else None
    return [p for p in points or [] if isinstance(p, dict) and isinstance(p.get("summary"), dict)]


def point_at(record: RunRecord, batch_size: int) -> dict[str, Any] | None:
    for point in bench_points(record):
        if point.get("batch_size") == batch_size:
            return point
    return None


def metric_spec(metric: str) -> tuple[str, str, bool]:
    spec = METRICS.get(metric)
    if spec is None:
        raise ConfigError(f"unknown metric '{metric}': choose one of {', '.join(METRICS)}")
    return spec


def kpi_history(records: Sequence[RunRecord], metric: str = "p50", batch_size: int | None = None,
                workload: str = "", kind: str = "bench") -> History:
    """The series of `metric` at `batch_size` over `records` (any order in; oldest first out).

    Only finished ('ok') runs count; none, or none at `batch_size`, is a StoreError. Without `batch_size`, the
    newest run's first batch size is used.
    """
    key, unit, higher = metric_spec(metric)
    ordered = sorted(records, key=lambda r: r.created_at)
    usable = [r for r in ordered if r.status == OK and bench_points(r)]
    # with a batch size too: `runs history zoo:mlp --batch-size 32` of a store with no run of it printed "over 0
    # runs ...: no finished runs with that batch size" and exited 0, as if the runs merely skipped that batch size
    if not usable:
        name = workload or "WORKLOAD"
        zoo_name = name.partition("?")[0].removeprefix("zoo:") if name.startswith("zoo:") else None
        if zoo_name is not None:
            from dlperf.workload import zoo

            if zoo_name not in zoo.names():  # 'run `dlperf bench zoo:nope` first' pointed at a model not there
                raise StoreError(f"no finished {kind} runs of '{name}' in the store, and there is no zoo "
                                 f"workload '{zoo_name}': {zoo.guess(zoo_name)}the zoo has {', '.join(zoo.names())}")
        raise StoreError(f"no finished {kind} runs of '{name}' in the store: run `dlperf {kind} {name}` first"
                         + (" (with --baseline NAME)" if kind == "check" else ""))
    if batch_size is None:
        batch_size = int(bench_points(usable[-1])[0]["batch_size"])
    points: list[HistoryPoint] = []
    for record in usable:
        point = point_at(record, batch_size)
        if point is None:
            continue
        value = point["summary"].get(key)
        if not isinstance(value, (int, float)):
            continue
        env = record.environment or {}
        commit = env.get("git_commit")
        points.append(HistoryPoint(record.id, record.created_at, float(value), point["summary"].get("noise_warning"),
                                   commit if isinstance(commit, str) else None, env.get("git_dirty")))
    if not any(point_at(r, batch_size) for r in usable):  # an empty history read as "no change", exit 0
        measured = sorted({int(p["batch_size"]) for r in usable for p in bench_points(r)})
        raise StoreError(f"no finished {kind} run of '{workload or ordered[0].workload}' measured batch size "
                         f"{batch_size}; they measured {', '.join(map(str, measured))}: give one of those with "
                         "--batch-size")
    if not points:  # it read "no finished runs with that batch size" of runs that measured it
        summaries = [p["summary"] for p in (point_at(r, batch_size) for r in usable) if p is not None]
        recorded = [name for name, (k, _, _) in METRICS.items()
                    if any(isinstance(s.get(k), (int, float)) for s in summaries)]
        raise StoreError(f"the finished {kind} runs of '{workload or ordered[0].workload}' at batch size {batch_size} "
                         f"did not record {metric} (recorded by an older dlperf?): choose a --metric they recorded"
                         f" ({', '.join(recorded) if recorded else 'none'}), or measure again")
    return History(workload or (ordered[0].workload if ordered else ""), metric, unit, higher, batch_size, points,
                   skipped=len(ordered) - len(points))
