"""`compare` of two stored runs: KPI deltas, the Mann-Whitney test, environment warnings, other kinds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlperf.compare.runs import compare_records
from dlperf.errors import ConfigError
from dlperf.measure.stats import Measurement
from dlperf.store import Store

from .helpers import ENV, add_run, bench_result

pytestmark = pytest.mark.unit


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "runs.db")


def test_slower_run_is_flagged_with_deltas_per_common_batch(store: Store) -> None:
    a = add_run(store, "bench", bench_result({1: 0.010, 8: 0.040}, seed=1))
    b = add_run(store, "bench", bench_result({1: 0.012, 32: 0.1}, seed=2))
    cmp = compare_records(store.get(a), store.get(b))
    assert [p.batch_size for p in cmp.points] == [1]
    point = cmp.points[0]
    p50 = next(k for k in point.kpis if k.name == "p50_s")
    assert p50.change == pytest.approx(0.2, abs=0.02)
    assert not p50.better
    thr = next(k for k in point.kpis if k.name == "throughput")
    assert thr.change < 0 and not thr.better
    assert point.test.p_value < 1e-6 and point.verdict == "B slower"
    assert point.median_ratio.ci[0] > 1.15
    assert any("[8, 32]" in note for note in cmp.notes)
    assert cmp.environment_differences == []


def test_same_distribution_is_no_significant_difference(store: Store) -> None:
    a = add_run(store, "bench", bench_result({1: 0.010}, seed=3))
    b = add_run(store, "bench", bench_result({1: 0.010}, seed=4))
    assert compare_records(store.get(a), store.get(b)).points[0].verdict == "no significant difference"


def test_different_environments_are_reported(store: Store) -> None:
    a = add_run(store, "bench", bench_result({1: 0.01}))
    b = add_run(store, "bench", bench_result({1: 0.01}), env={**ENV, "torch_threads": 8, "torch_version": "2.12"})
    diffs = compare_records(store.get(a), store.get(b)).environment_differences
    assert "torch_threads: 2 vs 8" in diffs
    assert "torch_version: 2.13.0+cpu vs 2.12" in diffs


def test_runs_without_samples_compare_their_numbers(store: Store) -> None:
    a = add_run(store, "load", {"peak_rps": 100.0, "p99_s": 0.05})
    b = add_run(store, "load", {"peak_rps": 120.0, "p99_s": 0.05})
    cmp = compare_records(store.get(a), store.get(b))
    assert cmp.points == []
    assert cmp.other_deltas == [("peak_rps", 100.0, 120.0)]
    data = cmp.to_dict()
    assert data["other_deltas"] == [{"key": "peak_rps", "a": 100.0, "b": 120.0}]
    assert "Mann-Whitney" in data["test_method"]


def _load_result(medians_s: dict[float, float], items_per_s: dict[float, float], seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    # the fields `LevelResult.summary` stores that compare reads
    return {"levels": [{"mode": "concurrency", "level": c, "items_per_request": 2,
                        "throughput_items_per_s": items_per_s[c], "requests_ok": 300, "errors": 0,
                        "statuses": {"200": 300},
                        "latencies_ns": [int(v) for v in rng.lognormal(np.log(med), 0.05, 300) * 1e9]}
                       for c, med in medians_s.items()]}


def test_load_runs_compare_level_by_level(store: Store) -> None:
    # B: a server 20% slower per request at concurrency 4, same at 1; concurrency 16 only in A
    a = add_run(store, "load", _load_result({1: 0.010, 4: 0.020, 16: 0.05}, {1: 200, 4: 400, 16: 640}, seed=1))
    b = add_run(store, "load", _load_result({1: 0.010, 4: 0.024}, {1: 200, 4: 333}, seed=2))
    cmp = compare_records(store.get(a), store.get(b))
    assert [p.title for p in cmp.points] == ["concurrency 1", "concurrency 4"]
    same, slower = cmp.points
    assert same.verdict == "no significant difference"
    assert slower.verdict == "B slower" and slower.median_ratio.ci[0] > 1.15
    throughput = next(k for k in slower.kpis if k.name == "throughput")
    assert (throughput.a, throughput.b) == (400, 333) and not throughput.better
    assert slower.batch_size == 2  # items per request
    assert any("concurrency 16" in note for note in cmp.notes)
    assert any("not independent samples" in note for note in cmp.notes)
    assert cmp.to_dict()["points"][1]["title"] == "concurrency 4"


def test_load_runs_say_what_makes_their_levels_unlike(store: Store) -> None:
    """An audit compared a batch-1 run with a batch-16 one, a run whose slow requests timed out with one
    without, and two peak searches against different SLOs: none of it was said, and the method note spoke of
    per-item latencies."""
    a_result = _load_result({1: 0.010}, {1: 100}, seed=1)
    b_result = _load_result({1: 0.010}, {1: 1600}, seed=2)
    b_result["levels"][0] |= {"items_per_request": 16, "statuses": {"200": 300, "timeout": 18},  # type: ignore[index]
                              "errors": 18}
    a_result["peak"] = {"peak_rate": 600.0, "steps": []}
    b_result["peak"] = {"peak_rate": None, "steps": []}
    a = add_run(store, "load", a_result, config={"slo": {"bound_s": 0.05, "percentile": 99.0}})
    b = add_run(store, "load", b_result, config={"slo": {"bound_s": 0.001, "percentile": 99.0}})
    cmp = compare_records(store.get(a), store.get(b))
    notes = "\n".join(cmp.notes)
    assert "concurrency 1: A sent 2 items per request, B 16" in notes
    assert "concurrency 1: failed requests A 0 of 300, B 18 of 318" in notes
    assert "different SLOs (A p99 <= 50 ms, B p99 <= 1 ms)" in notes
    assert "peak search: A 600.0 req/s, B no passing rate (against different SLOs)" in notes
    assert "per-request latencies" in cmp.test_note and cmp.to_dict()["test_method"] == cmp.test_note
    # like with like: none of it
    c = add_run(store, "load", _load_result({1: 0.010}, {1: 100}, seed=3))
    d = add_run(store, "load", _load_result({1: 0.011}, {1: 100}, seed=4))
    plain = compare_records(store.get(c), store.get(d))
    assert not any("items per request" in n or "failed requests" in n or "SLO" in n for n in plain.notes)


def test_requests_the_open_loop_did_not_send_are_not_failed_requests(store: Store) -> None:
    """A load level's 'errors' counted its 'dropped' requests (due, not sent) until 2026-12-06, and compare read
    them as failed: 'failed requests B 52 of 352' for a level where 2 of the 302 sent failed. Stored runs of both
    kinds are read from their statuses."""
    from dlperf.loadgen.generator import LevelResult

    a = add_run(store, "load", _load_result({1: 0.010}, {1: 100}, seed=1))
    b_result = _load_result({1: 0.010}, {1: 100}, seed=2)
    b_result["levels"][0] |= {"statuses": {"200": 300, "dropped": 50, "503": 2}, "errors": 52}  # type: ignore[index]
    b = add_run(store, "load", b_result)
    notes = "\n".join(compare_records(store.get(a), store.get(b)).notes)
    assert "failed requests A 0 of 300, B 2 of 302" in notes
    level = LevelResult("rate", 100.0, 1, [10**7] * 300, {"200": 300, "dropped": 50, "503": 2}, 3.0, False, [])
    summary = level.summary()
    assert (summary["errors"], summary["dropped"], summary["requests_ok"]) == (2, 50, 300)


def test_the_verdict_names_the_median_latency_and_a_throughput_or_failure_change_it_does_not_say(store: Store) -> None:
    """Two load runs read "no significant difference" (a verdict on the median latency) beside a throughput of -27%
    and failed requests that only a note after every table named."""
    from dlperf.report.compare_text import comparison_tables

    b_result = _load_result({1: 0.010, 4: 0.020}, {1: 292, 4: 333}, seed=2)
    b_result["levels"][0] |= {"statuses": {"200": 300, "503": 20}, "errors": 20}  # type: ignore[index]
    a = add_run(store, "load", _load_result({1: 0.010, 4: 0.024}, {1: 400, 4: 320}, seed=1))
    b = add_run(store, "load", b_result)
    cmp = compare_records(store.get(a), store.get(b))
    same, faster = cmp.points
    assert same.verdict == "no significant difference" and same.verdict_on == "median latency"
    assert same.also_changed == ["throughput -27.0% worse", "failed requests 0.0% -> 6.2% (A 0 of 300, B 20 of 320)"]
    assert faster.verdict == "B faster" and faster.also_changed == []  # +4.1%: not a lot
    lines = _lines(comparison_tables(cmp)[0], 160)
    assert lines[-2].startswith("median latency: no significant difference (B/A 0.99")
    assert "; Mann-Whitney U p=" in lines[-2]
    assert lines[-1] == ("not in that verdict: throughput -27.0% worse; failed requests 0.0% -> 6.2% (A 0 of 300, "
                         "B 20 of 320)")
    point = cmp.to_dict()["points"][0]  # added beside the fields scripts read
    assert point["verdict"] == "no significant difference" and point["verdict_on"] == "median latency"
    assert point["also_changed"] == same.also_changed
    # a direction the verdict gives is not said again: B slower beside a throughput of -20%
    c = add_run(store, "load", _load_result({1: 0.012}, {1: 320}, seed=3))
    (slower,) = compare_records(store.get(a), store.get(c)).points
    assert slower.verdict == "B slower" and slower.also_changed == []
    assert _lines(comparison_tables(compare_records(store.get(a), store.get(c)))[0], 160)[-1].startswith(
        "median latency: B slower (B/A 1.2")


def test_the_comparison_caption_never_claims_p_equals_0(tmp_path: Path) -> None:
    from dlperf.report.compare_text import comparison_tables

    store = Store(tmp_path / "runs.db")
    a = add_run(store, "bench", bench_result({1: 0.001}, n=2000, seed=1, sigma=0.01))
    b = add_run(store, "bench", bench_result({1: 0.002}, n=2000, seed=2, sigma=0.01))
    cmp = compare_records(store.get(a), store.get(b))
    assert cmp.points[0].test.p_value == 0.0  # the normal tail underflowed
    caption = _lines(comparison_tables(cmp)[0], 120)[-1]
    assert "Mann-Whitney U p<1e-300)" in caption and "B slower" in caption


def _lines(renderable: object, width: int) -> list[str]:
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def test_the_comparison_s_title_and_test_line_are_as_wide_as_the_console_not_the_table(tmp_path: Path) -> None:
    # They were the table's title and caption, wrapped at its 48 columns: 'batch 1: A=... (...)' / 'B=... (...)',
    # and 'Mann-Whitney U p=...; median B/A 1.154 (CI' / '1.032-1.426): B slower', centred.
    from dlperf.report.compare_text import comparison_tables

    store = Store(tmp_path / "runs.db")
    a = add_run(store, "bench", bench_result({1: 0.001, 32: 0.004}, n=200, seed=1))
    b = add_run(store, "bench", bench_result({1: 0.0011, 32: 0.004}, n=200, seed=2))
    cmp = compare_records(store.get(a), store.get(b))
    title = f"batch 1: A={cmp.a.id} ({cmp.a.created_at[:19]})  B={cmp.b.id} ({cmp.b.created_at[:19]})"
    for width in (80, 100):
        first, second = (_lines(part, width) for part in comparison_tables(cmp))
        assert first[-1].startswith("median latency: B slower (B/A 1.") and first[-1].endswith(")")  # one line
        assert first[-2].startswith("└")  # right under the table
        if width >= len(title):
            assert first[0] == title
        else:  # B under A, never a break inside '(2026-...)'
            assert first[:2] == [title.split("  ")[0], " " * len("batch 1:") + " " + title.split("  ")[1]]
        assert second[0].startswith("batch 32: A=")


def test_runs_of_two_kinds_are_refused_and_runs_with_nothing_left_to_compare_say_so(tmp_path: Path) -> None:
    from dlperf.cli.main import main
    from dlperf.errors import StoreError

    # A bench run against an ab run said "one of the runs holds no raw latency samples", then nothing; later a note
    # that nothing was left to compare, and exit 0 as for a comparison
    store = Store(tmp_path / "runs.db")
    bench = add_run(store, "bench", bench_result({1: 0.001}))
    ab = add_run(store, "ab", {"ratio": 1.02, "verdict": "no significant difference"})
    with pytest.raises(StoreError, match=rf"^cannot compare run {bench} \(a 'bench' run\) with run {ab} \(an 'ab' "
                                         rf"run\): `dlperf compare` takes two runs of one kind \(or a bench and a "
                                         rf"check run\); an ab run compares its own two sides: `dlperf runs show "
                                         rf"{ab}`$"):
        compare_records(store.get(bench), store.get(ab))
    assert main(["compare", bench, ab, "--store", str(tmp_path / "runs.db")]) == 2
    check = add_run(store, "check", bench_result({1: 0.0011}, seed=2))  # a bench and a check run do compare
    assert [p.batch_size for p in compare_records(store.get(bench), store.get(check)).points] == [1]
    first = add_run(store, "profile", {"step_s": 0.010})
    second = add_run(store, "profile", {"step_s": 0.012})
    cmp = compare_records(store.get(first), store.get(second))
    assert ("neither run holds samples of a kind compared here (a bench or check run's per batch size, a load run's "
            "per level, a train run's per step): only the numeric results are compared") in cmp.notes
    assert cmp.other_deltas == [("step_s", 0.010, 0.012)]


def _train_result(step_s: float, batch: int, seed: int, n: int = 60) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    samples = [int(s) for s in rng.lognormal(np.log(step_s), 0.05, n) * 1e9]
    return {"samples_per_s": batch / step_s, "config": {"batch_size": batch},
            "measurement": {"samples_ns": samples, "items_per_call": batch}}


def test_train_runs_compare_their_step_times_per_sample_with_the_test(store: Store) -> None:
    """Two train runs printed 30 flattened fields without a test, and said that neither held raw samples, while
    each holds one per step."""
    a = add_run(store, "train", _train_result(0.100, 64, seed=1))
    b = add_run(store, "train", _train_result(0.120, 64, seed=2))
    cmp = compare_records(store.get(a), store.get(b))
    assert len(cmp.points) == 1 and cmp.other_deltas == []
    point = cmp.points[0]
    assert point.title == "train step, batch 64" and point.verdict == "B slower"
    assert point.verdict_on == "median step time"  # the verdict line's words; a load or bench point's: median latency
    assert point.median_ratio.ratio == pytest.approx(1.2, abs=0.03)
    assert any(n.startswith("train runs: each measured step is a sample") for n in cmp.notes)
    # batch 64 against 32 at the same time per sample: compared per sample, not per step
    c = add_run(store, "train", _train_result(0.050, 32, seed=3))
    point = compare_records(store.get(a), store.get(c)).points[0]
    assert point.title == "train step, batch 64 vs 32 (times per sample)"
    assert point.verdict == "no significant difference"
    p50 = next(k for k in point.kpis if k.name == "p50_s")
    assert p50.a == pytest.approx(0.100 / 64, rel=0.05) and p50.b == pytest.approx(0.050 / 32, rel=0.05)


def test_runs_measured_with_other_settings_say_so(store: Store) -> None:
    """fp32 against bf16 read as a plain 'B slower', with no word of the settings (nor of device or timer)."""
    base = {"scenario": "offline", "precision": "fp32", "device": "cpu", "threads": None,
            "timer": {"min_duration_s": 1.0, "warmup_iters": 5}}
    a = add_run(store, "bench", bench_result({8: 0.010}, seed=1), config=base)
    b = add_run(store, "bench", bench_result({8: 0.020}, seed=2),
                config={**base, "precision": "bf16", "threads": 1, "timer": {"min_duration_s": 0.2, "warmup_iters": 5}})
    (note,) = [n for n in compare_records(store.get(a), store.get(b)).notes if "different settings" in n]
    assert note == ("measured with different settings (precision: A fp32, B bf16; threads: A default (2), B 1; "
                    "min_duration_s: A 1.0, B 0.2): the comparison is of those as much as of the code")
    same = add_run(store, "bench", bench_result({8: 0.010}, seed=3), config=base)
    assert not any("different settings" in n for n in compare_records(store.get(a), store.get(same)).notes)


def test_threads_at_the_default_are_the_threads_the_environment_recorded(store: Store) -> None:
    """A check records its baseline's threads (2), a bench at torch's default on the same 2-CPU machine ran 2 as
    well: 'threads: A 2, B default' was reported as a difference."""
    base = {"scenario": "offline", "precision": "fp32", "device": "cpu", "threads": 2}
    check = add_run(store, "check", bench_result({8: 0.010}, seed=1), config=base)
    bench = add_run(store, "bench", bench_result({8: 0.010}, seed=2), config={**base, "threads": None})
    assert not any("different settings" in n for n in compare_records(store.get(check), store.get(bench)).notes)
    other = add_run(store, "bench", bench_result({8: 0.010}, seed=3), config={**base, "threads": None},
                    env={**ENV, "torch_threads": 16})
    (note,) = [n for n in compare_records(store.get(check), store.get(other)).notes if "different settings" in n]
    assert "threads: A 2, B default (16)" in note


def test_the_direction_comes_from_the_test_and_the_median_interval_together() -> None:
    """A significant test beside a median ratio of 1.000 (CI 0.999-1.001) read "B slower" whatever the test's
    direction (ratio >= 1.0 meant slower): the test said B tended to be faster."""
    from dlperf.compare.runs import PointComparison
    from dlperf.compare.stats import MannWhitney, RatioEstimate

    def point(prob_greater: float, ci: tuple[float, float]) -> PointComparison:
        test = MannWhitney(u=0.0, p_value=0.007, z=-2.7 if prob_greater < 0.5 else 2.7, prob_greater=prob_greater,
                           n_x=1000, n_y=1000)
        return PointComparison(1, [], test, RatioEstimate("p50", 1.0, 1.0, (ci[0] + ci[1]) / 2, ci, 0.95),
                               min_effect=0.0)

    assert point(0.49, (0.999, 1.001)).verdict == "no significant difference"
    assert point(0.51, (0.999, 1.001)).verdict == "no significant difference"
    assert point(0.45, (1.002, 1.01)).verdict == "no significant difference"  # the two disagree
    assert point(0.45, (0.95, 0.99)).verdict == "B faster"
    assert point(0.55, (1.01, 1.05)).verdict == "B slower"


def test_too_few_samples_are_not_judged_and_a_run_compared_with_itself_is_named(store: Store) -> None:
    """3 calls against 3 read 'median B/A 1.917 (CI 1.911-1.971): no significant difference', where no test of 3
    and 3 can reach p < 0.1; check calls the same data 'too few to judge'."""
    from rich.console import Console

    from dlperf.measure.stats import Measurement
    from dlperf.report.compare_text import comparison_tables

    def run(samples_ms: list[float]) -> str:
        m = Measurement([int(v * 1e6) for v in samples_ms])
        rec = store.create_run("bench", "zoo:mlp", {"batch_sizes": [1]}, ENV)
        store.finish_run(rec.id, {"points": [{"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}]})
        return rec.id

    a, b = run([2.0, 2.1, 2.05]), run([3.9, 4.0, 4.1])
    cmp = compare_records(store.get(a), store.get(b))
    (point,) = cmp.points
    assert point.too_few and point.verdict == "too few samples to judge" and point.needed == 6
    assert cmp.to_dict()["points"][0]["too_few_samples"] is True
    console = Console(width=160, record=True)
    for part in comparison_tables(cmp):
        console.print(part)
    text = console.export_text()
    assert ("median latency: too few samples to judge (median B/A 1.951 from 3 samples in a run, where a 95% interval "
            "needs 6: measure longer") in text
    assert "CI" not in text.split("median B/A", 1)[1]
    many = compare_records(store.get(run([2.0] * 3 + [2.1] * 3)), store.get(run([4.0] * 3 + [4.1] * 3)))
    assert not many.points[0].too_few and many.points[0].verdict == "B slower"
    same = compare_records(store.get(a), store.get(a))
    assert any(n.startswith(f"A and B are the same run ({a})") for n in same.notes)


def test_two_profiles_of_other_batch_sizes_or_modes_say_so(store: Store) -> None:
    """Profiles at batch 1 and 8 listed step_s and the rest side by side with no note; the batch size was a row."""
    def profile(batch: int, mode: str, step_s: float) -> str:
        rec = store.create_run("profile", "zoo:mlp", {"mode": mode, "batch_size": None}, ENV)
        store.finish_run(rec.id, {"trace": {"batch_size": batch}, "step_s": step_s})
        return rec.id

    a, b, c = profile(1, "inference", 0.001), profile(8, "inference", 0.004), profile(8, "train", 0.012)
    notes = "\n".join(compare_records(store.get(a), store.get(b)).notes)
    assert "measured at different batch sizes (trace.batch_size: A 1, B 8)" in notes
    notes = "\n".join(compare_records(store.get(b), store.get(c)).notes)
    assert "mode: A inference, B train" in notes and "different batch sizes" not in notes


def test_a_test_that_is_not_significant_gives_no_direction_whatever_the_interval() -> None:
    """The direction needs the test significant at alpha as well as the median ratio's interval on one side of 1:
    p=0.3 beside an interval of 1.01-1.05 is no significant difference, not "B slower"."""
    from dlperf.compare.runs import PointComparison
    from dlperf.compare.stats import MannWhitney, RatioEstimate

    def point(p_value: float, prob_greater: float, ci: tuple[float, float]) -> PointComparison:
        test = MannWhitney(u=0.0, p_value=p_value, z=1.0 if prob_greater > 0.5 else -1.0, prob_greater=prob_greater,
                           n_x=1000, n_y=1000)
        return PointComparison(1, [], test, RatioEstimate("p50", 1.0, 1.03, 1.03, ci, 0.95), min_effect=0.0)

    assert point(0.3, 0.55, (1.01, 1.05)).verdict == "no significant difference"
    assert point(0.3, 0.45, (0.95, 0.99)).verdict == "no significant difference"
    assert point(0.05, 0.55, (1.01, 1.05)).verdict == "no significant difference"  # p = alpha is not below it
    assert point(0.049, 0.55, (1.01, 1.05)).verdict == "B slower"


def test_a_drift_below_the_minimum_effect_between_two_runs_is_not_called_slower(store: Store) -> None:
    # two bench runs of one unchanged model read "B slower" in 11 of 12 pairs at B/A 1.002-1.014: thousands of calls
    # make any drift between two runs significant, so compare calls a direction beyond --min-effect, as `dlperf ab`
    from dlperf.report.compare_text import comparison_tables

    a = add_run(store, "bench", bench_result({1: 0.010}, n=20000, seed=1, sigma=0.01))
    b = add_run(store, "bench", bench_result({1: 0.01003}, n=20000, seed=2, sigma=0.01))
    (point,) = compare_records(store.get(a), store.get(b)).points
    assert point.test.p_value < 0.05 and point.median_ratio.ci[0] > 1.0  # significant, but by 0.3%
    assert point.verdict == "no significant difference" and point.below_min_effect == "slower"
    assert point.to_dict()["min_effect"] == 0.01
    # --json said "no significant difference" beside p < 0.05, where the terminal said B is slower by less than it
    assert point.to_dict()["below_min_effect"] == "slower"
    line = " ".join(_lines(comparison_tables(compare_records(store.get(a), store.get(b)))[0], 200)[-1:])
    assert line.startswith("median latency: not shown beyond --min-effect (B/A 1.00")
    assert line.endswith("): B is slower, significantly, but its interval reaches within the --min-effect of 1% of no "
                         "change")
    (exact,) = compare_records(store.get(a), store.get(b), min_effect=0.0).points
    assert exact.verdict == "B slower" and exact.to_dict()["below_min_effect"] is None
    with pytest.raises(ConfigError, match="min_effect must be a fraction"):
        compare_records(store.get(a), store.get(b), min_effect=5)


def test_the_p50_row_does_not_judge_a_change_its_verdict_finds_no_direction_in(store: Store) -> None:
    """With --min-effect 50%, the p50 row read '+2.3% worse' beside the verdict 'no difference as large as the
    minimum effect'; each other KPI is judged by its own interval against the same minimum effect."""
    from dlperf.report.compare_text import comparison_tables

    def p50_row(a: str, b: str, min_effect: float) -> str:
        lines = _lines(comparison_tables(compare_records(store.get(a), store.get(b), min_effect=min_effect))[0], 160)
        return next(line for line in lines if "p50 latency" in line)

    a = add_run(store, "bench", bench_result({1: 0.010}, n=2000, seed=1, sigma=0.01))
    slower = add_run(store, "bench", bench_result({1: 0.0123}, n=2000, seed=2, sigma=0.01))
    same = add_run(store, "bench", bench_result({1: 0.010}, seed=4))
    below = p50_row(a, slower, 0.5)
    assert "+23." in below and below.endswith("(not shown beyond --min-effect) │") and "worse" not in below
    assert p50_row(a, slower, 0.01).endswith("worse │")  # B slower: the row agrees with the verdict
    noise = p50_row(a, same, 0.01)
    assert noise.endswith("(within noise) │") and "worse" not in noise and "better" not in noise
    lines = _lines(comparison_tables(compare_records(store.get(a), store.get(slower), min_effect=0.5))[0], 160)
    assert next(line for line in lines if "mean latency" in line).endswith("(not shown beyond --min-effect) │")
    lines = _lines(comparison_tables(compare_records(store.get(a), store.get(slower), min_effect=0.01))[0], 160)
    assert next(line for line in lines if "mean latency" in line).endswith("worse │")


