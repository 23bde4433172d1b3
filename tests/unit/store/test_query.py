"""KPI series over stored runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import ConfigError, StoreError
from dlperf.store.query import kpi_history, point_at, workload_runs
from dlperf.store.records import FAILED, OK, RunRecord
from tests.unit.store.spaced import space_runs

pytestmark = pytest.mark.unit


def _point(batch: int, p50: float, throughput: float, noise: str | None = None) -> dict[str, Any]:
    return {"batch_size": batch, "summary": {"p50_s": p50, "p90_s": p50 * 1.2, "p99_s": p50 * 1.5,
                                             "mean_s": p50, "throughput": throughput, "noise_warning": noise}}


def _record(run_id: str, created: str, points: list[dict[str, Any]], status: str = OK) -> RunRecord:
    return RunRecord(run_id, "bench", "zoo:mlp", status, created, result={"points": points})


RECORDS = [
    _record("c", "2026-01-03", [_point(1, 0.003, 330.0), _point(8, 0.010, 800.0)]),
    _record("a", "2026-01-01", [_point(1, 0.001, 1000.0), _point(8, 0.008, 1000.0)]),
    _record("b", "2026-01-02", [_point(8, 0.009, 900.0, noise="noisy")]),
    _record("f", "2026-01-04", [_point(1, 0.5, 2.0)], status=FAILED),
    RunRecord("e", "bench", "zoo:mlp", OK, "2026-01-05", result={}),
]



def _count_decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the rows the store decodes into records from now on (a query that narrows in SQL decodes few)."""
    from dlperf.store import db

    decoded: list[str] = []
    to_record = db._to_record

    def counted(row: Any) -> RunRecord:
        decoded.append(row["id"])
        return to_record(row)

    monkeypatch.setattr(db, "_to_record", counted)
    return decoded

def test_series_is_oldest_first_at_the_newest_runs_first_batch() -> None:
    h = kpi_history(RECORDS, "p50", workload="zoo:mlp")
    assert h.batch_size == 1  # newest usable run is 'c', whose first point is batch 1
    assert [p.run_id for p in h.points] == ["a", "c"]
    assert h.values == [0.001, 0.003]
    assert h.change == pytest.approx(2.0)
    assert h.best is not None and h.best.run_id == "a"
    assert h.skipped == 3  # b has no batch 1, f failed, e has no points
    assert h.unit == "s" and not h.higher_is_better


def test_without_a_batch_size_the_newest_runs_first_batch_is_used_not_the_oldest() -> None:
    """A workload re-benchmarked at other batch sizes: the history is of the batch size the newest run measured
    first (1), not the oldest run's (8)."""
    records = [_record("old", "2026-01-01", [_point(8, 0.008, 1000.0), _point(1, 0.001, 1000.0)]),
               _record("new", "2026-01-02", [_point(1, 0.002, 500.0), _point(8, 0.009, 890.0)])]
    h = kpi_history(records, "p50")
    assert h.batch_size == 1 and h.values == [0.001, 0.002]


def test_throughput_at_a_chosen_batch() -> None:
    h = kpi_history(RECORDS, "throughput", batch_size=8)
    assert [p.run_id for p in h.points] == ["a", "b", "c"]
    assert h.values == [1000.0, 900.0, 800.0]
    assert h.higher_is_better and h.best is not None and h.best.run_id == "a"
    assert h.change == pytest.approx(-0.2)
    assert h.points[1].noise_warning == "noisy"
    assert h.to_dict()["points"][0] == {"run_id": "a", "created_at": "2026-01-01", "value": 1000.0,
                                        "noise_warning": None, "git_commit": None, "git_dirty": None}


