"""Terminal renderers: units, sparkline, and the tables rendered from stored dicts."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console, RenderableType

from dlperf.measure.notes import bench_warnings
from dlperf.measure.stats import Measurement, fmt_count
from dlperf.report.terminal import (
    bench_report,
    bench_table,
    ceilings_table,
    environment_line,
    fmt_ci,
    fmt_mib,
    fmt_ms,
    fmt_si,
    headline_text,
    history_view,
    record_view,
    runs_table,
    sparkline,
)
from dlperf.store.query import History, HistoryPoint
from dlperf.store.records import RunRecord

pytestmark = pytest.mark.unit


def _text(renderable: RenderableType, width: int = 100) -> str:
    """What a console `width` columns wide shows of `renderable`."""
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    text = console.export_text()
    console.file.close()
    return text


RESULT: dict[str, Any] = {
    "workload": "mlp",
    "model_bytes": 3 * 2**20,
    "headline": {"kpi": "throughput", "value": 12345.6, "batch_size": 8},
    "points": [{
        "batch_size": 8, "peak_rss_bytes": 200 * 2**20, "process_cpu_percent": 190.4,
        "summary": {"n": 123, "p50_s": 0.00125, "p90_s": 0.0015, "p99_s": 0.002, "median_ci_s": [0.00120, 0.00130],
                    "throughput": 12345.6, "noise_ratio": 0.04, "noise_warning": None},
    }],
}


def test_units() -> None:
    assert fmt_ms(0.00125) == "1.25"
    assert fmt_ms(0.2) == "200.0"
    assert fmt_ms(0.00001234) == "0.0123"
    assert fmt_ms(0.0004571) == "0.457"
    assert fmt_si(3.1e11, "FLOP/s") == "310.0 GFLOP/s"
    assert fmt_si(2.5e9, "B/s") == "2.5 GB/s"
    assert fmt_ci(0.00125, [0.00120, 0.00130]) == "-4.0/+4.0%"
    assert fmt_ci(1.0, [0.5, 3.0]) == "-50/+200%"
    # a stable 5 ms sleep's interval (a stored run's): not '-0.0/+0.0%', which reads as no width at all
    assert fmt_ci(0.005138183, [0.005136583, 0.005139156]) == "-0.03/+0.02%"
    assert fmt_ci(1.0, [1.0, 1.0]) == "-0.0/+0.0%"
    assert fmt_ci(1.0, [0.9995, 1.099]) == "-0.05/+9.9%"


def test_a_rate_under_100_keeps_its_three_digits() -> None:
    """A bench column of 21.8, 30.3 and 22 items/s (a model allocating 50 MiB an item, 21.996 at batch 4) read the
    last as if known to two digits: three significant digits, trailing zeros kept."""
    assert [fmt_count(v) for v in (21.8, 30.3, 21.996)] == ["21.8", "30.3", "22.0"]
    assert [fmt_count(v) for v in (5.333, 0.5, 9.994, 9.999, 99.94)] == ["5.33", "0.500", "9.99", "10.0", "99.9"]
    assert [fmt_count(v) for v in (99.96, 100.0, 1_800_926.4, 0.0, None)] == ["100", "100", "1,800,926", "0", "-"]
    # a 12 KiB model's size read 0.0 MiB
    assert (fmt_mib(12 * 1024), fmt_mib(0), fmt_mib(3 * 2**20), fmt_mib(0.25 * 2**20)) == ("0.012", "0.0", "3.0", "0.2")
    assert (fmt_mib(40), fmt_mib(1)) == ("0.000038", "0.00000095")  # not 3.8e-05


@pytest.mark.parametrize("cuda", [False, True])
def test_the_bench_table_fits_80_columns_without_cutting_a_header(cuda: bool) -> None:
    """A fast model measured long (123,456 calls, 1,350,000 items/s) squeezed the last header to 'IQR/p…' at
    COLUMNS=80; a CUDA run has a column more. Narrower layouts (one space between columns, then two-line headers)
    keep every cell whole."""
    point = {**RESULT["points"][0], "peak_rss_bytes": 10240 * 2**20,
             "summary": {**RESULT["points"][0]["summary"], "n": 123456, "throughput": 1_350_000.0,
                         "median_ci_s": [0.0012375, 0.0013325]}}
    if cuda:
        point["cuda_max_allocated_bytes"] = 12345 * 2**20
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(bench_table({**RESULT, "points": [point]}))
    text = console.export_text()
    console.file.close()
    assert "…" not in text, text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("8 "))
    assert row.split()[1:] == ["123456", "1.25", "1.50", "2.00", "-1.0/+6.6%", "1,350,000", "10240.0", "190", "4%",
                               *(["12345.0"] if cuda else [])]
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    # where it fits, the table keeps its one-line headers and two spaces between columns
    assert "  IQR/p50" in _text(bench_table(RESULT))


def test_the_bench_table_s_iqr_column_tells_a_ratio_from_the_noise_threshold() -> None:
    """An IQR of 10.03% of the median read "10%" in yellow under the caption "IQR/p50 > 10% = noisy", and one of
    9.96% "10%" in green."""
    for ratio, warning, shown in ((0.1003, "noisy: IQR is 10.03% of the median (> 10%); ...", "10.03%"),
                                  (0.0996, None, "9.96%")):
        summary = {**RESULT["points"][0]["summary"], "noise_ratio": ratio, "noise_warning": warning}
        text = _text(bench_table({**RESULT, "points": [{**RESULT["points"][0], "summary": summary}]}))
        row = next(line for line in text.splitlines() if line.lstrip().startswith("8 "))
        assert row.split()[-1] == shown


@pytest.mark.parametrize("width", [60, 52, 46, 40])
def test_a_console_too_narrow_for_the_bench_table_leaves_columns_out_and_says_which(width: int) -> None:
    """Below 67 columns even the two-line headers did not fit: 'IQR/' read 'IQ…', at 60 'batch' and the
    latencies were cut too. Columns now go, least needed first, and the caption names them."""
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(bench_table(RESULT))
    text = console.export_text()
    console.file.close()
    assert "…" not in text, text
    assert "batch" in text and "IQR/" in text and "p99" in text
    assert "p90 " not in text.split("a narrow console:")[0]
    assert "a narrow console: p90" in " ".join(text.split())
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width


def test_sparkline() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3.0, 1.0]) == "█▁"
    assert sparkline([2.0, 2.0, 2.0]) == "▅▅▅"
    assert sparkline([]) == ""


def test_bench_report_shows_kpis() -> None:
    text = _text(bench_report(RESULT, {"torch_version": "2.13", "python_version": "3.11", "cpu_model": "EPYC",
                                       "logical_cores": 2, "torch_threads": 2}, "abc123", "sqlite:///x.db"))
    row = next(line for line in text.splitlines() if line.lstrip().startswith("8 "))
    assert row.split() == ["8", "123", "1.25", "1.50", "2.00", "-4.0/+4.0%", "12,346", "200.0", "190", "4%"]
    assert "headline: throughput 12,346 items/s at batch 8" in text
    assert "model size: 3.0 MiB" in text
    assert "torch 2.13 · Python 3.11 · EPYC (2 cores, 2 threads)" in text
    assert "run abc123 saved to sqlite:///x.db" in text


def test_an_engine_artifact_s_bench_names_the_threads_it_ran_with(tmp_path: Path) -> None:
    """An ONNX Runtime artifact of `optimize --threads 1` ran on 1 thread in `dlperf bench DIR`, under an environment
    line of torch's 2 threads, and the settings line named none."""
    from dlperf.api import artifact_settings

    (tmp_path / "model.onnx").write_bytes(b"x")
    manifest = {"format_version": 1, "engine": "onnxruntime", "threads": 1, "precision": "fp32",
                "files": ["model.onnx"], "inputs": [], "outputs": []}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    artifact = artifact_settings(str(tmp_path))
    assert artifact is not None and artifact["threads"] == 1
    env = {"torch_version": "2.13", "python_version": "3.11", "cpu_model": "EPYC", "logical_cores": 2,
           "torch_threads": 2}
    config = {"scenario": "offline", "device": "cpu", "precision": "fp32", "threads": None, "artifact": artifact}
    shown = " ".join(_text(bench_report(RESULT, env, config=config)).split())
    assert "precision fp32 (the artifact's) · threads 1 (the artifact's) · artifact onnxruntime" in shown
    given = " ".join(_text(bench_report(RESULT, env, config={**config, "threads": 2})).split())  # --threads 2
    assert "· threads 2 · artifact onnxruntime" in given
    # a torch recipe is a torch module: bench's --precision autocasts it, over the precision the recipe gives it
    recipe = {"engine": "torch", "label": None, "precision": "int8", "threads": None}
    autocast = " ".join(_text(bench_report(RESULT, env, config={**config, "precision": "bf16",
                                                                 "artifact": recipe})).split())
    assert "precision bf16 autocast over int8 (the artifact's) · artifact torch" in autocast


