"""The run store: schema version and migrations, recording outcomes, id lookup, locations and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dlperf.errors import ConfigError, StoreError
from dlperf.store import FAILED, INTERRUPTED, OK, SCHEMA_VERSION, Store, resolve_url
from dlperf.store.db import ENV_VAR, meta_table, runs_table

pytestmark = pytest.mark.unit


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "runs.db", create=True)


def test_new_store_has_current_schema(store: Store) -> None:
    assert store.schema_version == SCHEMA_VERSION == 2
    tables = set(sa.inspect(store.engine).get_table_names())
    assert {"runs", "baselines", "dlperf_meta"} <= tables


def _version_1_store(path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # what dlperf with schema 1 wrote: meta + runs, no baselines
        meta_table.create(conn)
        runs_table.create(conn)
        conn.execute(sa.insert(meta_table).values(key="schema_version", value="1"))
        conn.execute(sa.insert(runs_table).values(
            id="abc123def456", kind="bench", workload="zoo:mlp", status="ok", created_at="2026-01-01T00:00:00",
            config_json="{}", environment_json="{}", result_json='{"x": 1}', tags_json="{}"))
    engine.dispose()


def test_migrates_a_version_1_store_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_1_store(path)
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION
    assert "baselines" in sa.inspect(store.engine).get_table_names()
    assert store.get("abc").result == {"x": 1}
    store.set_baseline("main", "abc123")
    assert store.get_baseline("main").id == "abc123def456"


def test_a_read_only_version_1_store_is_read_without_its_upgrade_and_a_write_says_why_not(tmp_path: Path) -> None:
    """`dlperf runs list` and `baseline list` of a read-only schema-1 store failed with "cannot open ... it is
    read-only": a reading command tried to upgrade it, and the message did not say the store was old."""
    path = tmp_path / "old.db"
    _version_1_store(path)
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"  # what a file chmod 444 is to a user who is not root
    store = Store(read_only, create=False)
    assert store.not_upgraded == 1 and store.schema_version == 1
    assert [r.id for r in store.list()] == ["abc123def456"] and store.get("abc").result == {"x": 1}
    assert store.list_baselines() == []
    with pytest.raises(StoreError, match=r"no baseline named 'main': .* older dlperf \(schema 1\)"):
        store.get_baseline("main")
    for write in (lambda: store.set_baseline("main", "abc"), lambda: store.create_run("bench", "w"),
                  lambda: store.delete("abc")):
        with pytest.raises(StoreError, match=r"from an older dlperf \(schema 1\) and read-only, .* needs the "
                                             r"upgrade to schema 2 first, which needs write access"):
            write()
    with pytest.raises(StoreError, match="read-only"):  # a recording command still needs the store written
        Store(read_only)
    assert "baselines" not in sa.inspect(sa.create_engine(f"sqlite:///{path}")).get_table_names()
    assert Store(path, create=False).not_upgraded is None  # writable: upgraded as before
    assert Store(path).schema_version == SCHEMA_VERSION


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Store(path, create=True)
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.update(meta_table).values(value=str(SCHEMA_VERSION + 1)))
    engine.dispose()
    with pytest.raises(StoreError, match="newer than this dlperf"):
        Store(path)


def test_recording_ok(store: Store) -> None:
    with store.recording("bench", "zoo:mlp", {"a": 1}, {"torch_version": "x"}) as run:
        run.result = {"p50_s": 0.001}
    record = store.get(run.id)
    assert record.status == OK and record.error is None
    assert record.result == {"p50_s": 0.001}
    assert record.config == {"a": 1} and record.environment == {"torch_version": "x"}
    assert record.finished_at is not None and record.finished_at >= record.created_at


def test_recording_failed_keeps_partial_result(store: Store) -> None:
    with pytest.raises(ValueError), store.recording("bench", "zoo:mlp") as run:
        run.result = {"points": [1]}
        raise ValueError("model exploded")
    record = store.get(run.id)
    assert record.status == FAILED
    assert record.error == "ValueError: model exploded"
    assert record.result == {"points": [1]}


