"""A store clock whose runs are created a second apart, for tests that assert which runs are the newest: runs created
in one millisecond share a `created_at`, and newest first is then no one order."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

START = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def space_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on in this test, each time the store stamps (a run created or finished) is a second after the last."""
    ticks = (START + dt.timedelta(seconds=s) for s in itertools.count())
    monkeypatch.setattr("dlperf.store.db.now_iso", lambda: next(ticks).isoformat(timespec="milliseconds"))
