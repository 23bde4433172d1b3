"""An interrupted search resumes: candidates already measured are reused, not measured again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.optimize.search import OptimizeConfig, optimize
from dlperf.store.db import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST = {"warmup_iters": 2, "min_duration_s": 0.05, "min_iters": 5, "max_duration_s": 1.0, "ab_blocks": 4,
        "ab_iters_per_block": 3}


def test_interrupted_search_resumes_automatically(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    config = OptimizeConfig(passes=("hygiene", "dynamic_int8"), max_depth=1, time_budget_s=200,
                            workdir=str(tmp_path / "work"), **FAST)  # type: ignore[arg-type]
    done: list[str] = []

    def interrupt_after_two(kind: str, data: dict[str, Any]) -> None:
        if kind == "candidate_done":
            done.append(data["row"]["label"])
            if len(done) == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        optimize("zoo:mlp", config, store=store, on_event=interrupt_after_two)
    first = store.list(kind="optimize")[0]
    assert first.status == "interrupted"
    assert len(store.list(kind="candidate", parent_id=first.id, limit=None)) == 2

    started: list[str] = []
    result = optimize("zoo:mlp", config, store=store,
                      on_event=lambda kind, data: started.append(data["label"]) if kind == "candidate_start" else None)
    assert result.resumed_from == first.id
    labels = [r["label"] for r in result.rows]
    assert labels[:2] == done  # reused, in order
    assert all(result.row(r["key"]).get("reused") for r in result.rows[:2])
    assert started == [label for label in labels if label not in done]  # only the rest was measured
    assert store.get(result.run_id).status == "ok"  # type: ignore[arg-type]
    # A different search (other passes) does not resume it.
    other = OptimizeConfig(passes=("hygiene",), max_depth=1, time_budget_s=200, workdir=str(tmp_path / "work"),
                           **FAST)  # type: ignore[arg-type]
    assert optimize("zoo:mlp", other, store=store).resumed_from is None