def test_the_other_kpi_rows_say_worse_or_better_only_beyond_their_own_noise(store: Store) -> None:
    """Two runs of one unchanged model: the p50 row read '+2.5% (within noise)' and the rows under it '-2.4% better'
    (p90), '+1.1% worse' (p99), '-0.6% worse' (throughput), as if those had been tested. Each is judged now by its
    own interval of B/A, in the table and in --json; a load level's throughput, counted over the level, has none."""
    from dlperf.compare.runs import compare_load_levels
    from dlperf.report.compare_text import comparison_tables

    a = add_run(store, "bench", bench_result({1: 0.001}, n=300, seed=3, sigma=0.3))
    same = add_run(store, "bench", bench_result({1: 0.001}, n=300, seed=4, sigma=0.3))
    slower = add_run(store, "bench", bench_result({1: 0.0015}, n=300, seed=5, sigma=0.3))
    noise = compare_records(store.get(a), store.get(same))
    rows = [line for line in _lines(comparison_tables(noise)[0], 160) if " ms " in line or "items/s " in line]
    assert len(rows) == 5
    for row in rows:
        assert "worse" not in row and "better" not in row and row.endswith("(within noise) │"), row
    assert [k["verdict"] for k in noise.to_dict()["points"][0]["kpis"]] == ["within noise"] * 5
    judged = compare_records(store.get(a), store.get(slower)).to_dict()["points"][0]["kpis"]
    assert [k["verdict"] for k in judged] == ["worse"] * 5
    assert judged[4]["ci"][1] < 1.0 < judged[1]["ci"][0]  # throughput's interval below 1, the p90's above
    rng = np.random.default_rng(0)
    level = compare_load_levels((list(rng.lognormal(-7, 0.3, 300)), 400.0, 1),
                                (list(rng.lognormal(-7, 0.3, 300)), 300.0, 1), "rate 400")
    throughput = level.kpis[4]
    assert throughput.ci is None and level.kpi_verdict(throughput) == "no test"


