"""Other load on this machine while a level runs, for a server on this machine (a loopback URL).

A load level against a local server shares the cores with whatever else runs: a small transformer served at
concurrency 8 answered 103 req/s beside a `dlperf optimize` run and two package installs, and 1986 req/s a few
minutes later without them, and both outputs read alike. Here the machine's busy CPU time over the level (its
warm-up included) is split into the server's (the process listening on the URL's port and its children), this
generator's, and the rest's; `LevelLoad` keeps the three, and its `warning` says so where the rest kept half a
core busy or more, as `dlperf bench` does of its own measurement (`measure.bench.CONTENTION_PERCENT`). Behind Ray
Serve (`dlperf serve --ray`) the process listening is Ray's HTTP proxy, and the replicas that run the model are its
siblings under the raylet, not its children: they count as the server's too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

OTHER_CORES_WARNING = 0.5
"""Other processes keeping this many cores busy on average while a level measures get a warning (bench's 50%)."""
RAY_SERVE_PREFIX = "ray::Serve"
"""How Ray names the processes of Ray Serve's replicas (`ray::ServeReplica:APP:DEPLOYMENT`) and its controller."""


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine: localhost or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listening_pid(port: int) -> int | None:
    """The process listening on TCP `port` of this machine, None where there is none this user may see (another
    user's process, a platform psutil cannot list sockets on)."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError, NotImplementedError):
        return None
    for c in connections:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return int(c.pid)
    return None


def server_pids(pid: int) -> list[int]:
    """The server's processes: the one listening (`pid`) and, where it is Ray Serve's proxy (a Ray worker, named
    `ray::ProxyActor`), Ray Serve's replicas and controller beside it under the same raylet on this machine. Their CPU
    was "other processes" kept busy: `dlperf load` against `dlperf serve --ray --replicas 2` on 2 cores warned of
    other load (1.3 cores, about 0.5 of it the replicas') and said to measure again when the machine is quiet."""
    try:
        listener = psutil.Process(pid)
        if not listener.name().startswith("ray::"):
            return [pid]
        parent = listener.parent()
        siblings = parent.children() if parent is not None else []
    except psutil.Error:
        return [pid]
    found = [pid]
    for p in siblings:
        with contextlib.suppress(psutil.Error):
            if p.pid != pid and p.name().startswith(RAY_SERVE_PREFIX):
                found.append(p.pid)
    return found


def _tree_cpu_s(pid: int, root_own: bool = True) -> float | None:
    """CPU seconds of the process `pid` and its descendants, those already reaped included (their time is in their
    parent's children_* fields); without `root_own`, the root's own time is left out (its descendants' only). None
    when the process is gone or cannot be read."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:  # a child that ended since the listing: its time is in its parent's once reaped
            continue
        if p is not root or root_own:
            total += t.user + t.system
        total += getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


def _machine_busy_s() -> float:
    """CPU seconds the machine's cores have been busy since boot, all cores together (not idle, waiting for I/O, or
    taken by the hypervisor)."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0) + getattr(t, "steal", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # guest time is in user already


@dataclass
class LevelLoad:
    """The machine's cores over one level: on average how many the server, this generator and everything else kept
    busy (cores, 1.0 = one core the whole level)."""

    cores: int
    server_cores: float
    generator_cores: float
    other_cores: float
    server_pid: int
    server_name: str = ""
    in_process: bool = False
    """The server runs in this generator's process (a library call beside `serve.server.start_in_thread`): the
    process's CPU is `generator_cores`, server and generator together, and `server_cores` its children's."""
    server_peers: int = 0
    """Ray Serve's processes beside the listening proxy (replicas, controller) counted in `server_cores`."""

    @property
    def warning(self) -> str | None:
        if self.other_cores < OTHER_CORES_WARNING:
            return None
        name = f", {self.server_name}" if self.server_name else ""
        ours = (f"the server and this generator, one process (PID {self.server_pid}{name}): "
                f"{self.generator_cores + self.server_cores:.1f}" if self.in_process else
                f"the server (PID {self.server_pid}{name}) with its children{self._peers()}: {self.server_cores:.1f}; "
                f"this generator: {self.generator_cores:.1f}")
        return (f"other processes (besides the server and this generator) kept {self.other_cores:.1f} of the "
                f"machine's {self.cores} cores busy while the level ran ({ours}): the server's figures are slower "
                "and noisier than on a quiet machine; measure again when it is quiet")

    def _peers(self) -> str:
        if not self.server_peers:
            return ""
        plural = "es" if self.server_peers > 1 else ""
        return f" and {self.server_peers} Ray Serve process{plural} (replicas, controller)"

    def to_dict(self) -> dict[str, Any]:
        return {"cores": self.cores, "server_cores": self.server_cores, "generator_cores": self.generator_cores,
                "other_cores": self.other_cores, "server_pid": self.server_pid, "server_name": self.server_name,
                "in_process": self.in_process, "server_peers": self.server_peers}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelLoad:
        return cls(int(data["cores"]), float(data["server_cores"]), float(data["generator_cores"]),
                   float(data["other_cores"]), int(data["server_pid"]), str(data.get("server_name", "")),
                   bool(data.get("in_process", False)), int(data.get("server_peers", 0)))


class LevelMeter:
    """Reads the machine's, this process's and the server's CPU time at `start` and `stop`; `stop` returns the
    level's `LevelLoad`, None where the server is not a process of this machine this user can read.

    `start` finds the server's process and takes the first reading in a thread of its own: the lookup scans every
    process's sockets (12 ms here, far more on a busy machine with many), and taken on the event loop it delayed
    the level's first requests (a test whose server opened a gate 0.8 s after the level began saw the warm-up end
    later, and no backlog in the windows)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.pid: int | None = None
        self.pids: list[int] = []
        self._start: tuple[float, float, float, dict[int, float], float] | None = None
        self._thread: threading.Thread | None = None

    def _read(self) -> tuple[float, float, float, dict[int, float], float] | None:
        """(clock, machine busy, this process's CPU, each server process's tree CPU, clock): the level's wall time is
        taken from the first reading's first clock to the last reading's last, so that it spans every figure read
        between them. With the clock read once, after the server's figures, a reading held up between the two (this
        thread waiting for the GIL beside a busy main thread) gave a wall shorter than the figures' span: a server in
        this process read 4.2 of 2 cores."""
        if self.pid is None:
            return None
        first = time.perf_counter()
        # a server in this process: its own time is `own` below, read from the same clock as the generator's
        here = os.getpid()
        server = {p: t for p in self.pids if (t := _tree_cpu_s(p, root_own=p != here)) is not None}
        if self.pid not in server:
            return None
        return first, _machine_busy_s(), time.process_time(), server, time.perf_counter()

    def _begin(self) -> None:
        self.pid = listening_pid(self.port)
        self.pids = server_pids(self.pid) if self.pid is not None else []
        self._start = self._read()

    def start(self) -> None:
        if is_loopback(self.host):
            self._thread = threading.Thread(target=self._begin, name="dlperf-level-meter", daemon=True)
            self._thread.start()

    def stop(self) -> LevelLoad | None:
        if self._thread is None:
            return None
        self._thread.join(timeout=10.0)
        if self._thread.is_alive():  # a lookup that hung (a machine thrashing): no figures rather than a wait
            return None
        end = self._read()
        if self._start is None or end is None or self.pid is None or end[4] <= self._start[0]:
            return None
        wall = end[4] - self._start[0]
        machine, own = ((e - s) / wall for e, s in zip(end[1:3], self._start[1:3], strict=True))
        # a peer that ended during the level (a replica scaled down) is left out: its time went to the raylet's
        server = sum(end[3][p] - t for p, t in self._start[3].items() if p in end[3]) / wall
        # a server in this process: its tree was read without the process's own time, which is `own` (counted once)
        in_process = self.pid == os.getpid()
        try:
            name = psutil.Process(self.pid).name()
        except psutil.Error:
            name = ""
        return LevelLoad(cores=psutil.cpu_count() or 1, server_cores=server, generator_cores=own,
                         other_cores=max(0.0, machine - own - server), server_pid=self.pid, server_name=name,
                         in_process=in_process, server_peers=len(self.pids) - 1)
