"""`dlperf report` and `dlperf compare` from the command line on a store of synthetic records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dlperf.cli.main import main
from dlperf.measure.stats import Measurement
from dlperf.store import Store

pytestmark = pytest.mark.integration

ENV = {"torch_version": "2.13.0+cpu", "python_version": "3.11.7", "dlperf_version": "0.1.0", "cpu_model": "X",
       "logical_cores": 2, "torch_threads": 2, "gpu_name": None, "cuda_version": None, "os": "Linux"}


def _bench(store: Store, median_s: float, seed: int, env: dict[str, object]) -> str:
    rng = np.random.default_rng(seed)
    m = Measurement([int(v) for v in rng.lognormal(np.log(median_s), 0.05, 120) * 1e9])
    rec = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]}, env)
    store.finish_run(rec.id, {"points": [{"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}]})
    return rec.id


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "runs.db"
    store = Store(path)
    _bench(store, 0.010, 1, ENV)
    _bench(store, 0.013, 2, {**ENV, "torch_threads": 1})
    return path


def test_report_with_history_writes_one_file(store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [r.id for r in Store(store_path).list()]
    out = tmp_path / "r.html"
    assert main(["report", *ids, "--history", "zoo:mlp", "-o", str(out), "--store", str(store_path)]) == 0
    html = out.read_text()
    assert "History of zoo:mlp: p50" in html and "Comparison at batch 1" in html
    assert all(f'id="run-{i}"' in html for i in ids)
    assert f"wrote {out}" in capsys.readouterr().out
    # -o - is stdout (it wrote a file named '-')
    monkeypatch.chdir(tmp_path)
    assert main(["report", ids[0], "-o", "-", "--store", str(store_path)]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>") and not (tmp_path / "-").exists()


def test_report_errors_are_clear(store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "-o", str(tmp_path / "x.html"), "--store", str(store_path)]) == 2
    assert "nothing to report" in capsys.readouterr().err
    assert main(["report", "--history", "zoo:nope", "-o", str(tmp_path / "x.html"), "--store", str(store_path)]) == 2
    assert "workloads with finished ones: zoo:mlp" in capsys.readouterr().err


def test_compare_prints_deltas_the_test_and_the_environment_warning(store_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    newest, oldest = (r.id for r in Store(store_path).list())
    assert main(["compare", oldest, newest, "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "p50 latency ms" in out and "+30" in out
    assert "B slower" in out and "Mann-Whitney" in out
    assert "environments differ" in out and "torch_threads: 2 vs 1" in out
    assert main(["compare", oldest, "--store", str(store_path)]) == 2
    assert "compare needs two runs" in capsys.readouterr().err


def test_compare_tests_at_the_alpha_given(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    newest, oldest = (r.id for r in Store(store_path).list())
    assert main(["compare", oldest, newest, "--alpha", "1%", "--json", "--store", str(store_path)]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert [p["alpha"] for p in points] == [0.01]


def test_a_run_named_twice_is_reported_once(store_path: Path, tmp_path: Path) -> None:
    first = Store(store_path).list()[-1].id
    out = tmp_path / "r.html"
    assert main(["report", first, first[:6], "-o", str(out), "--store", str(store_path)]) == 0
    html = out.read_text()
    assert html.count(f'id="run-{first}"') == 1


def test_an_output_path_that_cannot_take_the_report_says_why(store_path: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = Store(store_path).list()[-1].id
    assert main(["report", run, "-o", str(tmp_path), "--store", str(store_path)]) == 2
    assert f"'{tmp_path}' is a folder: give the report a file name, e.g. -o {tmp_path / 'report.html'}" in \
        capsys.readouterr().err
    missing = tmp_path / "no-such-folder" / "r.html"
    assert main(["report", run, "-o", str(missing), "--store", str(store_path)]) == 2
    assert f"the folder '{missing.parent}' does not exist; create it" in capsys.readouterr().err
    # checked before the store is read: a bad -o with a bad run id names the -o
    assert main(["report", "nosuchrun", "-o", str(missing), "--store", str(store_path)]) == 2
    assert "does not exist; create it" in capsys.readouterr().err


def test_runs_of_two_workloads_are_warned_about_before_the_tables(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The 'different workloads' note came after the tables and the other notes, where the tables read as a change."""
    store = Store(tmp_path / "runs.db")
    a = _bench(store, 0.010, 1, ENV)
    rng = np.random.default_rng(3)
    m = Measurement([int(v) for v in rng.lognormal(np.log(0.02), 0.05, 120) * 1e9])
    rec = store.create_run("bench", "zoo:resnet18", {"batch_sizes": [1]}, ENV)
    store.finish_run(rec.id, {"points": [{"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}]})
    assert main(["compare", a, rec.id, "--store", str(tmp_path / "runs.db")]) == 0
    out = capsys.readouterr().out
    first = out.lstrip().splitlines()[0]
    assert first.startswith("warning: different workloads: 'zoo:mlp' vs 'zoo:resnet18'")
    assert out.count("different workloads") == 1
    # --json keeps it apart from the notes, so a script need not match the note's words
    assert main(["compare", a, rec.id, "--json", "--store", str(tmp_path / "runs.db")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [w.split(":")[0] for w in data["warnings"]] == ["different workloads"]
    assert not any("different workloads" in n for n in data["notes"])


def test_a_bench_of_an_artifact_against_one_of_the_workload_it_was_optimized_from_names_the_lineage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf compare` of a bench of zoo:minilm and a bench of the artifact `dlperf optimize zoo:minilm --export`
    wrote warned "different workloads ... two models, not one model's change": the comparison the loop promises.
    A bench of an artifact keeps its source workload and optimize run from the manifest, and compare says so."""
    from dlperf.api import artifact_settings
    from dlperf.optimize.artifact import MANIFEST

    art = tmp_path / "art"
    art.mkdir()
    (art / MANIFEST).write_text(json.dumps({"format_version": 1, "engine": "torch", "files": [], "label":
                                            "dynamic_int8", "precision": "int8", "workload": "zoo:mlp",
                                            "run_id": "3be1c5709f46", "inputs": [], "outputs": []}))
    settings = artifact_settings(str(art))
    assert settings is not None
    assert (settings["source_workload"], settings["optimize_run_id"]) == ("zoo:mlp", "3be1c5709f46")
    store = Store(tmp_path / "runs.db")
    a = _bench(store, 0.010, 1, ENV)
    rng = np.random.default_rng(3)
    m = Measurement([int(v) for v in rng.lognormal(np.log(0.008), 0.05, 120) * 1e9])
    rec = store.create_run("bench", str(art), {"batch_sizes": [1], "artifact": settings}, ENV)
    store.finish_run(rec.id, {"points": [{"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}]})
    assert main(["compare", a, rec.id, "--json", "--store", str(tmp_path / "runs.db")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert not any("different workloads" in w for w in data["warnings"]), data["warnings"]
    assert ("B is an artifact optimized from A's workload 'zoo:mlp' (optimize run 3be1c5709f46): the models differ "
            "(B: dynamic_int8, int8), as the comparison means them to") in data["notes"]
    # the other way round, A the artifact
    assert main(["compare", rec.id, a, "--store", str(tmp_path / "runs.db")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "A is an artifact optimized from B's workload 'zoo:mlp' (optimize run 3be1c5709f46)" in out
    assert "different workloads" not in out