def test_a_real_change_whose_interval_reaches_near_no_change_is_not_called_below_the_minimum_effect() -> None:
    """`dlperf compare A B` showed "p90 -35.2% (below --min-effect)" with B/A in [0.625, 0.998]: the change is real and
    may be 37% or 0.2%, but the words read as a change smaller than 1%. It is now not shown beyond --min-effect."""
    from dlperf.compare.runs import NOT_BEYOND_MIN_EFFECT, KpiDelta, compare_load_levels
    from dlperf.report.compare_text import _change_cell

    rng = np.random.default_rng(0)
    point = compare_load_levels((list(rng.lognormal(-7, 0.3, 300)), 400.0, 1),
                                (list(rng.lognormal(-7, 0.3, 300)), 400.0, 1), "rate 400")
    p90 = KpiDelta("p90_s", "p90 latency ms", 0.010, 0.00648, lower_is_better=True, ci=(0.625, 0.998))
    assert point.min_effect == 0.01 and point.kpi_verdict(p90) == NOT_BEYOND_MIN_EFFECT
    assert _change_cell(p90, point).plain == "-35.2% (not shown beyond --min-effect)"
    beyond = KpiDelta("p90_s", "p90 latency ms", 0.010, 0.00648, lower_is_better=True, ci=(0.625, 0.985))
    assert point.kpi_verdict(beyond) == "better"
    holds_one = KpiDelta("p90_s", "p90 latency ms", 0.010, 0.00998, lower_is_better=True, ci=(0.99, 1.004))
    assert point.kpi_verdict(holds_one) == "within noise"


