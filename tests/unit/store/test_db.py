"""The run store: schema version and migrations, recording outcomes, id lookup, locations and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from dlperf.errors import StoreError
from dlperf.store import FAILED, INTERRUPTED, OK, SCHEMA_VERSION, Store, resolve_url
from dlperf.store.db import ENV_VAR, meta_table, runs_table

pytestmark = pytest.mark.unit


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "runs.db")


def test_new_store_has_current_schema(store: Store) -> None:
    assert store.schema_version == SCHEMA_VERSION == 2
    tables = set(sa.inspect(store.engine).get_table_names())
    assert {"runs", "baselines", "dlperf_meta"} <= tables


def test_migrates_a_version_1_store_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # what dlperf with schema 1 wrote: meta + runs, no baselines
        meta_table.create(conn)
        runs_table.create(conn)
        conn.execute(sa.insert(meta_table).values(key="schema_version", value="1"))
        conn.execute(sa.insert(runs_table).values(
            id="abc123def456", kind="bench", workload="zoo:mlp", status="ok", created_at="2026-01-01T00:00:00",
            config_json="{}", environment_json="{}", result_json='{"x": 1}', tags_json="{}"))
    engine.dispose()
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION
    assert "baselines" in sa.inspect(store.engine).get_table_names()
    assert store.get("abc").result == {"x": 1}
    store.set_baseline("main", "abc123")
    assert store.get_baseline("main").id == "abc123def456"


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Store(path)
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
    store.delete(a.id)
    assert [r.id for r in store.list(kind="bench")] == [c.id]


def test_result_json_allows_nan_and_objects(store: Store) -> None:
    with store.recording("bench", "w") as run:
        run.result = {"v": float("inf"), "path": Path("/x"), "t": (1, 2)}
    assert store.get(run.id).result == {"v": float("inf"), "path": "/x", "t": [1, 2]}


def test_env_var_and_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "from-env" / "runs.db"
    monkeypatch.setenv(ENV_VAR, str(target))
    store = Store()
    assert store.url == f"sqlite:///{target}"
    store.create_run("bench", "w")
    assert target.exists()
    url = f"sqlite:///{tmp_path / 'by-url.db'}"
    assert resolve_url(url) == url
    assert Store(url).list() == []
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    assert resolve_url() == "sqlite:///.dlperf/runs.db"


@pytest.mark.parametrize("url", ["nosuchdialect://host/db", "sqlite:////nonexistent-dir-dlperf/x/runs.db"])
def test_bad_url_is_a_store_error(url: str) -> None:
    with pytest.raises(StoreError, match="cannot open the run store"):
        Store(url)


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
