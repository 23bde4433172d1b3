"""`dlperf optimize --executor ray:ADDRESS` run for its refusal of an address that is not a Ray cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def refusal_line(address: str, tmp_path: Path) -> str:
    """The one line `dlperf optimize zoo:mlp --executor ray:ADDRESS` exits 2 with, without a traceback or Ray's retries
    ('Connecting to existing Ray cluster', then minutes of 'Failed to connect to GCS')."""
    done = subprocess.run([sys.executable, "-m", "dlperf.cli.main", "optimize", "zoo:mlp", "--executor",
                           f"ray:{address}", "--store", str(tmp_path / "runs.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Connecting to existing Ray cluster" not in done.stderr
    return lines[0]