def _run_with_a_fast_stretch(store: Store) -> str:
    """A bench run as a busy machine left one: ~2 ms calls, and a stretch of 130 calls of 4 us in the middle (the
    machine quiet for a while), so the median falls between the two clusters."""
    rng = np.random.default_rng(7)
    samples = rng.lognormal(np.log(2e-3), 0.2, 274)
    samples[110:240] = rng.lognormal(np.log(4e-6), 0.05, 130)
    m = Measurement([int(v * 1e9) for v in samples])
    return add_run(store, "bench", {"workload": "w", "points": [
        {"batch_size": 1, "summary": m.summary(), "measurement": m.to_dict()}]})


def test_a_significant_test_beside_an_interval_that_holds_1_says_the_tests_disagree(store: Store) -> None:
    # A real compare on a busy machine read "no significant difference (B/A 2.157, CI 0.869-353.977; Mann-Whitney U
    # p=1.62e-06)": the test found a difference, the interval did not, and nothing said so or why.
    from dlperf.report.compare_text import comparison_tables

    a = _run_with_a_fast_stretch(store)
    b = add_run(store, "bench", bench_result({1: 1.8e-3}, n=184, seed=5, sigma=0.2))
    cmp = compare_records(store.get(a), store.get(b))
    (point,) = cmp.points
    lo, hi = point.median_ratio.ci
    assert point.test.p_value < 0.05 and lo < 1.0 < hi and hi > 50  # what the real runs gave
    assert point.verdict == "no significant difference"
    base_lo, base_hi = point.median_ratio.base_ci or (0.0, 0.0)
    assert base_lo < 1e-5 and base_hi > 1e-3  # A's own median: at the fast calls in some resamples, the slow in others
    said = point.tests_disagree or ""
    assert said.startswith("the tests disagree: Mann-Whitney U finds B's latencies larger (p=")
    assert "counting the 274 and 184 samples as independent draws" in said and said.count("holds 1") == 1
    assert "A's median alone moves between 0.00" in said and "x its value across the resamples" in said
    assert "B's median" not in said
    assert cmp.to_dict()["points"][0]["tests_disagree"] == said
    line = next(x for x in _lines(comparison_tables(cmp)[0], 2000) if x.startswith("median latency"))
    assert line.startswith("median latency: no significant difference (B/A ") and f"): {said}" in line


