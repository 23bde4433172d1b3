"""The Ray executor's driver side against a fake Ray cluster and a fake clock: which nodes get trials, how many at
once, what a dead worker, a raising trial or a hung one gives, and what each result and the notes say."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dlperf.errors import ConfigError, ExecutorLost, OptimizeError
from dlperf.optimize.executor import WORKER_DIED, WORKER_LOST, Job
from dlperf.ray import trials
from dlperf.ray.trials import (
    TIMING_RESOURCE,
    RayExecutor,
    probe_node,
    reached_phase,
    run_trial,
    trial_file,
    workload_file,
)

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.unit

A, B, C, D = ("a" * 56, "b" * 56, "c" * 56, "d" * 56)


@dataclass
class _Node:
    node_id: str
    hardware_key: str = "xeon"
    sees_workdir: bool = True
    sees_workload: bool = True
    timing: float = 1.0
    cpus: float = 2.0
    gpus: float = 0.0
    alive: bool = True

    def as_ray_lists_it(self) -> dict[str, Any]:
        resources = {"CPU": self.cpus, **({TIMING_RESOURCE: self.timing} if self.timing else {}),
                     **({"GPU": self.gpus} if self.gpus else {})}
        return {"Alive": self.alive, "NodeID": self.node_id, "NodeManagerHostname": f"host-{self.node_id[0]}",
                "Resources": resources}


@dataclass(eq=False)  # a Ray object ref: hashed and compared by identity
class _Ref:
    kind: str
    node: str
    done_at: float
    value: Any
    folder: str = ""
    attempt: int = 0


HANG = "hang"
"""A trial that writes its first phase and never ends."""
SILENT = "silent"
"""A trial that never starts (no phase written)."""


class _Cluster:
    """Ray as the driver sees it. `outcomes[folder]` says what each attempt of the trial whose log is in `folder`
    does: (seconds, result dict or exception), HANG or SILENT."""

    exceptions = ray.exceptions

    def __init__(self, nodes: list[_Node], outcomes: dict[str, list[Any]] | None = None,
                 initialized: bool = True) -> None:
        self.node_list = nodes
        self.outcomes = outcomes or {}
        self.initialized = initialized
        self.now = 1000.0
        self.submitted: list[tuple[str, int, str]] = []
        """(folder, attempt, node) of each trial, in order."""
        self.trial_args: list[tuple[Any, ...]] = []
        """What each trial was called with (run_trial's arguments)."""
        self.probes: list[str] = []
        self.cancelled: list[_Ref] = []
        self.running: list[_Ref] = []
        self.most_at_once = 0
        self.steps = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(trials, "_ray", lambda: self)
        monkeypatch.setattr(trials, "time", SimpleNamespace(monotonic=lambda: self.now, sleep=self.sleep))

    def sleep(self, seconds: float) -> None:
        self.steps += 1
        assert self.steps < 100_000, "the driver never finished"
        self.now += seconds

    # --- what RayExecutor calls ---

    def is_initialized(self) -> bool:
        return self.initialized

    def nodes(self) -> list[dict[str, Any]]:
        return [n.as_ray_lists_it() for n in self.node_list]

    def get_runtime_context(self) -> Any:
        return SimpleNamespace(get_node_id=lambda: A, gcs_address="10.0.0.5:6379")

    def remote(self, **options: Any) -> Any:
        return lambda fn: SimpleNamespace(options=lambda scheduling_strategy: SimpleNamespace(
            remote=lambda *args: self._start(fn, scheduling_strategy.node_id, args)))

    def wait(self, refs: list[_Ref], num_returns: int, timeout: float) -> tuple[list[_Ref], list[_Ref]]:
        ready = [r for r in refs if r.done_at <= self.now][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(self, ref: _Ref) -> Any:
        self.running = [r for r in self.running if r is not ref]
        if isinstance(ref.value, BaseException):
            raise ref.value
        return ref.value

    def cancel(self, ref: _Ref, force: bool) -> None:
        self.cancelled.append(ref)
        self.running = [r for r in self.running if r is not ref]

    # --- the workers ---

    def _start(self, fn: Any, node_id: str, args: tuple[Any, ...]) -> _Ref:
        node = next(n for n in self.node_list if n.node_id == node_id)
        if fn is probe_node:
            self.probes.append(node_id)
            marker, workload = args
            return _Ref("probe", node_id, self.now, {
                "node_id": node_id, "hostname": f"host-{node_id[0]}", "hardware_key": node.hardware_key,
                "sees_workdir": node.sees_workdir and Path(marker).exists(),
                "sees_workload": node.sees_workload and (workload is None or Path(workload).is_file()),
                "environment": {}})
        assert fn is run_trial
        self.trial_args.append(args)
        log_path, attempt = Path(args[2]), args[3]
        folder = log_path.parent.name
        self.submitted.append((folder, attempt, node_id))
        outcome = self.outcomes[folder][attempt - 1]
        log_path.parent.mkdir(parents=True, exist_ok=True)  # as the worker makes it
        if outcome in (HANG, SILENT):
            if outcome == HANG:
                trial_file(log_path.parent, attempt, "phase").write_text("measure")
            ref = _Ref("trial", node_id, math.inf, None, folder, attempt)
        else:
            seconds, value = outcome
            if isinstance(value, dict):
                value = {**value, "node": {"node_id": node_id, "hostname": f"host-{node_id[0]}",
                                           "hardware_key": node.hardware_key, "worker_pid": 7}}
            ref = _Ref("trial", node_id, self.now + seconds, value, folder, attempt)
        self.running.append(ref)
        self.most_at_once = max(self.most_at_once, len(self.running))
        return ref


OK = {"status": "ok", "phase": "done", "error": None}


def _jobs(tmp_path: Path, *folders: str, timeout_s: float = 10.0) -> list[Job]:
    return [Job("evaluate", {}, tmp_path / folder / "log.txt", timeout_s) for folder in folders]


@pytest.fixture
def executor_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    made: list[RayExecutor] = []

    def make(cluster: _Cluster, **kwargs: Any) -> RayExecutor:
        cluster.install(monkeypatch)
        executor = RayExecutor("auto", **kwargs)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.close()


def test_the_phase_a_trial_reached_is_start_until_it_writes_one(tmp_path: Path) -> None:
    assert reached_phase(tmp_path, 1) == "start"
    trial_file(tmp_path, 1, "phase").write_text("")
    assert reached_phase(tmp_path, 1) == "start"
    trial_file(tmp_path, 1, "phase").write_text("measure\n")
    assert reached_phase(tmp_path, 1) == "measure"


def test_a_probe_says_whether_the_node_sees_the_work_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _Cluster([_Node(A)]).install(monkeypatch)
    marker = tmp_path / ".dlperf-ray-marker"
    assert probe_node(str(marker))["sees_workdir"] is False
    marker.touch()
    probed = probe_node(str(marker))
    assert probed["sees_workdir"] is True and probed["node_id"] == A and probed["hardware_key"]


def test_a_probe_says_whether_the_node_sees_the_workload_file(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _Cluster([_Node(A)]).install(monkeypatch)
    wl = tmp_path / "digits_cnn.py"
    assert probe_node(None, str(wl))["sees_workload"] is False
    wl.write_text("# a workload\n")
    assert probe_node(None, str(wl))["sees_workload"] is True and probe_node(None)["sees_workload"] is True
    assert workload_file({"settings": {"source": f"{wl}:workload?width=8"}}) == str(wl)
    assert workload_file({"settings": {"source": "zoo:mlp"}}) is None and workload_file({}) is None


def test_a_node_that_cannot_see_the_workload_file_is_left_out_saying_so(tmp_path: Path, executor_on: Any) -> None:
    """A node of a `ray start` cluster that had not mounted the workload's folder got the baseline's trial, which
    failed ("workload file '/work/scratch-w2/digits_cnn.py' does not exist, on Ray node f1b8d64c"), and with it the
    whole search, though the other node could run every trial."""
    wl = tmp_path / "digits_cnn.py"
    wl.write_text("# a workload\n")
    cluster = _Cluster([_Node(A), _Node(B, sees_workload=False)], {"c1": [(1.0, OK)], "c2": [(1.0, OK)]})
    executor = executor_on(cluster)
    jobs = [Job("evaluate", {"settings": {"source": f"{wl}:workload"}}, tmp_path / f / "log.txt", 10.0)
            for f in ("c1", "c2")]
    assert sorted(job.log_path.parent.name for job, _ in executor.map(jobs)) == ["c1", "c2"]
    assert [n for _, _, n in cluster.submitted] == [A, A]
    assert executor.excluded[B] == (f"it cannot see the workload file {wl}: put it on a file system every node "
                                    "mounts at the same path")
    assert f"Ray node host-b (bbbbbbbb) left out: {executor.excluded[B]}" in executor.notes()
    # no node sees it: the search stops saying why, rather than failing every trial
    cluster = _Cluster([_Node(C, sees_workload=False)], {"c3": [(1.0, OK)]})
    executor = executor_on(cluster)
    with pytest.raises(OptimizeError, match=r"no Ray node can run trials .*cccccccc: it cannot see the workload file"):
        list(executor.map([Job("evaluate", {"settings": {"source": str(wl)}}, tmp_path / "c3" / "log.txt", 10.0)]))


def test_trials_fill_every_timing_slot_and_each_result_says_where_it_ran(tmp_path: Path, executor_on: Any) -> None:
    cluster = _Cluster([_Node(A, timing=2), _Node(B)],
                       {"c1": [(5.0, OK)], "c2": [(1.0, OK)], "c3": [(1.0, OK)], "c4": [(1.0, OK)]})
    executor = executor_on(cluster)
    assert executor.slots == 3
    results = {job.log_path.parent.name: result for job, result in executor.map(_jobs(tmp_path, "c1", "c2", "c3",
                                                                                      "c4"))}
    assert sorted(results) == ["c1", "c2", "c3", "c4"] and cluster.most_at_once == 3
    for folder, result in results.items():
        node = next(n for f, _, n in cluster.submitted if f == folder)
        assert result["node"] == {"node_id": node, "hostname": f"host-{node[0]}", "hardware_key": "xeon",
                                  "worker_pid": 7}
        assert result["attempts"] == 1 and "retried_after" not in result and result["executor"] == "ray"
        assert result["log"] == str(tmp_path / folder / "log.txt")
    # three at once, one to each free slot; the fourth to the first slot freed (c1 runs longest)
    assert [(f, n) for f, _, n in cluster.submitted] == [("c1", B), ("c2", A), ("c3", A), ("c4", A)]
    assert executor.notes() == ["ran 4 trials on 2 Ray nodes: host-a (aaaaaaaa) 3, host-b (bbbbbbbb) 1"]


def test_each_trial_is_given_the_folder_the_search_runs_in(tmp_path: Path, executor_on: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A local child runs in the caller's folder; a Ray worker runs in its raylet's, where `ray start` ran, and a
    workload opening a file relative to the folder `dlperf optimize` ran in failed there."""
    monkeypatch.chdir(tmp_path)
    cluster = _Cluster([_Node(A)], {"c1": [(1.0, OK)]})
    executor = executor_on(cluster)
    assert [r["status"] for _, r in executor.map(_jobs(tmp_path, "c1"))] == ["ok"]
    assert [args[-1] for args in cluster.trial_args] == [str(tmp_path)]


def test_a_trial_taken_as_a_node_leaves_waits_for_a_slot_rather_than_being_lost(tmp_path: Path,
                                                                                 executor_on: Any) -> None:
    nodes = [_Node(A), _Node(B)]
    cluster = _Cluster(nodes, {"c1": [(1.0, OK)], "c2": [(1.0, OK)]})
    executor = executor_on(cluster)
    start = cluster._start

    def then_a_leaves(fn: Any, node_id: str, args: tuple[Any, ...]) -> _Ref:
        if fn is run_trial:
            nodes[0].alive = False  # after the first trial went to B: A's slot, free a moment ago, is gone
        return start(fn, node_id, args)

    cluster._start = then_a_leaves  # type: ignore[method-assign]
    done = [job.log_path.parent.name for job, _ in executor.map(_jobs(tmp_path, "c1", "c2"))]
    assert done == ["c1", "c2"] and [n for _, _, n in cluster.submitted] == [B, B]


def test_free_slots_go_to_the_least_busy_node_then_in_turn(executor_on: Any) -> None:
    executor = executor_on(_Cluster([_Node(A, timing=2), _Node(B, timing=2)]))
    executor._eligible = lambda shared_dir: {A: 2, B: 2}
    executor._last_eligible = {A: 2, B: 2}
    picked = [executor._free_node(Path("w")) for _ in range(4)]
    assert sorted(picked[:2]) == [A, B] and picked[2:] == picked[:2]  # in turn, so one trial at a time visits both
    executor._in_flight = {A: 1}
    assert [executor._free_node(Path("w")) for _ in range(2)] == [B, B]
    executor._in_flight = {A: 2, B: 2}
    assert executor._free_node(Path("w")) is None and not executor._has_free_slot()
    executor._in_flight = {A: 2, B: 1}
    assert executor._has_free_slot()


def test_a_retry_avoids_the_node_its_trial_died_on_unless_it_is_the_only_one(executor_on: Any) -> None:
    executor = executor_on(_Cluster([_Node(A), _Node(B)]))
    executor._eligible = lambda shared_dir: {A: 1, B: 1}
    assert [executor._free_node(Path("w"), avoid=A) for _ in range(3)] == [B, B, B]
    executor._in_flight = {B: 1}
    assert executor._free_node(Path("w"), avoid=A) is None  # waits for B rather than going back to A
    executor._eligible = lambda shared_dir: {A: 1}
    executor._in_flight = {}
    assert executor._free_node(Path("w"), avoid=A) == A


def test_a_trial_whose_worker_dies_is_retried_elsewhere_and_its_time_counts_from_the_first_try(
        tmp_path: Path, executor_on: Any) -> None:
    died = ray.exceptions.WorkerCrashedError()
    cluster = _Cluster([_Node(A), _Node(B)], {"c1": [(1.0, died), (1.0, died), (1.0, OK)], "c2": [(5.0, OK)]})
    executor = executor_on(cluster, max_retries=2)
    results = {job.log_path.parent.name: result for job, result in executor.map(_jobs(tmp_path, "c1", "c2"))}
    tries = [n for f, _, n in cluster.submitted if f == "c1"]
    assert len(tries) == 3 and tries[0] != tries[1] != tries[2]  # never again on the node it just died on
    result = results["c1"]
    assert result["status"] == "ok" and result["attempts"] == 3 and result["wall_s"] >= 3.0
    assert result["retried_after"] == [
        f"WorkerCrashedError on Ray node {n[:8]}: The worker died unexpectedly while executing this task. Check "
        "python-core-worker-*.log files for more information." for n in tries[:2]]
    assert executor.notes()[-1].endswith(", 1 of them again after their worker or node died")


def test_a_trial_whose_worker_dies_every_time_fails_after_max_retries_as_a_lost_worker(
        tmp_path: Path, executor_on: Any) -> None:
    died = ray.exceptions.NodeDiedError("the node was removed")
    cluster = _Cluster([_Node(A), _Node(B)], {"c1": [(1.0, died)] * 3})
    executor = executor_on(cluster, max_retries=2)
    ((_, result),) = list(executor.map(_jobs(tmp_path, "c1")))
    assert [a for _, a, _ in cluster.submitted] == [1, 2, 3]
    assert result["status"] == "failed" and result[WORKER_LOST] is True and result["attempts"] == 3
    assert result["error"].startswith(f"{WORKER_DIED} (NodeDiedError on Ray node ")
    assert ": the node was removed), after 3 attempt(s)" in result["error"]
    assert len(result["retried_after"]) == 2


@pytest.mark.parametrize("gone", [ray.exceptions.LocalRayletDiedError(),
                                  ray.exceptions.TaskUnschedulableError("its node left"),
                                  ray.exceptions.ObjectLostError("ff" * 28, None, "")],
                         ids=lambda e: type(e).__name__)
def test_every_kind_of_lost_worker_or_node_is_retried(tmp_path: Path, executor_on: Any, gone: Exception) -> None:
    cluster = _Cluster([_Node(A), _Node(B)], {"c1": [(1.0, gone), (1.0, OK)]})
    ((_, result),) = list(executor_on(cluster).map(_jobs(tmp_path, "c1")))
    assert result["status"] == "ok" and result["attempts"] == 2


def test_a_trial_that_raises_fails_at_once_with_the_first_line_of_its_error(tmp_path: Path, executor_on: Any) -> None:
    cluster = _Cluster([_Node(A), _Node(B)], {"c1": [(1.0, ValueError("bad payload\nmore detail"))]})
    ((_, result),) = list(executor_on(cluster).map(_jobs(tmp_path, "c1")))
    (node,) = [n for _, _, n in cluster.submitted]
    assert result["status"] == "failed" and result[WORKER_LOST] is False and result["attempts"] == 1
    # the node is named once, in the error's own words (it was named again after them)
    assert result["error"] == f"the trial raised (ValueError on Ray node {node[:8]}: bad payload), after 1 attempt(s)"


def test_a_hung_trial_is_killed_past_its_timeout_and_the_node_takes_the_next(tmp_path: Path,
                                                                              executor_on: Any) -> None:
    cluster = _Cluster([_Node(A)], {"c1": [HANG], "c2": [(1.0, OK)]})
    executor = executor_on(cluster)
    results = {job.log_path.parent.name: result for job, result in executor.map(_jobs(tmp_path, "c1", "c2"))}
    hung = results["c1"]
    assert (hung["status"], hung["phase"], hung["timed_out"]) == ("failed", "measure", True)
    assert hung["error"] == "timed out after 40 s during 'measure' on Ray node aaaaaaaa (killed)"
    assert [(r.folder, r.attempt) for r in cluster.cancelled] == [("c1", 1)]
    assert results["c2"]["status"] == "ok"


def test_a_trial_that_never_starts_is_killed_after_the_startup_grace(tmp_path: Path, executor_on: Any) -> None:
    cluster = _Cluster([_Node(A)], {"c1": [SILENT]})
    start = cluster.now
    ((_, result),) = list(executor_on(cluster, startup_grace_s=20.0).map(_jobs(tmp_path, "c1", timeout_s=300.0)))
    assert (result["phase"], result["timed_out"]) == ("start", True)
    assert result["error"] == "did not start within 20 s on Ray node aaaaaaaa (killed)"
    assert 20.0 < cluster.now - start < 21.0


def test_a_started_trial_counts_its_timeout_from_its_first_phase(tmp_path: Path) -> None:
    job = _jobs(tmp_path, "c1")[0]
    job.log_path.parent.mkdir()
    # a retry: first submitted long ago, submitted again at 100
    pending = trials._Pending(job, A, 2, first_submitted=0.0, submitted=100.0, errors=[])
    assert not pending.overdue(100.0 + trials.STARTUP_GRACE_S - 1, trials.STARTUP_GRACE_S)
    trial_file(job.log_path.parent, 2, "phase").write_text("load")
    assert not pending.overdue(250.0, trials.STARTUP_GRACE_S)  # started: seen at 250
    assert not pending.overdue(250.0 + 10.0 + trials.KILL_GRACE_S - 1, trials.STARTUP_GRACE_S)
    assert pending.overdue(250.0 + 10.0 + trials.KILL_GRACE_S + 1, trials.STARTUP_GRACE_S)
    silent = trials._Pending(job, A, 3, first_submitted=0.0, submitted=100.0, errors=[])
    assert not silent.overdue(100.0 + 179.0, 180.0) and silent.overdue(100.0 + 181.0, 180.0)


def test_a_failed_trials_error_names_its_node_before_the_logs_tail(tmp_path: Path, executor_on: Any) -> None:
    failed = {"status": "failed", "phase": "measure", "error": "exit -9 during 'measure'; log: line 1\nline 2",
              "log": "elsewhere.txt"}
    cluster = _Cluster([_Node(A, hardware_key="xeon"), _Node(B, hardware_key="epyc")], {"c1": [(1.0, failed)]})
    executor = executor_on(cluster)
    executor._eligible = lambda shared_dir: {A: 1}
    executor.hardware_key = "xeon"
    ((_, result),) = list(executor.map(_jobs(tmp_path, "c1")))
    assert result["error"] == "exit -9 during 'measure', on Ray node aaaaaaaa; log: line 1\nline 2"
    assert result["log"] == "elsewhere.txt" and "hardware_warning" not in result
    # a workload's error with its frame: the node on the first line, not glued to the user's source line
    raised = {"status": "failed", "phase": "load", "error": "workload file 'wl.py' raised FileNotFoundError while "
              "importing: settings.json\n  File \"wl.py\", line 5, in <module>\n    SCALE = open(\"settings.json\")"}
    result = executor._finish(trials._Pending(_jobs(tmp_path, "c3")[0], A, 1, cluster.now, cluster.now, []), raised)
    assert result["error"] == ("workload file 'wl.py' raised FileNotFoundError while importing: settings.json, on Ray "
                               "node aaaaaaaa\n  File \"wl.py\", line 5, in <module>\n"
                               "    SCALE = open(\"settings.json\")")
    result = executor._finish(trials._Pending(_jobs(tmp_path, "c2")[0], B, 1, cluster.now, cluster.now, []),
                              {"status": "ok", "node": {"node_id": B, "hostname": "host-b", "hardware_key": "epyc"}})
    assert result["hardware_warning"] == ("measured on hardware epyc, the other candidates on xeon: its timings are "
                                          "not comparable")
    assert "c2: measured on hardware epyc" in executor.notes()[0]


def test_nodes_that_cannot_see_the_work_folder_or_differ_in_hardware_are_left_out(tmp_path: Path,
                                                                                  executor_on: Any) -> None:
    nodes = [_Node(A), _Node(B, sees_workdir=False), _Node(C, hardware_key="epyc")]
    cluster = _Cluster(nodes)
    executor = executor_on(cluster)
    assert executor._eligible(tmp_path) == {A: 1}  # a tie of one slot each: this node's hardware
    assert sorted(cluster.probes) == [A, B, C]
    assert executor.excluded == {
        B: f"it cannot see the work folder {tmp_path}: put --workdir on a file system every node mounts at the same "
           "path",
        C: "its hardware (epyc) differs from the other nodes' (xeon)"}
    # two more epyc nodes join: the hardware chosen stays, or timings of two classes would be compared
    nodes.append(_Node(D, hardware_key="epyc"))
    assert executor._eligible(tmp_path) == {A: 1}
    assert sorted(cluster.probes) == [A, B, C, D]  # each node is probed once
    assert executor.hardware_key == "xeon" and D in executor.excluded
    (marker,) = tmp_path.glob(".dlperf-ray-*")
    for node in nodes:
        node.alive = False
    with pytest.raises(ExecutorLost, match=r"every Ray node that ran trials has left the cluster: host-a \(aaaaaaaa\)"
                                           r".* \(check the cluster with `ray status`\); the candidates measured so "
                                           "far are in the store"):
        executor._eligible(tmp_path)
    executor.close()
    assert not marker.exists()


def test_the_nodes_that_ran_trials_leaving_loses_the_executor_though_nodes_left_out_remain(
        tmp_path: Path, executor_on: Any) -> None:
    """Only a node of other hardware left: the search lost every place its trials could run, and is resumed by the
    same command. It failed with "no Ray node can run trials (cccccccc: its hardware ...)", recorded as a plain
    failure (the next search started over), and the message named no node that had left."""
    nodes = [_Node(A), _Node(B), _Node(C, hardware_key="epyc")]
    executor = executor_on(_Cluster(nodes))
    assert executor._eligible(tmp_path) == {A: 1, B: 1}
    nodes[0].alive = nodes[1].alive = False
    with pytest.raises(ExecutorLost) as caught:
        executor._eligible(tmp_path)
    assert str(caught.value).startswith("every Ray node that ran trials has left the cluster: host-a (aaaaaaaa), "
                                        "host-b (bbbbbbbb) (check the cluster with `ray status`)")


def test_a_nodes_slots_are_its_timing_slots_bounded_by_its_cpus_and_gpus(executor_on: Any) -> None:
    nodes = [_Node(A, timing=4, cpus=8), _Node(B, timing=3, cpus=0.3), _Node(C, timing=1, cpus=8, gpus=4),
             _Node(D, timing=2, cpus=8, alive=False)]
    executor = executor_on(_Cluster(nodes), trial_cpus=0.1)
    assert executor._alive() == {A: 4, B: 3, C: 1}  # 0.3 CPUs hold three trials of 0.1
    executor.trial_cpus = 0.0  # no CPU asked: the timing slots alone
    assert executor._alive() == {A: 4, B: 3, C: 1}
    executor.trial_cpus, executor.trial_gpus = 1.0, 1.0
    assert executor._alive() == {C: 1}  # four GPUs, one timing slot
    assert executor.excluded[A].startswith("it offers 0 GPUs and a trial on --device cuda needs 1")
    assert executor.excluded[B] == ("it offers 0.3 CPUs and a trial needs 1: start it with `ray start --num-cpus 1` "
                                    "or more")  # what it lacks first


def test_the_search_runs_as_many_trials_at_once_as_there_are_timing_slots_on_nodes_it_uses(executor_on: Any) -> None:
    executor = executor_on(_Cluster([_Node(A, timing=3, cpus=8), _Node(B, timing=1)]))
    assert executor.slots == 4
    executor.excluded[B] = "its hardware (epyc) differs from the other nodes' (xeon)"
    assert executor.slots == 3


def test_a_cluster_without_a_node_for_trials_is_refused_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    _Cluster([_Node(A, timing=0)]).install(monkeypatch)
    with pytest.raises(ConfigError, match=f"no live node of the Ray cluster offers the '{TIMING_RESOURCE}' resource"):
        RayExecutor("auto")
    _Cluster([_Node(A, cpus=0)]).install(monkeypatch)
    with pytest.raises(ConfigError, match=r"no node of the Ray cluster can run a trial \(aaaaaaaa: it offers 0 CPUs "
                                          "and a trial needs 1"):
        RayExecutor("auto")


def test_the_executor_is_named_by_the_cluster_it_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster([_Node(A)])
    cluster.install(monkeypatch)
    assert RayExecutor("auto").name == "ray:10.0.0.5:6379"  # joined by the caller's ray.init
    assert RayExecutor(None).name == "ray:10.0.0.5:6379"
    cluster.initialized = False
    started: list[bool] = []
    monkeypatch.setattr(trials, "check_reachable", lambda address: None)
    monkeypatch.setattr(trials, "token_auth_problem", lambda address: None)
    monkeypatch.setattr(trials, "child_pids", set)
    monkeypatch.setattr(trials, "shutdown_ray", lambda: None)

    def start_ray(init: Any, local: bool, refused: Any) -> list[int]:
        started.append(local)
        return []

    monkeypatch.setattr(trials, "start_ray", start_ray)
    assert RayExecutor(None).name == "ray" and RayExecutor("local").name == "ray"  # a new local instance
    assert RayExecutor(" 10.0.0.9:6379").name == "ray:10.0.0.9:6379"
    assert started == [True, True, False]


@pytest.mark.parametrize(("address", "said", "message"), [
    ("10.0.0.9:6379", "Failed to connect to GCS at 10.0.0.9:6379",
     "--executor ray:10.0.0.9:6379: cannot start or reach Ray: Failed to connect to GCS at 10.0.0.9:6379; check the "
     "address (ray:HOST:6379 as `ray start --head` prints it, or ray:auto for the cluster this machine joined) and "
     "that `ray start` ran there"),
    ("auto", "Could not find any running Ray instance. Please specify the one to connect to by setting `--address`",
     "--executor ray:auto: no Ray cluster is running on this machine for 'auto' to join: start one with `ray start "
     "--head`, give another's address as HOST:6379, or use --executor ray for a new local instance"),
])
def test_rays_refusal_to_start_is_said_in_dlperfs_terms(monkeypatch: pytest.MonkeyPatch, address: str, said: str,
                                                        message: str) -> None:
    _Cluster([_Node(A)], initialized=False).install(monkeypatch)
    monkeypatch.setattr(trials, "check_reachable", lambda address: None)
    monkeypatch.setattr(trials, "token_auth_problem", lambda address: None)

    def start_ray(init: Any, local: bool, refused: Any) -> list[int]:
        raise refused(ConnectionError(said))

    monkeypatch.setattr(trials, "start_ray", start_ray)
    with pytest.raises(ConfigError) as caught:
        RayExecutor(address)
    assert str(caught.value) == message
