"""Optimization trials on a Ray cluster: one timing trial per node at a time, retried elsewhere if a worker dies.

Each trial runs in a Ray worker process, which runs it as the local executor does (a child process forked from a
server with torch imported, with its timeout and memory limit), and holds the node's `dlperf_timing` resource (1
per node) while it runs, so two timing trials never share a node. Before a node gets trials it is probed: its
environment (`capture_environment` there) and whether it sees the search's work folder. Only nodes with the same
hardware as the majority, and that see the work folder, and have a CPU for a trial, get trials; the others are left
out with a note. A trial whose worker or node dies is submitted again (to another node when one is free); what was
measured already is in the store.

Ray reuses a worker for later trials, and with it the worker's process server: torch is imported once per worker, as
the local executor imports it once per search. Each trial still gets a fresh child process, so nothing of one
candidate reaches the next. A fresh worker per trial (`max_calls=1` before) started a new process server, importing
torch, for every trial.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf._files import write_text_atomic
from dlperf.errors import ConfigError, ExecutorLost, OptimizeError, require
from dlperf.optimize.executor import WORKER_DIED, WORKER_LOST, Job, PhaseFn
from dlperf.ray.address import (
    child_pids,
    cluster_address,
    init_error,
    shutdown_ray,
    start_ray,
    stop_started,
    token_auth_problem,
    unreachable_reason,
)

TIMING_RESOURCE = "dlperf_timing"
"""The custom resource a node offers once (`ray start --resources '{"dlperf_timing": 1}'`)."""
STARTUP_GRACE_S = 180.0
"""How long a trial may take to start (a Ray worker, torch imported, on a loaded node), as the local child's
STARTUP_TIMEOUT_S: not charged to the candidate, whose timeout counts from its first phase."""
TRIAL_FILES = ("json", "phase")
"""What a trial's worker writes beside its log (`ray-trial-ATTEMPT.EXT`): where it runs, the phase it reached."""
KILL_GRACE_S = 30.0
"""How long past a trial's timeout the driver waits before it cancels the trial and kills its worker: the worker
enforces the timeout itself (as the local executor does), so this only catches a worker that cannot."""
PROBE_TIMEOUT_S = 300.0
RETRYABLE = ("WorkerCrashedError", "NodeDiedError", "ActorDiedError", "LocalRayletDiedError",
             "TaskUnschedulableError", "ObjectLostError", "OwnerDiedError", "RaySystemError")
"""Ray exceptions that say the trial's process or node went away, not that the candidate failed."""


def trial_file(folder: Path, attempt: int, ext: str) -> Path:
    """One of TRIAL_FILES of a trial's attempt, beside its log."""
    return folder / f"ray-trial-{attempt}.{ext}"


def reached_phase(folder: Path, attempt: int) -> str:
    """The last phase the trial's attempt wrote ('start' before its first)."""
    with contextlib.suppress(OSError):
        return trial_file(folder, attempt, "phase").read_text().strip() or "start"
    return "start"


def _ray() -> Any:
    return require("ray", "ray")


# --- the worker side ----------------------------------------------------------------------------


def _node_identity() -> dict[str, Any]:
    ray = _ray()
    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "worker_pid": os.getpid()}


def probe_node(marker: str | None, workload_file: str | None = None) -> dict[str, Any]:
    """Runs on a node: what it is (environment, hardware key) and whether it sees the work folder and the
    workload's file."""
    from dlperf.measure.env import capture_environment

    env = capture_environment()
    return {**_node_identity(), "hardware_key": env.hardware_key, "environment": env.to_dict(),
            "sees_workdir": marker is None or Path(marker).exists(),
            "sees_workload": workload_file is None or Path(workload_file).is_file()}


def workload_file(payload: dict[str, Any]) -> str | None:
    """The file of a trial's workload (an absolute path, as the search names it) where it is one this process sees,
    else None (a zoo workload, a spec naming no file here)."""
    from dlperf.workload.loader import _split_file_spec

    source = (payload.get("settings") or {}).get("source")
    if not isinstance(source, str) or source.startswith("zoo:"):
        return None
    path = Path(_split_file_spec(source)[0])
    return str(path) if path.is_absolute() and path.is_file() else None


