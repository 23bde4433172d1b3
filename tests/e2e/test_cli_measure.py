"""`dlperf bench`, `dlperf runs ...` and `dlperf calibrate` driven through the CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlperf.cli.main import main
from dlperf.store import Store

pytestmark = pytest.mark.e2e

TINY = ["--min-duration", "10ms", "--min-iters", "3", "--warmup", "1"]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store") / "runs.db"


@pytest.fixture(scope="module")
def bench_json(store_path: Path) -> dict[str, Any]:
    """Two bench runs of zoo:mlp; the JSON output of the second."""
    import contextlib  # capsys is function-scoped: capture by redirecting stdout
    import io

    for _ in range(2):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["bench", "zoo:mlp", "--batch-sizes", "1,4", *TINY, "--json", "--store", str(store_path)])
        assert code == 0
    return dict(json.loads(out.getvalue()))


def test_bench_json(bench_json: dict[str, Any], store_path: Path) -> None:
    result = bench_json["result"]
    assert [p["batch_size"] for p in result["points"]] == [1, 4]
    for point in result["points"]:
        s = point["summary"]
        assert s["n"] >= 3 and 0 < s["p50_s"] <= s["p90_s"] <= s["p99_s"]
        assert s["throughput"] == pytest.approx(point["batch_size"] * s["n"] / (sum(
            point["measurement"]["samples_ns"]) / 1e9))
        assert point["peak_rss_bytes"] > 10 * 2**20
    assert result["model_bytes"] == (64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10) * 4
    assert result["headline"]["kpi"] == "throughput" and result["headline"]["unit"] == "items/s"
    assert result["rss_before_model_bytes"] > 10 * 2**20  # (this process ran other benches: no order to the peaks)
    for point in result["points"]:  # the slow-start check's figures are there whether it fired or not
        assert point["summary"]["slow_start_calls"] >= 0 and "slow_start_note" in point["summary"]
    assert bench_json["config"]["timer"]["min_iters"] == 3
    record = Store(store_path).get(bench_json["run_id"])
    assert record.status == "ok" and record.kind == "bench" and record.workload == "zoo:mlp"
    assert record.result["points"][0]["summary"] == result["points"][0]["summary"]
    assert record.environment["torch_threads"] >= 1


def test_bench_table(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "zoo:mlp", "--scenario", "single-stream", "--threads", "1", *TINY,
                 "--store", str(store_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "bench mlp: latency in ms" in out
    assert "headline: p90" in out and "at batch 1" in out
    record = Store(store_path).get(out.rsplit("run ", 1)[1].split()[0])
    samples = sorted(record.result["points"][0]["measurement"]["samples_ns"])
    bound = record.result["headline"]["bound_99"]
    if len(samples) >= 44:  # MLPerf's early stopping bounds a p90 from 44 samples on
        assert min(abs(bound * 1e9 - s) for s in samples) < 1 and bound >= record.result["headline"]["value"]
    else:
        assert bound is None
    assert "threads 1" in out and "saved to sqlite:///" in out
    run_id = out.rsplit("run ", 1)[1].split()[0]
    record = Store(store_path).get(run_id)
    assert record.config["scenario"] == "single-stream" and record.environment["torch_threads"] == 1


def test_runs_list_show_export(bench_json: dict[str, Any], store_path: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    run_id = bench_json["run_id"]
    assert main(["runs", "list", "--kind", "bench", "--json", "--store", str(store_path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert run_id in [r["id"] for r in listed]
    assert all(r["kind"] == "bench" for r in listed)
    assert main(["runs", "list", "--store", str(store_path)]) == 0
    assert run_id in capsys.readouterr().out
    assert main(["runs", "show", run_id[:8], "--store", str(store_path)]) == 0
    shown = capsys.readouterr().out
    assert run_id in shown and "bench mlp" in shown
    assert main(["runs", "show", run_id, "--json", "--store", str(store_path)]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["points"][1]["batch_size"] == 4
    target = tmp_path / "run.json"
    assert main(["runs", "export", run_id, "--json", "-o", str(target), "--store", str(store_path)]) == 0
    assert capsys.readouterr().out.strip() == f"run {run_id} written to {target}"
    exported = json.loads(target.read_text())
    assert exported["id"] == run_id and exported["result"] == bench_json["result"]
    assert main(["runs", "export", run_id, "--store", str(store_path)]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == run_id


def test_runs_history(bench_json: dict[str, Any], store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "history", "zoo:mlp", "--metric", "throughput", "--batch-size", "4", "--json",
                 "--store", str(store_path)]) == 0
    history = json.loads(capsys.readouterr().out)
    assert history["batch_size"] == 4 and len(history["points"]) == 2
    assert history["points"][-1]["run_id"] == bench_json["run_id"]
    assert history["points"][-1]["value"] == bench_json["result"]["points"][1]["summary"]["throughput"]
    assert main(["runs", "history", "zoo:mlp", "--metric", "p99", "--batch-size", "4", "--store",
                 str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "p99 of zoo:mlp at batch 4 over 2 runs" in out
    assert any(c in out for c in "▁▂▃▄▅▆▇█")


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "zoo:nope"], "no zoo workload 'nope'"),
    (["bench", "zoo:mlp", "--batch-sizes", "1,x"], "--batch-sizes"),
    (["bench", "zoo:mlp", "--scenario", "server"], "the server scenario (Poisson arrivals against a latency bound) "
     "is measured on a served model: `dlperf serve WORKLOAD`, then `dlperf load HOST:PORT --model NAME --find-peak"),
    (["bench", "zoo:mlp", "--precision", "int4"], "unknown precision 'int4'"),
    (["bench", "zoo:mlp", "--min-iters", "0"], "--min-iters must be >= 1"),
    (["bench", "zoo:mlp", "--threads", "two"], "--threads expects an integer"),
    (["bench", "zoo:mlp", "--min-duration", "soon"], "--min-duration"),
    (["bench", "missing_file.py"], "workload file 'missing_file.py' does not exist"),
    (["runs", "show", "nosuchid"], "no run 'nosuchid'"),
    (["runs", "history", "zoo:mlp", "--metric", "p42"], "unknown metric 'p42'"),
    (["runs", "history", "zoo:never-run"], "no finished bench runs of 'zoo:never-run'"),
    # with --batch-size it printed "over 0 runs (higher is better): no finished runs with that batch size", exit 0
    (["runs", "history", "zoo:never-run", "--batch-size", "32"], "no finished bench runs of 'zoo:never-run'"),
    (["runs", "list", "--limit", "-3"], "--limit expects a positive integer"),
    (["runs"], "needs a subcommand"),
    (["calibrate", "--device", "tpu"], "unknown device 'tpu'"),
    # options named as the user typed them, and options that only go with another one (they were ignored)
    (["ab", "zoo:mlp", "--a", "", "--b", "", "--iters-per-block", "0"], "--iters-per-block must be >= 1"),
    (["ab", "zoo:mlp", "--a", "", "--b", "", "--confidence", "2"], "--confidence must be in (0.5, 1)"),
    (["check", "zoo:mlp", "--baseline", "b", "--max-regression", "-1"], "--max-regression must be a fraction >= 0"),
    (["report", "--metric", "p99"], "--metric sets the metric of the --history trend"),
    (["compare", "a", "b", "--window", "60s"], "--window goes with --live URL"),
    (["bench", "zoo:mlp", "--batch-sizes", ""], "--batch-sizes: expected positive integers, got ''"),
])
def test_bad_inputs_give_one_error_line_and_exit_2(argv: list[str], message: str, store_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    Store(store_path, create=True)  # a store to find nothing in, also run alone (-k: no bench made it)
    assert main([*argv, "--store", str(store_path)] if argv != ["runs"] else argv) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ") and message in lines[0]
    assert captured.out == ""


def test_bad_store_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--store", "nosuchdialect://x/y"]) == 2
    assert "cannot open the run store" in capsys.readouterr().err


def test_interrupted_bench_is_recorded_with_partial_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import dlperf.measure.bench as bench

    real = bench.time_callable
    calls = []

    def interrupt_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "time_callable", interrupt_second)
    store = tmp_path / "runs.db"
    assert main(["bench", "zoo:mlp", "--batch-sizes", "1,2", *TINY, "--store", str(store)]) == 130
    (record,) = Store(store).list()
    assert record.status == "interrupted"
    assert record.result["partial"] is True
    assert [p["batch_size"] for p in record.result["points"]] == [1]


def test_an_interrupt_during_a_batch_size_keeps_the_calls_it_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in the middle of a batch size lost every call timed at it: a single-stream run (one batch size)
    interrupted after minutes kept nothing."""
    import dlperf.measure.bench as bench

    real = bench.make_call

    def make_call(model: Any, inputs: Any, device: str, precision: str) -> Any:
        call, calls = real(model, inputs, device, precision), [0]

        def interrupted_at_the_thirtieth() -> Any:
            calls[0] += 1
            if calls[0] == 30:
                raise KeyboardInterrupt
            return call()
        return interrupted_at_the_thirtieth

    monkeypatch.setattr(bench, "make_call", make_call)
    store = tmp_path / "runs.db"
    assert main(["bench", "zoo:mlp", "--scenario", "single-stream", "--warmup", "4", "--min-iters", "1000",
                 "--store", str(store)]) == 130
    (record,) = Store(store).list()
    assert record.status == "interrupted"
    (point,) = record.result["points"]
    assert point["batch_size"] == 1 and point["summary"]["n"] == 25  # 4 warm-up calls and 25 timed before the 30th
    assert point["summary"]["stop_note"] == "interrupted after 25 timed calls"
    assert record.result["headline"]["batch_size"] == 1
    capsys.readouterr()
    assert main(["runs", "show", record.id, "--store", str(store)]) == 0
    assert "batch 1: interrupted after 25 timed calls" in capsys.readouterr().out