def test_each_point_carries_the_commit_its_run_was_taken_in() -> None:
    """A trend over a workload's runs is read against its code's history: each point names its run's commit (the
    environment's git_commit, where recorded), in the history's JSON and in `runs history`'s commit column."""
    import io

    from rich.console import Console

    from dlperf.report.terminal import history_view

    def _text(renderable: object) -> str:
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(renderable)
        return console.export_text()

    commits = {"a": ("1f3e5a7c9b2d4f6e8a0c", False), "c": ("9e8d7c6b5a4f3e2d1c0b", True)}
    records = [RunRecord(r.id, r.kind, r.workload, r.status, r.created_at, result=r.result,
                         environment={"git_commit": commits[r.id][0], "git_dirty": commits[r.id][1]}
                         if r.id in commits else {})
               for r in RECORDS]
    h = kpi_history(records, "throughput", batch_size=8)
    assert [(p.git_commit, p.git_dirty) for p in h.points] == [(*commits["a"],), (None, None), (*commits["c"],)]
    assert [(p["git_commit"], p["git_dirty"]) for p in h.to_dict()["points"]] == [
        (*commits["a"],), (None, None), (*commits["c"],)]
    rows = [" ".join(line.split()) for line in _text(history_view(h)).splitlines()]
    assert any(row.endswith("a 2026-01-01 1f3e5a7c9b2d 1,000 items/s best") for row in rows), rows
    assert any(row.endswith("b 2026-01-02 - 900 items/s noisy") for row in rows), rows
    assert any(row.endswith("c 2026-01-03 9e8d7c6b5a4f+ 800 items/s") for row in rows), rows
    assert "commit+: taken with uncommitted changes in that checkout" in rows
    plain = _text(history_view(kpi_history(RECORDS, "throughput", batch_size=8)))
    assert "commit" not in plain  # no run recorded one: no column


def test_p99_values() -> None:
    assert kpi_history(RECORDS, "p99", batch_size=8).values == pytest.approx([0.012, 0.0135, 0.015])


def test_errors() -> None:
    with pytest.raises(ConfigError, match="unknown metric 'p42'"):
        kpi_history(RECORDS, "p42")
    with pytest.raises(StoreError, match="no finished bench runs of 'zoo:x'"):
        kpi_history([], "p50", workload="zoo:x")
    # `runs history --kind check` said "no finished bench runs" of a store full of them
    with pytest.raises(StoreError, match=r"no finished check runs of 'zoo:mlp' in the store: run `dlperf check "
                                         r"zoo:mlp`"):
        kpi_history([], "p50", workload="zoo:mlp", kind="check")
    # with a batch size too: it gave an empty history, which `runs history` printed as "over 0 runs ...: no finished
    # runs with that batch size" and exit 0
    with pytest.raises(StoreError, match=r"^no finished bench runs of 'zoo:mlp' in the store: run `dlperf bench "
                                         r"zoo:mlp` first$"):
        kpi_history([], "p50", batch_size=4, workload="zoo:mlp")
    with pytest.raises(StoreError, match="and there is no zoo workload 'nope'"):
        kpi_history([], "p50", batch_size=4, workload="zoo:nope")
    # runs that never measured the batch size asked for: "over 0 runs ..." and exit 0 read as nothing changed
    with pytest.raises(StoreError, match=r"^no finished bench run of 'zoo:mlp' measured batch size 7; they measured "
                                         r"1, 8: give one of those with --batch-size$"):
        kpi_history(RECORDS, "p50", batch_size=7, workload="zoo:mlp")
    # runs that measured it but hold no value of the metric (recorded before p95 was): it said "no finished runs
    # with that batch size" of runs listed beside it with that batch size
    # and it names the metrics they did record (it suggested p50 even when p50 was the one missing)
    with pytest.raises(StoreError, match=r"^the finished bench runs of 'zoo:mlp' at batch size 8 did not record p95 "
                                         r"\(recorded by an older dlperf\?\): choose a --metric they recorded "
                                         r"\(p50, p90, p99, mean, throughput\), or measure again$"):
        kpi_history(RECORDS, "p95", batch_size=8, workload="zoo:mlp")
    only_p95 = [_record("q", "2026-11-29T10:00:00", [{"batch_size": 1, "summary": {"p95_s": 0.003}}])]
    with pytest.raises(StoreError, match=r"did not record p50 .*: choose a --metric they recorded \(p95\), or"):
        kpi_history(only_p95, "p50", batch_size=1, workload="zoo:mlp")


def test_p95_is_a_history_metric_as_it_is_a_gate_metric() -> None:
    from dlperf.compare.gate import METRICS as GATE_METRICS
    from dlperf.report.build import HISTORY_METRICS
    from dlperf.store.query import METRICS

    assert set(GATE_METRICS) <= set(METRICS) and set(METRICS) == set(HISTORY_METRICS)
    records = [_record("p", "2026-11-29T10:00:00", [{"batch_size": 1, "summary": {"p95_s": 0.003}}])]
    assert kpi_history(records, "p95", batch_size=1).values == [0.003]