def test_recording_interrupted_keeps_saved_partial_result(store: Store) -> None:
    with pytest.raises(KeyboardInterrupt), store.recording("bench", "zoo:mlp") as run:
        run.result = {"points": [1, 2]}
        run.save()
        assert store.get(run.id).status == "running"
        assert store.get(run.id).result == {"points": [1, 2]}
        raise KeyboardInterrupt
    record = store.get(run.id)
    assert record.status == INTERRUPTED
    assert record.result == {"points": [1, 2]}
    assert "interrupted" in (record.error or "")


def test_a_run_end_with_no_result_keeps_the_saved_one_and_an_empty_one_replaces_it(store: Store) -> None:
    """finish_run(None) is a run that ends without a result of its own (an optimize trial's interrupted child): what
    it saved stays. An empty dict is a result: a command that cleared what it saved must not show the stale one."""
    kept, cleared = store.create_run("bench", "zoo:mlp"), store.create_run("bench", "zoo:mlp")
    for run in (kept, cleared):
        store.update_result(run.id, {"points": [1]})
    store.finish_run(kept.id, None, INTERRUPTED, "interrupted")
    store.finish_run(cleared.id, {})
    assert store.get(kept.id).result == {"points": [1]} and store.get(kept.id).status == INTERRUPTED
    assert store.get(cleared.id).result == {} and store.get(cleared.id).status == OK


def test_id_prefix_lookup(store: Store) -> None:
    ids = [store.create_run("bench", f"w{i}").id for i in range(20)]
    assert store.get(ids[3]).id == ids[3]
    assert store.get(ids[3][:10]).id == ids[3]
    # 20 random hex ids: some first character is shared (pigeonhole over 16 digits)
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    with pytest.raises(StoreError, match="ambiguous"):
        store.get(first)
    with pytest.raises(StoreError, match="no run 'zz'"):
        store.get("zz")
    with pytest.raises(StoreError, match="no run id"):
        store.get("")


def test_a_bare_name_lists_the_runs_of_a_workload_built_in_code(store: Store) -> None:
    """`dlperf.bench(Workload(name="digits-mlp", ...), store=...)` records `python:digits-mlp`; the bare name found
    none of its runs."""
    built = store.create_run("bench", "python:digits-mlp")
    as_named = store.create_run("bench", "digits-mlp")  # an artifact folder or an old run named so: kept
    store.create_run("bench", "python:digits-mlp-2")
    store.create_run("bench", "zoo:mlp")
    assert [r.id for r in store.list(workload="digits-mlp")] == [as_named.id, built.id]
    assert [r.id for r in store.list(workload="python:digits-mlp")] == [built.id]
    assert store.list(workload="mlp") == []  # a zoo model is not named bare


def test_list_filters_and_order(store: Store) -> None:
    a = store.create_run("bench", "zoo:mlp")
    b = store.create_run("calibrate", "cpu")
    c = store.create_run("bench", "zoo:resnet18")
    store.finish_run(c.id, {"ok": True})
    assert [r.id for r in store.list()] == [c.id, b.id, a.id]
    assert [r.id for r in store.list(kind="bench")] == [c.id, a.id]
    assert [r.id for r in store.list(workload="zoo:mlp")] == [a.id]
    assert [r.id for r in store.list(status=OK)] == [c.id]
    assert len(store.list(limit=2)) == 2
    store.finish_run(a.id, {})  # a running run is not deleted without --force
    store.delete(a.id)
    assert [r.id for r in store.list(kind="bench")] == [c.id]


def test_listing_a_kind_no_run_can_have_names_the_kinds(store: Store) -> None:
    """Store.list(kind='benhc') returned [] without a word, as if no benchmark had been run."""
    store.create_run("bench", "zoo:mlp")
    with pytest.raises(ConfigError, match="no run kind 'benhc': the kinds are ab, bench, calibrate, candidate"):
        store.list(kind="benhc")
    assert store.list(kind="optimize") == []  # a kind dlperf records, of which this store has no run yet
    store.create_run("custom", "zoo:mlp")  # one the store has (another tool's, a future dlperf's) is listed
    assert [r.kind for r in store.list(kind="custom")] == ["custom"]


