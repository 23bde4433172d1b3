"""Gathering a report from the store: which runs, and what --history is told when it finds none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.report.build import build_report, history_runs
from dlperf.store.db import Store
from tests.unit.store.spaced import space_runs

pytestmark = pytest.mark.unit


def test_history_of_an_unknown_workload_names_only_workloads_it_would_find(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    for kind, workload, status in (("bench", "broken.py", "failed"), ("bench", "zoo:mlp", "ok"),
                                   ("check", "zoo:cnn", "ok")):
        run = store.create_run(kind, workload)
        store.finish_run(run.id, {"points": []}, status=status)
    with pytest.raises(ConfigError) as info:
        build_report(store, [], history_workload="zoo:nope")
    # broken.py has no finished run, so --history broken.py fails too; zoo:cnn's check run is found
    assert str(info.value).endswith("workloads with finished ones: zoo:cnn, zoo:mlp")


def test_a_history_is_of_the_newest_finished_bench_and_check_runs_oldest_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space_runs(monkeypatch)
    store = Store(tmp_path / "runs.db")
    ids = {}
    for name, kind, status in (("old", "bench", "ok"), ("check", "check", "ok"), ("failed", "bench", "failed"),
                               ("new", "bench", "ok")):
        run = store.create_run(kind, "zoo:mlp", {"workload_key": "zoo:mlp"})
        store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": {"p50_s": 0.001}}]}, status=status)
        ids[name] = run.id
    assert [r.id for r in history_runs(store, "zoo:mlp")] == [ids["old"], ids["check"], ids["new"]]
    assert [r.id for r in history_runs(store, "zoo:mlp", limit=2)] == [ids["check"], ids["new"]]


def _point(batch: int, median_s: float, seed: int) -> dict[str, object]:
    import numpy as np

    from dlperf.measure.stats import Measurement

    rng = np.random.default_rng(seed)
    m = Measurement([int(v) for v in rng.lognormal(np.log(median_s), 0.05, 200) * 1e9], items_per_call=batch)
    return {"batch_size": batch, "summary": m.summary(), "measurement": m.to_dict()}


def test_a_report_of_two_bench_runs_judges_b_against_a_at_every_batch_size(tmp_path: Path) -> None:
    """Two bench runs' report compared them at batch 1 only (0.0150 vs 0.0151 ms) with no verdict, while the second
    run's batch 64 was 232x slower: a reader of the report saw no regression. Now each shared batch size has the
    verdict `dlperf compare` gives."""
    store = Store(tmp_path / "runs.db", create=True)
    ids = []
    for seed, slow_s in ((1, 0.001), (2, 0.003)):  # B's batch 8 three times as slow, batch 1 the same
        run = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1, 8]})
        store.finish_run(run.id, {"points": [_point(1, 0.0005, seed), _point(8, slow_s, seed + 10)]})
        ids.append(run.id)
    html = build_report(store, ids)
    section = html.split("<h2>Verdict: each run against the first, per batch size</h2>", 1)[1].split("</section>")[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", section)[1:]
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[1])]
    assert cells[:3] == [ids[0], ids[1], "8"] and cells[8] == "B slower"
    assert 2.7 < float(cells[5]) < 3.3  # the median ratio B/A
    assert "B slower" not in rows[0] and "B faster" not in rows[0]
    assert "<h2>Verdict" not in build_report(store, ids[:1])  # one run: nothing to judge


def test_the_verdict_keeps_each_interval_on_one_line_and_names_the_runs_it_leaves_out(tmp_path: Path) -> None:
    """At 1200 px the verdict table's '95% CI' cell broke at its hyphen ('0.955-' over '0.964'); and of a report of
    twelve bench runs it judged the first ten after the first and left the twelfth out without a word."""
    store = Store(tmp_path / "runs.db", create=True)
    ids = []
    for seed in range(12):
        run = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]})
        store.finish_run(run.id, {"points": [_point(1, 0.0005, seed)]})
        ids.append(run.id)
    html = build_report(store, ids)
    section = html.split("<h2>Verdict: each run against the first, per batch size</h2>", 1)[1].split("</section>")[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", section)[1:]
    assert [re.sub(r"<[^>]+>", "", re.findall(r"<td[^>]*>(.*?)</td>", row)[1]) for row in rows] == ids[1:11]
    intervals = [re.findall(r"<td[^>]*>(.*?)</td>", row)[6] for row in rows]
    assert all(re.fullmatch(r'<span class="nw">\d\.\d{3}-\d\.\d{3}</span>', cell) for cell in intervals), intervals
    assert ".nw{white-space:nowrap}" in html
    assert (f"1 later run not judged here: only the first 10 after {ids[0]} are ({ids[11]}); "
            f"dlperf compare {ids[0]} RUN judges one") in section
    assert "not judged here" not in build_report(store, ids[:11])  # eleven: the first and ten judged


def test_the_verdict_of_a_change_not_shown_beyond_the_min_effect_says_so_not_less_than_it(tmp_path: Path) -> None:
    """The row read "no difference as large as the minimum effect (B slower, by less than 1%)" wherever the median's
    interval excluded 1 without lying wholly beyond --min-effect, even where its far end was past 1%: the words of
    compare's KPI rows, "not shown beyond --min-effect", say what the interval shows."""
    import numpy as np

    from dlperf.measure.stats import Measurement

    store = Store(tmp_path / "runs.db", create=True)
    ids = []
    for seed, median_s in ((1, 0.0005), (2, 0.0005 * 1.004)):  # B 0.4% slower, in 20000 calls each
        rng = np.random.default_rng(seed)
        m = Measurement([int(v) for v in rng.lognormal(np.log(median_s), 0.01, 20000) * 1e9])
        run = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]})
        store.finish_run(run.id, {"points": [{"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}]})
        ids.append(run.id)
    section = build_report(store, ids).split("<h2>Verdict: each run against the first, per batch size</h2>", 1)[1]
    (row,) = re.findall(r"<tr[^>]*>(.*?)</tr>", section.split("</section>")[0])[1:]
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
    assert 1.0 < float(cells[6].split("-")[0]) < 1.01  # the interval excludes 1 but reaches within 1% of it
    assert cells[8] == "not shown beyond --min-effect (B slower; its interval reaches within 1% of no change)"


def test_a_report_takes_the_store_s_path_as_dlperf_bench_does(tmp_path: Path) -> None:
    """`dlperf.bench(store="runs.db")` takes a path; `build_report("runs.db", ids)` raised "'str' object has no
    attribute 'get'". A path (str or Path) is opened as the store; one that does not exist is refused."""
    from dlperf.errors import StoreError

    store = Store(tmp_path / "runs.db", create=True)
    run = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]})
    store.finish_run(run.id, {"points": [_point(1, 0.0005, 1)]})
    def page(source: Store | str | Path) -> str:  # the same page but for the figures' numbered clip ids
        return re.sub(r"clip\d+", "clip", build_report(source, [run.id]))

    html = page(store)
    assert run.id in html
    assert page(tmp_path / "runs.db") == html
    assert page(str(tmp_path / "runs.db")) == html
    with pytest.raises(StoreError):
        build_report(tmp_path / "missing.db", [run.id])
    assert not (tmp_path / "missing.db").exists()
