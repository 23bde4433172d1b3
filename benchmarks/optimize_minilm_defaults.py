"""Benchmark: `dlperf optimize zoo:minilm` with its defaults: wall time against the default budget, peak memory.

Runs the command exactly as a user would (defaults: latency objective, 1% metric budget, 10 min time
budget, every pass), in a fresh store and work folder, as a child process. Wall time is the command's,
from start to exit (Python and torch imports included). Memory is sampled every 0.25 s over the command
and all its descendants (the process server and each candidate): PSS (shared pages split between the
processes that map them) and the sum of RSS (shared pages counted once per process: an upper bound).
Target: within the default time budget, and under 4 GiB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optimize_common as common

DEFAULT_BUDGET_S = 600.0
MEMORY_LIMIT_GIB = 4.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="zoo:minilm")
    parser.add_argument("--tail", type=int, default=60, help="lines of the command's report to print")
    args = parser.parse_args()
    dlperf = Path(sys.executable).with_name("dlperf")
    with tempfile.TemporaryDirectory(prefix="dlperf-bench-") as tmp:
        cmd = [str(dlperf), "optimize", args.workload, "--no-resume", "--store", str(Path(tmp) / "runs.db"),
               "--workdir", str(Path(tmp) / "work"), "--export", str(Path(tmp) / "export")]
        print(f"dlperf benchmark: {' '.join(cmd[:3])} with its defaults (fresh store and work folder)", flush=True)
        start = time.perf_counter()
        with open(Path(tmp) / "stdout.txt", "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "150"})
            memory = common.TreeMemory(proc.pid)
            with memory.sampling():
                code = proc.wait()
        wall_s = time.perf_counter() - start
        report = (Path(tmp) / "stdout.txt").read_text(errors="replace").splitlines()
    lines = [line for line in report if not line.startswith(("Failed to load", "W1201", "W1202"))]
    print("\n".join(lines[-args.tail:]))
    print(f"\nexit code {code}")
    within = wall_s <= DEFAULT_BUDGET_S
    print(f"{'':<16}{'measured':<52}{'target':<14}")
    print(f"{'wall time':<16}{f'{wall_s:.0f} s':<52}{f'<= {DEFAULT_BUDGET_S:.0f} s':<14}"
          f"{'MET' if within else 'NOT MET'}")
    pss = memory.peak_pss_bytes / 2**30
    rss = memory.peak_rss_bytes / 2**30
    print(f"{'peak memory':<16}{f'{pss:.2f} GiB PSS ({rss:.2f} GiB sum of RSS, {memory.peak_processes} procs)':<52}"
          f"{f'< {MEMORY_LIMIT_GIB:.0f} GiB':<14}{'MET' if rss < MEMORY_LIMIT_GIB else 'NOT MET'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