def test_result_json_allows_nan_and_objects(store: Store) -> None:
    with store.recording("bench", "w") as run:
        run.result = {"v": float("inf"), "path": Path("/x"), "t": (1, 2)}
    assert store.get(run.id).result == {"v": float("inf"), "path": "/x", "t": [1, 2]}


def test_a_run_reads_back_as_it_was_recorded(store: Store) -> None:
    """Everything a run is created with comes back from the store: its config, environment, parent and tags; a
    result holding a Measurement is stored as the Measurement's own dict (from_dict reads it back), not its repr."""
    from dlperf.measure.stats import Measurement

    parent = store.create_run("optimize", "zoo:mlp")
    m = Measurement([1_000, 1_200, 900], items_per_call=4, clock="cuda_events", label="b")
    created = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1, 8]}, {"torch_threads": 2},
                               parent_id=parent.id, tags={"ci": "main", "pr": 7})
    store.finish_run(created.id, {"measurement": m, "batch_sizes": {8}})
    back = store.get(created.id)
    assert (back.config, back.environment, back.parent_id) == ({"batch_sizes": [1, 8]}, {"torch_threads": 2},
                                                               parent.id)
    assert back.tags == {"ci": "main", "pr": 7}
    assert back.result["batch_sizes"] == [8]
    assert Measurement.from_dict(back.result["measurement"]) == m


def test_env_var_and_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "from-env" / "runs.db"
    monkeypatch.setenv(ENV_VAR, str(target))
    store = Store()
    assert store.url == f"sqlite:///{target}"
    store.create_run("bench", "w")
    assert target.exists()
    url = f"sqlite:///{tmp_path / 'by-url.db'}"
    assert resolve_url(url) == url
    assert Store(url, create=True).list() == []
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    assert resolve_url() == "sqlite:///.dlperf/runs.db"


