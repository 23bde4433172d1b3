"""GPU sampling reads the GPU torch runs on: NVML numbers every GPU, CUDA only the visible ones."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from dlperf.measure.system import nvml_index

pytestmark = pytest.mark.unit


def test_nvml_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert (nvml_index(0), nvml_index(1)) == (3, 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_index(2) == 2


def test_cpu_percent_of_short_regions_is_within_the_machine() -> None:
    """Over a region of a few ms psutil's 10 ms clock ticks read as 482% on a 2-core machine; the process's CPU
    time at fine resolution stays within 100% per core (and near 100% for one busy thread)."""
    import time

    import psutil

    from dlperf.measure.system import UtilizationSampler

    readings = []
    for _ in range(30):
        with UtilizationSampler() as sampler:
            end = time.perf_counter() + 0.003
            while time.perf_counter() < end:
                pass
        readings.append(sampler.result.process_cpu_percent)
    assert max(readings) <= 100.0 * (psutil.cpu_count() or 1)
    # with 10 ms ticks most 3 ms regions read 0%; how far above 0 depends on other load on the machine (it
    # asserted > 50%, which failed while other processes kept this 2-core machine busy)
    assert sorted(readings)[len(readings) // 2] > 0.0


def test_cpu_percent_is_process_time_over_wall_time_capped_at_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import psutil

    from dlperf.measure.system import UtilizationSampler

    clocks = {"cpu": 0.0, "wall": 0.0}
    monkeypatch.setattr(time, "process_time", lambda: clocks["cpu"])
    monkeypatch.setattr(time, "perf_counter", lambda: clocks["wall"])
    with UtilizationSampler(interval_s=60.0) as half:
        clocks["cpu"] += 0.0015
        clocks["wall"] += 0.003
    assert half.result.process_cpu_percent == pytest.approx(50.0)  # half of one core
    with UtilizationSampler(interval_s=60.0) as over:
        clocks["cpu"] += 1.0  # a clock's rounding that reads more CPU time than the cores had
        clocks["wall"] += 0.003
    assert over.result.process_cpu_percent == 100.0 * (psutil.cpu_count() or 1)


def test_run_queue_wait_is_the_threads_wait_for_a_core_over_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from dlperf.measure import system

    clocks = {"wall": 0.0, "wait": 5.0}
    monkeypatch.setattr(time, "perf_counter", lambda: clocks["wall"])
    monkeypatch.setattr(system, "run_queue_wait_s", lambda: clocks["wait"])
    with system.UtilizationSampler(interval_s=60.0) as starved:
        clocks["wall"] += 2.0
        clocks["wait"] += 1.5  # threads waited 1.5 s for a core in 2 s
    assert starved.result.run_queue_wait_cores == pytest.approx(0.75)
    with system.UtilizationSampler(interval_s=60.0) as ended:
        clocks["wall"] += 1.0
        clocks["wait"] -= 0.5  # a thread that ended took its wait along
    assert ended.result.run_queue_wait_cores == 0.0
    monkeypatch.setattr(system, "run_queue_wait_s", lambda: None)  # not Linux
    with system.UtilizationSampler(interval_s=60.0) as unknown:
        clocks["wall"] += 1.0
    assert unknown.result.run_queue_wait_cores is None


def test_run_queue_wait_reads_this_process_on_linux() -> None:
    from dlperf.measure.system import run_queue_wait_s

    if not os.path.exists("/proc/self/task"):
        pytest.skip("per-thread schedstat is Linux's")
    first = run_queue_wait_s()
    assert first is not None and first >= 0.0


def test_a_gpu_reading_that_fails_leaves_the_gpu_numbers_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVML refuses utilization on a MIG instance (NotSupported): the sampling thread died with a traceback on
    # stderr at every batch size (an unhandled thread exception, an error under pytest's filterwarnings)
    import threading

    from dlperf.measure import system

    read = threading.Event()

    def refuse(handle: object) -> tuple[float, int]:
        read.set()
        raise RuntimeError("Not Supported")

    monkeypatch.setattr(system, "_nvml_handle", lambda index: object())
    monkeypatch.setattr(system, "_nvml_read", refuse)
    with system.UtilizationSampler(interval_s=0.001, gpu_index=0) as sampler:
        assert read.wait(5.0)
    assert sampler.result.gpu_util_percent is None and sampler.result.gpu_memory_used_bytes is None
    assert sampler.result.extra["gpu_util_error"] == "RuntimeError: Not Supported"


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="reads Linux's schedstat")
def test_a_thread_core_clock_reads_the_thread_that_made_it_from_the_file_it_keeps_open() -> None:
    """`profile --train` reads it twice inside each timed step: one pread, not an open and read of /proc (25 µs)."""
    from dlperf.measure.system import ThreadCoreClock, core_time_s

    mine = ThreadCoreClock()
    before, read, after = core_time_s(), mine.read(), core_time_s()
    assert before is not None and read is not None and after is not None
    assert before <= read <= after  # this thread's figure, as core_time_s reads it
    made: list[ThreadCoreClock] = []
    idle = threading.Event()

    def sleeper() -> None:
        made.append(ThreadCoreClock())
        idle.wait(10)

    other = threading.Thread(target=sleeper)
    other.start()
    try:
        while not made:
            time.sleep(0.001)
        theirs0, mine0 = made[0].read(), mine.read()
        end = time.thread_time() + 0.05
        while time.thread_time() < end:  # this thread busy, the other asleep
            pass
        theirs1, mine1 = made[0].read(), mine.read()
    finally:
        idle.set()
        other.join()
    assert theirs0 is not None and theirs1 is not None and mine0 is not None and mine1 is not None
    assert mine1 - mine0 >= 0.05
    assert theirs1 - theirs0 < 0.01  # the other thread's task, though read from this one
    made[0].close()
    mine.close()
    assert mine.read() is None
    mine.close()  # twice is once


def test_a_thread_core_clock_without_the_file_reads_none(tmp_path: Path) -> None:
    from dlperf.measure.system import ThreadCoreClock

    assert ThreadCoreClock(str(tmp_path / "missing")).read() is None