def test_bench_report_bounds_a_latency_headline_or_says_why_not() -> None:
    env = {"torch_version": "2.13", "python_version": "3.11", "cpu_model": "EPYC", "logical_cores": 2}
    bounded = {**RESULT, "headline": {"kpi": "p90_s", "value": 0.0012, "batch_size": 1, "bound_99": 0.0013}}
    assert "headline: p90 1.20 ms at batch 1 (<= 1.30 ms at 99% confidence, MLPerf's early stopping)" in \
        " ".join(_text(bench_report(bounded, env)).split())
    loose = {**RESULT, "headline": {"kpi": "p90_s", "value": 0.002, "batch_size": 1, "bound_99": 0.02,
                                    "bound_note": "the bound is 10.0x the p90: ..."}}
    assert "(<= 20.00 ms at 99% confidence, MLPerf's early stopping); the bound is 10.0x the p90: ..." in \
        " ".join(_text(bench_report(loose, env)).split())
    short = {**RESULT, "headline": {"kpi": "p99_s", "value": 0.0012, "batch_size": 8, "bound_99": None}}
    assert "too few samples to bound the p99 at 99% confidence: MLPerf's early stopping needs 459" in \
        " ".join(_text(bench_report(short, env)).split())


def test_a_load_run_s_headline_is_its_peak_or_its_busiest_level() -> None:
    levels = [{"mode": "concurrency", "level": c, "throughput_rps": t, "p99_s": p99}
              for c, t, p99 in [(1, 90.0, 0.012), (8, 400.0, 0.031), (16, 390.0, 0.08)]]
    plain = RunRecord("l1", "load", "127.0.0.1:8000/m", "ok", "2026-01-01T10:00:00", result={"levels": levels})
    assert headline_text(plain) == "400.0 req/s, p99 31 ms at concurrency 8"
    # an interrupted peak search (levels, no peak): its busiest step with its verdict, which may be a FAIL
    judged = [{**lv, "verdict": "fail" if lv["level"] == 8 else "pass"} for lv in levels]
    stopped = RunRecord("l0", "load", "127.0.0.1:8000/m", "interrupted", "2026-01-01T10:00:00",
                        result={"levels": judged})
    assert headline_text(stopped) == "400.0 req/s, p99 31 ms at concurrency 8 (fail)"
    searched = RunRecord("l2", "load", "127.0.0.1:8000/m", "ok", "2026-01-01T10:00:00",
                         result={"peak": {"slo_p99_s": 0.05, "peak_rate": None}, "levels": levels})
    assert headline_text(searched) == "no passing rate at p99 <= 50 ms"
    p90 = RunRecord("l3", "load", "127.0.0.1:8000/m", "ok", "2026-01-01T10:00:00",
                    result={"peak": {"slo": {"bound_s": 0.02, "percentile": 90.0}, "peak_rate": 180.0}})
    assert headline_text(p90) == "peak 180.0 req/s at p90 <= 20 ms"


def test_record_view_summarizes_raw_samples_in_the_json_fallback() -> None:
    result = {"levels": [{"samples_ns": list(range(1000, 1100)), "shape": [1, 3, 224, 224]}], "ok": True}
    text = _text(record_view(RunRecord("x1", "optimize", "zoo:mlp", "ok", "2026-01-01T10:00:00", result=result)))
    assert "[100 numbers from 1000 to 1099; `dlperf runs export` has them]" in text
    assert "224" in text and "1050" not in text  # short lists stay as they are


