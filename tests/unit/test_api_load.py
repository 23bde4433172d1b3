"""dlperf.load (the artifact loader) given a workload spec: its name is close to dlperf.load_workload's."""

from __future__ import annotations

from pathlib import Path

import pytest

import dlperf
from dlperf.errors import OptimizeError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("spec", ["zoo:mlp", "zoo:minilm?seq_len=8", "wl.py", "wl.py:small?width=8"])
def test_load_given_a_workload_names_load_workload(spec: str, tmp_path: Path) -> None:
    """It said "artifact folder 'zoo:mlp' does not exist (dlperf optimize --export DIR writes one)", and of an
    existing workload file "is a file, not an artifact folder": nothing said which loader was meant."""
    target = spec if spec.startswith("zoo:") else str(tmp_path / spec)
    (tmp_path / "wl.py").write_text("x = 1\n")
    with pytest.raises(OptimizeError, match=r"dlperf.load loads an artifact folder written by dlperf optimize "
                                            r"--export; '.*' is a workload: load it with dlperf.load_workload\("):
        dlperf.load(target)


def test_a_folder_named_like_a_python_file_is_still_read_as_an_artifact(tmp_path: Path) -> None:
    folder = tmp_path / "model.py"
    folder.mkdir()
    with pytest.raises(OptimizeError, match=r"has no manifest\.json"):
        dlperf.load(folder)