def test_calibrate_quick_json_and_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    store = str(tmp_path / "runs.db")
    assert main(["calibrate", "--quick", "--json", "--store", store]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["cached"] is False and first["gemm_flops"]["fp32"] > 0 and first["memory_bandwidth_bytes_s"] > 0
    assert Path(first["cache_file"]).is_file()
    assert main(["calibrate", "--quick", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "GEMM fp32" in out and "cached at" in out and "quick mode" in out
    records = Store(store).list(kind="calibrate")
    assert [r.result["cached"] for r in records] == [True, False]
    assert main(["runs", "show", records[0].id, "--store", store]) == 0
    shown = capsys.readouterr().out
    assert "GEMM fp32" in shown and "cached at" in shown and '"gemm_flops"' not in shown


def test_calibrate_threads_measures_at_that_count_and_a_corrupt_cache_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from dlperf.calibrate import cache_path, machine_key

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    store = str(tmp_path / "runs.db")
    before = torch.get_num_threads()
    assert main(["calibrate", "--quick", "--threads", "1", "--json", "--store", store]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["threads"] == 1 and "|threads=1|" in result["machine_key"]
    assert torch.get_num_threads() == before
    (record,) = Store(store).list(kind="calibrate")
    assert record.config["threads"] == 1 and record.environment["torch_threads"] == 1
    broken = cache_path(machine_key("cpu"), quick=False)
    broken.write_text("{not json")
    assert main(["calibrate", "--quick", "--json", "--store", store]) == 0
    err = capsys.readouterr().err
    assert f"note: the ceilings cache '{broken}' could not be read (JSONDecodeError" in err
    assert err.rstrip().endswith("measuring again")  # a quick run writes the -quick file, not over the broken one
    # the quick file now serves --quick: the broken full one is named, and no measuring is announced
    assert main(["calibrate", "--quick", "--json", "--store", store]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["cached"] is True
    assert err.rstrip().endswith("using the quick measurement cached beside it")
    # a broken quick file was never named: the note spoke of the full one only
    quick = cache_path(machine_key("cpu"), quick=True)
    quick.write_text("{not json")
    assert main(["calibrate", "--quick", "--json", "--store", store]) == 0
    err = capsys.readouterr().err
    assert f"note: the ceilings cache '{quick}' could not be read (JSONDecodeError" in err
    assert err.count("note:") == 2 and err.rstrip().endswith("measuring again")


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from dlperf.cli.main import main\n"
        "for argv in (['--help'], ['bench', '--help'], ['runs', 'history', '--help'], ['calibrate', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'onnxruntime', 'openvino') if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "usage: dlperf" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY="


RAISES = "import torch\n\ndef model():\n    raise RuntimeError('weights file missing')\n\n" \
         "def inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n"


@pytest.mark.parametrize("argv", [["ab", "zoo:mlp", "--a", "", "--b", "", "--blocks", "3"],
                                  ["check", "zoo:mlp", "--baseline", "nope"],
                                  ["bench", "RAISES"], ["profile", "RAISES"]])
def test_an_error_is_the_first_line_not_after_a_blank_one(argv: list[str], store_path: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """ab, check, bench and profile printed a blank line (their progress display, stopped) before 'error:' where
    stderr is not a terminal: a CI log's first line was empty."""
    (tmp_path / "raises.py").write_text(RAISES)
    argv = [str(tmp_path / "raises.py") if a == "RAISES" else a for a in argv]
    assert main([*argv, "--store", str(store_path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
