"""Where candidate trials run: `LocalExecutor` (a child process here, one at a time) or a Ray cluster.

The search hands an executor a target ('evaluate', 'confirm' or 'versus'), a plain-data payload and a log
path, and gets back the same result dict `run_isolated` returns, wherever the trial ran. `map` takes a lazy
iterable of jobs and yields results as they complete; it pulls the next job only when a slot is free, so
with one slot (local) it behaves exactly like calling `run` in a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dlperf.errors import ConfigError

PhaseFn = Callable[[str], None]

WORKER_LOST = "worker_lost"
"""The key a failed result carries (True) when the failure was the executor's, not the candidate's: the process or
node running the trial went away on every attempt (a Ray node that died). A resumed search measures such a
candidate again instead of reusing it as failed."""
WORKER_DIED = "the Ray worker or node running the trial died"
"""How such a failure's error begins (rows stored before the `worker_lost` flag are known by it)."""


@dataclass(frozen=True)
class Job:
    """One trial: `target` ('evaluate', 'confirm' or 'versus') on `payload`, its output in `log_path`; `tag`
    is the caller's, returned with the result."""

    target: str
    payload: dict[str, Any]
    log_path: Path
    timeout_s: float
    memory_limit_bytes: int | None = None
    tag: Any = None


class Executor(Protocol):
    """Runs trials and returns `run_isolated`-shaped result dicts (status, error, latency ...)."""

    name: str

    @property
    def slots(self) -> int:
        """How many trials may run at once (timing trials: one per node)."""

    def run(self, target: str, payload: dict[str, Any], log_path: Path, timeout_s: float,
            memory_limit_bytes: int | None = None, on_phase: PhaseFn | None = None) -> dict[str, Any]: ...

    def map(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, dict[str, Any]]]: ...

    def notes(self) -> list[str]:
        """What the user should know about where the trials ran (e.g. nodes left out, mixed hardware)."""

    def close(self) -> None: ...


class LocalExecutor:
    """Today's behaviour: each trial in a fresh child process of this one (`run_isolated`), one at a time."""

    name = "local"

    @property
    def slots(self) -> int:
        return 1

    def run(self, target: str, payload: dict[str, Any], log_path: Path, timeout_s: float,
            memory_limit_bytes: int | None = None, on_phase: PhaseFn | None = None) -> dict[str, Any]:
        from dlperf.optimize.evaluate import run_isolated

        return run_isolated(target, payload, log_path, timeout_s, memory_limit_bytes, on_phase=on_phase)

    def map(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, dict[str, Any]]]:
        for job in jobs:
            yield job, self.run(job.target, job.payload, job.log_path, job.timeout_s, job.memory_limit_bytes)

    def notes(self) -> list[str]:
        return []

    def close(self) -> None:
        return None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_executor(spec: str) -> tuple[str, str | None]:
    """'local' -> ('local', None); 'ray' -> ('ray', None); 'ray:ADDRESS' -> ('ray', ADDRESS); a Ray client address
    'ray://HOST:PORT' -> ('ray', 'ray://HOST:PORT') (it was read as 'ray:' and the host '//HOST', "Name or service
    not known"). A HOST:PORT whose port is not a port is refused here (Ray's message rewrote the host)."""
    text = spec.strip()
    if text.lower().startswith("ray://"):
        return "ray", text
    kind, sep, address = text.partition(":")
    kind = kind.lower()
    if kind == "local" and not sep:
        return "local", None
    if kind == "ray":
        if sep and not address:
            raise ConfigError("--executor ray: give an address after the colon (ray:HOST:PORT, ray:auto) "
                              "or none for a local Ray instance")
        from dlperf.ray.address import address_shape_problem

        problem = address_shape_problem(address) if address else None
        if problem is not None:
            raise ConfigError(f"--executor {spec}: {problem}")
        host, colon, port = address.rpartition(":")
        if colon and host and not address.lower().startswith("ray://") and not (port.isdigit()
                                                                               and 0 < int(port) < 65536):
            raise ConfigError(f"--executor {spec}: '{port}' is not a port: give ray:HOST:PORT as `ray start --head` "
                              "prints it (port 6379 by default)")
        return "ray", address or None
    raise ConfigError(f"unknown executor '{spec}': use local, ray (a local Ray instance) or ray:ADDRESS")


def executor_from_spec(spec: str, device: str = "cpu") -> Executor:
    """The executor `--executor` names; Ray is imported only for 'ray'. On Ray, a trial on a CUDA `device` asks for
    a GPU (a Ray task that asks for none sees none)."""
    kind, address = parse_executor(spec)
    if kind == "local":
        return LocalExecutor()
    from dlperf.ray.trials import RayExecutor

    return RayExecutor(address, trial_gpus=1.0 if device.startswith("cuda") else 0.0)


__all__ = ["Executor", "Job", "LocalExecutor", "executor_from_spec", "parse_executor"]
