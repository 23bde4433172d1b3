"""The optimize report's candidate table: the labels stay readable on a narrow (piped) console."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from dlperf.report.optimize_view import candidate_view, candidates_table, fmt_metric, print_result, summary_lines

pytestmark = pytest.mark.unit

LABEL = "openvino(precision=int8-static,keep_fp32=auto)"
WIDE = ("#", "passes", "p50 ms", "p99 ms", "items/s", "metric", "drop", "MiB", "peak MiB", "build s", "gain", "paired")


def _data() -> dict[str, Any]:
    row = {"key": "k1", "label": LABEL, "status": "ok", "p50_s": 0.02, "p99_s": 0.03, "throughput": 50.0,
           "metric": 0.995, "metric_drop_rel": 0.005, "size_bytes": 2**24, "peak_rss_bytes": 2**30,
           "build_s": 90.0, "gain": 2.0, "feasible": True}
    base = {"key": "k0", "label": "baseline", "status": "ok", "p50_s": 0.04, "p99_s": 0.05, "throughput": 25.0,
            "metric": 1.0, "size_bytes": 2**26, "peak_rss_bytes": 2**30, "build_s": 0.0, "gain": 1.0}
    return {"workload": "zoo:minilm", "batch_size": 1, "device": "cpu", "candidates": [base, row],
            "pareto_front": ["k1"], "winner": "k1", "objective": "latency", "constraints": {},
            "metric_name": "fidelity", "elapsed_s": 100.0, "time_budget_s": 600.0}


@pytest.mark.parametrize("width", [80, 160])
def test_labels_survive_any_console_width(width: int) -> None:
    out = io.StringIO()
    print_result(_data(), Console(file=out, width=width, color_system=None))
    text = out.getvalue()
    assert "openvino(precision" in text and "baseline" in text  # folded over lines, never cut to nothing
    assert "20.000" in text and "2.00x" in text  # p50 ms and gain of the candidate
    assert ("p99 ms" in text) == (width >= 130)  # the narrow table drops the secondary columns


def test_summary_says_how_the_pick_fared_against_the_runner_up() -> None:
    data = _data()
    data["confirmation"] = {"describe": "winner vs baseline: 2.00x speed (95% CI 1.90-2.10x, 16 paired blocks): faster"}
    data["runner_up"] = {"key": "k0", "label": "baseline", "switched": False, "reason": f"{LABEL} is faster",
                         "describe": f"r vs {LABEL}: 0.80x speed (95% CI 0.70-0.90x, 16 paired blocks): slower"}
    lines = summary_lines(data)
    at = lines.index(f"winner: {LABEL}")
    assert lines[at + 1].startswith("  A/B against the baseline, both loaded in one process: winner vs baseline")
    assert lines[at + 2] == ("  A/B against the runner-up, both loaded in one process: "
                             f"r vs {LABEL}: 0.80x speed (95% CI 0.70-0.90x, 16 paired blocks): slower")
    assert lines[at + 3] == f"  kept {LABEL}: {LABEL} is faster"
    data["runner_up"] = {**data["runner_up"], "switched": True, "reason": "no significant difference, and ...",
                         "pick": "pruning + onnxruntime"}
    assert (f"  picked {LABEL} over pruning + onnxruntime: no significant difference, and ..."
            in summary_lines(data))
    del data["runner_up"]
    assert not any("runner-up" in line for line in summary_lines(data))
    # the winner's own caveat is said with the pick, not only in the stored run
    optimistic = ("its keep_fp32 layers were chosen on the eval data, which then judges the candidate too: the "
                  "candidate's metric may be optimistic")
    data["candidates"][1] = {**data["candidates"][1], "notes": [optimistic]}
    lines = summary_lines(data)
    assert lines[lines.index(f"winner: {LABEL}") + 1] == f"  its note: {optimistic}"


@pytest.mark.parametrize("width", [80, 160])
def test_runs_show_fits_the_table_to_its_console(width: int) -> None:
    from dlperf.report.terminal import record_view
    from dlperf.store.records import RunRecord

    out = io.StringIO()
    record = RunRecord("o1", "optimize", "zoo:minilm", "ok", "2026-01-01T10:00:00", result=_data())
    Console(file=out, width=width, color_system=None).print(record_view(record))
    text = out.getvalue()
    assert "openvino(precision" in text and "baseline" in text  # the wide table on 80 columns cut them to ''
    assert ("p99 ms" in text) == (width >= 130)


def test_an_indented_line_keeps_its_indent_when_it_wraps() -> None:
    data = _data()
    data["candidates"][1] = {**data["candidates"][1], "slower_reasons": [
        "the measurement is noisy, its IQR is 31% of the median (> 10%): the difference may not be real, "
        "measure it again with a longer budget"]}
    data["runner_up"] = {"describe": "B/A 0.950 (95% CI 0.930-0.970), faster over 20 paired ABBA blocks in one "
                         "process", "pick": LABEL, "switched": False, "reason": "no other candidate was faster"}
    out = io.StringIO()
    print_result(data, Console(file=out, width=80, color_system=None))
    lines = out.getvalue().splitlines()
    why = lines.index("why:")
    assert lines[why + 1].startswith(f"  1 {LABEL}: slower: the measurement is")
    assert lines[why + 2].startswith("  ") and lines[why + 2].strip()  # it went to column 0
    runner_up = next(i for i, line in enumerate(lines) if line.startswith("  A/B against the runner-up"))
    assert lines[runner_up + 1].startswith("  ") and not lines[runner_up + 1].startswith("  kept")


def test_a_resumed_search_counts_only_its_own_build_time() -> None:
    """Reused candidates were built in the run they come from: a resumed 52 s search said 60 s of build time."""
    data = _data()
    assert any("(build/compile time 90 s included)" in line for line in summary_lines(data))
    data["candidates"][1]["reused"] = True
    data["resumed_from"] = "abc123"
    assert any("(build/compile time 0 s included); resumed from run abc123" in line for line in summary_lines(data))


def _cells(data: dict[str, Any]) -> list[list[str]]:
    """The candidates table's cells, row by row."""
    table = candidates_table(data, width=160)
    return [[str(c) for c in column.cells] for column in table.columns]