def test_profile_and_train_headlines() -> None:
    def headline(kind: str, result: dict[str, object]) -> str:
        return headline_text(RunRecord("x", kind, "zoo:mlp", "ok", "2026-01-01T10:00:00", result=result))

    assert headline("profile", {"verdict": "input pipeline: 61% of the step", "trace": {}}) == \
        "input pipeline: 61% of the step"
    long = "framework/launch overhead: the step is dominated by its fixed per-call cost (68% of the step)"
    assert headline("profile", {"verdict": long, "trace": {}}) == \
        "framework/launch overhead: the step is dominated by its fixed …"  # '... per-call', cut with no mark
    assert headline("train", {"samples_per_s": 35646.2}) == "35,646 samples/s"
    assert headline("train", {"best_samples_per_s": 1200.0, "speedup": 1.31, "final_ab": {"verdict": "faster"}}) \
        == "tuned 1,200 samples/s (1.31x)"
    assert headline("train", {"best_samples_per_s": 900.0, "speedup": 1.0, "final_ab": None,
                              "trials": [{"knob": "threads", "status": "rejected"}]}) == "tuned 900 samples/s (no gain)"
    assert headline("train", {"nproc": 2, "samples_per_s": 1800.0, "scaling_efficiency": 0.9}) == \
        "2 processes 1,800 samples/s, 90% scaling"


def test_a_tuning_in_which_every_knob_was_skipped_is_headlined_as_nothing_tried() -> None:
    """`--time-budget 1s` skipped every knob and `runs list` said 'tuned 24,035 samples/s (no gain)'."""
    trials = [{"knob": "threads", "status": "skipped", "reason": "not tried: the time budget (1s) would be exceeded"},
              {"knob": "pin_memory", "status": "skipped", "reason": "pinned memory only speeds host-to-GPU copies"}]
    result = {"best_samples_per_s": 24035.0, "speedup": 1.0, "final_ab": None, "trials": trials}
    assert headline_text(RunRecord("x", "train", "zoo:mlp", "ok", "2026-01-01T10:00:00", result=result)) == \
        "nothing tried: 24,035 samples/s (the baseline)"


def test_a_run_that_failed_before_it_measured_anything_is_headlined_by_its_error() -> None:
    """`runs list` showed a failed train run with an empty headline."""
    error = ("TrainError: workload 'bad': a training step raised RuntimeError: The size of tensor a (2) must match "
             "the size of tensor b (3) at non-singleton dimension 1\n  File \"x.py\", line 3")
    failed = RunRecord("x", "train", "bad.py", "failed", "2026-01-01T10:00:00", result={}, error=error)
    assert headline_text(failed) == "TrainError: workload 'bad': a training step raised RuntimeError: The …"
    measured = RunRecord("x", "train", "bad.py", "failed", "2026-01-01T10:00:00", result={"samples_per_s": 10.0},
                         error=error)
    assert headline_text(measured) == "10.0 samples/s"  # failed after 23 of 40 steps: what it measured comes first


def test_optimize_and_candidate_headlines() -> None:
    def headline(kind: str, result: dict[str, object]) -> str:
        return headline_text(RunRecord("x", kind, "zoo:mlp", "ok", "2026-01-01T10:00:00", result=result))

    candidates = [{"key": "k0", "label": "baseline"}, {"key": "k1", "label": "onnxruntime"}]
    assert headline("optimize", {"winner": "k1", "candidates": candidates}) == "winner: onnxruntime"
    assert headline("optimize", {"winner": None, "candidates": candidates}) == "no winner"
    assert headline("candidate", {"label": "onnxruntime", "p50_s": 0.0012, "metric": 0.97512,
                                  "metric_name": "accuracy"}) == "onnxruntime: p50 1.20 ms, accuracy 0.9751"
    assert headline("candidate", {"label": "compile", "status": "failed"}) == "compile: failed"
    assert headline("candidate", {"label": "hygiene", "p50_s": 0.0000651, "metric": 0.99962, "metric_name":
                                  "fidelity (mean cosine vs the original model's outputs on 32 held-out inputs)"}) \
        == "hygiene: p50 0.0651 ms, fidelity 0.9996"
    assert headline("ab", {"ratio": 0.9931, "verdict": "no significant difference"}) == \
        "B/A 0.993: no significant difference"


def test_record_and_runs_views() -> None:
    record = RunRecord("abc123", "bench", "zoo:mlp", "ok", "2026-01-01T10:00:00", result=RESULT, config={"k": 1})
    assert headline_text(record) == "12,346 items/s @ bs8"
    text = _text(runs_table([record], "sqlite:///x.db"))
    assert "abc123" in text and "zoo:mlp" in text and "2026-01-01 10:00" in text
    shown = _text(record_view(record))
    assert "1.25" in shown and '{"k": 1}' in shown
    failed = RunRecord("f", "calibrate", "cpu", "failed", "2026-01-01", error="boom")
    assert "boom" in _text(record_view(failed)) and headline_text(failed) == "boom"  # was empty in `runs list`
    assert "no runs" in _text(runs_table([], "s"))


def test_history_view() -> None:
    h = History("zoo:mlp", "p50", "s", False, 1, [HistoryPoint("a", "2026-01-01T00:00", 0.001),
                                                   HistoryPoint("b", "2026-01-02T00:00", 0.002, "noisy")])
    text = _text(history_view(h))
    assert "▁█" in text
    assert "last vs first: +100.0%" in text
    assert "best" in text and "noisy" in text


def test_history_view_counts_runs_in_the_singular_and_plural() -> None:
    one = History("zoo:mlp", "p50", "s", False, 8, [HistoryPoint("a", "2026-01-01T00:00", 0.001)], skipped=1)
    text = " ".join(_text(history_view(one)).split())
    assert "p50 of zoo:mlp at batch 8 over 1 run (lower is better)" in text  # 'over 1 runs'
    assert "1 run skipped: not ok, or no point at batch 8" in text  # '1 run(s) skipped'
    two = History("zoo:mlp", "p50", "s", False, 8, one.points * 2, skipped=2)
    text = " ".join(_text(history_view(two)).split())
    assert "over 2 runs (lower is better)" in text and "2 runs skipped:" in text
    assert "over 0 runs (lower is better): no finished runs" in _text(history_view(History(
        "zoo:mlp", "p50", "s", False, 8, [])))