@pytest.mark.parametrize("location", [5, 1.5, b"runs.db", ["runs.db"]])
def test_a_store_that_is_no_path_is_refused(location: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dlperf.bench(..., store=5)` recorded into a new store file named '5' in the working folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"^store must be a path, a database URL or a Store, got "):
        Store(location)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["nosuchdialect://host/db", "sqlite:////nonexistent-dir-dlperf/x/runs.db"])
def test_bad_url_is_a_store_error(url: str) -> None:
    with pytest.raises(StoreError, match="cannot open the run store"):
        Store(url, create=True)
    with pytest.raises(StoreError, match="cannot open the run store"):
        Store(url).create_run("bench", "w")  # made at the first write: a URL's folder is not made


def test_baselines(store: Store) -> None:
    run = store.create_run("bench", "w")
    store.set_baseline("main", run.id[:6])
    assert store.list_baselines()[0][:2] == ("main", run.id)
    store.remove_baseline("main")
    with pytest.raises(StoreError):
        store.get_baseline("main")
    with pytest.raises(StoreError):
        store.remove_baseline("main")


def test_record_to_json(store: Store) -> None:
    with store.recording("bench", "w", {"k": 1}) as run:
        run.result = {"r": 2}
    data = json.loads(store.get(run.id).to_json())
    assert data["id"] == run.id and data["config"] == {"k": 1} and data["result"] == {"r": 2}


def test_a_store_whose_driver_is_missing_is_a_clear_error_without_the_password() -> None:
    """postgresql:// without psycopg installed was a ModuleNotFoundError traceback."""
    import importlib.util

    if importlib.util.find_spec("psycopg2") is not None:
        pytest.skip("psycopg2 is installed here")
    with pytest.raises(StoreError) as info:
        Store("postgresql+psycopg2://user:secret@127.0.0.1:1/db")
    message = str(info.value)
    assert "its database driver is not installed" in message and "pip install it" in message
    assert "secret" not in message and "user:***@127.0.0.1:1/db" in message


def test_a_missing_store_is_an_error_for_readers_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo" / "runs.db"
    with pytest.raises(StoreError, match=r"no run store at .*runs\.db.*--store PATH \(in Python: Store\(PATH\), "
                                           r"store=PATH\) or \$DLPERF_STORE"):
        Store(path, create=False)
    assert not path.parent.exists()  # neither the file nor its folder was made
    Store(path, create=True)  # a command that records creates it
    assert Store(path, create=False).list() == []


def test_the_librarys_store_refuses_a_read_of_a_missing_store_and_makes_it_at_the_first_write(tmp_path: Path) -> None:
    """`dlperf.Store('missing.db').list()` answered [] and left a 44 KiB store (and its folder) there, where the
    CLI's readers refuse a missing store."""
    path = tmp_path / "typo" / "runs.db"
    store = Store(path)
    for read in (store.list, lambda: store.get("abc"), lambda: store.get_baseline("main"), store.list_baselines):
        with pytest.raises(StoreError, match=r"^no run store at '.*runs\.db': nothing has been recorded there\. Give "
                                             r"the store your runs are in with --store PATH "
                                             r"\(in Python: Store\(PATH\), store=PATH\) or \$DLPERF_STORE"):
            read()
    assert not path.parent.exists()  # neither the file nor its folder was made
    with store.recording("bench", "w") as run:  # a write makes it
        run.result = {"x": 1}
    assert [r.id for r in store.list()] == [run.id] and [r.id for r in Store(path).list()] == [run.id]
    other = tmp_path / "made-elsewhere.db"
    reader = Store(other)
    Store(other).set_baseline("main", Store(other).create_run("bench", "w").id)
    assert reader.list_baselines()[0][0] == "main"  # made by another Store since this one was opened


def test_the_cli_readers_refuse_a_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    path = tmp_path / "runz.db"
    for argv in (["runs", "list"], ["runs", "show", "abc"], ["baseline", "list"],
                 ["report", "abc", "-o", str(tmp_path / "r.html")]):
        assert main([*argv, "--store", str(path)]) == 2
        assert "no run store at" in capsys.readouterr().err
    assert not path.exists()


def test_readers_do_not_turn_an_empty_file_or_database_into_a_store(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf runs list --store empty.db` on a 0-byte file answered 'No runs' and left a 44 KiB store there."""
    from dlperf.cli.main import main

    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match=r"'.*empty\.db' is an empty file, not a run store.*--store PATH"):
        Store(empty, create=False)
    assert main(["runs", "list", "--store", str(empty)]) == 2
    assert "is an empty file, not a run store" in capsys.readouterr().err
    assert empty.stat().st_size == 0
    blank = tmp_path / "blank.db"  # a SQLite database without tables
    with sa.create_engine(f"sqlite:///{blank}").connect() as conn:
        conn.exec_driver_sql("VACUUM")
    size = blank.stat().st_size
    with pytest.raises(StoreError, match=r"is an empty SQLite database, not a run store"):
        Store(blank, create=False)
    assert blank.stat().st_size == size and sa.inspect(sa.create_engine(f"sqlite:///{blank}")).get_table_names() == []
    Store(empty)  # a command that records makes it a store
    assert Store(empty, create=False).list() == []
    # sqlite:/// (in memory) was "'None' is an empty SQLite database"
    with pytest.raises(StoreError, match=r"^sqlite:/// names no file \(an in-memory SQLite database"):
        Store("sqlite:///", create=False)


def test_readers_refuse_another_programs_database_without_touching_it(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sa.create_engine(f"sqlite:///{other}").begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    with pytest.raises(StoreError, match=r"a database of something else, not a dlperf run store \(it has the tables t"):
        Store(other, create=False)
    assert sa.inspect(sa.create_engine(f"sqlite:///{other}")).get_table_names() == ["t"]


def test_a_file_that_is_no_database_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.write_text("this is not sqlite, it is a text file\n" * 40)
    with pytest.raises(StoreError) as info:
        Store(path)
    message = str(info.value)
    assert "not a dlperf run store or is damaged" in message and "move this file aside" in message
    assert "\n" not in message and "sqlalche.me" not in message and "[SQL" not in message
    assert path.read_text().startswith("this is not sqlite")  # untouched


def test_another_programs_database_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE users (id INTEGER)"))
    engine.dispose()
    with pytest.raises(StoreError, match=r"not a dlperf run store .*tables users"):
        Store(path)
    assert sa.inspect(sa.create_engine(f"sqlite:///{path}")).get_table_names() == ["users"]



def _open_when_released(path: str, start: Any, results: Any) -> None:
    start.wait()
    try:
        Store(path, create=True).list()
        results.put("ok")
    except Exception as exc:  # what the test reports
        results.put(f"{type(exc).__name__}: {exc}")


def test_commands_opening_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    """Each made the tables and wrote the schema version: one in four rounds of three failed here with 'table
    runs already exists' or 'UNIQUE constraint failed: dlperf_meta.key' (a profile's CLI beside a test polling
    its store)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    failures = []
    for round_ in range(12):
        path = str(tmp_path / f"runs{round_}.db")
        start, results = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_open_when_released, args=(path, start, results)) for _ in range(3)]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(60)
        failures += [o for o in outcomes if o != "ok"]
        assert Store(path).schema_version == SCHEMA_VERSION
    assert failures == []