def test_a_tiny_metric_keeps_its_digits_and_an_absolute_budget_shows_absolute_drops() -> None:
    """A metric of ~1.7e-06 showed as 0.0000 in every row, and the drop column was relative under
    --max-metric-drop-abs 2e-9, so the table could not show that the winner meets the constraint."""
    assert [fmt_metric(v) for v in (0.9723, 1.0, 0.0, 23.45678, 0.05123, 1.7071e-06, None)] == [
        "0.9723", "1.0000", "0.0000", "23.4568", "0.05123", "1.707e-06", "-"]
    data = _data()
    data["candidates"][0]["metric"] = 1.7071e-06
    data["candidates"][1].update(metric=1.7061e-06, metric_drop=1.0e-09, metric_drop_rel=1.0e-09 / 1.7071e-06)
    data["constraints"] = {"max_metric_drop": None, "max_metric_drop_abs": 2e-9}
    columns = _cells(data)
    metric, drop = columns[WIDE.index("metric")], columns[WIDE.index("drop")]
    assert metric == ["1.707e-06", "1.706e-06"]
    assert drop == ["-", "+1e-09"]
    assert any("constraints: metric drop <= 2e-09" in line for line in summary_lines(data))
    data["constraints"] = {"max_metric_drop": 0.01, "max_metric_drop_abs": None}
    assert _cells(data)[WIDE.index("drop")] == ["-", "+0.06%"]  # a relative budget keeps the relative drop
    # a candidate's own view does not know its search's constraint: both
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(candidate_view(data["candidates"][1]))
    assert "metric: 1.706e-06 (drop +0.06%, +1e-09)" in out.getvalue()