def test_ceilings_table() -> None:
    data: dict[str, Any] = {"device": "cpu", "threads": 2, "machine_key": "k", "measured_at": "t", "quick": False,
            "gemm_flops": {"fp32": 3.1e11}, "memory_bandwidth_bytes_s": 2e10,
            "details": {"gemm_fp32": {"n": 2048, "samples": 5}, "copy": {"bytes": 2**28, "samples": 5},
                        "skipped": {"int8": "no VNNI"}}}
    text = _text(ceilings_table(data))
    assert "310.0 GFLOP/s" in text and "20.0 GB/s" in text and "no VNNI" in text and "2048³" in text
    flags = "no int8 dot-product unit (CPU flags lack avx512_vnni/avx_vnni/amx_int8/asimddp/i8mm)"
    data["details"]["skipped"] = {"int8": flags}
    narrow = _lines(ceilings_table(data), 80)
    assert "…" not in "\n".join(narrow)  # the unbreakable flag list was cut to '.../asimddp/i8m…'
    column = "".join(line.split("│")[3].strip() for line in narrow if line.count("│") == 4)
    assert "avx512_vnni/avx_vnni/amx_int8/asimddp/i8mm)" in column
    assert "provisional" not in text


def test_ceilings_table_says_a_cached_calibration_is_provisional_and_at_what_load() -> None:
    """A profile on a busy machine cached its ceilings as provisional (load average 3.6 on 2 cores), and `dlperf
    calibrate` showed them as plainly "cached at ...": nothing said a later profile would measure them again."""
    data: dict[str, Any] = {"device": "cpu", "threads": 2, "machine_key": "k", "measured_at": "t", "quick": False,
                            "gemm_flops": {"fp32": 3.1e11}, "memory_bandwidth_bytes_s": 2e10,
                            "details": {"provisional": True, "load_average": 3.637,
                                        "warnings": ["the machine is busy (load average 3.6 on 2 cores)"]}}
    text = " ".join(_text(ceilings_table(data, cached=True), width=200).split())
    assert ("cached at t; key k provisional: measured on the way by profile or train at a load average of 3.6, with "
            "the doubts below; a later profile, train or calibrate measures them again once the load average is below "
            "the cores and 0.75x that, or `dlperf calibrate --force` now warning: the machine is busy") in text
    del data["details"]["load_average"]
    assert "at a load average not recorded" in _text(ceilings_table(data))


def test_environment_line_without_env() -> None:
    assert environment_line({}) == "environment: not recorded"


def test_environment_line_names_pinning_governor_and_thread_variables() -> None:
    env = {"torch_version": "2.13.0", "python_version": "3.12.3", "cpu_model": "EPYC", "logical_cores": 16,
           "torch_threads": 4, "os": "Linux 6.1", "allocator": "glibc"}
    plain = "environment: torch 2.13.0 · Python 3.12.3 · EPYC (16 cores, 4 threads) · Linux 6.1 · glibc malloc"
    assert environment_line(env) == plain
    assert environment_line({**env, "usable_cores": 16, "thread_env": {}}) == plain
    pinned = {**env, "usable_cores": 4, "cpu_governor": "powersave",
              "thread_env": {"OMP_NUM_THREADS": "4", "KMP_AFFINITY": "compact"}}
    assert environment_line(pinned) == (
        "environment: torch 2.13.0 · Python 3.12.3 · EPYC (16 cores, 4 usable, 4 threads) · Linux 6.1 · glibc malloc"
        " · governor powersave · KMP_AFFINITY=compact OMP_NUM_THREADS=4")


def test_bench_warnings_are_grouped() -> None:
    def point(batch: int, noise: str | None, contention: str | None, others: float) -> dict[str, Any]:
        return {"batch_size": batch, "summary": {"noise_warning": noise}, "contention_warning": contention,
                "other_load_percent": others}

    lines = bench_warnings([
        point(1, "noisy: IQR is 38% ...", "other processes kept 1.2 cores busy", 120.0),
        point(8, None, "other processes kept 1.7 cores busy", 170.0),
        point(32, "noisy: IQR is 12% ...", None, 10.0),
        point(64, "only 3 samples: percentiles and spread are unreliable", None, 0.0),
    ])
    assert lines == [
        "noisy at batch 1, 32 (IQR/p50 > 10%): other load on the machine, frequency scaling, the model's own per-call "
        "variation (data-dependent control flow, random-length loops) or too few samples",
        "batch 64: only 3 samples: percentiles and spread are unreliable",
        "batch 1, 8: other processes kept 1.7 cores busy",
    ]


def test_a_noisy_point_measured_with_little_other_load_names_the_model_s_own_variation_first() -> None:
    """A model whose calls vary (a loop of random length) on an idle machine read "noisy: ... other load on the
    machine, frequency scaling or too few samples": its own cause was not listed, and the one that was did not hold.
    A point stored without its load (an older run) keeps the whole list."""
    def point(batch: int, others: float | None) -> dict[str, Any]:
        return {"batch_size": batch, "summary": {"noise_warning": "noisy: IQR is 44% ..."},
                "contention_warning": None, "other_load_percent": others}

    assert bench_warnings([point(1, 12.0), point(8, 31.0)]) == [
        "noisy at batch 1, 8 (IQR/p50 > 10%) with little other load on the machine (at most 0.3 cores): the model's "
        "own per-call variation (data-dependent control flow, random-length loops), frequency scaling or too few "
        "samples"]
    assert bench_warnings([point(1, None)])[0].startswith("noisy at batch 1 (IQR/p50 > 10%): other load on the")


def _measurement(scale: float, n: int = 200) -> Measurement:
    rng = random.Random(int(scale * 1000))
    return Measurement([int(scale * 1e6 * (1 + 0.05 * rng.random())) for _ in range(n)])


