"""Metric families and their parser; `dlperf serve` argument checks; the variant router."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from dlperf.cli import serve as serve_cli
from dlperf.errors import ConfigError
from dlperf.serve.metrics import (
    FAILURE_REASONS,
    METRIC_NAMES,
    PRIORITY_METRIC_NAMES,
    HistogramData,
    Metrics,
    parse_variant_metrics,
)
from dlperf.serve.service import ModelEntry, ServeConfig, warmup_sizes

pytestmark = pytest.mark.unit


def test_recorded_values_come_back_through_the_parser() -> None:
    metrics = Metrics()
    a = metrics.recorder("m", "a", pending=lambda: 3.0)
    b = metrics.recorder("m", "b")
    a.batch(4, 1000, 2_000_000, 1000)
    for _ in range(4):
        a.success(5_000_000, 1_000_000, (1000, 2_000_000, 1000))
    a.failure("REJECTED", 100_000)
    b.failure("BACKEND", 3_000_000)
    b.failure("weird", 1)
    text, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    parsed = parse_variant_metrics(text.decode())
    assert set(parsed) == {"a", "b"}
    pa, pb = parsed["a"], parsed["b"]
    assert pa.success_total == 4 and pa.inference_count_total == 4 and pa.exec_count_total == 1
    assert pa.average_batch_size == 4.0 and pa.pending_requests == 3.0
    assert pa.failure_total == {r: (1.0 if r == "REJECTED" else 0.0) for r in FAILURE_REASONS}
    assert pa.request_duration.count == 5 and pa.queue_duration.count == 4
    assert pa.request_duration.sum == pytest.approx(4 * 0.005 + 0.0001)
    assert pb.failure_total["BACKEND"] == 1 and pb.failure_total["OTHER"] == 1 and pb.success_total == 0
    stats = metrics.stats_dict("m", "1")
    assert stats["inference_count"] == 4 and stats["execution_count"] == 1
    assert stats["inference_stats"]["success"] == {"count": 4, "ns": 20_000_000}
    assert stats["inference_stats"]["fail"]["count"] == 3
    assert stats["batch_stats"][0]["batch_size"] == 4
    names = {line.split("{")[0].split(" ")[0] for line in text.decode().splitlines() if not line.startswith("#")}
    for family in METRIC_NAMES:
        assert any(n == family or n.startswith(family + "_") for n in names), family


def test_priority_levels_get_their_own_request_and_queue_histograms() -> None:
    metrics = Metrics()
    plain = metrics.recorder("m", "plain")
    leveled = metrics.recorder("m", "leveled", priority_levels=2, level_pending=lambda level: {1: 3.0, 2: 0.0}[level])
    leveled.set_level_queue_capacity(1, 4)
    leveled.set_level_queue_capacity(2, 0)
    plain.set_level_queue_capacity(1, 4)  # no levels: nothing exported
    plain.success(5_000_000, 1_000_000, (0, 1, 0), priority=0)
    leveled.success(3_000_000, 500_000, (0, 1, 0), priority=1)
    leveled.success(9_000_000, 7_000_000, (0, 1, 0), priority=2)
    leveled.success(8_000_000, 6_000_000, (0, 1, 0), priority=2)
    lines = metrics.exposition()[0].decode().splitlines()

    def value(family: str, variant: str, level: str) -> float:
        prefix = f'{family}{{model="m",priority="{level}",variant="{variant}"}} '
        return float(next(line for line in lines if line.startswith(prefix)).split(" ")[1])

    request, queue, pending, capacity = PRIORITY_METRIC_NAMES
    # each level's queue against its own bound, which the saturation alert compares
    assert value(pending, "leveled", "1") == 3 and value(capacity, "leveled", "1") == 4
    assert value(pending, "leveled", "2") == 0 and value(capacity, "leveled", "2") == 0
    assert not any('variant="plain"' in line for line in lines if line.startswith((pending, capacity)))
    assert value(request + "_count", "leveled", "1") == 1 and value(request + "_count", "leveled", "2") == 2
    assert value(queue + "_sum", "leveled", "1") == pytest.approx(0.0005)
    assert value(queue + "_sum", "leveled", "2") == pytest.approx(0.013)
    assert not any('variant="plain"' in line for line in lines if line.startswith(request))  # no levels: none


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    h = HistogramData([(0.1, 50.0), (0.2, 100.0), (float("inf"), 100.0)], sum=12.0, count=100.0)
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.75) == pytest.approx(0.15)
    earlier = HistogramData([(0.1, 40.0), (0.2, 40.0), (float("inf"), 40.0)], sum=2.0, count=40.0)
    delta = h.minus(earlier)
    assert delta.count == 60 and delta.buckets[0] == (0.1, 10.0) and delta.quantile(0.5) == pytest.approx(0.14)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_serve_arguments_become_a_config() -> None:
    config = serve_cli.config_from_args(_args("zoo:mlp", "--max-queue-delay-ms", "2", "--timeout-ms", "50",
                                              "--fixed-wait", "--max-request-mb", "1", "--priority-levels", "3",
                                              "--default-priority-level", "2"))
    assert config.model == "zoo:mlp" and config.host == "127.0.0.1" and config.port == 8000
    assert config.max_queue_delay_s == 0.002 and config.timeout_s == 0.05 and not config.adaptive_wait
    assert config.max_request_bytes == 1024 * 1024
    assert config.priority_levels == 3 and config.default_priority_level == 2
    assert config.priority_queue_policy == () and config.queue_capacity == 0 and config.reject_status == 503
    assert serve_cli.config_from_args(_args("zoo:mlp", "--reject-status", "429")).reject_status == 429
    with pytest.raises(ConfigError, match=r"--reject-status \(reject_status\) must be 429 or 503, got 500"):
        ServeConfig(model="zoo:mlp", reject_status=500)
    leveled = serve_cli.config_from_args(_args(
        "zoo:mlp", "--priority-levels", "3", "--max-queue-size", "8", "--timeout-ms", "50",
        "--priority-queue-policy", "1:max_queue_size=2,timeout_ms=5", "--priority-queue-policy", "3:timeout-ms=500"))
    assert [(p.level, p.max_queue_size, p.timeout_s) for p in leveled.priority_queue_policy] == [
        (1, 2, 0.005), (3, None, 0.5)]
    assert [leveled.queue_size_of(level) for level in (1, 2, 3)] == [2, 8, 8]
    assert [leveled.timeout_of(level) for level in (1, 2, 3)] == [0.005, 0.05, 0.5]
    assert leveled.queue_capacity == 18  # all levels together, as the pending gauge counts
    assert leveled.delayed_levels == frozenset() and leveled.allows_timeout_override(1)
    delayed = serve_cli.config_from_args(_args(
        "zoo:mlp", "--priority-levels", "3", "--timeout-ms", "50", "--timeout-action", "delay",
        "--priority-queue-policy", "1:timeout_action=reject,allow_timeout_override=false",
        "--priority-queue-policy", "2:timeout_action=DELAY"))
    assert [p.timeout_action for p in delayed.priority_queue_policy] == ["reject", "delay"]
    assert [delayed.timeout_action_of(level) for level in (1, 2, 3)] == ["reject", "delay", "delay"]
    assert delayed.delayed_levels == frozenset({2, 3})
    assert [delayed.allows_timeout_override(level) for level in (1, 2, 3)] == [False, True, True]
    one = serve_cli.config_from_args(_args("zoo:mlp", "--timeout-action", "delay", "--no-timeout-override"))
    assert one.delayed_levels == frozenset({0}) and not one.allow_timeout_override
    assert not leveled.allow_client_shm
    shm = serve_cli.config_from_args(_args("zoo:mlp", "--allow-client-shm"))
    assert shm.allow_client_shm
    assert serve_cli.settings_line(shm, 8, 1).endswith("; clients' system shared memory allowed")
    ab = serve_cli.config_from_args(_args("--variant", "a=d1", "--variant", "b=d2", "--split", "90:10"))
    assert ab.variants == (("a", "d1"), ("b", "d2")) and ab.split == (90, 10)
    assert ab.to_dict()["token"] is None


def test_the_startup_line_says_what_the_server_runs_with() -> None:
    plain = serve_cli.config_from_args(_args("zoo:mlp"))
    assert serve_cli.settings_line(plain, 32, 2) == (
        "batching: max batch 32, queue delay 5 ms (adaptive); 1 instance x 2 torch threads; "
        "queue: unbounded, no timeout")
    assert serve_cli.settings_line(plain, 0, None) == (
        "batching: off; 1 instance; queue: unbounded, no timeout")
    leveled = serve_cli.config_from_args(_args(
        "zoo:mlp", "--fixed-wait", "--instances", "2", "--max-queue-size", "8", "--timeout-ms", "50",
        "--priority-levels", "2", "--priority-queue-policy", "1:max_queue_size=2,timeout_ms=5",
        "--reject-status", "429"))
    assert serve_cli.settings_line(leveled, 16, 1) == (
        "batching: max batch 16, queue delay 5 ms (fixed); 2 instances x 1 torch thread; "
        "queue: at most 8 queued, timeout 50 ms per level; priority levels 1-2 (default 2); "
        "level 1: at most 2 queued, timeout 5 ms; a full queue answers 429")
    delayed = serve_cli.config_from_args(_args(
        "zoo:mlp", "--timeout-ms", "50", "--timeout-action", "delay", "--priority-levels", "2",
        "--priority-queue-policy", "1:timeout_action=reject,allow_timeout_override=false"))
    assert serve_cli.settings_line(delayed, 8, 1).endswith(
        "queue: unbounded, timeout 50 ms (then delayed) per level; priority levels 1-2 (default 2); "
        "level 1: unbounded, timeout 50 ms, requests' own timeouts ignored")
    # delay without a server timeout: only a request's own timeout delays it (it said "no timeout (then delayed)")
    own = serve_cli.config_from_args(_args("zoo:mlp", "--timeout-action", "delay"))
    assert serve_cli.settings_line(own, 8, 1).endswith(
        "queue: unbounded, no timeout (a request's own timeout delays it)")
    # whether the server wants a token (an operator could not tell from its log), never the token itself
    protected = serve_cli.config_from_args(_args("zoo:mlp", "--token", "s3cr3t", "--max-queue-size", "4"))
    line = serve_cli.settings_line(protected, 8, 1)
    assert line.endswith("queue: at most 4 queued, no timeout; bearer token required (all but /v2/health/*)")
    assert "s3cr3t" not in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "nothing to serve"),
        (("zoo:mlp", "--variant", "a=x"), "not both"),
        (("--variant", "a=x"), "at least two"),
        (("--variant", "a=x", "--variant", "a=y"), "distinct"),
        (("--variant", "ax", "--variant", "b=y"), "is not NAME=DIR"),
        (("--variant", "a=", "--variant", "b=y"), "'a=' is not NAME=DIR"),
        (("--variant", "a=x", "--variant", "b=y", "--split", "90:5:5"), "3 weights for 2 variants"),
        (("zoo:mlp", "--split", "1:1"), "only applies with --variant"),
        (("zoo:mlp", "--instances", "0"), "--instances"),
        (("zoo:mlp", "--grpc-stream-window", "8"), "bounds the requests of a gRPC stream: add --grpc-port PORT"),
        (("zoo:mlp", "--grpc-port", "0", "--grpc-stream-window", "0"),
         r"--grpc-stream-window \(grpc_stream_window\) must be at least 1"),
        (("zoo:mlp", "--max-batch-size", "-1"), r"--max-batch-size \(max_batch_size\) must be >= 0"),
        (("zoo:mlp", "--max-queue-delay-ms", "-1"),
         r"--max-queue-delay-ms \(max_queue_delay_s, in seconds\) must be a number >= 0, got -1 ms"),
        (("zoo:mlp", "--max-queue-delay-ms", "nan"),
         r"--max-queue-delay-ms \(max_queue_delay_s, in seconds\) must be a number >= 0, got nan ms"),
        (("zoo:mlp", "--max-queue-delay-ms", "inf"),
         r"--max-queue-delay-ms \(max_queue_delay_s, in seconds\) must be a number >= 0, got inf ms"),
        (("zoo:mlp", "--timeout-ms", "nan"),
         r"--timeout-ms \(timeout_s, in seconds\) must be a positive number, got nan ms"),
        (("zoo:mlp", "--timeout-ms", "inf"),
         r"--timeout-ms \(timeout_s, in seconds\) must be a positive number, got inf ms"),
        (("zoo:mlp", "--max-request-mb", "nan"), "--max-request-mb must be a positive number, got nan"),
        (("zoo:mlp", "--max-request-mb", "inf"), "--max-request-mb must be a positive number, got inf"),
        (("zoo:mlp", "--max-request-mb", "0"), "--max-request-mb must be a positive number, got 0"),
        (("zoo:mlp", "--exit-timeout-s", "-5"), r"--exit-timeout-s \(exit_timeout_s\) must be a number >= 0, got -5"),
        (("zoo:mlp", "--exit-timeout-s", "inf"), r"--exit-timeout-s \(exit_timeout_s\) must be a number >= 0, got inf"),
        (("zoo:mlp", "--model-name", "team/enc"), "a model name is one URL path segment"),
        (("zoo:mlp", "--model-name", ".."), "a model name is one URL path segment"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:timeout_ms=inf"),
         "timeout_ms must be a positive number, got inf"),
        (("zoo:mlp", "--priority-levels", "2", "--default-priority-level", "3"), "must be in 1..2"),
        (("zoo:mlp", "--default-priority-level", "1"), "needs --priority-levels"),
        (("zoo:mlp", "--priority-queue-policy", "1:timeout_ms=5"), "needs --priority-levels N"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "3:timeout_ms=5"), "must be in 1..2"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:timeout_ms=5",
          "--priority-queue-policy", "1:max_queue_size=1"), "given more than once"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "timeout_ms=5"), "is not LEVEL:KEY=VALUE"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "high:timeout_ms=5"),
         "'high:timeout_ms=5' is not LEVEL:KEY=VALUE"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:queue=5"),
         "'queue=5' is not one of max_queue_size=VALUE, timeout_ms=VALUE, timeout_action=VALUE"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:max_queue_size=2.5"),
         "max_queue_size=2.5 is not a whole number"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:timeout_ms=5,timeout_ms=6"),
         "timeout_ms is given twice"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "2:timeout_ms=-1"),
         "timeout_ms must be a positive number"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:timeout_action=drop"),
         "timeout_action=drop is not reject or delay"),
        (("zoo:mlp", "--priority-levels", "2", "--priority-queue-policy", "1:allow_timeout_override=no"),
         "allow_timeout_override=no is not true or false"),
    ],
)
def test_bad_serve_arguments_say_how_to_fix_them(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        serve_cli.config_from_args(_args(*argv))


def test_the_grpc_stream_window_reaches_the_config() -> None:
    windowed = serve_cli.config_from_args(_args("zoo:mlp", "--grpc-port", "8001", "--grpc-stream-window", "8"))
    assert (windowed.grpc_port, windowed.grpc_stream_window) == (8001, 8)
    assert serve_cli.config_from_args(_args("zoo:mlp", "--grpc-port", "0")).grpc_stream_window == 1024


def test_router_is_sticky_and_follows_the_weights() -> None:
    entry = ModelEntry("m", [object(), object()], [90, 10])  # type: ignore[list-item]
    picks = [entry.choose(f"user-{i}") for i in range(2000)]
    assert all(entry.choose(f"user-{i}") is picks[i] for i in range(50))
    share = picks.count(entry.variants[0]) / len(picks)
    assert 0.85 < share < 0.95


def test_warmup_covers_every_batch_size_up_to_64_then_powers_of_two_and_the_max() -> None:
    assert warmup_sizes(32) == tuple(range(1, 33))
    assert warmup_sizes(64) == tuple(range(1, 65))
    assert warmup_sizes(100) == (1, 2, 4, 8, 16, 32, 64, 100)
    assert warmup_sizes(0) == (1,)


def test_config_rejects_both_or_neither() -> None:
    with pytest.raises(ConfigError):
        ServeConfig()
    with pytest.raises(ConfigError):
        ServeConfig(model="zoo:mlp", variants=(("a", "x"), ("b", "y")))


def test_a_python_callers_bad_serve_config_is_named_by_its_field() -> None:
    """dlperf.ServeConfig(port='80') raised a bare TypeError of a comparison, and a config without a model asked for
    WORKLOAD_OR_ARTIFACT and --variant, which a Python caller never wrote."""
    with pytest.raises(ConfigError, match=r"--port \(port\) must be an integer, got '80'"):
        ServeConfig(model="zoo:mlp", port="80")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"--timeout-ms \(timeout_s, in seconds\) must be a number, got '5'"):
        ServeConfig(model="zoo:mlp", timeout_s="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"--instances \(instances\) must be an integer, got True"):
        ServeConfig(model="zoo:mlp", instances=True)
    with pytest.raises(ConfigError, match=r"either one model \(model='zoo:NAME'.* or two or more variants \(variants="):
        ServeConfig(port=80)
    with pytest.raises(ConfigError, match=r"--max-batch-size \(max_batch_size\) must be >= 0 \(0 or 1: no batch"):
        ServeConfig(model="zoo:mlp", max_batch_size=-1)
    assert ServeConfig(model="zoo:mlp", max_batch_size=0).max_batch_size == 0  # batching off, as the CLI's 0
    assert ServeConfig(model="zoo:mlp", grpc_port=None, threads=None, timeout_s=None).threads is None


def test_every_recorded_time_and_count_lands_in_its_own_series_and_statistic() -> None:
    """Each figure of a batch, a success and a failure is read back where it was put, in seconds on /metrics and in
    ns/ms in the statistics: the queue histogram with the request time, the compute one with the model's time alone
    (not input + infer + output), a batch histogram of ones, a batch's input and infer times swapped or seconds for
    last_inference would all look plausible on a dashboard."""
    import time

    from dlperf.serve.metrics import BATCH_BUCKETS, LATENCY_BUCKETS_S

    metrics = Metrics()
    r = metrics.recorder("m", "a")
    before_ms = int(time.time() * 1000)
    r.batch(2, 1_000_000, 4_000_000, 2_000_000)
    r.batch(5, 3_000_000, 8_000_000, 5_000_000)
    after_ms = int(time.time() * 1000)
    r.success(20_000_000, 3_000_000, (1_000_000, 4_000_000, 2_000_000))
    r.failure("TIMEOUT", 40_000_000)
    parsed = parse_variant_metrics(metrics.exposition()[0].decode())["a"]
    assert parsed.queue_duration.sum == pytest.approx(0.003) and parsed.queue_duration.count == 1
    assert parsed.compute_duration.sum == pytest.approx(0.007) and parsed.compute_duration.count == 1
    assert parsed.success_duration.sum == pytest.approx(0.02) and parsed.request_duration.sum == pytest.approx(0.06)
    buckets = dict(parsed.batch_size.buckets)
    assert parsed.batch_size.sum == 7 and (buckets[1], buckets[2], buckets[4], buckets[6]) == (0, 1, 1, 2)
    assert parsed.failure_total["TIMEOUT"] == 1 and parsed.requests_total == 2
    stats = metrics.stats_dict("m", "1")
    assert before_ms <= stats["last_inference"] <= after_ms  # milliseconds since the epoch, as Triton's
    assert [(s["batch_size"], s["compute_input"]["ns"], s["compute_infer"]["ns"], s["compute_output"]["ns"])
            for s in stats["batch_stats"]] == [(2, 1_000_000, 4_000_000, 2_000_000),
                                               (5, 3_000_000, 8_000_000, 5_000_000)]
    inference = stats["inference_stats"]
    assert [inference[k]["ns"] for k in ("queue", "compute_input", "compute_infer", "compute_output", "fail")] == [
        3_000_000, 1_000_000, 4_000_000, 2_000_000, 40_000_000]
    # docs/serve.md: latency buckets 0.5 ms to 30 s, 25 of them; batch-size buckets 1 to 512
    assert (LATENCY_BUCKETS_S[0], LATENCY_BUCKETS_S[-1], len(LATENCY_BUCKETS_S)) == (0.0005, 30.0, 25)
    assert (BATCH_BUCKETS[0], BATCH_BUCKETS[-1]) == (1, 512)
    assert [b for b, _ in parsed.queue_duration.buckets] == [*LATENCY_BUCKETS_S, float("inf")]


def test_a_quantile_in_the_open_top_bucket_is_the_highest_finite_bound() -> None:
    """As Prometheus' histogram_quantile: observations above the last finite bound are reported at that bound, not
    as infinity (a live comparison's p99 of a variant with a few very slow requests)."""
    h = HistogramData([(0.1, 90.0), (0.2, 95.0), (float("inf"), 100.0)], sum=30.0, count=100.0)
    assert h.quantile(0.99) == 0.2 and h.quantile(0.5) == pytest.approx(0.1 * 50 / 90)


def test_whose_engine_threads_the_startup_line_gives_and_which_specs_are_loaded() -> None:
    """An engine artifact's threads are --threads' where given, else the artifact's own; the allocator and memory
    line look at the target, or each variant's folder."""
    given = serve_cli.config_from_args(_args("zoo:mlp", "--threads", "2"))
    assert serve_cli.instance_threads(given, None, "onnxruntime", 2) == "1 instance x 2 onnxruntime threads (--threads)"
    own = serve_cli.config_from_args(_args("zoo:mlp"))
    assert serve_cli.instance_threads(own, None, "onnxruntime", 1) == (
        "1 instance x 1 onnxruntime thread (the artifact's; --threads sets others)")
    assert serve_cli._specs(own) == ["zoo:mlp"]
    assert serve_cli._specs(serve_cli.config_from_args(_args("--variant", "a=d1", "--variant", "b=d2"))) == ["d1", "d2"]


def test_only_an_artifact_quantized_per_batch_gets_the_batching_note(tmp_path: Path) -> None:
    from dlperf.optimize.artifact import MANIFEST

    for name, engine, precision in (("int8", "onnxruntime", "int8-dynamic"), ("fp32", "onnxruntime", "fp32"),
                                    ("torch", "torch", "int8-dynamic")):
        (tmp_path / name).mkdir()
        (tmp_path / name / MANIFEST).write_text(json.dumps({"engine": engine, "precision": precision}))
    specs = [str(tmp_path / name) for name in ("int8", "fp32", "torch")] + ["zoo:mlp"]
    (note,) = serve_cli.batch_dependence_notes(specs)
    assert note.startswith(f"{tmp_path / 'int8'} quantizes activations dynamically with one scale per batch")


def test_the_token_can_come_from_a_file_kept_off_the_command_line(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("  s3cr3t\n")
    assert serve_cli.config_from_args(_args("zoo:mlp", "--token-file", str(secret))).token == "s3cr3t"
    assert serve_cli.config_from_args(_args("zoo:mlp", "--token", "t")).token == "t"
    with pytest.raises(ConfigError, match="either --token or --token-file, not both"):
        serve_cli.config_from_args(_args("zoo:mlp", "--token", "t", "--token-file", str(secret)))
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"--token-file '{missing}' cannot be read"):
        serve_cli.config_from_args(_args("zoo:mlp", "--token-file", str(missing)))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty: write the bearer token in it"):
        serve_cli.config_from_args(_args("zoo:mlp", "--token-file", str(tmp_path / "empty")))
    (tmp_path / "two").write_text("s3cr3t\nother\n")
    with pytest.raises(ConfigError, match="holds more than one word"):
        serve_cli.config_from_args(_args("zoo:mlp", "--token-file", str(tmp_path / "two")))


def test_the_startup_lines_say_which_artifact_is_served_and_where_it_came_from(tmp_path: Path) -> None:
    """`dlperf serve DIR` of zoo:minilm's dynamic_int8 artifact said `loading DIR` and `serving model 'minilm'`, and its
    metadata `platform: torch`: nothing told it from the fp32 model, nor gave the run, batch and fidelity it was
    chosen at. Each artifact served gets a line from its manifest; a workload gets none."""
    from dlperf.optimize.artifact import MANIFEST

    manifests = {
        "int8": {"engine": "torch", "precision": "int8", "label": "dynamic_int8", "workload": "zoo:minilm",
                 "run_id": "3be1c5709f46", "batch_size": 1, "confirmed": True,
                 "metrics": {"metric": 0.99707, "metric_name": "fidelity", "ab": {"speedup": 1.195}}},
        "runner": {"engine": "onnxruntime", "precision": "fp32", "label": "onnxruntime", "confirmed": False},
    }
    for name, manifest in manifests.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / MANIFEST).write_text(json.dumps(manifest))
    lines = serve_cli.artifact_lines([str(tmp_path / "int8"), str(tmp_path / "runner"), "zoo:mlp"])
    assert lines == [
        f"artifact {tmp_path / 'int8'}: dynamic_int8 (torch, int8) from `dlperf optimize zoo:minilm` (run "
        "3be1c5709f46), chosen at batch 1; fidelity 0.9971; 1.20x the baseline's speed by A/B",
        f"artifact {tmp_path / 'runner'}: onnxruntime (onnxruntime, fp32); not confirmed faster by an A/B",
    ]