def test_the_tests_agree_on_a_clear_change_and_on_none(store: Store) -> None:
    a = add_run(store, "bench", bench_result({1: 0.010}, seed=3))
    for median, verdict in ((0.012, "B slower"), (0.010, "no significant difference")):
        b = add_run(store, "bench", bench_result({1: median}, seed=4))
        (point,) = compare_records(store.get(a), store.get(b)).points
        assert point.verdict == verdict and point.tests_disagree is None
        assert compare_records(store.get(a), store.get(b)).to_dict()["points"][0]["tests_disagree"] is None


def test_the_repr_is_one_line_with_each_batch_size_s_verdict(store: Store) -> None:
    """compare_records in a notebook cell showed both records and every KPI, test and interval: ~1.5 KB a batch
    size. Now the two runs and each batch size's verdict."""
    a = add_run(store, "bench", bench_result({1: 0.010, 8: 0.040}, seed=1))
    b = add_run(store, "bench", bench_result({1: 0.012, 8: 0.040}, seed=2))
    cmp = compare_records(store.get(a), store.get(b))
    text = repr(cmp)
    assert "\n" not in text and len(text) < 160, text
    said = len(cmp.warnings) + len(cmp.notes) + len(cmp.environment_differences)
    assert text == (f"RunComparison({a!r} vs {b!r}, batch 1: B slower; batch 8: {cmp.points[1].verdict}, {said} "
                    f"warning{'s' * (said != 1)} and notes; .points, .to_dict())")