def test_a_candidate_s_training_time_is_shown_as_training_not_as_compile() -> None:
    """A distill candidate's view read 'build 31.0 s (compile 30.0 s)' for 30 s of distillation; a row stored before
    the two were apart holds both in compile_s, and says so."""
    def build_line(row: dict[str, Any]) -> str:
        out = io.StringIO()
        Console(file=out, width=160, color_system=None).print(candidate_view({**_data()["candidates"][1], **row}))
        return next(line.strip() for line in out.getvalue().splitlines() if line.strip().startswith("build"))

    assert build_line({"build_s": 31.0, "compile_s": 0.0, "train_s": 30.0}).split(maxsplit=1)[1] == (
        "31.0 s (training 30.0 s)")
    assert build_line({"build_s": 12.0, "compile_s": 4.0, "train_s": 8.0}).endswith("(compile 4.0 s, training 8.0 s)")
    assert build_line({"build_s": 0.5, "compile_s": 0.0, "train_s": 0.0}).endswith("0.5 s")
    assert build_line({"build_s": 31.0, "compile_s": 30.0}).endswith("(compile or training 30.0 s)")


def test_the_winner_mark_does_not_hide_the_pareto_mark() -> None:
    """`✓` replaced `*`: a winner the runner-up rule picked off the frontier looked like one on it."""
    data = _data()
    data["pareto_front"] = ["k0", "k1"]
    assert _cells(data)[0] == ["0*", "1✓*"]
    data["pareto_front"] = ["k0"]  # the winner off the frontier
    assert _cells(data)[0] == ["0*", "1✓"]
    assert any("* = Pareto frontier (latency, metric, size, memory), ✓ = winner" in line
               for line in summary_lines(data))


def test_no_winner_says_confirmed_only_where_an_a_b_was_run() -> None:
    """With --objective memory the baseline ranked first, no A/B was run, and the line said 'confirmed'."""
    data = {**_data(), "winner": None, "objective": "memory",
            "notes": ["no candidate that meets the constraints beats the baseline on memory: ..."]}
    lines = summary_lines(data)
    assert "no winner: no candidate beat the baseline" in lines
    assert not any("confirmed" in line for line in lines)
    assert "note: no candidate that meets the constraints beats the baseline on memory: ..." in lines
    data["candidates"][1]["confirmation"] = {"status": "ok", "describe": "winner vs baseline: 0.98x speed: slower"}
    data["confirmation"] = data["candidates"][1]["confirmation"]
    lines = summary_lines(data)
    assert "no winner: no candidate was confirmed better than the baseline" in lines
    assert "  best candidate's A/B: candidate vs baseline: 0.98x speed: slower" in lines


def test_a_gain_far_from_its_paired_gain_is_called_out() -> None:
    """A baseline measured while the machine was busy (p50 40 ms for zoo:mlp) gave 'gain 855.52x' beside 'paired
    1.01x', with no word on which to trust."""
    data = _data()
    data["candidates"][1].update(gain=855.52, paired_gain=1.01)
    (line,) = [line for line in summary_lines(data) if "disagree" in line]
    assert "1 of 1 candidates" in line and "855.52x, paired 1.01x" in line and "ranks by" in line
    data["candidates"][1].update(gain=1.6, paired_gain=1.01)  # within 2x: two processes' usual spread
    assert not any("disagree" in line for line in summary_lines(data))


def test_a_tiny_gain_keeps_two_significant_digits() -> None:
    """With three CPU hogs on 2 cores hygiene's process stalled (p50 232 ms against the baseline's 0.058 ms): its gain
    of 0.00025 read "0.00x" in the table, the why and the disagreement line, as if it were none at all."""
    data = _data()
    data["candidates"][1].update(gain=2.5e-4, paired_gain=1.88, ranked_by="gain")
    (line,) = [line for line in summary_lines(data) if "disagree" in line]
    assert "(e.g. " + LABEL + ": 0.00025x, paired 1.88x)" in line
    cells = _cells(data)
    assert cells[WIDE.index("gain")][1] == "0.00025x" and cells[WIDE.index("paired")][1] == "1.88x"
    from dlperf.measure.stats import fmt_ratio

    assert [fmt_ratio(x) for x in (0.0523, 0.1, 0.0997, 2.0, 855.516, 0.0)] == [
        "0.052x", "0.10x", "0.10x", "2.00x", "855.52x", "0.00x"]