_server_omp: list[tuple[str | None, str | None, str]] = []
"""The OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES and working directory this worker's process server started with (empty
until a trial here started one)."""


@contextlib.contextmanager
def child_environment(omp_num_threads: str | None, cwd: str | None = None) -> Iterator[None]:
    """Sets the caller's OMP_NUM_THREADS for the trial's child: Ray caps it at the task's CPUs, and a local child
    inherits the caller's value (the process server that forks the child starts from this environment, and
    torch reads it when imported there). Ray reuses this worker for later trials, and with it the process server, so
    a server started with another value (by an earlier trial, or by other code in this worker) is stopped first, and
    the next child starts a new one. So is one started under another CUDA_VISIBLE_DEVICES: Ray sets it per task to
    the GPUs it gives the trial, and a child forked from a server of an earlier trial's ran on that trial's GPU.

    `cwd`, the caller's working directory, becomes the worker's (and so the child's) where this node has it, as a
    local child runs in the caller's: a Ray worker runs in its raylet's (where `ray start` ran), and a workload that
    opens a file relative to the folder `dlperf optimize` ran in (`open("settings.json")`) failed its baseline there
    with FileNotFoundError, though it loaded in the driver and ran with the local executor."""
    if omp_num_threads is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = omp_num_threads
    if cwd is not None and os.path.isdir(cwd):
        os.chdir(cwd)
    started = (omp_num_threads, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getcwd())
    if _server_omp != [started]:
        from dlperf.optimize.evaluate import stop_process_server

        stop_process_server()
    try:
        yield
    finally:
        _server_omp[:] = [started]


def run_trial(target: str, payload: dict[str, Any], log_path: str, attempt: int, timeout_s: float,
              memory_limit_bytes: int | None, omp_num_threads: str | None, cwd: str | None = None) -> dict[str, Any]:
    """Runs in a Ray worker: the trial exactly as the local executor runs it (`run_isolated`: a child process forked
    from a server with torch imported, its timeout and memory limit, its failure reports), plus where it ran.

    The trial ran in the Ray worker itself, whose process also holds Ray's core worker: every peak RSS came out about
    118 MiB above the local executor's (zoo:mlp's baseline: 296 MiB on Ray, 178 MiB locally), its timing loop shared
    the process with Ray's threads, and a crash of the candidate took the worker down."""
    from dlperf.measure.env import capture_environment
    from dlperf.optimize.evaluate import run_isolated

    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    # Lets an operator (or a test) see which worker process runs which trial, and then which process is the candidate.
    identity = _node_identity()
    info = {**identity, "attempt": attempt}
    where = trial_file(log.parent, attempt, "json")
    write_text_atomic(where, json.dumps(info))
    phase = trial_file(log.parent, attempt, "phase")
    started = time.monotonic()
    with child_environment(omp_num_threads, cwd):
        result = run_isolated(target, payload, log, timeout_s, memory_limit_bytes,
                              on_phase=lambda name: write_text_atomic(phase, name),
                              on_start=lambda pid: write_text_atomic(where, json.dumps({**info, "candidate_pid": pid})))
    env = capture_environment()
    result["trial_wall_s"] = time.monotonic() - started
    result["node"] = {**identity, "hardware_key": env.hardware_key}
    result["environment"] = env.to_dict()
    return result


# --- the driver side ----------------------------------------------------------------------------


def _wait(refs: list[Any], num_returns: int, timeout_s: float) -> tuple[list[Any], list[Any]]:
    """`ray.wait`, but the waiting is done here, in Python: a signal that lands inside Ray's own blocking wait comes
    out as a plain KeyboardInterrupt (Ray's signal check re-raises it), so the CLI's SIGTERM (`Terminated`) ended
    the search as Ctrl-C did (exit 130, 'interrupted'); a Python sleep lets the handler's exception through."""
    ray = _ray()
    deadline = time.monotonic() + timeout_s
    while True:
        ready, not_ready = ray.wait(refs, num_returns=num_returns, timeout=0)
        if len(ready) >= num_returns or time.monotonic() >= deadline:
            return ready, not_ready
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