def test_runs_show_of_an_ab_run_is_its_table_and_verdict() -> None:
    from dlperf.compare.ab import ABRun
    from dlperf.compare.settings import ABSettings
    from dlperf.measure.ab import ABResult

    result = ABResult(_measurement(2.0), _measurement(1.5), [0.74, 0.76, 0.75, 0.75], 0.75, (0.74, 0.76), 0.95,
                      "faster")
    run = ABRun("zoo:mlp", ABSettings(threads=1), ABSettings(threads=2, options=(("hidden", 64),)), 1, 1, result,
                False, 50)
    stored = run.to_dict()
    assert ABRun.from_dict(stored).to_dict() == stored  # the stored dict is all the view needs
    shown = _text(record_view(RunRecord("ab1", "ab", "zoo:mlp", "ok", "2026-01-01", result=stored)))
    assert "A/B of zoo:mlp: 4 paired blocks of 50 calls" in shown
    assert "threads=2,option.hidden=64" in shown and "verdict: B is faster (B speed 1.333x of A" in shown
    assert "samples_ns" not in shown and "block_ratios" not in shown  # not the JSON
    assert "warning:" not in shown  # recorded before the machine's load was kept
    # one taken beside other processes' load says so again, as the A/B did
    loaded = {**stored, "process_cpu_percent": 80.0, "system_cpu_percent": 95.0 * 2 / (os.cpu_count() or 1),
              "threads": [1, 2]}
    shown = _text(record_view(RunRecord("ab1", "ab", "zoo:mlp", "ok", "2026-01-01", result=loaded)))
    assert "warning: other processes kept 1.1 cores busy while measuring (this process: 0.8)" in shown


def test_runs_show_of_a_check_run_adds_the_gate_verdict_to_its_measurements() -> None:
    from dlperf.compare.gate import GateConfig, gate

    verdict = gate({1: _measurement(1.0)}, {1: _measurement(1.5)}, GateConfig(max_regression=0.05)).to_dict()
    result = {**RESULT, "gate": verdict}
    shown = _text(record_view(RunRecord("c1", "check", "zoo:mlp", "ok", "2026-01-01", result=result)))
    assert "1.25" in shown  # the bench table of the check's own measurements
    assert "batch 1: p50" in shown and "REGRESSION" in shown
    assert "FAIL: p50 regressed significantly by more than 5.0%" in shown
    passing = gate({1: _measurement(1.0)}, {1: _measurement(1.0)}).to_dict()
    shown = _text(record_view(RunRecord("c2", "check", "zoo:mlp", "ok", "2026-01-01",
                                        result={**RESULT, "gate": passing})))
    assert "PASS: no significant regression above the threshold" in shown


def test_runs_show_of_a_check_run_says_each_measurement_warning_once() -> None:
    """The check's gate warnings repeat its bench's noise and contention ('batch 8: noisy: ...'), and `runs show`
    printed both: each warning twice. A stop note, which the gate does not repeat, stays."""
    noise = "noisy: IQR is 22% of the median (> 10%); other load on the machine"
    contention = "other processes used 1.2 of 2 cores while this ran"
    point = {**RESULT["points"][0], "contention_warning": contention,
             "summary": {**RESULT["points"][0]["summary"], "noise_warning": noise, "stop_note": "capped at 10 s"}}
    gate = {"points": [{"batch_size": 8, "failed": False}], "reasons": ["batch 8: p50 +0.1%"], "failed": False,
            "metric": "p50", "max_regression": 0.05, "warnings": [f"batch 8: {noise}", f"batch 8: {contention}"]}
    shown = _text(record_view(RunRecord("c1", "check", "zoo:mlp", "ok", "2026-01-01",
                                        result={**RESULT, "points": [point], "gate": gate})))
    assert shown.count("IQR is 22%") == 1 and shown.count("used 1.2 of 2 cores") == 1
    assert "noisy at batch 8" not in shown  # bench's own wording of the same noise
    assert "batch 8: capped at 10 s" in shown
    # a bench run (no gate) keeps its warnings
    shown = _text(record_view(RunRecord("b1", "bench", "zoo:mlp", "ok", "2026-01-01",
                                        result={**RESULT, "points": [point]})))
    assert "noisy at batch 8" in shown and "used 1.2 of 2 cores" in shown


def test_a_check_run_s_headline_is_its_verdict() -> None:
    # `runs list` showed a check run's throughput, which hid whether it failed the gate.
    from dlperf.compare.gate import GateConfig, gate

    failing = gate({1: _measurement(1.0)}, {1: _measurement(1.5)}, GateConfig(max_regression=0.05)).to_dict()
    record = RunRecord("c1", "check", "zoo:mlp", "ok", "2026-01-01", result={**RESULT, "gate": failing})
    headline = headline_text(record)
    regression = failing["points"][0]["regression"]
    assert headline == f"FAIL: p50 {regression * 100:+.1f}% worse @ bs1" and regression > 0.05
    passing = gate({1: _measurement(1.0)}, {1: _measurement(1.0)}).to_dict()
    assert headline_text(RunRecord("c2", "check", "zoo:mlp", "ok", "2026-01-01",
                                   result={**RESULT, "gate": passing})).startswith("PASS: p50 ")
    # a check that stopped before its verdict keeps the bench headline
    assert headline_text(RunRecord("c3", "check", "zoo:mlp", "failed", "2026-01-01", result=RESULT)) == \
        headline_text(RunRecord("b", "bench", "zoo:mlp", "ok", "2026-01-01", result=RESULT))


def test_ab_and_compare_tables_print_items_per_s_as_bench_does() -> None:
    # They printed 4.804e+04 where `dlperf bench` prints 48,041.
    from dlperf.compare.ab import ABRun
    from dlperf.compare.settings import ABSettings
    from dlperf.measure.ab import ABResult
    from dlperf.report.compare_text import ab_table

    fast, slow = _measurement(0.02), _measurement(20.0)  # about 48,000 and 48 calls a second
    result = ABResult(fast, slow, [1000.0] * 4, 1000.0, (990.0, 1010.0), 0.95, "slower")
    shown = _text(ab_table(ABRun("zoo:mlp", ABSettings(), ABSettings(), 1, 1, result, False, 5)))
    assert f"{fast.throughput:,.0f}" in shown and "e+0" not in shown
    assert f" {slow.throughput:.4g} " in shown
    from dlperf.report.compare_text import _count

    assert [_count(v) for v in (9371.2, 17537.4, 999.94, 175.66)] == ["9,371", "17,537", "999.9", "175.7"]  # 9371