def test_the_gain_is_named_for_the_objective_it_measures(capsys: pytest.CaptureFixture[str]) -> None:
    """Under --objective throughput the gain line said "the baseline's p50 / the candidate's" for a ratio of items/s;
    under size the progress line printed 'dynamic_int8: p50 0.072 ms 2.78x', a size gain beside a p50 slower than the
    baseline's 0.060 ms."""
    from dlperf.cli.optimize import _Progress

    data = _data()
    data["candidates"][1]["paired_gain"] = 1.9
    assert any(line.startswith("gain: the baseline's p50 / the candidate's, each") for line in summary_lines(data))
    data["objective"] = "throughput"
    assert any(line.startswith("gain: the candidate's items/s / the baseline's, each") for line in summary_lines(data))
    row = {"status": "ok", "label": "dynamic_int8", "p50_s": 0.072e-3, "gain": 2.78, "feasible": True}
    _Progress("size")("candidate_done", {"row": row})
    _Progress("latency")("candidate_done", {"row": {**row, "paired_gain": 0.75}})
    assert capsys.readouterr().err.splitlines() == [
        "  dynamic_int8: p50 0.072 ms, size 2.78x",
        "  dynamic_int8: p50 0.072 ms 2.78x (in its process against the original: 0.75x)"]


def test_the_summary_says_where_the_candidates_artifacts_stay_and_how_much_they_take() -> None:
    """Every candidate's artifact stays in the search's work folder (about 86 MiB a MiniLM candidate, under
    .dlperf/optimize by default), and the report never said where or how much."""
    data = {**_data(), "workdir": "/w/.dlperf/optimize/abc123", "workdir_bytes": 1536 * 2**20}
    assert ("candidates' artifacts: /w/.dlperf/optimize/abc123 (1536.0 MiB; remove it when you no longer need them: "
            "the export does not use it)") in summary_lines(data)
    assert not any("candidates' artifacts" in line for line in summary_lines(_data()))


def test_the_memory_objective_says_what_the_peak_includes() -> None:
    """`peak MiB` was the candidate's own process (torch and the original model in it) with nothing saying so; under
    --objective memory it is a fresh process's that loads the artifact alone, and the summary says that, and names
    a candidate whose fresh process failed (its figure is the old one)."""
    data = {**_data(), "objective": "memory"}
    data["candidates"][0]["deployed_memory"] = {"peak_rss_bytes": 2**29, "engine": "torch"}
    data["candidates"][1]["deployed_memory"] = {"error": "RuntimeError: no"}
    line = next(x for x in summary_lines(data) if x.startswith("peak MiB"))
    assert "a fresh process that loads the exported artifact alone" in line and "no torch" in line
    assert line.endswith(f"not measured so for {LABEL} (their own process's peak during timing)")
    assert not any(x.startswith("peak MiB") for x in summary_lines(_data()))  # latency: no fresh process, no line


def test_a_memory_search_on_a_gpu_shows_and_explains_the_gpu_memory_it_ranks_by() -> None:
    """On a GPU the memory objective ranks by each deployed process's GPU memory: the table has it beside the peak
    RSS, the summary says what it counts and names a candidate whose GPU memory was not read."""
    from dlperf.optimize.evaluate import TIMED_GPU_MEMORY
    from dlperf.optimize.footprint import NVML_GPU_MEMORY

    data = {**_data(), "objective": "memory", "device": "cuda"}
    base, row = data["candidates"]
    base.update(deployed_memory={"peak_rss_bytes": 2**29}, gpu_memory_bytes=600 * 2**20,
                gpu_memory_of=NVML_GPU_MEMORY)
    row.update(deployed_memory={"error": "timed out"}, gpu_memory_bytes=None)
    out = io.StringIO()
    print_result(data, Console(file=out, width=200, color_system=None))
    header = next(line for line in out.getvalue().splitlines() if "passes" in line)
    assert "peak MiB" in header and "GPU MiB" in header
    assert "600.0" in out.getvalue()
    line = next(x for x in summary_lines(data) if x.startswith("peak MiB"))
    assert "GPU MiB, which the memory objective ranks by on a GPU" in line
    assert line.endswith(f"not read for {LABEL} (ranked last)")
    row.update(gpu_memory_bytes=2**20, gpu_memory_of=TIMED_GPU_MEMORY)
    line = next(x for x in summary_lines(data) if x.startswith("peak MiB"))
    assert line.endswith(f"for some candidates {TIMED_GPU_MEMORY}")
    out = io.StringIO()  # a search on the CPU has no such column
    print_result(_data(), Console(file=out, width=200, color_system=None))
    assert "GPU MiB" not in out.getvalue()
    out = io.StringIO()  # nor a latency search on a GPU, whose engine rows have no GPU figure
    print_result({**data, "objective": "latency"}, Console(file=out, width=200, color_system=None))
    assert "GPU MiB" not in out.getvalue() and "peak MiB" in out.getvalue()