def test_the_startup_line_of_an_artifact_whose_search_timing_was_disturbed_says_so(tmp_path: Path) -> None:
    """The manifest's p99 2.03 s and 4.0 items/s beside a p50 of 13.3 ms came from stalled calls: the line quotes
    the A/B, and says the search's own figures in the manifest are not the model's."""
    from dlperf.optimize.artifact import MANIFEST

    manifest = {"engine": "torch", "precision": "int8", "label": "dynamic_int8", "workload": "zoo:minilm",
                "run_id": "3be1c5709f46", "batch_size": 1, "confirmed": True,
                "metrics": {"metric": 0.99707, "metric_name": "fidelity", "ab": {"speedup": 1.195}, "p99_s": 2.03,
                            "disturbed": "its mean call took 19x its median (250 against 13.3 ms, p99 2.03e+03 ms): "
                                         "some calls stalled, so its p99 and items/s are not the model's"}}
    (tmp_path / "int8").mkdir()
    (tmp_path / "int8" / MANIFEST).write_text(json.dumps(manifest))
    assert serve_cli.artifact_lines([str(tmp_path / "int8")]) == [
        f"artifact {tmp_path / 'int8'}: dynamic_int8 (torch, int8) from `dlperf optimize zoo:minilm` (run "
        "3be1c5709f46), chosen at batch 1; fidelity 0.9971; 1.20x the baseline's speed by A/B; the search's own "
        "timing of it was disturbed (its mean call took 19x its median): the manifest's p50, p99 and throughput are "
        "not the model's",
    ]
