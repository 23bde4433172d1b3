"""`--executor`: what each spelling names, the spellings refused before Ray is imported, and what the executor
named is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import ConfigError
from dlperf.optimize.executor import Job, LocalExecutor, executor_from_spec, parse_executor

pytestmark = pytest.mark.unit


def test_each_spelling_names_its_executor() -> None:
    assert parse_executor("local") == ("local", None)
    assert parse_executor("ray") == ("ray", None)
    assert parse_executor("ray:auto") == ("ray", "auto")
    assert parse_executor("ray:10.0.0.5:6379") == ("ray", "10.0.0.5:6379")
    # a Ray client address whole: it was 'ray:' and a host named '//127.0.0.1' ("Name or service not known")
    assert parse_executor("ray://127.0.0.1:10001") == ("ray", "ray://127.0.0.1:10001")
    assert parse_executor("ray:ray://10.0.0.5:10001") == ("ray", "ray://10.0.0.5:10001")
    assert parse_executor(" Local ") == ("local", None) and parse_executor("RAY:auto") == ("ray", "auto")


@pytest.mark.parametrize("spec, said", [
    ("rayy", "unknown executor 'rayy'"),
    ("ray:", "give an address after the colon"),
    # Ray's own message rewrote the host: "Unable to parse port number from abc (full address = 192.0.2.2:abc)"
    ("ray:127.0.0.1:abc", "--executor ray:127.0.0.1:abc: 'abc' is not a port"),
    ("ray:127.0.0.1:70000", "'70000' is not a port"),
    ("ray:127.0.0.1:65536", "'65536' is not a port"),
    ("ray:127.0.0.1:0", "'0' is not a port"),
    ("local:4", "unknown executor 'local:4'"),  # local takes no address
    # Ray's answer, seconds later: "It looks like you set RAY_ADDRESS to an HTTP address ... Unset RAY_ADDRESS"
    ("ray:http://bad:1", "--executor ray:http://bad:1: http:// is a URL .* not a cluster's address: give the head "
     "node's GCS address"),
    ("ray:https://10.0.0.5:8265", "https:// is a URL"),
    ("ray:127.0.0.1", "--executor ray:127.0.0.1: no port: give HOST:PORT"),  # Ray: "Invalid address format"
])
def test_a_bad_spelling_is_refused_with_the_fix(spec: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_executor(spec)


def test_a_ray_trial_asks_for_a_gpu_only_for_a_cuda_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray task that asks for no GPU sees none: a --device cuda search's trials ask for one."""
    from dlperf.ray import trials

    made: list[tuple[str | None, float]] = []
    monkeypatch.setattr(trials, "RayExecutor", lambda address, trial_gpus: made.append((address, trial_gpus)))
    executor_from_spec("ray:auto", device="cuda:1")
    executor_from_spec("ray", device="cpu")
    assert made == [("auto", 1.0), (None, 0.0)]
    assert isinstance(executor_from_spec("local", device="cuda"), LocalExecutor)


def test_the_local_executor_runs_jobs_one_after_another_each_with_its_limits(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.optimize import evaluate

    ran: list[tuple[str, float, int | None]] = []

    def run_isolated(target: str, payload: dict[str, Any], log_path: Path, timeout_s: float,
                     memory_limit_bytes: int | None = None, on_phase: Any = None) -> dict[str, Any]:
        ran.append((target, timeout_s, memory_limit_bytes))
        return {"status": "ok", "log": str(log_path)}

    monkeypatch.setattr(evaluate, "run_isolated", run_isolated)
    jobs = [Job("evaluate", {}, tmp_path / "a.log", 30.0, 2**30, tag="a"),
            Job("confirm", {}, tmp_path / "b.log", 60.0, None, tag="b")]
    assert [(job.tag, result["log"]) for job, result in LocalExecutor().map(jobs)] == [
        ("a", str(tmp_path / "a.log")), ("b", str(tmp_path / "b.log"))]
    assert ran == [("evaluate", 30.0, 2**30), ("confirm", 60.0, None)]