def test_ab_s_title_and_ratio_are_lines_as_wide_as_the_console() -> None:
    from dlperf.compare.ab import ABRun
    from dlperf.compare.settings import ABSettings
    from dlperf.measure.ab import ABResult
    from dlperf.report.compare_text import ab_table

    result = ABResult(_measurement(0.05), _measurement(0.06), [1.2] * 4, 1.2, (1.1, 1.3), 0.95, "slower")
    run = ABRun("examples/models/resnet.py:make?width=3", ABSettings(), ABSettings(), 1, 1, result, False, 200)
    lines = [line.rstrip() for line in _text(ab_table(run)).splitlines()]
    # they were the table's title and caption, wrapped at its 60 columns and centred
    assert lines[0] == "A/B of examples/models/resnet.py:make?width=3: 4 paired blocks of 200 calls, interleaved"
    assert lines[-1] == "time B/A per call: 1.200 (95% CI 1.100-1.300); speedup 0.833x"


def test_profile_breakdown_puts_the_of_which_rows_under_the_step() -> None:
    from dlperf.report.profile_view import _breakdown

    text = _text(_breakdown({"step_s": 0.0601, "forward_s": 0.060, "other_s": 0.000082, "operator_s": 0.0591,
                             "framework_overhead_s": 0.00099, "device_sync_s": None, "device_idle_s": None}))
    lines = [line.strip() for line in text.splitlines()]
    at = {name: next(i for i, line in enumerate(lines) if line.startswith(name))
          for name in ("forward", "other (outside", "step ", "of which operators", "of which framework")}
    # 59.1 ms of operators is a part of the 60.1 ms step, not of the 82 µs 'other' row it followed
    assert at["forward"] < at["other (outside"] < at["step "] < at["of which operators"] < at["of which framework"]


def test_runs_show_prints_bench_s_warnings() -> None:
    point = {**RESULT["points"][0], "contention_warning": "other processes kept 1.1 cores busy while measuring",
             "other_load_percent": 110.0}
    point["summary"] = {**point["summary"], "stop_note": "stopped at the 1,000-iteration cap after 0.2 s"}
    shown = _text(record_view(RunRecord("b1", "bench", "zoo:mlp", "ok", "2026-01-01", result={"points": [point]})))
    assert "warning: batch 8: stopped at the 1,000-iteration cap after 0.2 s" in shown  # bench printed them; runs
    assert "warning: batch 8: other processes kept 1.1 cores busy" in shown  # show dropped them


@pytest.mark.parametrize("points", [[{"batch_size": 1, "summary": {"n": 3, "p50_s": 0.001}}], [{"batch_size": 1}],
                                    "not a list"])
def test_runs_show_of_a_bench_run_with_missing_fields_falls_back_to_json(points: Any) -> None:
    shown = _text(record_view(RunRecord("old", "bench", "zoo:mlp", "ok", "2026-01-01", result={"points": points})))
    assert '"points"' in shown and "environment: not recorded" in shown  # it raised KeyError or AttributeError


def _lines(renderable: RenderableType, width: int) -> list[str]:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    text = console.export_text()
    console.file.close()
    return [line.rstrip() for line in text.splitlines()]


RUNS = [
    RunRecord("bc937ed2d874", "candidate", "zoo:mlp", "ok", "2026-12-04T07:31:20",
              result={"label": "hygiene", "p50_s": 0.0000585, "metric": 1.0, "metric_name": "fidelity"}),
    RunRecord("8ceb2ba13d86", "bench", "zoo:mlp", "interrupted", "2026-12-04T07:33:14"),
    RunRecord("33eedbe92e28", "load", "127.0.0.1:37173/mlp", "ok", "2026-12-04T07:30:00", result={"levels": [
        {"mode": "concurrency", "level": 4, "throughput_rps": 1964.5, "p99_s": 0.00843}]}),
    RunRecord("6bc3cceb96a6", "train-trial", "zoo:mlp", "ok", "2026-12-04T07:34:00",
              result={"knob": "threads", "change": {"threads": 1}, "speedup": 1.59, "verdict": "faster"}),
]


def test_runs_list_on_80_columns_leaves_the_headline_room() -> None:
    lines = _lines(runs_table(RUNS, "sqlite:///runs.db"), 80)
    assert max(len(line) for line in lines) <= 80
    assert lines[1].split() == ["id", "kind", "workload", "status", "headline"]  # created went; the caption says so
    assert lines[-1] == "created (UTC) not shown at this width: `dlperf runs show ID` has it"
    start = lines[1].index("headline")
    rows: dict[str, list[str]] = {}
    for line in lines[3:-1]:
        if line[:12].strip():
            rows[line[:12]] = [line]
        else:
            rows[list(rows)[-1]].append(line)
    assert set(rows) == {r.id for r in RUNS}
    # the headline was 11 columns wide: 'hygiene: p50' / '0.0585 ms,' / 'fidelity' / '1.0000'
    assert all(len(row) <= 2 for row in rows.values())
    headlines = {run_id: " ".join(line[start:].strip() for line in row) for run_id, row in rows.items()}
    assert headlines["bc937ed2d874"] == "hygiene: p50 0.0585 ms, fidelity 1.0000"
    assert headlines["6bc3cceb96a6"] == "threads: threads=1 1.59x (faster)"
    assert headlines["33eedbe92e28"] == "1964.5 req/s, p99 8.43 ms at concurrency 4"
    load = rows["33eedbe92e28"]
    assert load[0].split()[1:4] == ["load", "127.0.0.1:", "ok"] and load[1].split()[0] == "37173/mlp"  # folded


