"""`dlperf optimize --no-resume` starts a new search where the last interrupted search of the workload would
otherwise be continued."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.cli.main import main

pytestmark = pytest.mark.unit


def test_no_resume_starts_a_new_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def optimize(workload: Any, config: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise KeyboardInterrupt  # only what the search was asked to do is looked at

    monkeypatch.setattr("dlperf.optimize.search.optimize", optimize)
    for options, resumes in (([], True), (["--no-resume"], False)):
        assert main(["optimize", "zoo:mlp", *options, "--store", str(tmp_path / "runs.db")]) == 130
        assert calls.pop()["auto_resume"] is resumes
