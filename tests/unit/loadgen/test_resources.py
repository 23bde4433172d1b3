"""--collect-metrics' pure parts: one Prometheus page read, a level's readings reduced, the CSV's GPU columns."""

from __future__ import annotations

import csv
import io

import pytest

from dlperf.loadgen.generator import LevelResult
from dlperf.loadgen.render import perf_analyzer_csv, resource_lines
from dlperf.loadgen.resources import Resources, describe, parse_sample, summarize

pytestmark = pytest.mark.unit


def _page(cpu_s: float, rss: float, util: tuple[float, float], power: float, used: tuple[float, float]) -> str:
    """A page as dlperf serve (process collector) and Triton (nv_gpu_*) write it, two GPUs."""
    return f"""# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total {cpu_s}
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes {rss}
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{{gpu_uuid="GPU-aaa"}} {util[0]}
nv_gpu_utilization{{gpu_uuid="GPU-bbb"}} {util[1]}
# HELP nv_gpu_power_usage GPU power usage in watts
# TYPE nv_gpu_power_usage gauge
nv_gpu_power_usage{{gpu_uuid="GPU-aaa"}} {power}
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{{gpu_uuid="GPU-aaa"}} {used[0]}
nv_gpu_memory_used_bytes{{gpu_uuid="GPU-bbb"}} {used[1]}
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{{gpu_uuid="GPU-aaa"}} 1.6e+10
nv_gpu_memory_total_bytes{{gpu_uuid="GPU-bbb"}} 8e+09
# HELP dlperf_inference_pending_requests Requests queued
# TYPE dlperf_inference_pending_requests gauge
dlperf_inference_pending_requests{{model="m",variant="default"}} 3.0
"""


def test_a_page_gives_the_process_and_each_gpu_s_figures() -> None:
    s = parse_sample(_page(12.5, 4e8, (0.25, 0.5), 60.0, (1e9, 2e9)), t_s=7.0)
    assert (s.t_s, s.cpu_s, s.rss_bytes) == (7.0, 12.5, 4e8)
    assert s.gpus["GPU-aaa"] == {"utilization": 0.25, "power_w": 60.0, "memory_used_bytes": 1e9,
                                 "memory_total_bytes": 1.6e10}
    assert "power_w" not in s.gpus["GPU-bbb"] and s.gpus["GPU-bbb"]["memory_used_bytes"] == 2e9
    bare = parse_sample("# TYPE x gauge\nx 1\n", t_s=0.0)  # a page without either: nothing, not an error
    assert bare.cpu_s is None and bare.rss_bytes is None and bare.gpus == {}


def test_a_level_s_readings_reduce_to_cores_peaks_and_means() -> None:
    samples = [parse_sample(_page(10.0 + 1.5 * i, 4e8 + i * 1e7, (0.2 * i, 0.5), 50.0 + 10 * i, (1e9 + i * 1e8, 2e9)),
                            t_s=100.0 + i) for i in range(4)]
    res = summarize(samples, 1.0)
    assert res.samples == 4 and res.cpu_cores == pytest.approx(1.5)  # 4.5 CPU s over 3 s
    assert res.rss_max_bytes == pytest.approx(4.3e8)
    a = res.gpus["GPU-aaa"]
    assert a.utilization == pytest.approx(0.3) and a.power_w == pytest.approx(65.0)
    assert a.memory_used_max_bytes == pytest.approx(1.3e9) and a.memory_total_bytes == 1.6e10
    assert res.gpus["GPU-bbb"].power_w is None
    assert Resources.from_dict(res.to_dict()) == res
    text = describe(res)
    assert text.startswith("server CPU 1.50 cores, RSS max 410 MiB; GPU-aaa: 30% busy, 65.0 W, 1.2 GiB of 14.9 GiB max")
    assert text.endswith("(4 readings)")
    # readings from two processes (replicas behind a proxy): their CPU counters are not one series
    replicas = [parse_sample(_page(5.0 * i, 4e8, (0.1, 0.1), 50.0, (1e9, 1e9)) +
                             f"process_start_time_seconds {1000 + i % 2}\n", t_s=float(i)) for i in range(4)]
    mixed = summarize(replicas, 1.0)
    assert mixed.processes == 2 and mixed.cpu_cores is None and mixed.rss_max_bytes == 4e8
    assert describe(mixed).startswith("server 2 processes answered (replicas?), so no CPU figure, RSS max")
    one = summarize(samples[:1], 1.0)
    assert one.cpu_cores is None and one.rss_max_bytes == 4e8  # one reading says nothing about CPU use


