"""Exporting over an earlier artifact: a failed export leaves it as it was; a good one replaces it whole."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlperf.errors import OptimizeError
from dlperf.optimize.artifact import copy_artifact, load_artifact, read_manifest
from dlperf.optimize.space import Candidate
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
from tests.unit.optimize.artifacts import export_candidate as _export

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def candidates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("candidates")
    return (_export(root / "a", Candidate((HygieneConfig(),))),
            _export(root / "b", Candidate((DynamicInt8Config(),))))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_an_export_whose_candidate_folder_is_gone_leaves_the_earlier_artifact(candidates: tuple[Path, Path],
                                                                              tmp_path: Path) -> None:
    """The earlier artifact was deleted first, then the copy failed: a resumed search whose reused winner's work
    folder had been removed lost the user's deployed artifact and wrote nothing in its place."""
    first, second = candidates
    deployed = copy_artifact(first, tmp_path / "deployed", {"label": "first"})
    before = _snapshot(deployed)
    gone = tmp_path / "work" / "artifact"
    shutil.copytree(second, gone)
    shutil.rmtree(gone.parent)
    with pytest.raises(OptimizeError, match=r"cannot export to '.*deployed': the candidate's artifact "
                                            r"'.*work/artifact' is gone \(was the search's work folder removed\?\); "
                                            r"the artifact already there is unchanged"):
        copy_artifact(gone, deployed, {"label": "second"})
    assert _snapshot(deployed) == before
    assert read_manifest(deployed)["label"] == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deployed"]  # nothing left beside it


def test_a_copy_that_fails_halfway_leaves_the_earlier_artifact_whole(candidates: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """A copy error (here a dangling link in the candidate's folder, as a full disk would) came after the earlier
    artifact was emptied: the folder held part of the new artifact under no manifest of its own."""
    first, second = candidates
    deployed = copy_artifact(first, tmp_path / "deployed", {"label": "first"})
    before = _snapshot(deployed)
    broken = tmp_path / "broken"
    shutil.copytree(second, broken)
    (broken / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OptimizeError, match=r"cannot export to '.*deployed': .*; the artifact already there is "
                                            r"unchanged"):
        copy_artifact(broken, deployed, {"label": "second"})
    assert _snapshot(deployed) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "deployed"]
    assert load_artifact(deployed) is not None


def test_exporting_twice_replaces_the_artifact_whole(candidates: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = candidates
    monkeypatch.chdir(tmp_path)
    out = copy_artifact(first, Path("out"), {"label": "first"})
    assert out.is_absolute() and out.resolve() == (tmp_path / "out").resolve()  # a run stores it
    assert read_manifest(out)["files"] == ["weights.pt"]
    copy_artifact(second, Path("out"), {"label": "second"})
    assert read_manifest("out")["label"] == "second"
    manifest = (Path("out") / "manifest.json").read_bytes()
    assert _snapshot(Path("out")) == {**_snapshot(second), "manifest.json": manifest}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # an empty folder and a new nested one take an export too
    (tmp_path / "empty").mkdir()
    copy_artifact(second, tmp_path / "empty", {})
    copy_artifact(second, tmp_path / "new" / "nested", {})
    assert read_manifest(tmp_path / "empty")["engine"] == "torch"
    assert read_manifest(tmp_path / "new" / "nested")["engine"] == "torch"


def test_an_engine_artifact_says_which_workload_it_was_made_from(tmp_path: Path) -> None:
    """An engine artifact's manifest named the workload ('minilm') but not its spec: artifacts of
    zoo:minilm?seq_len=64 and of a user's file could not be traced back to what to run dlperf optimize on."""
    pytest.importorskip("onnxruntime")
    from dlperf.passes.onnxruntime import OrtConfig

    folder = _export(tmp_path / "cand", Candidate((OrtConfig(),)))
    manifest = read_manifest(copy_artifact(folder, tmp_path / "out", {}))
    assert manifest["engine"] == "onnxruntime" and manifest["workload"] == "zoo:mlp" and manifest["name"] == "mlp"
    assert "workload_relative" not in manifest
    assert load_artifact(tmp_path / "out").threads >= 1  # type: ignore[attr-defined]


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    """An empty tmpfs mounted on a folder, as a container's volume is (needs root; skipped elsewhere)."""
    folder = tmp_path / "volume"
    folder.mkdir()
    if not shutil.which("mount") or subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(folder)],
                                                   capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_an_export_into_a_mount_point_fills_it_in_place(candidates: tuple[Path, Path], mount_point: Path) -> None:
    """A mount point cannot be renamed (EBUSY): swapping the new artifact in refused an export to an empty mounted
    volume ('cannot export to ...: Device or resource busy'), which writing into it had taken."""
    first, second = candidates
    copy_artifact(first, mount_point, {"label": "first"})
    assert read_manifest(mount_point)["label"] == "first"
    copy_artifact(second, mount_point, {"label": "second"})  # an earlier artifact in it is replaced
    assert read_manifest(mount_point)["label"] == "second"
    assert sorted(p.name for p in mount_point.iterdir()) == ["manifest.json", "weights.pt"]
    assert sorted(p.name for p in mount_point.parent.iterdir()) == ["volume"]  # no staging folder left
    assert load_artifact(mount_point) is not None
