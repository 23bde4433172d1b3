"""Every zoo workload runs through the benchmark engine on CPU, and `dlperf zoo --json` describes them all."""

from __future__ import annotations

import json

import pytest

from dlperf.cli.main import main
from dlperf.measure.bench import BenchConfig, run_bench
from dlperf.measure.timer import TimerConfig
from dlperf.workload import load_workload
from dlperf.workload.info import describe
from dlperf.workload.zoo import names

pytestmark = pytest.mark.integration

SHORT = TimerConfig(warmup_iters=1, min_duration_s=0.0, min_iters=3, max_iters=3)
BATCHES = {"mlp": (1, 4), "digits-cnn": (1, 4), "resnet18": (1,), "minilm": (1,)}


@pytest.mark.parametrize("name", names())
def test_bench_every_zoo_workload(name: str) -> None:
    workload = load_workload(f"zoo:{name}")
    result = run_bench(workload, BenchConfig(batch_sizes=BATCHES[name], timer=SHORT))
    assert [p.batch_size for p in result.points] == list(BATCHES[name])
    for point in result.points:
        assert len(point.measurement.samples_ns) == 3
        assert point.measurement.throughput > 0
    assert result.model_bytes == describe(workload).parameter_bytes


def test_zoo_json_lists_every_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert list(listed) == names()
    assert all(row["flops_per_sample"] > 0 and row["params"] > 0 for row in listed.values())
    # Hand counts (multiply-add = 2 FLOPs): mlp 64*256 + 256*256 + 256*10 MACs;
    # digits-cnn 64*16*9 + 64*32*16*9 + 512*64 + 64*10 MACs.
    assert listed["mlp"]["flops_per_sample"] == 2 * (64 * 256 + 256 * 256 + 256 * 10)
    assert listed["digits-cnn"]["flops_per_sample"] == 2 * (64 * 16 * 9 + 64 * 32 * 16 * 9 + 512 * 64 + 64 * 10)
    assert 3.5e9 < listed["resnet18"]["flops_per_sample"] < 3.8e9
    # MiniLM at 128 tokens: 6 layers of 4 384x384 and 2 384x1536 projections per token, plus attention.
    linear = 2 * 128 * 6 * (4 * 384 * 384 + 2 * 384 * 1536)
    attention = 2 * 2 * 6 * 128 * 128 * 384
    assert listed["minilm"]["flops_per_sample"] == linear + attention
    assert listed["minilm"]["metric_name"] == "fidelity" and listed["digits-cnn"]["metric_name"] == "accuracy"
    assert listed["mlp"]["metric_name"] is None
    assert listed["minilm"]["params"] == 22_565_376


def test_zoo_table_names_each_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "mlp", "digits-cnn"]) == 0
    out = capsys.readouterr().out
    assert "zoo:mlp" in out and "zoo:digits-cnn" in out and "accuracy" in out and "zoo:minilm" not in out