def test_no_winner_where_the_baseline_too_misses_the_constraints_says_so() -> None:
    """An impossible --latency-budget-ms: the baseline's own row said it exceeded the budget, and the summary said
    "no candidate beat the baseline"."""
    data = {**_data(), "winner": None}
    for row in data["candidates"]:
        row.update(status="ok", feasible=False, violations=["p99 0.26 ms over the 0.001 ms latency budget"])
    lines = summary_lines(data)
    assert ("no winner: nothing measured meets the constraints, the baseline included (each row's why says what it "
            "missed)") in lines
    assert "no winner: no candidate beat the baseline" not in lines


def test_a_failure_repeated_by_later_candidates_is_named_once() -> None:
    """Three compile modes failing on the same recompile printed the same three-line error three times."""
    from dlperf.report.optimize_view import why_lines

    data = _data()
    error = "torch.compile recompiles on a second input of the same shape (Dynamo's failed guard: x == 1)"
    failed = [{"key": f"c{i}", "label": label, "status": "failed", "phase": "apply", "error": f"{label}: {error}"}
              for i, label in enumerate(["compile", "compile(freezing=True)", "hygiene + compile"])]
    failed[2]["error"] = f"compile: {error}"  # the pass's own label, inside a pipeline's
    other = {"key": "c9", "label": "onnxruntime", "status": "failed", "phase": "apply",
             "error": "onnxruntime failed: ExportError: no"}
    data["candidates"] += [*failed, other]
    lines = why_lines(data)
    assert lines[0] == f"  2 compile: failed in apply: compile: {error}"
    assert lines[1] == "  3 compile(freezing=True): failed in apply: the same error as 2 (compile)"
    assert lines[2] == "  4 hygiene + compile: failed in apply: the same error as 2 (compile)"
    assert lines[3] == "  5 onnxruntime: failed in apply: onnxruntime failed: ExportError: no"


def test_a_failed_candidate_shows_its_status_not_the_figures_it_measured_before_failing() -> None:
    """A candidate timed before its eval failed keeps its throughput and gain in the record: the table shows '-' and
    'failed', as for its p50, not a gain beside a run that failed."""
    data = _data()
    data["candidates"][1].update(status="failed", phase="eval", error="eval: boom")
    columns = dict(zip(WIDE, _cells(data), strict=True))
    assert [columns[name][1] for name in ("p50 ms", "items/s", "metric", "gain", "paired")] == [
        "-", "-", "-", "failed", "-"]


def test_two_failures_that_differ_only_past_a_worded_head_are_not_the_same_error() -> None:
    """An error is another's but for a pass's label in front only where that label is one word ('compile(...)')."""
    from dlperf.report.optimize_view import why_lines

    data = _data()
    data["candidates"] += [{"key": f"c{i}", "label": label, "status": "failed", "phase": "apply",
                            "error": f"could not {verb}: shape mismatch"}
                           for i, (label, verb) in enumerate([("onnx", "export"), ("openvino", "convert")])]
    assert why_lines(data)[-2:] == ["  2 onnx: failed in apply: could not export: shape mismatch",
                                    "  3 openvino: failed in apply: could not convert: shape mismatch"]