def test_runs_list_keeps_every_column_where_they_fit() -> None:
    lines = _lines(runs_table(RUNS, "sqlite:///runs.db"), 130)
    assert lines[1].split() == ["id", "kind", "workload", "status", "created", "(UTC)", "headline"]
    assert any(line.startswith("33eedbe92e28  load         127.0.0.1:37173/mlp  ok           2026-12-04 07:30  "
                               "1964.5 req/s") for line in lines)
    assert "not shown" not in "\n".join(lines)


def test_runs_show_of_a_bench_run_has_its_headline_an_interrupted_one_that_of_what_it_measured() -> None:
    from dlperf.measure.bench import BenchConfig, BenchPoint, headline_record

    shown = " ".join(_text(record_view(RunRecord("b", "bench", "zoo:mlp", "ok", "2026-01-01", result=RESULT)))
                     .split())
    assert "headline: throughput 12,346 items/s at batch 8 model size" in shown  # bench printed it; runs show not
    # an interrupted run recorded its points and no headline: `runs list` and `runs show` had none
    points = [BenchPoint(1, Measurement([100_000] * 50), 2**20, 100.0, 50.0),
              BenchPoint(8, Measurement([400_000] * 50, items_per_call=8), 2**20, 100.0, 50.0)]
    result = {"workload": "mlp", "points": [p.to_dict() for p in points], "partial": True,
              "headline": headline_record(BenchConfig(batch_sizes=(1, 8, 32)), points)}
    stopped = RunRecord("i", "bench", "zoo:mlp", "interrupted", "2026-01-01", result=result, error="terminated")
    assert headline_text(stopped) == "20,000 items/s @ bs8"
    assert ("headline: throughput 20,000 items/s at batch 8 (of the batch sizes measured before the run stopped: "
            "1, 8)") in " ".join(_text(record_view(stopped)).split())
    single = headline_record(BenchConfig(scenario="single-stream"), points[:1])
    assert single == {"kpi": "p90_s", "value": 0.0001, "unit": "s", "batch_size": 1, "bound_99": 0.0001}  # 50 >= 44
    # the best batch size was the one the interrupt cut short: its figure is from the calls timed before it
    cut = [points[0], BenchPoint(8, Measurement([400_000] * 3, items_per_call=8,
                                                extra={"stop_note": "interrupted after 3 timed calls"}),
                                 2**20, 100.0, 50.0)]
    cut_points = [p.to_dict() for p in cut]
    cut_result = {"workload": "mlp", "points": cut_points, "partial": True,
                  "headline": headline_record(BenchConfig(batch_sizes=(1, 8, 32)), cut)}
    shown = " ".join(_text(record_view(RunRecord("c", "bench", "zoo:mlp", "interrupted", "2026-01-01",
                                                 result=cut_result, error="interrupted"))).split())
    assert ("headline: throughput 20,000 items/s at batch 8 (of the batch sizes measured before the run stopped: "
            "1, 8); batch 8 was interrupted after 3 timed calls") in shown
    cut_points[1]["summary"]["stop_note"] = None  # the headline's batch size complete: no such remark
    assert "was interrupted" not in " ".join(_text(record_view(RunRecord(
        "c", "bench", "zoo:mlp", "interrupted", "2026-01-01", result=cut_result, error="interrupted"))).split())


def test_runs_show_of_an_optimize_candidate_is_a_few_lines_not_its_json() -> None:
    row = {"key": "94d5", "label": "hygiene", "status": "ok", "engine": "torch", "precision": "fp32",
           "latency": {"n": 10706, "p50_s": 0.0000585}, "p50_s": 0.0000585, "p99_s": 0.000325, "throughput": 10799.4,
           "samples_ns": list(range(1000, 2000)), "metric": 0.99999, "metric_name": "fidelity (mean cosine)",
           "metric_drop_rel": 0.0, "gain": 0.877, "paired_gain": 0.890,
           "paired": {"ratio": 1.124, "verdict": "slower", "blocks": 18}, "size_bytes": 340008,
           "peak_rss_bytes": 186388480, "build_s": 0.0003, "compile_s": 0.0,
           "slower_reasons": ["the measurement is noisy, its IQR is 31% of the median (> 10%): the difference may "
                              "not be real"],
           "artifact": {"dir": "/tmp/o/94d5/artifact"}, "log": "/tmp/o/94d5/child.log"}
    shown = " ".join(_text(record_view(RunRecord("c1", "candidate", "zoo:mlp", "ok", "2026-01-01", result=row,
                                                 parent_id="p1"))).split())
    assert '"samples_ns"' not in shown and '"latency"' not in shown  # it was the whole result as JSON
    for part in ("passes hygiene", "engine torch, fp32", "latency p50 0.058 ms, p99 0.325 ms, 10,799 items/s, "
                 "10,706 calls", "metric fidelity (mean cosine): 1.0000 (drop +0.00%)",
                 "gain 0.88x (the baseline's p50 / this one's, each in its own process); paired 0.89x (against "
                 "the original model in this process, 18 ABBA blocks: slower)", "size 0.32 MiB; peak RSS 177.8 MiB",
                 "why slower: the measurement is noisy", "artifact /tmp/o/94d5/artifact", "log /tmp/o/94d5/child.log"):
        assert part in shown, part
    failed = {"key": "k", "label": "compile", "status": "failed", "phase": "apply", "error": "boom"}
    shown = " ".join(_text(record_view(RunRecord("c2", "candidate", "zoo:mlp", "failed", "2026-01-01",
                                                 result=failed))).split())
    assert "passes compile" in shown and "result failed in apply: boom" in shown and '"phase"' not in shown