def test_the_csv_gets_perf_analyzer_s_gpu_columns_with_collect_metrics() -> None:
    res = summarize([parse_sample(_page(1.0, 4e8, (0.5, 0.25), 70.0, (1887436800, 2e9)), t_s=0.0)], 1.0)
    level = LevelResult("concurrency", 1.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0], resources=res)
    rows = list(csv.reader(io.StringIO(perf_analyzer_csv([level]))))
    assert rows[0][-4:] == ["Avg GPU Utilization", "Avg GPU Power Usage", "Max GPU Memory Usage", "Total GPU Memory"]
    assert rows[1][-4:] == ["GPU-aaa:0.5;GPU-bbb:0.25;", "GPU-aaa:70;", "GPU-aaa:1887436800;GPU-bbb:2000000000;",
                            "GPU-aaa:16000000000;GPU-bbb:8000000000;"]
    plain = LevelResult("concurrency", 1.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0])
    assert "GPU" not in perf_analyzer_csv([plain])  # without --collect-metrics the columns are perf_analyzer's 13
    assert resource_lines([plain, level]) == [f"  concurrency 1: {describe(res)}"]
    back = LevelResult.from_dict(level.to_dict())
    assert back.resources == res


def test_cpu_is_read_between_the_first_and_last_reading_and_memory_at_its_peak() -> None:
    """Two readings are enough for a CPU figure; with more, the first and the last bound it (a busy middle reading
    does not stand for the level); RSS and GPU memory are their highest reading, not the last one."""
    cpu = [(0.0, 10.0), (1.0, 13.0), (4.0, 14.0)]  # 3 CPU s in the first second, 1 in the next three
    rss = [5e8, 9e8, 6e8]
    samples = [parse_sample(_page(c, m, (0.5, 0.5), 50.0, (m, 1e9)), t_s=t) for (t, c), m in zip(cpu, rss, strict=True)]
    res = summarize(samples, 1.0)
    assert res.cpu_cores == pytest.approx(1.0)  # 4 CPU s over 4 s
    assert res.rss_max_bytes == 9e8 and res.gpus["GPU-aaa"].memory_used_max_bytes == 9e8
    assert summarize(samples[:2], 1.0).cpu_cores == pytest.approx(3.0)


def test_an_idle_gpu_s_zero_readings_are_figures_in_the_csv() -> None:
    """0% busy and 0 W are readings (an idle GPU), not missing ones: the CSV gave an empty cell for them."""
    res = summarize([parse_sample(_page(1.0, 4e8, (0.0, 0.25), 0.0, (0.0, 2e9)), t_s=0.0)], 1.0)
    level = LevelResult("concurrency", 1.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0], resources=res)
    row = list(csv.reader(io.StringIO(perf_analyzer_csv([level]))))[1]
    assert row[-4:-1] == ["GPU-aaa:0;GPU-bbb:0.25;", "GPU-aaa:0;", "GPU-aaa:0;GPU-bbb:2000000000;"]


def test_levels_that_read_no_metrics_keep_the_gpu_columns_of_those_that_did() -> None:
    """One level's metrics page failed (a warning): the CSV lost the GPU columns of every level."""
    res = summarize([parse_sample(_page(1.0, 4e8, (0.5, 0.25), 70.0, (1e9, 2e9)), t_s=0.0)], 1.0)
    read = LevelResult("concurrency", 1.0, 1, [1_000_000] * 10, {"200": 10}, 1.0, True, [10.0], resources=res)
    unread = LevelResult("concurrency", 2.0, 1, [1_000_000] * 20, {"200": 20}, 1.0, True, [20.0])
    rows = list(csv.reader(io.StringIO(perf_analyzer_csv([read, unread]))))
    assert rows[0][-1] == "Total GPU Memory"
    assert rows[1][-4] == "GPU-aaa:0.5;GPU-bbb:0.25;" and rows[2][-4:] == ["", "", "", ""]


def test_a_gauge_without_a_gpu_uuid_and_a_record_without_processes_are_read() -> None:
    """Another exporter's nv_gpu_utilization without its gpu_uuid label is no GPU of this page (it was a KeyError);
    a level stored before `processes` was recorded answered from one process."""
    assert parse_sample("# TYPE nv_gpu_utilization gauge\nnv_gpu_utilization 0.5\n", t_s=0.0).gpus == {}
    old = Resources.from_dict({"samples": 3, "interval_s": 1.0, "cpu_cores": 0.5, "rss_max_bytes": 1e8})
    assert old.processes == 1


def test_readings_taken_at_one_instant_give_no_cpu_figure() -> None:
    """Two readings with no time between them (a level shorter than the clock's step) have no rate to give: it
    was a ZeroDivisionError at the end of the level."""
    samples = [parse_sample(_page(c, 4e8, (0.5, 0.5), 50.0, (1e9, 1e9)), t_s=2.0) for c in (10.0, 10.5)]
    res = summarize(samples, 1.0)
    assert res.cpu_cores is None and res.rss_max_bytes == 4e8