def test_point_at() -> None:
    assert point_at(RECORDS[0], 8) == RECORDS[0].result["points"][1]
    assert point_at(RECORDS[0], 32) is None


def test_runs_of_a_workload_file_match_however_each_command_recorded_it(tmp_path: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`runs list --workload wl/good.py` missed the profile and optimize runs, which record a file workload by its
    absolute path and name ('ABS/wl/good.py:workload'); bench records the spec as typed, with its workload_key."""
    from dlperf.store import Store
    from dlperf.store.query import runs_of_workload

    (tmp_path / "wl").mkdir()
    for name in ("good.py", "other.py"):
        (tmp_path / "wl" / name).write_text("")
    monkeypatch.chdir(tmp_path)
    store = Store(tmp_path / "runs.db")
    good = str(tmp_path / "wl" / "good.py")
    ids = {
        "bench": store.create_run("bench", "wl/good.py", {"workload_key": good}).id,
        "profile": store.create_run("profile", f"{good}:workload").id,
        "sized": store.create_run("bench", "wl/good.py?width=2", {"workload_key": f"{good}?width=2"}).id,
        "other": store.create_run("profile", f"{tmp_path / 'wl' / 'other.py'}:workload").id,
        "zoo": store.create_run("bench", "zoo:mlp").id,
    }
    assert {r.id for r in runs_of_workload(store, "wl/good.py")} == {ids["bench"], ids["profile"]}
    assert {r.id for r in runs_of_workload(store, "wl/good.py", kind="profile")} == {ids["profile"]}
    # a name given: the runs of that name, and those of the plain file, whose one workload it names (an audit typed
    # 'wl.py:workload' and the bench runs of 'wl.py' were left out)
    assert {r.id for r in runs_of_workload(store, f"{good}:workload")} == {ids["bench"], ids["profile"]}
    # another name: not the profile of ':workload'; the plain file's runs cannot say which name they were
    assert [r.id for r in runs_of_workload(store, f"{good}:other")] == [ids["bench"]]
    assert [r.id for r in runs_of_workload(store, "wl/good.py?width=2")] == [ids["sized"]]
    assert [r.id for r in runs_of_workload(store, "zoo:mlp")] == [ids["zoo"]]
    monkeypatch.chdir(tmp_path / "wl")  # typed from another folder: the same file
    assert {r.id for r in runs_of_workload(store, "good.py")} == {ids["bench"], ids["profile"]}
    # another folder's good.py, typed the same way, is another workload: its runs are not these
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "good.py").write_text("")
    there = store.create_run("bench", "good.py", {"workload_key": str(tmp_path / "b" / "good.py")}).id
    assert {r.id for r in runs_of_workload(store, "good.py")} == {ids["bench"], ids["profile"]}
    monkeypatch.chdir(tmp_path / "b")
    assert [r.id for r in runs_of_workload(store, "good.py")] == [there]
    monkeypatch.chdir(tmp_path)  # where no good.py is: none of them
    assert runs_of_workload(store, "good.py") == []


def test_store_list_finds_a_workload_s_runs_however_the_cli_and_the_library_named_it(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """dlperf.bench('wl.py:workload', store=...) records the absolute path, `dlperf bench wl.py:workload` the spec
    as typed: Store.list(workload='wl.py:workload') matched the spelling and missed the library's run."""
    from dlperf.store import Store

    (tmp_path / "wl.py").write_text("")
    monkeypatch.chdir(tmp_path)
    store = Store(tmp_path / "runs.db")
    key = f"{tmp_path / 'wl.py'}:workload"
    library = store.create_run("bench", key, {"workload_key": key}).id
    cli = store.create_run("bench", "wl.py:workload", {"workload_key": key}).id
    store.create_run("bench", "wl.py:other", {"workload_key": f"{tmp_path / 'wl.py'}:other"})
    store.create_run("profile", key)
    assert [r.id for r in store.list(workload="wl.py:workload", kind="bench")] == [cli, library]
    assert [r.id for r in store.list(workload=key, kind="bench", limit=1)] == [cli]
    assert len(store.list(workload="wl.py:workload")) == 3  # the profile run too


def test_store_list_reads_only_the_runs_the_database_narrowed_to_the_workload(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """list(workload=...) read and decoded every run of the kind to match a few (optimize's resume lookup, every
    optimize run): the database now narrows them by the file's name, or the zoo spec, and `limit` still applies to
    the runs that match."""
    from dlperf.store import Store

    (tmp_path / "my_wl.py").write_text("")
    monkeypatch.chdir(tmp_path)
    space_runs(monkeypatch)
    store = Store(tmp_path / "runs.db")
    zoos = {}
    for i in range(40):
        store.create_run("optimize", f"{tmp_path / f'other{i}.py'}:workload")
        zoos[i] = store.create_run("optimize", f"zoo:m{i}").id
    store.create_run("optimize", "myXwl.py:workload")  # '_' is LIKE's any character: the name is matched as written
    key = f"{tmp_path / 'my_wl.py'}:workload"
    absolute = store.create_run("optimize", key).id
    relative = store.create_run("optimize", "my_wl.py:workload").id
    zoo = store.create_run("optimize", "zoo:m3", {"workload_key": "zoo:m3"}).id
    decoded = _count_decoded(monkeypatch)
    assert [r.id for r in store.list(kind="optimize", workload="my_wl.py:workload")] == [relative, absolute]
    assert len(decoded) == 2
    decoded.clear()
    assert [r.id for r in store.list(kind="optimize", workload=key, limit=1)] == [relative]
    assert len(decoded) == 1
    decoded.clear()
    assert [r.id for r in store.list(kind="optimize", workload="zoo:m3")] == [zoo, zoos[3]]
    assert len(decoded) == 2
    decoded.clear()
    assert [r.id for r in store.list(kind="optimize", workload="my%wl.py")] == []
    assert decoded == []


def test_a_history_of_nothing_says_what_to_run_or_that_the_zoo_has_no_such_model() -> None:
    from dlperf.errors import StoreError

    with pytest.raises(StoreError, match=r"run `dlperf bench zoo:mlp` first"):
        kpi_history([], "p50", workload="zoo:mlp")
    # `run dlperf bench zoo:nope first` pointed at a model that is not there
    with pytest.raises(StoreError, match=r"there is no zoo workload 'nope': the zoo has mlp, "):
        kpi_history([], "p50", workload="zoo:nope")
    with pytest.raises(StoreError, match=r"there is no zoo workload 'mpl': did you mean mlp\? the zoo has mlp, "):
        kpi_history([], "p50", workload="zoo:mpl")


@pytest.mark.parametrize(("metric", "key"), [("p50", "p50_s"), ("p90", "p90_s"), ("p95", "p95_s"), ("p99", "p99_s"),
                                           ("mean", "mean_s"), ("throughput", "throughput")])
def test_each_metric_s_history_is_of_its_own_summary_value(metric: str, key: str) -> None:
    summary = {k: float(i + 1) for i, k in enumerate(("p50_s", "p90_s", "p95_s", "p99_s", "mean_s", "throughput"))}
    h = kpi_history([_record("a", "2026-01-01", [{"batch_size": 1, "summary": summary}])], metric)
    assert h.values == [summary[key]]


def test_a_history_of_one_run_has_no_change() -> None:
    h = kpi_history([_record("a", "2026-01-01", [{"batch_size": 1, "summary": {"p50_s": 0.001}}])], "p50")
    assert h.change is None and h.to_dict()["change"] is None  # not 0.0: "no change" is a claim one run cannot make


def test_a_workload_s_runs_are_the_newest_of_its_own_key_whatever_their_spelling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """'good.py' typed in another folder is another workload though spelled the same; `--limit` keeps the newest."""
    from dlperf.store import Store

    space_runs(monkeypatch)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "good.py").write_text("")
    store = Store(tmp_path / "runs.db")
    here = [store.create_run("bench", "good.py", {"workload_key": str(tmp_path / "a" / "good.py")}).id
            for _ in range(3)]
    store.create_run("bench", "good.py", {"workload_key": str(tmp_path / "b" / "good.py")})
    monkeypatch.chdir(tmp_path / "a")
    found = workload_runs(store, "bench", "good.py")
    assert [r.id for r in found] == here[::-1]  # newest first
    assert [r.id for r in workload_runs(store, "bench", "good.py", limit=2)] == [here[2], here[1]]


def test_a_history_joins_a_file_s_plain_and_named_runs_unless_they_could_be_of_two_workloads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`runs history wl.py` left out the runs recorded as 'wl.py:workload' (which `runs list --workload wl.py`
    listed); a plain 'wl.py' run is of the file's one workload, so it is joined to a named history only while no
    other name was measured, and a plain history of a file whose runs name two is refused, not mixed."""
    from dlperf.store import Store

    space_runs(monkeypatch)
    (tmp_path / "wl.py").write_text("")
    monkeypatch.chdir(tmp_path)
    store = Store(tmp_path / "runs.db")
    key = str(tmp_path / "wl.py")
    plain = store.create_run("bench", "wl.py", {"workload_key": key}).id
    named = store.create_run("bench", "wl.py:workload", {"workload_key": f"{key}:workload"}).id
    store.create_run("bench", "wl.py?width=2", {"workload_key": f"{key}?width=2"})  # another model
    store.create_run("check", "wl.py:other", {"workload_key": f"{key}:other"})  # another kind
    for spec in ("wl.py", "wl.py:workload", key):
        assert [r.id for r in workload_runs(store, "bench", spec)] == [named, plain], spec
    assert workload_runs(store, "bench", "wl.py:other") == []  # the plain run's workload was 'workload'
    other = store.create_run("bench", "wl.py:other", {"workload_key": f"{key}:other"}).id
    assert [r.id for r in workload_runs(store, "bench", "wl.py:workload")] == [named]
    assert [r.id for r in workload_runs(store, "bench", "wl.py:other")] == [other]
    with pytest.raises(StoreError, match=r"^the bench runs of 'wl.py' measured 2 of its workloads \(other, "
                                         r"workload\): name one, e.g. 'wl.py:other'$"):
        workload_runs(store, "bench", "wl.py")


def test_a_history_reads_only_the_runs_the_database_narrowed_to_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """workload_runs read and decoded every run of the kind (list(kind=..., limit=None)) to find a file's few: ~270 ms
    on a store of 5000 runs. The database narrows them by the file's name now; the plain/named rules still see the
    file's other named workloads."""
    from dlperf.store import Store

    space_runs(monkeypatch)
    (tmp_path / "wl.py").write_text("")
    monkeypatch.chdir(tmp_path)
    store = Store(tmp_path / "runs.db")
    key = str(tmp_path / "wl.py")
    zoos = {}
    for i in range(40):
        store.create_run("bench", f"other{i}.py", {"workload_key": str(tmp_path / f"other{i}.py")})
        zoos[i] = store.create_run("bench", f"zoo:m{i}", {"workload_key": f"zoo:m{i}"}).id
    plain = store.create_run("bench", "wl.py", {"workload_key": key}).id
    named = store.create_run("bench", "wl.py:workload", {"workload_key": f"{key}:workload"}).id
    zoo = store.create_run("bench", "zoo:m3", {"workload_key": "zoo:m3"}).id
    decoded = _count_decoded(monkeypatch)
    assert [r.id for r in workload_runs(store, "bench", "wl.py")] == [named, plain]
    assert sorted(decoded) == sorted([named, plain])  # 83 before
    decoded.clear()
    assert [r.id for r in workload_runs(store, "bench", "zoo:m3")] == [zoo, zoos[3]]
    assert len(decoded) == 2
    decoded.clear()
    other = store.create_run("bench", "wl.py:other", {"workload_key": f"{key}:other"}).id
    assert [r.id for r in workload_runs(store, "bench", "wl.py:other", limit=5)] == [other]
    assert len(decoded) == 3
    with pytest.raises(StoreError, match="measured 2 of its workloads"):
        workload_runs(store, "bench", "wl.py")


def test_a_record_printed_in_a_notebook_is_one_line_without_its_samples() -> None:
    """`Store.list()` in a notebook printed each record's config, environment and every stored sample: ~100 KB for
    one bench run."""
    record = RunRecord("a1", "bench", "zoo:mlp", FAILED, "2026-01-01", parent_id="p0", error="boom " * 40,
                       result={"points": [{"measurement": {"samples_ns": list(range(10_000))}}]})
    shown = repr(record)
    assert shown.startswith("RunRecord('a1', bench, 'zoo:mlp', failed, created 2026-01-01, parent p0, error 'boom ")
    assert shown.endswith("; .config, .environment, .result)") and len(shown) < 250