def test_runs_show_of_a_tuning_trial_is_its_row_not_its_json() -> None:
    trial = {"knob": "threads", "change": {"threads": 1}, "note": "torch.set_num_threads(1)", "status": "accepted",
             "reason": "", "config": {"batch_size": 64, "precision": "fp32", "threads": 1},
             "parity": {"ok": True, "relative_difference": 0.0, "baseline_losses": [2.3] * 16},
             "speedup": 1.59, "speedup_ci": [1.2, 2.1], "verdict": "faster", "samples_per_s": 34532.0,
             "reference_samples_per_s": 21700.0, "details": {}, "duration_s": 3.0}
    shown = " ".join(_text(record_view(RunRecord("t1", "train-trial", "zoo:mlp", "ok", "2026-01-01",
                                                 result=trial))).split())
    assert '"baseline_losses"' not in shown and '"knob"' not in shown
    assert "threads threads=1 +0.0% 34,532 1.59x (1.20-2.10) accepted" in shown
    assert "the best so far: 21,700 samples/s step: batch 64, fp32, threads 1 note: torch.set_num_threads(1)" in shown
    skipped = {**trial, "knob": "precision", "change": {}, "status": "skipped", "config": None, "parity": None,
               "speedup": None, "speedup_ci": None, "samples_per_s": None, "reference_samples_per_s": None,
               "note": "", "reason": "this CPU has no bf16 instructions"}
    shown = " ".join(_text(record_view(RunRecord("t2", "train-trial", "zoo:mlp", "ok", "2026-01-01",
                                                 result=skipped))).split())
    assert "precision: skipped: this CPU has no bf16 instructions environment: not recorded" in shown


def test_runs_list_s_title_and_note_are_as_wide_as_the_console_not_the_table() -> None:
    # a store of short rows: the table is 65 columns wide and its caption wrapped there, '... has' / 'it'
    short = [RunRecord("fd51ffae0d95", "bench", "zoo:mlp", "ok", "2026-12-04T07:40:00", result=RESULT),
             RunRecord("8ceb2ba13d86", "bench", "zoo:mlp", "interrupted", "2026-12-04T07:33:00")]
    lines = _lines(runs_table(short, "sqlite:////tmp/a/long/path/to/the/store/runs.db"), 72)
    assert lines[0] == "runs in sqlite:////tmp/a/long/path/to/the/store/runs.db"
    assert lines[-1] == "created (UTC) not shown at this width: `dlperf runs show ID` has it"
    assert max(len(line) for line in lines[1:-1]) < 72


def test_optimize_s_size_columns_keep_a_small_artifact_s_size() -> None:
    """The demo's winner, a 40 KiB ONNX file, read 'MiB 0.0' in optimize's table."""
    from dlperf.report.optimize_view import _mib

    assert (_mib(40 * 1024), _mib(None), _mib(488.5 * 2**20)) == ("0.039", "-", "488.5")


def test_optimize_s_size_columns_under_a_mib_agree_with_the_size_gain() -> None:
    """`--objective size` on a small CNN: the baseline's 154,000 bytes read 0.1 and openvino's 168,000 read 0.2 beside
    a size gain of 0.92x; int8 ONNX Runtime's 46,000 bytes read 0.044, at a gain of 3.33x that 0.1 / 0.044 does not
    give."""
    from dlperf.report.optimize_view import _mib

    assert [_mib(b) for b in (154_000, 168_000, 46_000, 2**20, 0)] == ["0.15", "0.16", "0.044", "1.0", "0.0"]


def test_a_check_runs_headline_line_is_its_gated_metric_per_item() -> None:
    """A check run's headline is the gated metric (it was the bench's throughput); at a batch of 8 the gate's p50 is
    per item, an eighth of the table's per-call p50, and the line says so."""
    from dlperf.compare.gate import GateConfig, gate
    from dlperf.report.terminal import bench_headline_line

    def per8(scale: float) -> Measurement:
        return Measurement(_measurement(scale).samples_ns, items_per_call=8)

    verdict = gate({8: per8(8.0)}, {8: per8(8.8)}, GateConfig())
    line = bench_headline_line({**RESULT, "headline": verdict.headline()})
    value = fmt_ms(verdict.points[0].current_value)
    assert line == f"headline: p50 {value} ms per item at batch 8", line


def test_loading_the_workload_is_said_when_it_took_a_noticeable_share_of_the_budget() -> None:
    from dlperf.report.optimize_view import load_note

    assert load_note(0.5, 5.0) is None  # under a second: never worth a line
    assert load_note(20.0, 600.0) is None  # 3%
    note = load_note(42.0, 600.0)
    assert note == ("loading the workload took 42.0 s, 7% of the 600 s time budget (the budget counts from the "
                    "command's start: that time is not left for candidates)")


def test_an_ab_stopped_before_two_blocks_is_shown_as_interrupted_with_the_blocks_it_finished(tmp_path: Path) -> None:
    from dlperf.compare.ab import run_ab_recorded
    from dlperf.compare.settings import parse_settings
    from dlperf.report.html import run_section
    from dlperf.store import Store

    def stop_after_the_first(done: int, total: int) -> None:
        raise KeyboardInterrupt

    store = Store(tmp_path / "runs.db")
    with pytest.raises(KeyboardInterrupt):
        run_ab_recorded(store, "zoo:mlp?hidden=16", parse_settings("threads=1"), parse_settings("threads=1"),
                        blocks=6, iters_per_block=3, on_block=stop_after_the_first)
    record = store.list(kind="ab")[0]
    assert record.status == "interrupted"
    # `runs show` said only "no result recorded"
    shown = " ".join(_text(record_view(record)).split())
    assert "note: interrupted after 1 of 6 paired blocks: no verdict (it needs at least 2)" in shown
    assert "no result recorded" not in shown
    assert headline_text(record) == "interrupted after 1 of 6 paired blocks"
    assert "note: interrupted after 1 of 6 paired blocks" in run_section(record)


def test_runs_show_of_a_bench_run_has_its_scenario_device_and_precision_line_as_bench_printed_it() -> None:
    config = {"scenario": "offline", "device": "cpu", "precision": "bf16", "threads": 2, "batch_sizes": [8]}
    shown = " ".join(_text(record_view(RunRecord("b", "bench", "zoo:mlp", "ok", "2026-01-01", config=config,
                                                 result=RESULT)), 200).split())
    said = " ".join(_text(bench_report(RESULT, {}, config=config), 200).split())
    assert "scenario offline · device cpu · precision bf16 · threads 2" in said
    assert "headline: throughput 12,346 items/s at batch 8 scenario offline · device cpu · precision bf16 · " \
           "threads 2 model size" in shown  # bench printed it under the headline; runs show did not