@dataclass
class NodeInfo:
    node_id: str
    hostname: str
    hardware_key: str
    sees_workdir: bool
    environment: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Pending:
    job: Job
    node_id: str
    attempt: int
    first_submitted: float
    submitted: float
    errors: list[str]
    started: float | None = None
    """When the driver first saw the trial's phase file: its timeout counts from there, as a local child's from its
    first phase message (it counted from submission, plus a 120 s grace: a hung candidate ran two minutes past
    --candidate-timeout, and past the search's --time-budget)."""

    def trial_file(self, ext: str) -> Path:
        return trial_file(self.job.log_path.parent, self.attempt, ext)

    def overdue(self, now: float, startup_grace_s: float) -> bool:
        if self.started is None and self.trial_file("phase").exists():
            self.started = now
        if self.started is None:
            return now > self.submitted + startup_grace_s
        return now > self.started + self.job.timeout_s + KILL_GRACE_S


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT address, or the RAY_ADDRESS that 'auto' joins, answers TCP within `timeout_s` (ray.init retried an
    unreachable one for minutes, printing a warning every few seconds); ray:// client addresses are left to Ray."""
    reason = unreachable_reason(
        address, timeout_s,
        fix_auto=("correct RAY_ADDRESS or unset it (ray:auto then joins a cluster `ray start` started on this "
                  "machine), give ray:HOST:6379, or plain ray for a new local instance"),
        fix_address=("give the head node's address as `ray start --head` prints it (ray:HOST:6379), ray:auto for the "
                     "cluster this machine joined, or plain ray for a new local instance"))
    if reason is not None:
        raise ConfigError(f"--executor {executor_name(address)}: {reason}")


def joined_address(given: str | None) -> str:
    """The address of the cluster this process is connected to: the one given when it names one (HOST:PORT, a
    ray:// client address), else (auto, or Ray already started by the caller) the GCS address Ray joined."""
    if given and given.strip().lower() not in ("auto", "local"):
        return given.strip()
    with contextlib.suppress(Exception):
        gcs = _ray().get_runtime_context().gcs_address
        if gcs:
            return str(gcs)
    return given or "auto"


def executor_name(address: str) -> str:
    """How `--executor` names a joined cluster: 'ray:HOST:PORT', or a Ray Client address as it was given
    ('ray://HOST:PORT'; it read 'ray:ray://HOST:PORT')."""
    return address if address.lower().startswith("ray://") else f"ray:{address}"


def choose_hardware(nodes: list[NodeInfo], slots: dict[str, int], local_node: str | None) -> str:
    """The hardware class trials run on: the one with the most timing slots; ties go to this node's class,
    then to the first in name order. Timings from different hardware are never compared."""
    per_class: dict[str, int] = {}
    for node in nodes:
        per_class[node.hardware_key] = per_class.get(node.hardware_key, 0) + slots.get(node.node_id, 1)
    local_key = next((n.hardware_key for n in nodes if n.node_id == local_node), None)
    return min(per_class, key=lambda k: (-per_class[k], k != local_key, k))


