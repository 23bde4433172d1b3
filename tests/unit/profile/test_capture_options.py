"""The capture's settings and fixes, checked when they are made and applied, and the busy-thread count of a step."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from dlperf.errors import ConfigError
from dlperf.profile import capture as capture_module
from dlperf.profile.capture import CaptureConfig, StepOptions
from dlperf.profile.fixes import (
    Fix,
    batch_fix,
    bf16_fix,
    channels_last_fix,
    compile_fix,
    loader_fix,
    optimizer_fix,
)

pytestmark = pytest.mark.unit


def test_a_batch_size_or_memory_budget_of_zero_is_refused_not_read_as_the_default() -> None:
    """0 is falsy: a batch size of 0 ran the workload's default batch, a --memory-budget of 0 the machine's RAM."""
    with pytest.raises(ConfigError, match="batch size must be >= 1, got 0"):
        StepOptions(batch_size=0)
    with pytest.raises(ConfigError, match="--memory-budget must be positive, got 0"):
        CaptureConfig(memory_budget_bytes=0)


def test_a_fix_of_unknown_kind_or_a_batch_factor_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown fix 'faster'"):
        Fix("faster", "label", "setting")
    with pytest.raises(ConfigError, match="batch_factor must be >= 1, got 0"):
        Fix("batch", "label", "setting", batch_factor=0)


def test_each_fix_changes_its_own_step_option_and_a_loader_fix_wins_over_the_workloads_setting() -> None:
    base = StepOptions(loader_kwargs=(("num_workers", 0), ("pin_memory", True)))
    fixed = loader_fix({"num_workers": 2}).apply(base, 8)
    assert dict(fixed.loader_kwargs) == {"num_workers": 2, "pin_memory": True}
    assert bf16_fix().apply(base, 8) == StepOptions(loader_kwargs=base.loader_kwargs, precision="bf16")
    assert channels_last_fix().apply(base, 8) == StepOptions(loader_kwargs=base.loader_kwargs, channels_last=True)
    assert compile_fix().apply(base, 8) == StepOptions(loader_kwargs=base.loader_kwargs, compile=True)
    fused = optimizer_fix("fused")
    assert fused.apply(base, 8) == StepOptions(loader_kwargs=base.loader_kwargs, optimizer_impl="fused")
    assert fused.label == "fused optimizer (fused=True)"
    with pytest.raises(ConfigError, match="unknown optimizer implementation 'fast'"):
        StepOptions(optimizer_impl="fast")
    four = batch_fix(8)
    assert (four.batch_factor, four.label, four.setting) == (4, "batch 32 instead of 8", "--batch-size 32")


@pytest.fixture()
def threads_named() -> Iterator[dict[str, int]]:
    """Two idle threads, one named as dlperf names its samplers and one as a user's thread: their native ids."""
    stop = threading.Event()
    started = [threading.Thread(target=stop.wait, name=name) for name in ("dlperf-sampler", "user-feeder")]
    for t in started:
        t.start()
    yield {t.name: int(t.native_id or 0) for t in started}
    stop.set()
    for t in started:
        t.join()


def test_busy_threads_count_those_over_five_percent_and_other_python_threads_leave_out_dlperfs(
        threads_named: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 1 s: the sampler used 0.9 s, the user's thread 0.5 s, a native thread 0.06 s and another 0.01 s."""
    sampler, feeder = threads_named["dlperf-sampler"], threads_named["user-feeder"]
    native, idle = 10**9 + 1, 10**9 + 2
    before = {sampler: 0.0, feeder: 0.0, native: 1.0, idle: 1.0}
    monkeypatch.setattr(capture_module, "_thread_cpu_s",
                        lambda: {sampler: 0.9, feeder: 0.5, native: 1.06, idle: 1.01})
    busy, others = capture_module._busy_threads(before, 1.0)
    assert busy == 3
    assert others == pytest.approx(0.5)


def test_oversubscribed_threads_sharing_a_fraction_of_a_core_each_count_as_busy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--threads 64` on 2 busy cores: each of 64 threads got about 1% of a core over 1 s (0.8 cores in all), the
    main thread 3%; two idle threads none. All 64 ran the step: it read '1 thread of this process was busy'."""
    workers = {10**9 + i: 0.0125 for i in range(63)}
    before = dict.fromkeys([*workers, 1, 2, 3], 0.0)
    monkeypatch.setattr(capture_module, "_thread_cpu_s", lambda: {**workers, 1: 0.03, 2: 0.0, 3: 0.0})
    busy, _ = capture_module._busy_threads(before, 1.0)
    assert busy == 64


def test_the_loader_workers_cpu_counts_from_their_first_reading_or_from_their_birth_within_the_timing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' CPU is this process's load: a worker there at the start counts from its first reading, one born
    later (a new epoch's) from 0, and one gone keeps its last reading. Over 2 s: 1.0 s and 0.6 s of CPU."""
    from types import SimpleNamespace

    pids: list[int] = [11]
    cpu = {11: 5.0, 12: 0.2}
    clock = iter([100.0, 102.0])
    step = SimpleNamespace(_iter=object(), workers=SimpleNamespace(pids=lambda _it: list(pids)))
    monkeypatch.setattr(capture_module, "time", SimpleNamespace(perf_counter=lambda: next(clock, 102.0)))
    monkeypatch.setattr(capture_module, "core_time_s", lambda _path: None)
    workers = capture_module._WorkersCore(step, interval_s=3600.0)  # type: ignore[arg-type]
    monkeypatch.setattr(workers, "_cpu_s", lambda pid: cpu.get(pid))
    with workers:
        pids.append(12)
        workers._read()
        cpu.update({11: 6.0, 12: 0.6})
        workers._read()
        pids.remove(11)
        del cpu[11]
    assert workers.seen and workers.count == 2
    assert workers.busy_cores == pytest.approx((1.0 + 0.6) / 2.0)
