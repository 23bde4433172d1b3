"""A spec's option values, as the workload function gets them and as two specs are matched."""

from __future__ import annotations

import math

import pytest

from dlperf.workload.loader import canonical_spec, split_canonical

pytestmark = pytest.mark.unit


def test_a_spec_with_a_nan_option_matches_itself(tmp_path):
    """'?x=nan' was parsed to a float NaN, which equals nothing: `runs list --workload 'wl.py?metric=nan'` typed from
    another folder (or a profile's record of it) found none of the workload's runs."""
    (tmp_path / "wl.py").write_text("")
    spec = f"{tmp_path / 'wl.py'}:make?metric=nan&lr=NaN&width=1.50"
    parts = split_canonical(spec)
    assert parts is not None
    assert parts == split_canonical(spec)
    assert parts == split_canonical(canonical_spec(spec))
    assert parts[2]["width"] == 1.5  # still parsed: '1.50' typed matches the '1.5' a record wrote
    assert not any(isinstance(v, float) and math.isnan(v) for v in parts[2].values())


def test_runs_of_a_nan_option_workload_are_found_from_another_folder(tmp_path, monkeypatch):
    from dlperf.store import Store
    from dlperf.store.query import runs_of_workload

    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "good.py").write_text("")
    monkeypatch.chdir(tmp_path)
    store = Store(tmp_path / "runs.db")
    good = str(tmp_path / "wl" / "good.py")
    bench = store.create_run("bench", "wl/good.py?metric=nan", {"workload_key": f"{good}?metric=nan"}).id
    profile = store.create_run("profile", f"{good}:workload?metric=nan").id
    store.create_run("bench", "wl/good.py?metric=acc", {"workload_key": f"{good}?metric=acc"})
    monkeypatch.chdir(tmp_path / "wl")
    assert {r.id for r in runs_of_workload(store, "good.py?metric=nan")} == {bench, profile}
    # a name given also finds the plain file's runs (it names the file's one workload): store.query.runs_of_workload
    assert {r.id for r in runs_of_workload(store, "good.py:workload?metric=nan")} == {bench, profile}


FACTORY = '''
import torch
import dlperf

def make(metric: str = "acc", width: int = 4, scale=1.0) -> dlperf.Workload:
    return dlperf.Workload(name=repr((metric, width, scale)), make_model=lambda: torch.nn.Linear(width, 1),
                           make_inputs=lambda b: (torch.zeros(b, width),))
'''


def test_options_typed_outside_the_spec_are_read_by_the_parameter_they_are_for(tmp_path):
    """`dlperf ab`'s option.NAME=VALUE reaches the loader as text (option_texts) and is read as the spec's
    ?NAME=VALUE is: 'nan' for `metric: str` is the text, not a float NaN."""
    from dlperf.workload.loader import load_workload

    path = tmp_path / "wl.py"
    path.write_text(FACTORY)
    w = load_workload(f"{path}:make", option_texts={"metric": "nan", "width": "8", "scale": "1e-1"})
    assert w.name == repr(("nan", 8, 0.1))
    assert w.name == load_workload(f"{path}:make?metric=nan&width=8&scale=1e-1").name
    # they win over the spec's, as keyword options do
    assert load_workload(f"{path}:make?metric=acc&width=2", option_texts={"metric": "1"}).name == repr(("1", 2, 1.0))
    assert load_workload("zoo:mlp", option_texts={"hidden": "16"}).name == load_workload("zoo:mlp?hidden=16").name


def test_a_nan_option_of_a_float_parameter_keeps_the_workloads_source(tmp_path):
    """'?scale=nan' for `scale: float` left the workload no source (the round trip compared nan != nan), so profile
    recorded the spec as typed, not the absolute one that optimize's candidates reload."""
    from dlperf.workload.loader import load_workload

    path = tmp_path / "wl.py"
    path.write_text(FACTORY.replace("scale=1.0", "scale: float = 1.0"))
    w = load_workload(f"{path}:make?scale=nan")
    assert w.source == f"{path}:make?scale=nan"
    assert load_workload(w.source).name == w.name == repr(("acc", 4, math.nan))


def test_a_zoo_option_for_a_string_parameter_stays_text() -> None:
    """A zoo spec's options were all parsed by their text, so minilm's `attn: str` got the int 1 from '?attn=1'
    (and a float NaN from '?attn=nan'); they are read by the zoo function's parameters as a file's are."""
    from dlperf.errors import WorkloadError
    from dlperf.workload.loader import load_workload

    with pytest.raises(WorkloadError, match="attn='1' is unknown"):
        load_workload("zoo:minilm?attn=1")
    with pytest.raises(WorkloadError, match="attn='nan' is unknown"):
        load_workload("zoo:minilm", option_texts={"attn": "nan"})
