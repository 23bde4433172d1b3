"""A command refused before it measures anything records no run: `ab` stored a failed run for a workload file
that does not exist or does not import, and `profile --train` for a workload without a training spec, where
bench, train, check and optimize store nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.cli.main import main
from dlperf.store import Store

pytestmark = pytest.mark.integration

NO_TRAIN = '''import torch

def model():
    return torch.nn.Linear(4, 2)

def inputs(batch_size):
    return (torch.randn(batch_size, 4),)
'''


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.parametrize(("argv", "message"), [
    (["ab", "missing.py"], "workload file 'missing.py' does not exist"),
    (["ab", "broken.py"], "workload file 'broken.py' raised SyntaxError while importing"),
    (["ab", "zoo:mlp", "--b", "option.nosuch=3"], "nosuch"),
    (["profile", "plain.py", "--train"], "has no training spec (Workload.train)"),
    # bench checked the device inside its run, and left a failed run behind (train refused before recording)
    pytest.param(["bench", "zoo:mlp", "--device", "cuda"], "--device cuda asked for, but no CUDA device is available",
                 marks=pytest.mark.skipif(_has_cuda(), reason="a CUDA device is here")),
])
def test_a_refused_command_records_no_run(argv: list[str], message: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def model()\n    pass\n")
    (tmp_path / "plain.py").write_text(NO_TRAIN)
    store = tmp_path / "runs.db"
    Store(store, create=True)  # exists and is empty
    assert main([*argv, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and message in err, err
    assert Store(store).list(limit=None) == []