def test_a_locked_store_says_what_to_do(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "runs.db"
    run_id = Store(path).create_run("bench", "w").id
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
        store_url = f"sqlite:///{path}?timeout=0.05"
        with pytest.raises(StoreError, match=r"locked by another process.*retry when that has finished"):
            Store(store_url).get(run_id)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert Store(path).get(run_id).id == run_id


def test_a_run_end_waits_for_a_lock_longer_than_sqlites_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3
    import threading

    from dlperf.store import db

    path = tmp_path / "runs.db"
    store = Store(f"sqlite:///{path}?timeout=0.05")
    run_id = store.create_run("bench", "w").id
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.5, lambda: holder.execute("ROLLBACK"))
    monkeypatch.setattr(db, "FINISH_LOCK_WAIT_S", 30.0)
    release.start()
    try:
        store.finish_run(run_id, {"p50_ms": 1.5})  # SQLite alone gave up after 0.05 s and the run stayed 'running'
    finally:
        release.join()
        holder.close()
    record = Store(path).get(run_id)
    assert (record.status, record.result) == ("ok", {"p50_ms": 1.5})


def test_a_run_end_the_store_refuses_is_saved_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from dlperf.store import db

    path = tmp_path / "runs.db"
    store = Store(f"sqlite:///{path}?timeout=0.05")
    run_id = store.create_run("bench", "w").id
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(db, "FINISH_LOCK_WAIT_S", 0.2)
    try:
        with pytest.raises(StoreError, match=rf"stays 'running' there, and what it measured is saved in .*{run_id}"):
            store.finish_run(run_id, {"p50_ms": 1.5})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    saved = json.loads((tmp_path / f"dlperf-run-{run_id}.json").read_text())
    assert (saved["status"], saved["result"]) == ("ok", {"p50_ms": 1.5})
    assert Store(path).get(run_id).status == "running"


def test_a_read_only_store_reads_and_explains_a_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = Store(path).create_run("bench", "w").id
    read_only = Store(f"sqlite:///file:{path}?mode=ro&uri=true")
    assert read_only.get(run_id[:4]).id == run_id
    with pytest.raises(StoreError, match="read-only: make the file and its folder writable"):
        read_only.set_baseline("main", run_id)


def test_id_prefix_is_literal_and_an_ambiguous_one_names_the_runs(store: Store) -> None:
    ids = [store.create_run("bench", f"w{i}").id for i in range(20)]
    for wildcard in ("%", "_", "_" * 12):
        with pytest.raises(StoreError, match="no run"):
            store.get(wildcard)
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    with pytest.raises(StoreError, match="ambiguous") as info:
        store.get(first)
    named = [i for i in ids if i.startswith(first)]
    assert named[0] in str(info.value) or named[1] in str(info.value)
    assert "(bench of w" in str(info.value)


