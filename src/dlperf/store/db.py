"""The run store: SQLite by default (`.dlperf/runs.db`), any SQLAlchemy URL for teams; versioned schema."""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dlperf.errors import ConfigError, StoreError
from dlperf.store.records import FAILED, INTERRUPTED, KINDS, OK, RUNNING, RunRecord

ENV_VAR = "DLPERF_STORE"
DEFAULT_PATH = Path(".dlperf") / "runs.db"
AMBIGUOUS_SHOWN = 5
"""Runs an ambiguous id prefix names in its error."""
FINISH_LOCK_WAIT_S = 60.0
"""How long a run's last write waits for a store another process keeps locked, beyond SQLite's own 5 s."""

metadata = sa.MetaData()
meta_table = sa.Table(
    "dlperf_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
runs_table = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False, index=True),
    sa.Column("workload", sa.String(512), nullable=False, index=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False, index=True),
    sa.Column("finished_at", sa.String(40)),
    sa.Column("parent_id", sa.String(32), index=True),
    sa.Column("config_json", sa.Text, nullable=False, default="{}"),
    sa.Column("environment_json", sa.Text, nullable=False, default="{}"),
    sa.Column("result_json", sa.Text, nullable=False, default="{}"),
    sa.Column("error", sa.Text),
    sa.Column("tags_json", sa.Text, nullable=False, default="{}"),
)
baselines_table = sa.Table(
    "baselines", metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("run_id", sa.String(32), nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
)


def _migrate_1(conn: Connection) -> None:
    metadata.create_all(conn, tables=[runs_table])


def _migrate_2(conn: Connection) -> None:
    metadata.create_all(conn, tables=[baselines_table])


MIGRATIONS: list[Callable[[Connection], None]] = [_migrate_1, _migrate_2]
SCHEMA_VERSION = len(MIGRATIONS)
READABLE_FROM = 1
"""The oldest schema whose runs this dlperf reads as they are: a store that old that cannot be written (a read-only
file) is read without its upgrade. Raise it with a migration that changes the runs table."""


STORE_OPTION = "--store PATH (in Python: Store(PATH), store=PATH)"
_GIVE_STORE = (f"Give the store your runs are in with {STORE_OPTION} or ${ENV_VAR}, or record a run first (e.g. "
               "`dlperf bench zoo:mlp`)")


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def resolve_url(location: str | os.PathLike[str] | None = None, create_folder: bool = True) -> str:
    """--store value, else $DLPERF_STORE, else ./.dlperf/runs.db. A path becomes a sqlite URL (its folder is
    made unless `create_folder` is false)."""
    if location is not None and not isinstance(location, (str, os.PathLike)):  # store=5 made a store file named 5
        raise StoreError(f"store must be a path, a database URL or a Store, got {type(location).__name__} "
                         f"{location!r}")
    if location is not None and not str(location).strip():  # '' read as '.': "the run store '.' is a folder"
        raise StoreError(f"the run store's path is empty: give the store's file, e.g. --store runs.db, or leave it "
                         f"out for ${ENV_VAR} or the default {DEFAULT_PATH}")
    text = str(location) if location is not None else os.environ.get(ENV_VAR) or str(DEFAULT_PATH)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    if create_folder:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            blocker = next((p for p in path.parent.parents if p.is_file()), path.parent if path.parent.is_file()
                           else None)
            why = f"'{blocker}' is a file, not a folder" if blocker is not None else str(exc)
            raise StoreError(f"cannot create the store's folder '{path.parent}': {why}; give --store another "
                             "path") from exc
    return f"sqlite:///{path}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for another database, an in-memory one or a `file:` URI."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return None
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def store_error(exc: sa.exc.SQLAlchemyError, shown_url: str, doing: str = "run store") -> StoreError:
    """The database's error said in one line with what to do: SQLAlchemy's own text adds the SQL statement and
    a link to its docs, and SQLite's 'database is locked' says nothing about how to get out of it."""
    message = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    low = message.lower()
    if "locked" in low or "busy" in low:
        hint = ("it is locked by another process (another dlperf command writing to it, or an open sqlite3 "
                "shell): retry when that has finished, or use another --store")
    elif "not a database" in low or "malformed" in low or "file is encrypted" in low:
        hint = ("the file is not a dlperf run store or is damaged: point --store (or $DLPERF_STORE) at your store, "
                "or move this file aside to start a new one")
    elif "readonly" in low or "read-only" in low:
        hint = "it is read-only: make the file and its folder writable, or use another --store"
    elif "unable to open database file" in low:
        hint = "SQLite cannot open the file: check that its folder exists and is writable, or use another --store"
    else:
        return StoreError(f"{doing} at {shown_url}: {message}")
    return StoreError(f"{doing} at {shown_url}: {hint} ({message})")


def _cannot_write(exc: sa.exc.OperationalError) -> bool:
    """SQLite's error for a file, or a folder (for its journal), that this process may not write."""
    message = str(exc.orig or exc).lower()
    return "readonly" in message or "read-only" in message or "unable to open database file" in message


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, allow_nan=True)


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _without_password(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:  # not a URL SQLAlchemy reads: create_engine says so
        return url


class Store:
    """Runs and baselines in one database. Safe to use from one process at a time per run."""

    def __init__(self, location: str | os.PathLike[str] | None = None, *, create: bool | None = None) -> None:
        """Open the store at `location` (see `resolve_url`). With `create=False` a SQLite file that does not
        exist is an error instead of a new empty store: the commands that only read runs (`runs`, `report`,
        `baseline`, `check`) would otherwise answer "no runs" for a mistyped path, and leave a file there.
        `create=True` makes the store now. The default, None, makes a missing SQLite store at its first write
        (a run recorded, a baseline set) and refuses a read of it as `create=False` does: `Store('missing.db')
        .list()` answered [] and left a 44 KiB store there."""
        self._absent: Path | None = None
        """A SQLite store that did not exist when opened with `create=None`: made at the first write."""
        path = sqlite_path(resolve_url(location, create_folder=False))
        if create is None and path is not None and not path.exists():
            self._absent = path
        given = str(location) if location is not None else os.environ.get(ENV_VAR) or ""
        self._makes_folder = "://" not in given  # a path's folder is made as resolve_url makes it; a URL's is not
        self.url = resolve_url(location, create_folder=bool(create) or (create is None and self._absent is None))
        self.shown_url = _without_password(self.url)
        """The URL for messages: a password in it shows as ***."""
        self.not_upgraded: int | None = None
        """The schema version of an older store read as it is, since it could not be written (see `READABLE_FROM`);
        None where the store is at this dlperf's version. Such a store takes no writes."""
        path = sqlite_path(self.url)
        if path is not None and path.is_dir():
            raise StoreError(f"the run store '{path}' is a folder: give the store's file, e.g. "
                             f"--store {path / 'runs.db'}")
        if create is False and path is not None and not path.exists():
            raise StoreError(f"no run store at '{path}': nothing has been recorded there. {_GIVE_STORE}")
        if create is False and path is not None and path.stat().st_size == 0:
            # SQLite reads an empty file as an empty database: the migration made it a store (a 44 KiB file)
            raise StoreError(f"'{path}' is an empty file, not a run store: nothing has been recorded there. "
                             f"{_GIVE_STORE}")
        try:
            self.engine: Engine = sa.create_engine(self.url, future=True)
            if self.engine.dialect.name == "sqlite":
                sa.event.listen(self.engine, "connect", _lenient_text)
            if self._absent is None:
                self._migrate(create is not False)
        except sa.exc.SQLAlchemyError as exc:
            raise store_error(exc, self.shown_url, "cannot open the run store") from exc
        except ImportError as exc:  # the URL's database driver (psycopg, pymysql, ...) is not installed
            raise StoreError(f"cannot open the run store at {self.shown_url}: its database driver is not installed "
                             f"({exc}); pip install it, or use the default SQLite store (no --store)") from exc

    def _migrate(self, create: bool = True) -> None:
        if self.engine.dialect.name == "sqlite":
            if self._sqlite_current():
                return
            if not create:
                self._refuse_unless_store()
            # Two commands opening a new store at once each created the tables and wrote the schema version
            # ("table runs already exists", "UNIQUE constraint failed: dlperf_meta.key"). The migration holds
            # SQLite's write lock from its first look at the tables: a second command waits (SQLite's 5 s), then
            # finds the store made. Only a store that needs it takes the lock: readers of a current store never do.
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                    self._migrate_in(conn)
                    conn.commit()
            except sa.exc.OperationalError as exc:
                if create or not _cannot_write(exc):
                    raise
                self._read_without_upgrade(exc)
            return
        with self.engine.begin() as conn:
            self._migrate_in(conn)

    def _read_without_upgrade(self, exc: sa.exc.OperationalError) -> None:
        """A command that only reads found an older store it cannot upgrade (a read-only file or folder): `runs list`
        of a schema-1 store said only "it is read-only", as if reading needed write access."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version"))
            version = int(row.scalar() or 0)
        if version > SCHEMA_VERSION:
            raise StoreError(f"the store at {self.shown_url} has schema version {version}, newer than this dlperf "
                             f"understands ({SCHEMA_VERSION}): upgrade dlperf or use another --store") from exc
        if version < READABLE_FROM:
            raise StoreError(f"the store at {self.shown_url} is from an older dlperf (schema {version}) and must be "
                             f"upgraded to schema {SCHEMA_VERSION}, which needs write access: it is read-only (make "
                             "the file and its folder writable, or copy it and give --store the copy)") from exc
        self.not_upgraded = version

    def _refuse_unless_store(self) -> None:
        """A command that only reads runs does not turn a SQLite file without dlperf's tables into a store (an
        older dlperf store is upgraded: it is one)."""
        with self.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
        if meta_table.name in tables:
            return
        if tables:
            raise StoreError(f"{self.shown_url} is a database of something else, not a dlperf run store (it has the "
                             f"tables {', '.join(sorted(tables))}): point --store (or ${ENV_VAR}) at a dlperf store")
        path = sqlite_path(self.url)
        if path is None:  # 'None' is an empty SQLite database, of sqlite:/// (an in-memory one)
            raise StoreError(f"{self.shown_url} names no file (an in-memory SQLite database, empty and gone when the "
                             f"command ends): give the store's file, e.g. sqlite:///runs.db. {_GIVE_STORE}")
        raise StoreError(f"'{path}' is an empty SQLite database, not a run store: nothing has been recorded there. "
                         f"{_GIVE_STORE}")

    def _sqlite_current(self) -> bool:
        """Whether this SQLite store is a dlperf store at this dlperf's schema version (nothing to migrate)."""
        with self.engine.connect() as conn:
            if meta_table.name not in set(sa.inspect(conn).get_table_names()):
                return False
            row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version"))
            return int(row.scalar() or 0) == SCHEMA_VERSION

    def _migrate_in(self, conn: sa.Connection) -> None:
        """Create or upgrade dlperf's tables on `conn`, inside the caller's transaction."""
        tables = set(sa.inspect(conn).get_table_names()) if conn.dialect.name == "sqlite" else set()
        if tables and meta_table.name not in tables:
            # Another program's SQLite file: adding dlperf's tables to it would change a file that is not ours.
            # (A server database is shared by design: dlperf's tables sit beside the others there.)
            raise StoreError(
                f"{self.shown_url} is a database of something else, not a dlperf run store (it has the tables "
                f"{', '.join(sorted(tables))}): point --store (or ${ENV_VAR}) at a dlperf store or a new file"
            )
        metadata.create_all(conn, tables=[meta_table])
        row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version"))
        current = int(row.scalar() or 0)
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"the store at {self.shown_url} has schema version {current}, newer than this dlperf "
                f"understands ({SCHEMA_VERSION}): upgrade dlperf or use another --store"
            )
        for version in range(current, SCHEMA_VERSION):
            MIGRATIONS[version](conn)
        if current == 0:
            conn.execute(sa.insert(meta_table).values(key="schema_version", value=str(SCHEMA_VERSION)))
        elif current < SCHEMA_VERSION:
            conn.execute(sa.update(meta_table).where(meta_table.c.key == "schema_version")
                         .values(value=str(SCHEMA_VERSION)))

    @property
    def schema_version(self) -> int:
        with self._connect() as conn:
            row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version"))
            return int(row.scalar() or 0)

    # --- runs -------------------------------------------------------------------------------------

    def create_run(self, kind: str, workload: str, config: dict[str, Any] | None = None,
                   environment: dict[str, Any] | None = None, parent_id: str | None = None,
                   tags: dict[str, Any] | None = None) -> RunRecord:
        record = RunRecord(
            id=uuid.uuid4().hex[:12], kind=kind, workload=workload, status=RUNNING, created_at=now_iso(),
            config=config or {}, environment=environment or {}, parent_id=parent_id, tags=tags or {},
        )
        self._write(sa.insert(runs_table).values(
            id=record.id, kind=kind, workload=workload, status=RUNNING, created_at=record.created_at,
            parent_id=parent_id, config_json=_dumps(record.config),
            environment_json=_dumps(record.environment), result_json="{}", tags_json=_dumps(record.tags),
        ))
        return record

    def update_result(self, run_id: str, result: dict[str, Any]) -> None:
        """Save a partial result of a running run (so a crash keeps what was measured)."""
        self._write(sa.update(runs_table).where(runs_table.c.id == run_id).values(result_json=_dumps(result)))

    def finish_run(self, run_id: str, result: dict[str, Any] | None = None, status: str = OK,
                   error: str | None = None) -> None:
        """The run's last write, which carries its whole result. A store locked by another process longer than
        SQLite's own wait is waited for up to FINISH_LOCK_WAIT_S more; if the write still fails, the result is
        written to a JSON file beside the store (named in the error) instead of being lost with the run left
        "running"."""
        values: dict[str, Any] = {"status": status, "error": error, "finished_at": now_iso()}
        if result is not None:
            values["result_json"] = _dumps(result)
        statement = sa.update(runs_table).where(runs_table.c.id == run_id).values(**values)
        deadline = time.monotonic() + FINISH_LOCK_WAIT_S
        while True:
            try:
                written = self._write(statement)
            except StoreError as exc:
                if isinstance(exc.__cause__, sa.exc.OperationalError) and "locked" in str(exc) \
                        and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                aside = self._set_aside(run_id, {"id": run_id, "status": status, "error": error,
                                                  "finished_at": values["finished_at"], "result": result})
                if aside is None:
                    raise
                raise StoreError(f"{exc}; run {run_id} stays 'running' there, and what it measured is saved in "
                                 f"{aside}") from exc
            if written:
                return
            # The row is gone (`dlperf runs delete` while the command ran): the update changed nothing, and the
            # command said "run ... saved" of a run that was not there.
            aside = self._set_aside(run_id, {"id": run_id, "status": status, "error": error,
                                             "finished_at": values["finished_at"], "result": result})
            kept = f"what it measured is saved in {aside}" if aside is not None else "what it measured is lost"
            raise StoreError(f"run {run_id} is no longer in the store at {self.shown_url} (deleted while it ran?): "
                             f"{kept}")

    def _set_aside(self, run_id: str, content: dict[str, Any]) -> Path | None:
        """Write a run's end that the store refused to a JSON file beside the store (or in the current folder)."""
        path = sqlite_path(self.url)
        for folder in ([path.parent] if path is not None else []) + [Path.cwd()]:
            target = folder / f"dlperf-run-{run_id}.json"
            try:
                target.write_text(_dumps(content) + "\n")
            except OSError:
                continue
            return target
        return None

    @contextlib.contextmanager
    def recording(self, kind: str, workload: str, config: dict[str, Any] | None = None,
                  environment: dict[str, Any] | None = None, parent_id: str | None = None,
                  ) -> Iterator[RunHandle]:
        """A run that is recorded whatever happens: ok, failed (with the error) or interrupted (Ctrl-C)."""
        record = self.create_run(kind, workload, config, environment, parent_id)
        handle = RunHandle(self, record)
        try:
            yield handle
        except KeyboardInterrupt as exc:  # Ctrl-C, or a command's own subclass with its reason (e.g. SIGTERM)
            self.finish_run(record.id, handle.result, INTERRUPTED, str(exc) or "interrupted by the user (Ctrl-C)")
            exc.dlperf_run = record.id  # type: ignore[attr-defined]  # the outermost run last: what `main` names
            exc.dlperf_store = self  # type: ignore[attr-defined]  # where `main` reads it back for --json
            exc.dlperf_run_finished = bool(handle.result)  # type: ignore[attr-defined]  # `main` says if nothing
            raise
        except BaseException as exc:
            self.finish_run(record.id, handle.result, FAILED, f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(AttributeError):
                exc.dlperf_run = record.id  # type: ignore[attr-defined]  # `main` names it after the error
                exc.dlperf_store = self  # type: ignore[attr-defined]  # and prints it with --json
                # what it finished before the failure (bench's batch sizes before the one that raised), if anything:
                # a run that finished nothing is named on stderr only (a script had neither JSON nor its id)
                exc.dlperf_run_finished = bool(handle.result)  # type: ignore[attr-defined]
            raise
        else:
            self.finish_run(record.id, handle.result, handle.status, handle.error)

    def get(self, run_id: str) -> RunRecord:
        """A run by id or unique id prefix."""
        if not run_id:
            raise StoreError("no run id given")
        # The prefix is matched literally: '%' and '_' are LIKE's wildcards, not characters of an id.
        with self._connect() as conn:
            rows = conn.execute(
                sa.select(runs_table).where(runs_table.c.id.like(f"{_like_literal(run_id)}%", escape="\\"))
                .order_by(runs_table.c.created_at.desc()).limit(AMBIGUOUS_SHOWN + 1)
            ).mappings().all()
        exact = [r for r in rows if r["id"] == run_id]
        if exact:
            return _to_record(exact[0])
        if not rows:
            raise StoreError(f"no run '{run_id}' in the store at {self.shown_url} (`dlperf runs list` shows them)")
        if len(rows) > 1:
            shown = ", ".join(f"{r['id']} ({r['kind']} of {r['workload']})" for r in rows[:AMBIGUOUS_SHOWN])
            more = ", ..." if len(rows) > AMBIGUOUS_SHOWN else ""
            raise StoreError(f"run id prefix '{run_id}' is ambiguous: it matches {shown}{more}; give more characters")
        return _to_record(rows[0])

    def exists(self, run_id: str) -> bool:
        """Whether the store has the run of exactly this id (not a prefix); nothing of it is read."""
        with self._connect() as conn:
            found = conn.execute(sa.select(runs_table.c.id).where(runs_table.c.id == run_id).limit(1)).first()
        return found is not None

    def list(self, kind: str | None = None, workload: str | None = None, limit: int | None = 50,
             parent_id: str | None = None, status: str | None = None,
             top_level: bool = False, same_file: bool = False) -> builtins.list[RunRecord]:
        """Newest first; `top_level`: only runs of no parent (not an optimize run's candidates or a tune's trials).

        `workload` matches a run however its command named the workload (`runs_of_workload`): 'wl.py:workload'
        finds the runs of `dlperf bench wl.py:workload` typed in this folder, of `dlperf.bench("wl.py:workload")`
        (recorded by its absolute path) and of `dlperf profile wl.py`; a bare 'NAME' those stored as 'python:NAME'
        too (a `Workload` built in code). A `kind` dlperf does not record and the
        store has no run of is a ConfigError naming the kinds: a typo ('benhc') listed nothing without a word.
        `same_file`: with `workload`, every run the database narrows it to (those whose workload column holds the
        file's name, under any workload name: 'wl.py:a' and 'wl.py:b'), unmatched: a history (`workload_runs`)
        matches them itself, and needs the file's other named workloads to tell whether a plain 'wl.py' is ambiguous."""
        if kind and not self.has_kind(kind):
            raise ConfigError(f"no run kind '{kind}': the kinds are {', '.join(KINDS)}")
        query = sa.select(runs_table).order_by(runs_table.c.created_at.desc())
        if top_level:
            query = query.where(runs_table.c.parent_id.is_(None))
        if kind:
            query = query.where(runs_table.c.kind == kind)
        if parent_id:
            query = query.where(runs_table.c.parent_id == parent_id)
        if status:
            query = query.where(runs_table.c.status == status)
        if not workload:
            if limit:
                query = query.limit(limit)
            with self._connect() as conn:
                return [_to_record(r) for r in conn.execute(query).mappings().all()]
        # by the spec's meaning, not its spelling: `dlperf.bench` records a file workload by its absolute path, the
        # CLI's bench as typed, and list(workload='wl.py:workload') missed the library's runs. The database narrows
        # them by what every spelling holds (the file's name, or a zoo spec itself) before any is read: matching
        # read and decoded every run of the kind (optimize's resume lookup, every optimize run)
        from dlperf.store.query import recorded_names, workload_file_name, workload_matcher

        file_name = workload_file_name(workload)
        if file_name is None:  # a zoo spec, or a bare name: also a `Workload` built in code, stored as python:NAME
            query = query.where(runs_table.c.workload.in_(recorded_names(workload)))
        else:
            query = query.where(runs_table.c.workload.like(f"%{_like_literal(file_name)}%", escape="\\"))
        matches = (lambda _record: True) if same_file else workload_matcher(workload)
        records: builtins.list[RunRecord] = []
        with self._connect() as conn:
            for row in conn.execute(query).mappings():
                record = _to_record(row)
                if matches(record):
                    records.append(record)
                    if limit and len(records) == limit:
                        break
        return records

    def has_kind(self, kind: str) -> bool:
        """Whether `kind` is one dlperf records (`KINDS`) or the store has a run of."""
        return kind in KINDS or kind in self.distinct("kind")

    def count_children(self, kind: str | None = None) -> int:
        """How many runs (of `kind`) have a parent run: an optimize run's candidates, a tune's trials."""
        query = sa.select(sa.func.count()).select_from(runs_table).where(runs_table.c.parent_id.is_not(None))
        if kind:
            query = query.where(runs_table.c.kind == kind)
        with self._connect() as conn:
            return int(conn.execute(query).scalar_one())

    def distinct(self, column: str) -> builtins.list[str]:
        """The different values of a run column ('kind', 'workload', 'status') in the store, sorted."""
        if column not in ("kind", "workload", "status"):
            raise ValueError(f"no run column '{column}' to list")
        col = runs_table.c[column]
        with self._connect() as conn:
            return [str(v) for v in conn.execute(sa.select(col).distinct().order_by(col)).scalars().all()]

    def delete(self, run_id: str, force: bool = False) -> builtins.list[RunRecord]:
        """Delete a run and its child runs (an optimize run's candidates); the deleted records, the run first.

        A run that a baseline names is kept unless `force` (which removes those baselines too): deleting it would
        leave `dlperf check` pointing at nothing. So is a run still marked running unless `force`: its command may
        still be writing to it (a process killed with -9 leaves its run marked running for good).
        """
        record = self.get(run_id)
        if record.status == RUNNING and not force:
            # its command would go on and end with "run ... saved" of a run no longer there
            raise StoreError(
                f"run {record.id} ({record.kind} of {record.workload}, started {record.created_at[:19]}) is still "
                "running: let it finish or stop it first; if its process is gone (killed, the machine restarted), "
                "delete it with --force"
            )
        children = self.list(parent_id=record.id, limit=None)
        ids = [record.id, *(c.id for c in children)]
        self._refuse_write()
        with self._connect() as conn:
            named = conn.execute(sa.select(baselines_table.c.name).where(baselines_table.c.run_id.in_(ids))
                                 .order_by(baselines_table.c.name)).scalars().all()
        if named and not force:
            raise StoreError(
                f"run {record.id} is the baseline {', '.join(repr(n) for n in named)}: remove the baseline first "
                f"(`dlperf baseline rm {named[0]}`) or point it at another run, or delete with --force (which "
                "removes the baseline too)"
            )
        with self._begin() as conn:
            conn.execute(sa.delete(baselines_table).where(baselines_table.c.run_id.in_(ids)))
            conn.execute(sa.delete(runs_table).where(runs_table.c.id.in_(ids)))
        return [record, *children]

    # --- baselines --------------------------------------------------------------------------------

    def set_baseline(self, name: str, run_id: str) -> RunRecord:
        record = self.get(run_id)
        with self._begin() as conn:
            conn.execute(sa.delete(baselines_table).where(baselines_table.c.name == name))
            conn.execute(sa.insert(baselines_table).values(name=name, run_id=record.id, created_at=now_iso()))
        return record

    def get_baseline(self, name: str) -> RunRecord:
        if not self._has_baselines():
            raise StoreError(f"no baseline named '{name}': the store at {self.shown_url} is from an older dlperf "
                             f"(schema {self.not_upgraded}), which kept no baselines")
        with self._connect() as conn:
            run_id = conn.execute(
                sa.select(baselines_table.c.run_id).where(baselines_table.c.name == name)
            ).scalar()
        if run_id is None:
            raise StoreError(f"no baseline named '{name}' (`dlperf baseline list` shows them)")
        try:
            return self.get(run_id)
        except StoreError as exc:
            raise StoreError(f"baseline '{name}' names run {run_id}, which is no longer in the store: point it at "
                             f"another run (`dlperf baseline set {name} RUN`)") from exc

    def list_baselines(self) -> builtins.list[tuple[str, str, str]]:
        if not self._has_baselines():
            return []
        with self._connect() as conn:
            rows = conn.execute(sa.select(baselines_table).order_by(baselines_table.c.name)).all()
        return [(r.name, r.run_id, r.created_at) for r in rows]

    def remove_baseline(self, name: str) -> None:
        with self._begin() as conn:
            deleted = conn.execute(sa.delete(baselines_table).where(baselines_table.c.name == name)).rowcount
        if not deleted:
            raise StoreError(f"no baseline named '{name}' to remove")

    # --- plumbing ---------------------------------------------------------------------------------

    def _has_baselines(self) -> bool:
        """Whether the store has the baselines table (schema 2 on): an older store read as it is has none."""
        return self.not_upgraded is None or self.not_upgraded >= 2

    def _refuse_write(self) -> None:
        if self.not_upgraded is not None:
            raise StoreError(f"the store at {self.shown_url} is from an older dlperf (schema {self.not_upgraded}) "
                             f"and read-only, so it was read as it is; writing to it needs the upgrade to schema "
                             f"{SCHEMA_VERSION} first, which needs write access: make the file and its folder "
                             "writable, or use another --store")

    def make(self) -> None:
        """Make the store now where it was opened with `create=None` and did not exist (for a caller that records,
        but reads first: `optimize` looks for a search to resume)."""
        self._make_absent(writing=True)

    def _make_absent(self, writing: bool) -> None:
        """Make the store opened with `create=None` that did not exist, for a write; a read of it is refused (unless
        another process has made it since)."""
        path = self._absent
        if path is None:
            return
        if not writing and not path.exists():
            raise StoreError(f"no run store at '{path}': nothing has been recorded there. {_GIVE_STORE}")
        if self._makes_folder:
            resolve_url(path)  # its folder, with resolve_url's words where that fails
        try:
            self._migrate(writing)
        except sa.exc.SQLAlchemyError as exc:
            raise store_error(exc, self.shown_url, "cannot open the run store") from exc
        self._absent = None

    @contextlib.contextmanager
    def _begin(self) -> Iterator[Connection]:
        self._refuse_write()
        self._make_absent(writing=True)
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.SQLAlchemyError as exc:
            raise store_error(exc, self.shown_url) from exc

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        self._make_absent(writing=False)
        try:
            with self.engine.connect() as conn:
                yield conn
        except sa.exc.SQLAlchemyError as exc:
            raise store_error(exc, self.shown_url) from exc

    def _write(self, statement: Any) -> int:
        """Execute `statement` in its own transaction; the rows it changed."""
        with self._begin() as conn:
            return int(conn.execute(statement).rowcount or 0)


class RunHandle:
    """What a command fills in while it runs; `save()` streams the partial result to the store."""

    def __init__(self, store: Store, record: RunRecord) -> None:
        self.store = store
        self.record = record
        self.result: dict[str, Any] = {}
        self.status = OK
        self.error: str | None = None
        self._save_failed = False

    @property
    def id(self) -> str:
        return self.record.id

    def save(self) -> None:
        """Save the partial result; a store that cannot take it now (locked by another process longer than SQLite's
        wait) is warned of once and the command goes on: the run's last write (`finish_run`) waits longer and has
        a fallback file, while a failed progress save ended a bench before its other batch sizes were measured."""
        try:
            self.store.update_result(self.record.id, self.result)
        except StoreError as exc:
            if not self._save_failed:
                self._save_failed = True
                print(f"warning: run {self.record.id}: the partial result could not be saved now ({exc}); going on, "
                      "it is saved when the run ends", file=sys.stderr)


def _to_record(row: Any) -> RunRecord:
    problems: list[str] = []
    fields = {name: _load_field(row[f"{name}_json"], name, problems)
              for name in ("config", "environment", "result", "tags")}
    error = "; ".join([*([row["error"]] if row["error"] else []), *problems]) or None
    return RunRecord(
        id=row["id"], kind=row["kind"], workload=row["workload"], status=row["status"],
        created_at=row["created_at"], finished_at=row["finished_at"], parent_id=row["parent_id"],
        config=fields["config"], environment=fields["environment"], result=fields["result"], error=error,
        tags=fields["tags"],
    )


def _like_literal(text: str) -> str:
    """`text` for a LIKE pattern with `escape='\\'`, matched as written: '%' and '_' are LIKE's wildcards."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _lenient_text(dbapi_connection: Any, _record: Any) -> None:
    """SQLite text that is not UTF-8 (a damaged file) read with U+FFFD in place of the bad bytes: sqlite3's own
    decoding raised for the whole query, so one damaged run stopped `runs list`, `runs show` and even `runs delete`
    of it ("Could not decode to UTF-8 column 'result_json'")."""
    dbapi_connection.text_factory = lambda data: data.decode("utf-8", "replace")


def _load_field(text: str | None, name: str, problems: builtins.list[str]) -> dict[str, Any]:
    """A stored JSON object; a damaged one (a truncated write, an edit by hand) reads as empty with a note in the
    record's error, so that one bad row does not stop `runs list`, a report or a history of every other run."""
    if text and "\ufffd" in text:
        problems.append(f"its stored {name} holds U+FFFD characters: bytes that were not UTF-8 (a damaged store) "
                        "read as such")
    try:
        value = json.loads(text or "{}")
    except ValueError as exc:
        problems.append(f"its stored {name} is not readable JSON ({exc}); the text is left in the store as it was")
        return {}
    if not isinstance(value, dict):
        problems.append(f"its stored {name} is a JSON {type(value).__name__}, not an object; left in the store")
        return {}
    return value
