"""A workload file's classes reach processes started with spawn (DataLoader workers on macOS, and on Linux from
Python 3.14, where forkserver is the default): the file is imported under a name those processes can import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

WORKLOAD = """
    import torch
    import dlperf
    from torch.utils.data import DataLoader, Dataset

    class Points(Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, i):
            return torch.full((4,), float(i)), torch.tensor(i % 2)

    def make_loader(batch_size, **kwargs):
        return DataLoader(Points(), batch_size=batch_size, multiprocessing_context="spawn", **kwargs)

    workload = dlperf.Workload(
        name="spawned", make_model=lambda: torch.nn.Linear(4, 2), make_inputs=lambda b: (torch.ones(b, 4),),
        train=dlperf.TrainSpec(make_loader=make_loader, loss_fn=torch.nn.functional.cross_entropy,
                               make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8))
"""

MAIN = """
    import sys
    from dlperf.train.loop import StepConfig, TrainLoop
    from dlperf.workload import load_workload

    if __name__ == "__main__":  # spawn imports this file again in the worker
        loop = TrainLoop(load_workload(sys.argv[1]), StepConfig(batch_size=8, num_workers=1, threads=1))
        loop.step()
        print("trained a step")
"""


def test_a_loader_worker_started_with_spawn_unpickles_the_files_dataset(tmp_path: Path) -> None:
    """The worker died ('DataLoader worker exited unexpectedly'): the Dataset's module had a private name."""
    (tmp_path / "spawned_workload.py").write_text(textwrap.dedent(WORKLOAD))
    main = tmp_path / "main.py"
    main.write_text(textwrap.dedent(MAIN))
    done = subprocess.run([sys.executable, str(main), str(tmp_path / "spawned_workload.py")], cwd=tmp_path.parent,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "trained a step"
