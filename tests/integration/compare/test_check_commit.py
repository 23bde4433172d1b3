"""The git commit a bench or check run records is that of the workload file's checkout, not of the folder the
command ran from."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import dlperf
from dlperf.cli.main import main
from dlperf.store import Store

pytestmark = pytest.mark.integration

MODEL = """import torch

def model():
    return torch.nn.Linear(4, 2).eval()

def inputs(batch_size):
    return (torch.ones(batch_size, 4),)
"""


def _repo(folder: Path, files: dict[str, str]) -> str:
    folder.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    for name, text in files.items():
        (folder / name).write_text(text)
    git("add", *files)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return git("rev-parse", "HEAD").strip()


def test_a_run_records_the_commit_of_the_workload_file_s_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf bench /work/scratch-i2/proj/my_model.py:workload` run from dlperf's own checkout recorded dlperf's
    commit (039860442542), from /tmp none: the history's commit column named code that was not measured."""
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    model_head = _repo(tmp_path / "model", {"wl.py": MODEL})
    _repo(tmp_path / "elsewhere", {"README": "another project\n"})
    monkeypatch.chdir(tmp_path / "elsewhere")
    spec = str(tmp_path / "model" / "wl.py")
    store = tmp_path / "runs.db"
    assert main(["bench", spec, "--batch-sizes", "1", "--min-duration", "0.05", "--store", str(store)]) == 0
    bench = Store(store).list(kind="bench")[0]
    assert (bench.environment["git_commit"], bench.environment["git_dirty"]) == (model_head, False)
    assert main(["baseline", "set", "main", bench.id, "--store", str(store)]) == 0
    (tmp_path / "model" / "wl.py").write_text(MODEL + "# an edit not committed\n")
    capsys.readouterr()
    main(["check", spec, "--baseline", "main", "--duration", "0.05", "--store", str(store)])
    said = " ".join(capsys.readouterr().out.split())  # and says which code each side ran
    check = Store(store).list(kind="check")[0]
    assert f"(run {bench.id} at {model_head[:12]}); this run: {check.id} at {model_head[:12]}+" in said
    assert (check.environment["git_commit"], check.environment["git_dirty"]) == (model_head, True)
    library = dlperf.bench(spec, batch_sizes=(1,), min_duration_s=0.05, store=str(store))
    assert library.run_id is not None
    recorded = Store(store).get(library.run_id).environment
    assert (recorded["git_commit"], recorded["git_dirty"]) == (model_head, True)
    monkeypatch.chdir(tmp_path)  # outside any checkout, a zoo workload (no file) records none
    assert main(["bench", "zoo:mlp?hidden=8", "--batch-sizes", "1", "--min-duration", "0.05",
                 "--store", str(store)]) == 0
    assert Store(store).list(kind="bench")[0].environment["git_commit"] is None
