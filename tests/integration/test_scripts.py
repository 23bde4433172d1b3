"""scripts/gpu-check run on this machine with a stand-in interpreter that claims a GPU, so its handling of the
GPU tests' time limit is checked without one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# `-c CODE`: the CUDA check and the GPU's name (a GPU is here); `-m pytest ...`: a test run that overruns its
# limit, which prints its report when stopped as by Ctrl-C
if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then
  sleep 60 >/dev/null 2>&1 &
  trap 'kill $!; echo "slowest 8 durations (report of the stopped run)"; exit 2' INT
  wait $!
  exit 0
fi
exit 0
"""


def test_gpu_check_stops_overrunning_gpu_tests_so_that_pytest_still_reports(tmp_path: Path) -> None:
    """The --durations report was added to show which GPU tests overran the limit, but `timeout` ended pytest with
    SIGTERM, which prints nothing: pytest is now interrupted as by Ctrl-C, and prints its report."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "DLPERF_GPU_TESTS_S": "1"}
    done = subprocess.run([str(ROOT / "scripts" / "gpu-check")], env=env, capture_output=True, text=True,
                          timeout=50)
    assert done.returncode == 124, (done.stdout, done.stderr)  # the limit still fails the check
    assert "slowest 8 durations (report of the stopped run)" in done.stdout
    assert "dlperf bench" not in done.stdout  # nothing after the failed step
