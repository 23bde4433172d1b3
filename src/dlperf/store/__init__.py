"""The run store: every command's result as a run record, in SQLite by default or any SQLAlchemy URL."""

from dlperf.store.db import ENV_VAR, SCHEMA_VERSION, RunHandle, Store, resolve_url
from dlperf.store.records import FAILED, INTERRUPTED, OK, RUNNING, RunRecord

__all__ = [
    "ENV_VAR",
    "FAILED",
    "INTERRUPTED",
    "OK",
    "RUNNING",
    "SCHEMA_VERSION",
    "RunHandle",
    "RunRecord",
    "Store",
    "resolve_url",
]