def test_exists_asks_for_the_exact_id_without_reading_the_run(store: Store,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`dlperf check` learnt whether its baseline's run was still there by loading the whole record (its result
    decoded) with `get`, which also takes a prefix."""
    from dlperf.cli.check import _deleted
    from dlperf.store import db

    run_id = store.create_run("bench", "zoo:mlp").id

    def no_read(row: Any) -> Any:
        raise AssertionError(f"run {row['id']} was read")

    monkeypatch.setattr(db, "_to_record", no_read)
    assert store.exists(run_id)
    assert not store.exists(run_id[:6]) and not store.exists("%") and not store.exists("")
    assert not _deleted(store, run_id) and not _deleted(store, None)
    monkeypatch.undo()
    store.delete(run_id, force=True)
    assert not store.exists(run_id) and _deleted(store, run_id)


def test_runs_list_with_a_filter_that_matches_nothing_names_what_the_store_has(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    store.create_run("bench", "zoo:mlp")
    store.create_run("ab", "zoo:resnet18")
    assert main(["runs", "list", "--kind", "benchs", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no runs of kind 'benchs'" in out and "kinds: ab, bench" in out
    assert main(["runs", "list", "--kind", "bench", "--workload", "zoo:mlpp", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no runs of kind 'bench' and workload 'zoo:mlpp'" in out and "workloads: zoo:mlp, zoo:resnet18" in out
    assert store.distinct("status") == ["running"]


def test_delete_keeps_a_baseline_s_run_unless_forced(store: Store) -> None:
    base = store.create_run("bench", "zoo:mlp")
    store.finish_run(base.id, {})
    store.set_baseline("main", base.id)
    other = store.create_run("bench", "zoo:mlp")
    with pytest.raises(StoreError, match=r"is the baseline 'main'.*baseline rm main.*--force"):
        store.delete(base.id[:6])
    assert store.get_baseline("main").id == base.id  # nothing was lost
    assert [r.id for r in store.delete(base.id, force=True)] == [base.id]
    assert store.list_baselines() == []  # no baseline left pointing at nothing
    assert [r.id for r in store.list()] == [other.id]


def test_delete_takes_the_child_runs_with_it(store: Store) -> None:
    parent = store.create_run("optimize", "zoo:mlp")
    store.finish_run(parent.id, {})
    children = [store.create_run("candidate", "zoo:mlp", parent_id=parent.id).id for _ in range(3)]
    other = store.create_run("bench", "zoo:mlp").id
    deleted = [r.id for r in store.delete(parent.id)]
    assert deleted[0] == parent.id and sorted(deleted[1:]) == sorted(children)
    assert [r.id for r in store.list()] == [other]


def test_a_baseline_whose_run_is_gone_says_so(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = Store(path)
    run = store.create_run("bench", "w")
    store.set_baseline("main", run.id)
    engine = sa.create_engine(f"sqlite:///{path}")  # as an older dlperf's delete left it
    with engine.begin() as conn:
        conn.execute(sa.delete(runs_table))
    engine.dispose()
    with pytest.raises(StoreError, match=f"baseline 'main' names run {run.id}, which is no longer in the store"):
        store.get_baseline("main")


def test_runs_delete_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    run = store.create_run("bench", "zoo:mlp")
    store.finish_run(run.id, {})
    store.set_baseline("main", run.id)
    assert main(["runs", "delete", run.id[:5], "--store", str(path)]) == 2
    assert "is the baseline 'main'" in capsys.readouterr().err
    assert main(["runs", "delete", "nosuch", "--store", str(path)]) == 2
    assert "no run 'nosuch'" in capsys.readouterr().err
    assert main(["runs", "delete", run.id[:5], "--force", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"deleted run {run.id} (bench of zoo:mlp" in out
    assert out.rstrip().endswith("; removed the baseline main")  # --force took the baseline too: said so
    assert store.list() == [] and store.list_baselines() == []


def test_a_damaged_row_does_not_hide_the_other_runs(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = Store(path)
    good = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]})
    bad = store.create_run("bench", "zoo:mlp", {"batch_sizes": [8]})
    truncated = '{"points": [1, 2'
    engine = sa.create_engine(f"sqlite:///{path}")  # a write cut short, or an edit by hand
    with engine.begin() as conn:
        conn.execute(sa.update(runs_table).where(runs_table.c.id == bad.id).values(result_json=truncated))
        conn.execute(sa.update(runs_table).where(runs_table.c.id == good.id).values(tags_json="[1]"))
    engine.dispose()
    assert {r.id for r in store.list()} == {good.id, bad.id}
    record = store.get(bad.id)
    assert record.result == {} and record.config == {"batch_sizes": [8]}
    assert record.error is not None and "stored result is not readable JSON" in record.error
    assert store.get(good.id).tags == {} and "JSON list, not an object" in (store.get(good.id).error or "")
    with engine.connect() as conn:  # the text itself is kept
        assert conn.execute(sa.select(runs_table.c.result_json).where(runs_table.c.id == bad.id)).scalar() == truncated


def test_a_row_with_bytes_that_are_not_utf8_can_be_listed_shown_and_deleted(tmp_path: Path) -> None:
    """sqlite3's decoding raised for the whole query: `runs list`, `runs show` and `runs delete` of the damaged run all
    failed with "Could not decode to UTF-8 column 'result_json'", so the run could not even be removed."""
    path = tmp_path / "runs.db"
    store = Store(path)
    good = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]})
    bad = store.create_run("bench", "zoo:mlp", {"batch_sizes": [8]})
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # '{"x": "<0xff>"}' as TEXT: a flipped byte in the file
        conn.exec_driver_sql("UPDATE runs SET result_json = CAST(X'7b2278223a2022ff227d' AS TEXT) WHERE id = ?",
                             (bad.id,))
    engine.dispose()
    assert {r.id for r in store.list()} == {good.id, bad.id}
    record = store.get(bad.id)
    assert record.result == {"x": "\ufffd"}
    assert record.error is not None and "stored result holds U+FFFD characters" in record.error
    assert [r.id for r in store.delete(bad.id, force=True)] == [bad.id]  # force: create_run left it running
    assert [r.id for r in store.list()] == [good.id]


def test_a_folder_given_as_the_store_names_a_file_to_give(tmp_path: Path) -> None:
    # SQLite's "unable to open database file" said nothing about the path being a folder.
    for create in (True, False):
        with pytest.raises(StoreError, match=r"is a folder: give the store's file, e.g. --store .*runs\.db"):
            Store(tmp_path, create=create)


def test_runs_export_writes_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A non-finite value was exported as NaN / Infinity, which strict parsers (jq) refuse.
    from dlperf.cli.main import main

    path = tmp_path / "runs.db"
    store = Store(path)
    with store.recording("load", "http://x") as run:
        run.result = {"p50_s": float("nan"), "peak": float("inf"), "levels": [{"p99_s": float("-inf")}], "n": 3}

    def strict(text: str) -> object:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))

    assert main(["runs", "export", run.id, "--store", str(path)]) == 0
    exported = strict(capsys.readouterr().out)
    assert isinstance(exported, dict)
    assert exported["result"] == {"p50_s": None, "peak": None, "levels": [{"p99_s": None}], "n": 3}
    target = tmp_path / "run.json"
    assert main(["runs", "export", run.id, "-o", str(target), "--store", str(path)]) == 0
    assert strict(target.read_text()) == exported


def test_a_progress_save_the_store_cannot_take_now_warns_once_and_goes_on(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A store locked by another process during a bench's mid-run save ended the bench (its other batch sizes never
    measured); the run's last write waits longer and has a fallback, so a progress save may be skipped."""
    store = Store(str(tmp_path / "runs.db"))

    def locked(run_id: str, result: dict[str, object]) -> None:
        raise StoreError("run store at sqlite:///x: it is locked by another process")

    with store.recording("bench", "zoo:mlp") as run:
        monkeypatch.setattr(store, "update_result", locked)
        for n in (1, 2):
            run.result = {"points": n}
            run.save()
        monkeypatch.undo()
    assert capsys.readouterr().err.count("the partial result could not be saved now") == 1
    assert store.get(run.id).result == {"points": 2} and store.get(run.id).status == "ok"


def test_a_store_path_under_a_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match=r"'.*afile' is a file, not a folder; give --store another path"):
        Store(str(tmp_path / "afile" / "runs.db"), create=True)
    with pytest.raises(StoreError, match=r"'.*afile' is a file, not a folder; give --store another path"):
        Store(str(tmp_path / "afile" / "runs.db")).create_run("bench", "w")


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_store_path_is_refused_as_empty(given: str) -> None:
    """`--store ""` was read as '.' and refused as "the run store '.' is a folder"."""
    with pytest.raises(StoreError, match=r"the run store's path is empty: give the store's file"):
        Store(given)