class RayExecutor:
    """Trials as Ray tasks: `address` None starts a local Ray instance with one timing slot."""

    name = "ray"
    """What the run records as its executor: 'ray' for a new local instance, else 'ray:ADDRESS' with the cluster's
    address (`ray:auto` resolved to the one it joined); it was always 'ray', so a record did not say which cluster
    measured its candidates, and `--executor ray:10.0.0.5:6379` read as a local instance."""

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, max_retries: int = 2,
                 trial_cpus: float = 1.0, startup_grace_s: float = STARTUP_GRACE_S, trial_gpus: float = 0.0) -> None:
        """`trial_gpus`: the GPUs a trial asks Ray for (1 for a search on `--device cuda`), so that Ray schedules
        trials on GPU nodes, one a GPU, and sets CUDA_VISIBLE_DEVICES to it: asking for none, every trial saw every
        GPU and ran on cuda:0 together (Ray before 2.47 or so hid them all instead)."""
        ray = _ray()
        address = cluster_address(address)
        self.max_retries = max_retries
        self.startup_grace_s = startup_grace_s
        self.trial_cpus = trial_cpus
        self.trial_gpus = trial_gpus
        self._owns = False
        """Whether this executor called `ray.init` (and so disconnects, or stops its local instance, on close)."""
        self._local = False
        """Whether that started a new local instance (`address` None), rather than joining a cluster."""
        if not ray.is_initialized():
            if address:
                check_reachable(address)
                problem = token_auth_problem(address)
                if problem is not None:
                    raise ConfigError(f"--executor {executor_name(address)}: {problem}")
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}

            def init() -> None:
                if address:
                    ray.init(address=address, **kwargs)
                else:
                    # "local": a new instance, as the option says, not RAY_ADDRESS's cluster nor one `ray start` left
                    # on this machine (ray.init() joined those, then refused the timing resource given here)
                    ray.init(address="local", num_cpus=num_cpus, resources={TIMING_RESOURCE: 1}, **kwargs)

            def refused(exc: BaseException) -> Exception:
                where = executor_name(address) if address else "ray (a new local Ray instance)"
                message = init_error(exc, f"--executor {where}", "use --executor ray for a new local instance")
                if "no Ray cluster is running" not in message:
                    message += ("; check the address (ray:HOST:6379 as `ray start --head` prints it, or ray:auto for "
                                "the cluster this machine joined) and that `ray start` ran there")
                return ConfigError(message)

            before = child_pids()
            held = start_ray(init, local=not address, refused=refused)
            if held:  # Ctrl-C or SIGTERM while Ray started: stop it, then take the signal as the caller would
                try:
                    shutdown_ray()  # a whole start: Ray stops what it started (stop_started checks)
                    signal.raise_signal(held[0])
                    # the caller's handler returned (it notes the signal): there is no Ray left to run trials on
                    raise OptimizeError(f"interrupted by {signal.Signals(held[0]).name} while Ray was starting: "
                                        "the Ray executor was not made")
                except BaseException:
                    stop_started(before)
                    raise
            self._owns = True
            self._local = not address
        # a joined cluster is named by its address, 'auto' resolved (`ray:auto` was recorded as a local instance's)
        self.name = "ray" if self._local else executor_name(joined_address(address))
        # our own loop does the retries; Ray reuses a worker for later trials (each trial forks a fresh child)
        self._trial = ray.remote(max_retries=0, num_cpus=trial_cpus, num_gpus=trial_gpus,
                                 resources={TIMING_RESOURCE: 1})(run_trial)
        self._probe = ray.remote(max_retries=0, num_cpus=0)(probe_node)
        self.nodes: dict[str, NodeInfo] = {}
        self.excluded: dict[str, str] = {}
        self.hardware_key: str | None = None
        self._notes: list[str] = []
        self._in_flight: dict[str, int] = {}
        self._turn = 0
        self._last_eligible: dict[str, int] = {}
        self._markers: dict[Path, Path] = {}
        self._workload_file: str | None = None
        """The workload's file, which a node must see to take trials (set from the first trial's payload)."""
        self._ran: dict[str, dict[str, Any]] = {}
        """node id -> its host name, the trials that ended there and how many of them were retries."""
        self._omp = os.environ.get("OMP_NUM_THREADS")
        self._cwd = os.getcwd()
        try:
            self._check_nodes()
        except BaseException:
            self.close()
            raise

    def _check_nodes(self) -> None:
        """Refuse, before the search opens its run, a cluster where no node can take a trial."""
        if self._alive():
            return
        if not self.excluded:
            raise ConfigError(f"no live node of the Ray cluster offers the '{TIMING_RESOURCE}' resource: start "
                              f"each node with `ray start --resources '{{\"{TIMING_RESOURCE}\": 1}}'`")
        reasons = "; ".join(f"{n[:8]}: {why}" for n, why in self.excluded.items())
        raise ConfigError(f"no node of the Ray cluster can run a trial ({reasons})")

    # --- nodes --------------------------------------------------------------------------------

    def _alive(self) -> dict[str, int]:
        """node id -> the trials it can hold at once, for live nodes that offer the timing resource: its timing slots,
        bounded by its CPUs over a trial's. A node whose CPUs cannot hold one trial is left out with a note (its trials
        were unschedulable: 'the Ray worker or node running the trial died', three times)."""
        out = {}
        for node in _ray().nodes():
            resources = node.get("Resources", {})
            slots = int(resources.get(TIMING_RESOURCE, 0))
            if not node.get("Alive") or slots < 1:
                continue
            cpus, gpus = float(resources.get("CPU", 0.0)), float(resources.get("GPU", 0.0))
            short = None
            if self.trial_cpus > 0:
                slots = min(slots, int(cpus / self.trial_cpus + 1e-9))
                if slots < 1:
                    short = (f"it offers {cpus:g} CPUs and a trial needs {self.trial_cpus:g}: start it with `ray start "
                             f"--num-cpus {math.ceil(self.trial_cpus)}` or more")
            if self.trial_gpus > 0 and short is None:
                slots = min(slots, int(gpus / self.trial_gpus + 1e-9))
                if slots < 1:
                    short = (f"it offers {gpus:g} GPUs and a trial on --device cuda needs {self.trial_gpus:g}: run the "
                             "search's trials on nodes with a GPU (`ray start` finds them; --num-gpus sets the count)")
            node_id = node["NodeID"]
            if slots < 1:
                if node_id not in self.excluded:
                    self.excluded[node_id] = short or "it can hold no trial"
                    self._notes.append(f"Ray node {node.get('NodeManagerHostname', '?')} ({node_id[:8]}) left out: "
                                       f"{self.excluded[node_id]}")
                continue
            out[node_id] = slots
        return out

    @property
    def slots(self) -> int:
        alive = self._alive()
        return max(1, sum(s for n, s in alive.items() if n not in self.excluded))

    def _marker(self, shared_dir: Path) -> Path:
        marker = self._markers.get(shared_dir)
        if marker is None:
            shared_dir.mkdir(parents=True, exist_ok=True)
            marker = shared_dir / f".dlperf-ray-{uuid.uuid4().hex[:12]}"
            marker.write_text("a Ray node that sees this file shares the search's work folder\n")
            self._markers[shared_dir] = marker
        return marker

    def _eligible(self, shared_dir: Path) -> dict[str, int]:
        """Live nodes that may run trials (probing new ones first): node id -> slots."""
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = self._alive()
        if not alive and self.nodes:
            raise ExecutorLost(self._all_nodes_lost())
        if not alive and not self.excluded:
            raise OptimizeError(f"no live node of the Ray cluster offers the '{TIMING_RESOURCE}' resource: start "
                                f"each node with `ray start --resources '{{\"{TIMING_RESOURCE}\": 1}}'`")
        new = [n for n in alive if n not in self.nodes and n not in self.excluded]
        if new:
            marker = str(self._marker(shared_dir))
            refs = {self._probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
                    .remote(marker, self._workload_file): n for n in new}
            ready, not_ready = _wait(list(refs), len(refs), PROBE_TIMEOUT_S)
            for ref in not_ready:
                ray.cancel(ref, force=True)
                self.excluded[refs[ref]] = "did not answer the probe in time"
            for ref in ready:
                try:
                    info = ray.get(ref)
                except Exception as exc:  # a node that fails its probe is left out, not fatal
                    self.excluded[refs[ref]] = f"its probe failed: {type(exc).__name__}"
                    continue
                node = NodeInfo(info["node_id"], info["hostname"], info["hardware_key"], info["sees_workdir"],
                                info["environment"])
                if not node.sees_workdir:
                    self.excluded[node.node_id] = (f"it cannot see the work folder {shared_dir}: put --workdir on "
                                                   "a file system every node mounts at the same path")
                    self._notes.append(f"Ray node {node.hostname} ({node.node_id[:8]}) left out: "
                                       f"{self.excluded[node.node_id]}")
                    continue
                if not info.get("sees_workload", True):
                    # it failed the trial it got ("workload file ... does not exist, on Ray node ..."), and with it
                    # the whole search when that was the baseline, though another node could run every trial
                    self.excluded[node.node_id] = (f"it cannot see the workload file {self._workload_file}: put it "
                                                   "on a file system every node mounts at the same path")
                    self._notes.append(f"Ray node {node.hostname} ({node.node_id[:8]}) left out: "
                                       f"{self.excluded[node.node_id]}")
                    continue
                self.nodes[node.node_id] = node
            if self.hardware_key is None and self.nodes:
                local = ray.get_runtime_context().get_node_id()
                self.hardware_key = choose_hardware(list(self.nodes.values()), alive, local)
            for node in list(self.nodes.values()):
                if node.hardware_key != self.hardware_key and node.node_id not in self.excluded:
                    self.excluded[node.node_id] = (f"its hardware ({node.hardware_key}) differs from the "
                                                   f"other nodes' ({self.hardware_key})")
                    self._notes.append(f"Ray node {node.hostname} ({node.node_id[:8]}) left out: "
                                       f"{self.excluded[node.node_id]}; timings are only compared on "
                                       "identical hardware")
        eligible = {n: s for n, s in alive.items() if n in self.nodes and n not in self.excluded}
        self._last_eligible = eligible
        if not eligible and any(n not in self.excluded for n in self.nodes):
            # the nodes that took trials are gone, though nodes left out (other hardware, no work folder) remain
            raise ExecutorLost(self._all_nodes_lost())
        if not eligible:
            reasons = "; ".join(f"{n[:8]}: {why}" for n, why in self.excluded.items())
            raise OptimizeError(f"no Ray node can run trials ({reasons or 'none probed'})")
        return eligible

    def _all_nodes_lost(self) -> str:
        """Every node that took trials has left (or died). It said "no live node of the Ray cluster offers the
        'dlperf_timing' resource: start each node with `ray start --resources ...`": on a local instance whose
        raylet died mid-trial, a fix for a setup that was never wrong."""
        names = ", ".join(f"{n.hostname} ({n.node_id[:8]})" for n in self.nodes.values()
                          if n.node_id not in self.excluded)  # not those left out, which may still be there
        # a joined cluster's ('ray:auto' said "the local Ray instance this command started lost its node")
        where = ("the local Ray instance this command started lost its node" if self._local
                 else "every Ray node that ran trials has left the cluster")
        check = ("(its raylet died: killed, or out of memory)" if self._local
                 else "(check the cluster with `ray status`)")
        return (f"{where}: {names} {check}; the candidates measured so far are in the store with this failed run, "
                "and the same dlperf optimize command resumes it (or --resume RUN_ID)")

    def _has_free_slot(self) -> bool:
        return any(self._in_flight.get(n, 0) < s for n, s in self._last_eligible.items())

    def _free_node(self, shared_dir: Path, avoid: str | None = None) -> str | None:
        eligible = self._eligible(shared_dir)
        free = [n for n in sorted(eligible) if self._in_flight.get(n, 0) < eligible[n]]
        if not free:
            return None
        preferred = [n for n in free if n != avoid]
        if not preferred:
            if any(n != avoid for n in eligible):
                # A retry waits for another node rather than going back to the one its trial just died on,
                # which may be leaving (Ray can still list it as alive for a few seconds).
                return None
            preferred = free
        # Least busy first, then in turn, so that even one trial at a time visits every node.
        self._turn += 1
        return min(preferred, key=lambda n: (self._in_flight.get(n, 0),
                                             (preferred.index(n) - self._turn) % len(preferred)))

    # --- trials -------------------------------------------------------------------------------

    def _submit(self, job: Job, node: str, attempt: int, first: float, errors: list[str]) -> tuple[Any, _Pending]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pending = _Pending(job, node, attempt, first, time.monotonic(), errors)
        for ext in TRIAL_FILES:  # an earlier trial's in the same folder (the candidate's, before its confirmation)
            with contextlib.suppress(OSError):
                pending.trial_file(ext).unlink()
        ref = self._trial.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
            job.target, job.payload, str(job.log_path), attempt, job.timeout_s, job.memory_limit_bytes, self._omp,
            self._cwd)
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        return ref, pending

    def run(self, target: str, payload: dict[str, Any], log_path: Path, timeout_s: float,
            memory_limit_bytes: int | None = None, on_phase: PhaseFn | None = None) -> dict[str, Any]:
        job = Job(target, payload, Path(log_path), timeout_s, memory_limit_bytes)
        for _, result in self.map([job]):
            return result
        raise OptimizeError("the Ray executor returned no result")  # unreachable: map yields once per job

    def map(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, dict[str, Any]]]:
        """Submit jobs while timing slots are free; yield (job, result) as trials complete."""
        ray = _ray()
        source = iter(jobs)
        pending: dict[Any, _Pending] = {}
        waiting: list[tuple[Job, int, float, list[str], str | None]] = []
        exhausted = False
        try:
            while True:
                while True:  # fill the free slots: retries first, then new jobs
                    if waiting:
                        job, attempt, first, errors, avoid = waiting[0]
                        node = self._free_node(job.log_path.parent.parent, avoid)
                        if node is None:
                            break
                        waiting.pop(0)
                    elif not exhausted and (not pending or self._has_free_slot()):
                        next_job = next(source, None)
                        if next_job is None:
                            exhausted = True
                            break
                        job, attempt, first, errors = next_job, 1, time.monotonic(), []
                        if self._workload_file is None:
                            self._workload_file = workload_file(job.payload)
                        node = self._free_node(job.log_path.parent.parent)
                        if node is None:
                            waiting.insert(0, (job, attempt, first, errors, None))
                            break
                    else:
                        break
                    ref, entry = self._submit(job, node, attempt, first, errors)
                    pending[ref] = entry
                if not pending:
                    if exhausted and not waiting:
                        return
                    time.sleep(0.5)  # no eligible node is free yet
                    continue
                ready, _ = _wait(list(pending), 1, 0.5)
                now = time.monotonic()
                for ref in [r for r, p in pending.items() if r not in ready and p.overdue(now, self.startup_grace_s)]:
                    p = pending.pop(ref)
                    self._in_flight[p.node_id] -= 1
                    ray.cancel(ref, force=True)
                    if p.started is None:
                        what, phase = f"did not start within {self.startup_grace_s:.0f} s", "start"
                    else:
                        phase = reached_phase(p.job.log_path.parent, p.attempt)
                        what = f"timed out after {p.job.timeout_s + KILL_GRACE_S:.0f} s during '{phase}'"
                    yield p.job, self._finish(p, {"status": "failed", "phase": phase, "timed_out": True,
                                                  "error": f"{what} on Ray node {p.node_id[:8]} (killed)"})
                for ref in ready:
                    p = pending.pop(ref)
                    self._in_flight[p.node_id] -= 1
                    result = self._collect(ref, p, waiting)
                    if result is not None:
                        yield p.job, result
        except BaseException:
            # Ctrl-C, or the caller stopped iterating: stop the trials still running.
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise

    def _collect(self, ref: Any, p: _Pending, waiting: list[Any]) -> dict[str, Any] | None:
        """The trial's result; None when it was queued again because its worker or node died."""
        ray = _ray()
        try:
            result: dict[str, Any] = ray.get(ref)
        except Exception as exc:
            kind = type(exc).__name__
            retryable = isinstance(exc, tuple(getattr(ray.exceptions, n) for n in RETRYABLE
                                              if hasattr(ray.exceptions, n)))
            message = f"{kind} on Ray node {p.node_id[:8]}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if retryable and p.attempt <= self.max_retries:
                waiting.append((p.job, p.attempt + 1, p.first_submitted, [*p.errors, message], p.node_id))
                return None
            what = WORKER_DIED if retryable else "the trial raised"
            return self._finish(p, {"status": "failed", "phase": "unknown", WORKER_LOST: retryable,
                                    "error": f"{what} ({message}), after {p.attempt} attempt(s)"})
        return self._finish(p, result)

    def _finish(self, p: _Pending, result: dict[str, Any]) -> dict[str, Any]:
        result["wall_s"] = time.monotonic() - p.first_submitted
        result["executor"] = "ray"
        result["attempts"] = p.attempt
        if p.errors:
            result["retried_after"] = p.errors
        result.setdefault("log", str(p.job.log_path))
        error = result.get("error")
        if result.get("status") != "ok" and isinstance(error, str) and "Ray node" not in error:
            # the local executor's report, plus where it happened: on its first line, before a traceback's frames (it
            # ended the user's source line: 'SCALE = json.load(open("settings.json")), on Ray node 38e77748') and
            # the log's tail, which can be long
            head, sep, tail = error.partition("; log: ")
            first, newline, frames = head.partition("\n")
            result["error"] = f"{first}, on Ray node {p.node_id[:8]}{newline}{frames}{sep}{tail}"
        node = result.get("node") or {"node_id": p.node_id}
        result["node"] = node
        where = self._ran.setdefault(p.node_id, {"host": node.get("hostname") or "?", "trials": 0, "retried": 0})
        where["trials"] += 1
        where["retried"] += p.attempt > 1
        if node.get("hardware_key") and self.hardware_key and node["hardware_key"] != self.hardware_key:
            warning = (f"measured on hardware {node['hardware_key']}, the other candidates on {self.hardware_key}: "
                       "its timings are not comparable")
            result["hardware_warning"] = warning
            self._notes.append(f"{p.job.log_path.parent.name}: {warning}")
        return result

    def notes(self) -> list[str]:
        """Nodes left out and results from other hardware, then where the trials ran (the terminal said nothing of
        Ray beyond Ray's own start-up lines; each result's `node` has it in full)."""
        return list(dict.fromkeys(self._notes)) + ([self._where_note()] if self._ran else [])

    def _where_note(self) -> str:
        total = sum(w["trials"] for w in self._ran.values())
        retried = sum(w["retried"] for w in self._ran.values())
        nodes = [f"{w['host']} ({n[:8]})" + (f" {w['trials']}" if len(self._ran) > 1 else "")
                 for n, w in sorted(self._ran.items(), key=lambda item: (-item[1]["trials"], item[0]))]
        where = (f"Ray node {nodes[0]}" if len(nodes) == 1 else f"{len(nodes)} Ray nodes: {', '.join(nodes)}")
        again = (f", {retried} of them again after their worker or node died" if retried else "")
        return f"ran {total} trial{'s' * (total != 1)} on {where}{again}"

    def describe(self) -> dict[str, Any]:
        """The nodes in use and those left out (for reports and tests)."""
        return {"hardware_key": self.hardware_key,
                "nodes": {n: {"hostname": i.hostname, "hardware_key": i.hardware_key} for n, i in self.nodes.items()},
                "excluded": dict(self.excluded)}

    def close(self) -> None:
        for marker in self._markers.values():
            with contextlib.suppress(OSError):
                marker.unlink()
        self._markers.clear()
        if self._owns:
            shutdown_ray()
            self._owns = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["TIMING_RESOURCE", "NodeInfo", "RayExecutor", "check_reachable", "choose_hardware", "executor_name",
           "probe_node", "run_trial"]
