"""`dlperf profile`'s options reach the capture and the run record: --steps, --max-fixes, --memory-budget; a
--max-fixes below 1, an empty --memory-budget or --trace, and --train of a workload without a training spec are
refused before a run is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.store import Store
from tests.integration.profile.test_cli_profile import EXAMPLES, seeded_ceilings  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("seeded_ceilings")]


def test_the_options_reach_the_capture_and_the_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    assert main(["profile", "zoo:mlp", "--steps", "2", "--threads", "1", "--memory-budget", "4GiB", "--max-fixes", "3",
                 "--json", "--store", str(store)]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["result"]["trace"]["steps"] == 2
    assert out["result"]["ceilings"]["gemm_flops"]["fp32"] == 155e9  # the 1-thread ceilings
    config = Store(store).get(out["run_id"]).config
    assert config["memory_budget_bytes"] == 4 * 2**30 and config["steps"] == 2
    # without --verify, --max-fixes measures nothing: it was ignored without a word, and recorded as if used
    assert "warning: --max-fixes 3 is used only with --verify: no fix is measured" in captured.err
    assert config["max_fixes"] is None and out["result"]["verify"] is None


@pytest.mark.parametrize(("argv", "message"), [
    (["zoo:mlp", "--max-fixes", "0"], "--max-fixes must be >= 1, got 0"),
    (["zoo:mlp", "--threads", "0"], "--threads must be >= 1, got 0"),  # it said "threads must be", no option
    (["zoo:mlp", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),  # "batch size must be", as --threads
    ([str(EXAMPLES / "compute_bound.py"), "--train"], "has no training spec (Workload.train): profile its inference"),
    # an empty value (an unset variable in a script) profiled with the default budget, and wrote no trace, unsaid
    (["zoo:mlp", "--memory-budget", ""], "--memory-budget: expected a size like 4GiB, 512MiB or 2GB, got ''"),
    (["zoo:mlp", "--trace", ""], "--trace '' names no file: give a file name, or leave --trace out"),
])
def test_a_profile_that_cannot_run_is_refused_before_a_run_is_recorded(
        tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    assert main(["profile", *argv, "--steps", "1", "--store", str(store)]) == 2
    assert message in capsys.readouterr().err
    assert not store.exists() or Store(store).list() == []
