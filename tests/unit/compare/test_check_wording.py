"""How a check words its verdict: one sign convention with `dlperf compare`, one wording for `dlperf check` and
`dlperf.testing`, the inconclusive passes pytest is told about, and the gated metric as the run's headline."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from dlperf.compare.gate import GateConfig, GateResult, gate
from dlperf.compare.runs import RunComparison, compare_points
from dlperf.compare.stats import change_text
from dlperf.measure.stats import Measurement
from dlperf.report.compare_text import check_lines, comparison_tables, gate_lines
from dlperf.report.terminal import check_headline
from dlperf.store.records import RunRecord
from dlperf.testing import PerformanceRegression, pass_caveats

pytestmark = pytest.mark.unit


def _m(rng: np.random.Generator, median_s: float, n: int, sigma: float = 0.05) -> Measurement:
    return Measurement([int(s) for s in rng.lognormal(np.log(median_s), sigma, n) * 1e9])


def _slower_throughput() -> GateResult:
    rng = np.random.default_rng(3)
    return gate({1: _m(rng, 0.001, 400)}, {1: _m(rng, 0.00133, 400)}, GateConfig(metric="throughput"))


def test_change_text_gives_the_direction_in_words() -> None:
    assert change_text(0.299, lower_is_better=True) == "+29.9% worse"
    assert change_text(-0.251, lower_is_better=False) == "-25.1% worse"
    assert change_text(0.03, lower_is_better=False) == "+3.0% better"
    assert change_text(-0.03, lower_is_better=True) == "-3.0% better"
    assert change_text(0.0002, lower_is_better=True) == "+0.0%"  # no direction to a change that reads 0.0%


def test_a_throughput_loss_reads_the_same_in_check_and_compare() -> None:
    """check printed a quarter less throughput `+25.1%` (the regression, positive when worse) where compare printed
    it `-25.1%` (the KPI's own change); both now print the KPI's own change and say it is worse."""
    result = _slower_throughput()
    point = result.points[0]
    assert point.regression == pytest.approx(0.25, abs=0.03)  # the JSON field keeps its meaning
    assert point.change == pytest.approx(-point.regression)
    lo, hi = point.change_ci
    assert lo <= point.change <= hi < 0
    reason = result.reasons()[0]
    assert f": {point.change * 100:+.1f}% worse ({result.config.confidence:.0%} CI {lo * 100:+.1f}% to " \
           f"{hi * 100:+.1f}%;" in reason, reason
    recorded = result.to_dict()["points"][0]
    assert recorded["change"] == point.change and recorded["change_ci"] == [lo, hi]
    assert recorded["regression"] == point.regression and recorded["lower_is_better"] is False

    rng = np.random.default_rng(3)
    base, slow = _m(rng, 0.001, 400), _m(rng, 0.00133, 400)
    compared = compare_points(base, slow, 1)
    throughput = next(k for k in compared.kpis if k.name == "throughput")
    assert throughput.to_dict()["better"] is False and throughput.change < 0
    a = RunRecord("a1", "bench", "zoo:mlp", "ok", "2026-12-05T10:00:00")
    b = RunRecord("b1", "bench", "zoo:mlp", "ok", "2026-12-05T11:00:00")
    console = Console(width=120, record=True)
    for part in comparison_tables(RunComparison(a, b, [compared], [])):
        console.print(part)
    row = next(line for line in console.export_text().splitlines() if "throughput items/s" in line)
    assert row.rstrip(" │").endswith(f"{throughput.change * 100:+.1f}% worse"), row


def test_a_recorded_checks_headline_words_the_change_as_check_does() -> None:
    recorded = _slower_throughput().to_dict()
    change = recorded["points"][0]["change"]
    assert check_headline(recorded) == f"FAIL: throughput {change * 100:+.1f}% worse @ bs1"
    # a record from before `change` was recorded: derived from its regression, with the same sign
    old = {**recorded, "points": [{k: v for k, v in recorded["points"][0].items()
                                   if k not in ("change", "change_ci", "lower_is_better")}]}
    assert check_headline(old) == check_headline(recorded)


def test_check_and_assert_no_regression_word_a_failure_alike() -> None:
    """`dlperf check` ended a failure `FAIL: p50 regressed significantly by more than 5.0%` under a line naming the
    runs; PerformanceRegression said `performance regression of ...` and ended `FAIL: a significant regression above
    the threshold`. One function words both."""
    rng = np.random.default_rng(1)
    result = gate({1: _m(rng, 0.01, 300)}, {1: _m(rng, 0.012, 300)}, GateConfig(max_regression=0.05))
    result.baseline_run_id, result.current_run_id = "base0001", "this0002"
    message = str(PerformanceRegression(result, workload="zoo:mlp", baseline="main", store_url="s.db"))
    lines = [line.plain for line in check_lines(result.to_dict(), "zoo:mlp", "main", " --store s.db")]
    assert message.splitlines() == lines
    assert lines[0] == "check of zoo:mlp against baseline 'main' (run base0001); this run: this0002"
    assert "FAIL: p50 regressed significantly by more than 5.0%" in lines
    assert result.describe().splitlines()[-1] == "FAIL: p50 regressed significantly by more than 5.0%"
    assert lines[-2:] == ["details: `dlperf compare base0001 this0002 --store s.db`",
                          "if the slowdown is intended, make this run the baseline: "
                          "`dlperf baseline set main this0002 --store s.db`"]


def test_the_check_names_the_commits_of_the_baseline_and_of_this_run() -> None:
    """A CI log read "check of my_model.py:workload against baseline 'main' (run 8aea37c44794); this run:
    44e3de04dd26": which commit of main the pull request was judged against took `dlperf runs show`."""
    rng = np.random.default_rng(1)
    result = gate({1: _m(rng, 0.01, 300)}, {1: _m(rng, 0.01, 300)}, GateConfig(max_regression=0.05))
    result.baseline_run_id, result.current_run_id = "base0001", "this0002"
    result.baseline_git_commit, result.baseline_git_dirty = "f" * 40, False
    result.git_commit, result.git_dirty = "a" * 40, True
    lines = [line.plain for line in check_lines(result.to_dict(), "zoo:mlp", "main")]
    assert lines[0] == (f"check of zoo:mlp against baseline 'main' (run base0001 at {'f' * 12}); this run: this0002 "
                        f"at {'a' * 12}+")
    assert (result.to_dict()["baseline_git_commit"], result.to_dict()["git_dirty"]) == ("f" * 40, True)


def test_an_inconclusive_pass_is_one_of_the_caveats_pytest_is_warned_of() -> None:
    """A pass whose interval reaches above the threshold printed "inconclusive" in `dlperf check` and nothing under
    pytest, which issued only the verdict's warnings as PerformanceCheckWarning."""
    rng = np.random.default_rng(1)
    noisy = gate({1: _m(rng, 0.01, 60, sigma=0.4)}, {1: _m(rng, 0.0101, 60, sigma=0.4)}, GateConfig())
    assert not noisy.failed and noisy.points[0].inconclusive
    assert noisy.to_dict()["points"][0]["inconclusive"] is True
    assert pass_caveats(noisy) == [noisy.reasons()[0]] and "inconclusive" in pass_caveats(noisy)[0]
    calm = gate({1: _m(rng, 0.01, 2000, sigma=0.02)}, {1: _m(rng, 0.0101, 2000, sigma=0.02)}, GateConfig())
    assert not calm.points[0].inconclusive and pass_caveats(calm) == []


def test_a_checks_headline_is_the_gated_metric() -> None:
    """A check run recorded bench's headline (throughput at its best batch size) whatever the gate judged."""
    rng = np.random.default_rng(2)
    result = gate({1: _m(rng, 0.01, 300), 8: _m(rng, 0.01, 300)},
                  {1: _m(rng, 0.0101, 300), 8: _m(rng, 0.013, 300)}, GateConfig(metric="p90"))
    headline = result.headline()
    worst = result.points[1]
    assert headline["kpi"] == "p90_s" and headline["unit"] == "s" and headline["batch_size"] == 8
    assert headline["value"] == worst.current_value and headline["regression"] == worst.regression
    assert result.to_dict()["headline"] == headline
    assert _slower_throughput().headline()["kpi"] == "throughput"


def test_compare_prints_a_time_kpi_in_ms_and_each_run_s_other_results_in_its_own_column() -> None:
    rng = np.random.default_rng(5)
    compared = compare_points(_m(rng, 0.010, 400), _m(rng, 0.012, 400), 1)
    a = RunRecord("a1", "bench", "zoo:mlp", "ok", "2026-12-05T10:00:00")
    b = RunRecord("b1", "bench", "zoo:mlp", "ok", "2026-12-05T11:00:00")
    console = Console(width=120, record=True)
    for part in comparison_tables(RunComparison(a, b, [compared], [],
                                                  other_deltas=[("gemm_flops.fp32", 1.5e11, 2.5e11)])):
        console.print(part)
    rows = [re.sub("[│┃]", " ", line).split() for line in console.export_text().splitlines()]
    p50 = next(k for k in compared.kpis if k.name == "p50_s")
    assert next(r for r in rows if r[:3] == ["p50", "latency", "ms"])[3:5] == [f"{p50.a * 1e3:.4g}",
                                                                               f"{p50.b * 1e3:.4g}"]
    assert ["gemm_flops.fp32", "1.5e+11", "2.5e+11", "+66.7%"] in rows


def test_other_results_give_their_change() -> None:
    """Two profile runs compared listed `analyses.breakdown.step_s  0.256061  0.186133` and no change."""
    a = RunRecord("a1", "profile", "zoo:minilm", "ok", "2026-12-07T04:00:00")
    b = RunRecord("b1", "profile", "zoo:minilm", "ok", "2026-12-07T04:01:00")
    console = Console(width=120, record=True)
    for part in comparison_tables(RunComparison(a, b, [], [], other_deltas=[("step_s", 0.256061, 0.186133),
                                                                            ("waits", 0.0, 2.0)])):
        console.print(part)
    rows = [re.sub("[│┃]", " ", line).split() for line in console.export_text().splitlines()]
    assert ["step_s", "0.256061", "0.186133", "-27.3%"] in rows
    assert ["waits", "0", "2", "-"] in rows


def test_a_passing_check_gives_no_commands_for_accepting_a_slowdown() -> None:
    rng = np.random.default_rng(6)
    result = gate({1: _m(rng, 0.01, 300)}, {1: _m(rng, 0.01, 300)}, GateConfig(max_regression=0.05))
    result.baseline_run_id, result.current_run_id = "base0001", "this0002"
    lines = [line.plain for line in check_lines(result.to_dict(), "zoo:mlp", "main")]
    assert not result.failed and lines[-1] == "PASS: no significant regression above the threshold"


def test_a_significant_improvement_says_significantly_better_in_check_runs_show_and_the_report() -> None:
    """An 88% faster check read `-88.1% better (95% CI -88.5% to -87.4%): within the threshold: pass`, the words of a
    change of +0.1%, in `dlperf check`, `runs show` and (a plain 'pass') the HTML report."""
    from dlperf.report.html import render_report

    rng = np.random.default_rng(8)
    faster = gate({1: _m(rng, 0.010, 300)}, {1: _m(rng, 0.0012, 300)}, GateConfig())
    point = faster.points[0]
    assert point.improved and point.regression_ci[1] < 0 and not point.significant
    assert faster.reasons()[0].endswith("): significantly better: pass"), faster.reasons()[0]
    recorded = faster.to_dict()
    assert recorded["points"][0]["improved"] is True
    assert "significantly better: pass" in gate_lines(recorded)[0].plain
    points = [{"batch_size": 1, "summary": {"n": 300}}]
    html = render_report([RunRecord("c1", "check", "zoo:mlp", "ok", "2026-12-06T10:00:00",
                                    result={"points": points, "gate": recorded})])
    assert '<span class="good">significantly better: pass</span>' in html
    # a record from before `improved` was recorded: read from its interval
    old = {**recorded, "points": [{k: v for k, v in recorded["points"][0].items() if k != "improved"}]}
    html = render_report([RunRecord("c2", "check", "zoo:mlp", "ok", "2026-12-06T10:00:00",
                                    result={"points": points, "gate": old})])
    assert '<span class="good">significantly better: pass</span>' in html
    # an unchanged run still reads "within the threshold", and a too-short run never "significantly better"
    base = _m(rng, 0.010, 2000, sigma=0.02)
    same = gate({1: base}, {1: Measurement(list(base.samples_ns))}, GateConfig())
    assert not same.points[0].improved and same.reasons()[0].endswith(": within the threshold: pass")
    few = gate({1: _m(rng, 0.010, 3, sigma=0.01)}, {1: _m(rng, 0.0012, 3, sigma=0.01)}, GateConfig())
    assert not few.points[0].improved and few.to_dict()["points"][0]["improved"] is False


def test_a_check_whose_baseline_run_was_deleted_meanwhile_names_no_compare_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf runs delete` of the baseline's run while a check measured: the FAIL ended 'details: `dlperf compare
    BASE THIS`', and that command answered that run BASE is not in the store."""
    from types import SimpleNamespace

    from dlperf.cli.main import main
    from dlperf.compare.baselines import set_baseline
    from dlperf.store import Store

    from .helpers import add_run, bench_result

    db = tmp_path / "runs.db"
    store = Store(db)
    base = add_run(store, "bench", bench_result({1: 0.01}))
    set_baseline(store, "main", base)
    this = add_run(store, "check", {})

    def measure_while_the_run_is_deleted(*args: object, **kwargs: object) -> SimpleNamespace:
        Store(db).delete(base, force=True)
        rng = np.random.default_rng(1)
        result = gate({1: _m(rng, 0.01, 300)}, {1: _m(rng, 0.012, 300)}, GateConfig(max_regression=0.05))
        result.baseline_run_id, result.current_run_id = base, this
        return SimpleNamespace(gate=result, exit_code=1)

    monkeypatch.setattr("dlperf.compare.check.check_against_baseline", measure_while_the_run_is_deleted)
    assert main(["check", "zoo:mlp", "--baseline", "main", "--store", str(db)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    shown = store.shown_url
    assert f"dlperf compare {base}" not in out
    assert (f"the baseline's run {base} was deleted from the store during the check: there is no `dlperf compare` "
            f"with it; `dlperf runs show {this} --store {shown}` has this run's figures") in out
    assert f"`dlperf baseline set main {this} --store {shown}`" in out
