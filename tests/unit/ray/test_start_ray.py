"""`start_ray`: what a failed `ray.init` turns into (Ray's refusal in dlperf's terms, a held signal first, Ray's own
SIGTERM exit), what it stops of what it started, and the notice it drops for a new local instance."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from dlperf.errors import ConfigError
from dlperf.ray.address import TOKEN_AUTH_LOGGER, _freeze_and_kill_new, child_pids, start_ray

pytestmark = pytest.mark.unit


class _Terminated(Exception):
    """What the CLI's SIGTERM handler raises."""


@pytest.fixture
def cli_sigterm_handler() -> Iterator[None]:
    def terminated(signum: int, frame: Any) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _refused(exc: BaseException) -> Exception:
    return ConfigError(f"--executor ray: cannot start or reach Ray: {exc}")


@pytest.mark.parametrize("raised", [ConnectionError("GCS gone"), RuntimeError("raylet died"),
                                    ValueError("object store below Ray's minimum")], ids=lambda e: type(e).__name__)
def test_rays_refusal_becomes_the_callers_error(raised: Exception) -> None:
    def init() -> None:
        raise raised

    with pytest.raises(ConfigError, match=f"cannot start or reach Ray: {raised}"):
        start_ray(init, local=False, refused=_refused)


def test_rays_own_sigterm_exit_goes_to_the_callers_handler_and_another_exit_passes(cli_sigterm_handler: None) -> None:
    def exits(code: int) -> Any:
        def init() -> None:
            raise SystemExit(code)  # Ray's handler, set past the hold, exits with the signal's number
        return init

    with pytest.raises(_Terminated):
        start_ray(exits(signal.SIGTERM), local=False, refused=_refused)
    with pytest.raises(SystemExit) as caught:
        start_ray(exits(3), local=False, refused=_refused)
    assert caught.value.code == 3


@pytest.mark.parametrize("local", [True, False])
def test_the_token_authentication_notice_is_dropped_for_a_new_local_instance_only(
        caplog: pytest.LogCaptureFixture, local: bool) -> None:
    notice = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out."
    with caplog.at_level(logging.INFO, logger=TOKEN_AUTH_LOGGER):
        start_ray(lambda: logging.getLogger(TOKEN_AUTH_LOGGER).info(notice), local=local, refused=_refused)
    assert [r.getMessage() for r in caplog.records] == ([] if local else [notice])


SIGTERM_WHILE_IT_FAILS = """
import os, signal, time
from dlperf.ray.address import start_ray

class Terminated(Exception):
    pass

def terminated(signum, frame):
    raise Terminated

def init():
    os.kill(os.getpid(), signal.SIGTERM)  # held while ray.init runs
    time.sleep(0.2)
    raise ConnectionError("Failed to connect to GCS")

signal.signal(signal.SIGTERM, terminated)
try:
    start_ray(init, local=False, refused=lambda exc: RuntimeError(f"refused: {exc}"))
except Terminated:
    print("terminated")
except RuntimeError as exc:
    print(exc)
"""


def test_a_signal_held_while_ray_fails_to_start_comes_before_rays_error() -> None:
    """A command stopped while Ray failed ends as interrupted (143), not with Ray's error (exit 2)."""
    done = subprocess.run([sys.executable, "-c", SIGTERM_WHILE_IT_FAILS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "terminated", done.stdout


def test_what_ray_started_is_stopped_and_what_was_there_before_is_kept() -> None:
    earlier = subprocess.Popen(["sleep", "60"])
    try:
        before = child_pids()
        started = subprocess.Popen(["sleep", "60"])  # as Ray's GCS, started by a failed ray.init
        _freeze_and_kill_new(before)  # killed and reaped: gone when it returns
        assert not psutil.pid_exists(started.pid)
        assert earlier.poll() is None and psutil.Process(earlier.pid).status() != psutil.STATUS_ZOMBIE
    finally:
        earlier.kill()
        earlier.wait()