def test_a_pass_that_does_not_apply_is_said_not_applicable_once() -> None:
    """The pass's error names it and says "not applicable" (stored runs keep it so): the line read "2 dynamic_int8:
    not applicable: dynamic_int8: not applicable: its nn.Linear layers ...". Inside a pipeline the pass is named
    (an older run's error had the exception's class in front)."""
    from dlperf.report.optimize_view import why_lines

    data = _data()
    reason = "its nn.Linear layers are inside a scripted module"
    data["candidates"] += [
        {"key": "c0", "label": "dynamic_int8", "status": "not_applicable", "phase": "apply",
         "error": f"dynamic_int8: not applicable: {reason}"},
        {"key": "c1", "label": "channels_last + compile", "status": "not_applicable", "phase": "apply",
         "error": "PassNotApplicable: channels_last: not applicable: the model has no 2-D convolution"}]
    assert why_lines(data)[-2:] == [
        f"  2 dynamic_int8: not applicable: {reason}",
        "  3 channels_last + compile: not applicable (channels_last): the model has no 2-D convolution"]


def test_a_pass_not_applicable_again_in_a_pipeline_gives_the_same_reason_not_error() -> None:
    """conv_wl.py's why-lines read "15 hygiene + dynamic_int8: not applicable (dynamic_int8): the same error as 2
    (dynamic_int8)", where 2 was not applicable, not an error."""
    from dlperf.report.optimize_view import why_lines

    data = _data()
    reason = "the model has no nn.Linear with at least 16 input and output features"
    data["candidates"] += [
        {"key": "c0", "label": "dynamic_int8", "status": "not_applicable", "phase": "apply",
         "error": f"dynamic_int8: not applicable: {reason}"},
        {"key": "c1", "label": "distill + dynamic_int8", "status": "not_applicable", "phase": "apply",
         "error": f"dynamic_int8: not applicable: {reason}"}]
    assert why_lines(data)[-1] == ("  3 distill + dynamic_int8: not applicable (dynamic_int8): the same reason as 2 "
                                   "(dynamic_int8)")


@pytest.mark.parametrize("measured", [False, True], ids=["none-measured", "one-measured"])
def test_no_winner_says_the_budget_ran_out_only_where_no_candidate_was_measured(measured: bool) -> None:
    """On a slow machine the baseline took the budget: the first candidate was cut short and the rest never tried,
    and the headline read 'no winner: no candidate beat the baseline'. Where one was measured and lost, it still is."""
    data = {**_data(), "winner": None, "baseline": {"key": "k0"},
            "not_tried": [{"label": f"p{i}", "key": f"n{i}", "reason": "time budget"} for i in range(5)]}
    data["candidates"][1].update(status="ok", feasible=True) if measured else data["candidates"][1].update(
        status="failed", phase="measure", budget_cut=True, error="timed out after 9 s: the time budget had only 9 s")
    assert summary_lines(data)[2] == ("no winner: no candidate beat the baseline" if measured else
                                      "no winner: the time budget ran out before any candidate was measured (1 cut "
                                      "short, 5 not tried; a longer --time-budget tries them)")


def test_the_constraints_line_gives_each_in_its_unit() -> None:
    data = {**_data(), "constraints": {"max_metric_drop": 0.01, "latency_budget_s": 0.05}}
    assert any(line.startswith("objective: latency; constraints: metric drop <= 1.00%, p99 <= 50 ms;")
               for line in summary_lines(data))


def test_no_winner_after_a_candidate_s_own_ab_failed_says_none_was_confirmed() -> None:
    """A search whose only A/B failed records the error on the candidate, and no confirmation of its own."""
    data = {**_data(), "winner": None}
    data["candidates"][1]["confirm_error"] = "the A/B's process died"
    assert "no winner: no candidate was confirmed better than the baseline" in summary_lines(data)


def test_a_metric_gain_that_rounds_to_zero_shows_no_minus_sign() -> None:
    """A candidate 0.003% better than the baseline read "-0.00%" in the drop column: a sign for a zero."""
    data = _data()
    data["candidates"][1]["metric_drop_rel"] = -3e-05
    assert _cells(data)[WIDE.index("drop")] == ["-", "+0.00%"]
    data["candidates"][1]["metric_drop_rel"] = -0.0004  # a gain the two decimals show keeps its sign
    assert _cells(data)[WIDE.index("drop")] == ["-", "-0.04%"]
