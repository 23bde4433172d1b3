"""BenchPoint's derived fields (CPU taken by other processes, the contention warning) and a run's headline."""

from __future__ import annotations

import math
import os
import random

import pytest

from dlperf.measure.bench import (
    CONTENTION_PERCENT,
    BenchConfig,
    BenchPoint,
    BenchResult,
    headline_record,
    make_call,
)
from dlperf.measure.stats import Measurement, percentile_upper_bound

from ..passes.torch_models import MaskedEncoder, masked_inputs

pytestmark = pytest.mark.unit


def _point(process: float, system: float) -> BenchPoint:
    return BenchPoint(8, Measurement([1000, 1000, 1000, 1000]), 2**20, process, system)


def test_other_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    busy = _point(process=23.0, system=100.0)  # 200 core-% busy, 23 of it ours
    assert busy.other_load_percent == pytest.approx(177.0)
    assert busy.contention_warning is not None and "1.8 cores" in busy.contention_warning
    alone = _point(process=195.0, system=99.0)
    assert alone.other_load_percent == pytest.approx(3.0)
    assert alone.contention_warning is None
    assert _point(process=50.0, system=10.0).other_load_percent == 0.0
    edge = _point(process=0.0, system=CONTENTION_PERCENT / 2)
    assert edge.other_load_percent == pytest.approx(CONTENTION_PERCENT)
    assert edge.contention_warning is not None
    data = busy.to_dict()
    assert data["other_load_percent"] == pytest.approx(177.0) and data["contention_warning"]


def test_threads_starved_of_cores_are_named_in_the_contention_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """zoo:minilm at batch 1 on 2 cores with one busy elsewhere took 920 ms a call at 2 threads, 37 ms at 1: the
    warning said only "expect slower, noisier numbers"."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def point(process: float, threads: int | None) -> BenchPoint:
        return BenchPoint(1, Measurement([1000] * 4), 2**20, process, 100.0, torch_threads=threads)

    starved = point(100.0, 2).contention_warning  # 2 threads got 1.0 core; 1.0 busy elsewhere
    assert starved is not None and starved.endswith(
        "; its 2 intra-op threads got 1.0 cores: an operator split across them waits for the descheduled one, which "
        "can make a call many times slower (`dlperf profile` tells; --threads 1 measures with fewer)"), starved
    assert point(100.0, 2).to_dict()["torch_threads"] == 2
    # 8 threads, 0.6 cores busy elsewhere on 2: the 1 free core is what --threads is told
    eight = BenchPoint(1, Measurement([1000] * 4), 2**20, 140.0, 100.0, torch_threads=8).contention_warning
    assert eight is not None and "its 8 intra-op threads got 1.4 cores" in eight and "--threads 1 " in eight
    for threads, process in ((1, 100.0), (2, 150.0), (None, 100.0)):  # one thread; got its cores; an engine's
        said = point(process, threads).contention_warning
        assert said is not None and "intra-op threads" not in said, (threads, said)


def test_a_process_that_waited_for_no_core_is_not_said_to_have_starved_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that sleeps 2 ms a call used 0.0 cores on a busy machine and read "its 2 intra-op threads got 0.0
    cores: an operator split across them waits for the descheduled one ... --threads 1 measures with fewer": its
    threads never waited for a core. The thread clause needs their run-queue wait; the other load is still said."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def point(wait_cores: float | None) -> BenchPoint:
        return BenchPoint(1, Measurement([2_000_000] * 4), 2**20, 2.0, 100.0, torch_threads=2,
                          run_queue_wait_cores=wait_cores)

    idle = BenchPoint(1, Measurement([2_000_000, 2_300_000, 2_000_000, 2_600_000]), 2**20, 2.0, 100.0,
                      torch_threads=2, run_queue_wait_cores=0.02).contention_warning  # noisy: said as before
    assert idle is not None and idle.startswith("other processes kept 2.0 cores busy") and "intra-op" not in idle
    assert "expect slower, noisier numbers" in idle
    starved = point(0.94).contention_warning
    assert starved is not None and "its 2 intra-op threads got 0.0 cores" in starved
    unknown = point(None).contention_warning  # not Linux, or a record from before: said as before
    assert unknown is not None and "intra-op threads" in unknown
    assert point(0.02).to_dict()["run_queue_wait_cores"] == 0.02


def test_a_quiet_waiting_model_is_not_told_to_expect_slower_noisier_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model sleeping 5 ms a call (IQR 0.26% of the median, 0.016 cores, its threads waiting 0.02 cores for one) on
    a machine with 2.0 cores busy elsewhere read "expect slower, noisier numbers": neither was true of its run. The
    load is said as the machine's, with the run's own quiet shown; a model that computed, or was noisy, is warned."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    quiet = Measurement([5_000_000, 5_010_000, 5_005_000, 5_002_000] * 10)

    def point(process: float, wait: float | None, m: Measurement = quiet) -> BenchPoint:
        return BenchPoint(4, m, 2**20, process, 100.0, torch_threads=2, run_queue_wait_cores=wait)

    said = point(1.6, 0.02).contention_warning
    assert said is not None and "expect slower" not in said, said
    assert said.startswith("other processes kept 2.0 cores busy while measuring; this process used 0.02 cores, its "
                           "threads waited for none, and its calls' IQR was 0.1% of the median (p99 1.00x it)"), said
    assert "a model computing on the CPU would measure slower and noisier on this machine now" in said
    for computing in (point(100.0, 0.02), point(1.6, 0.94), point(1.6, None)):  # used a core; waited; not known
        assert "expect slower, noisier numbers" in (computing.contention_warning or "")
    assert _point(process=1.6, system=10.0).contention_warning is None  # 0.2 cores elsewhere: nothing to say


def test_the_offline_headline_is_the_batch_size_of_the_best_throughput_not_the_last() -> None:
    """Offline's headline is the best items/s of the sweep: here batch 8, between a slower batch 1 and a batch 32
    that ran out of cache (the last batch size measured is not the best one)."""
    points = [BenchPoint(1, Measurement([100_000] * 20), 2**20, 100.0, 50.0),  # 10,000 items/s
              BenchPoint(8, Measurement([200_000] * 20, items_per_call=8), 2**20, 100.0, 50.0),  # 40,000
              BenchPoint(32, Measurement([1_600_000] * 20, items_per_call=32), 2**20, 100.0, 50.0)]  # 20,000
    headline = headline_record(BenchConfig(batch_sizes=(1, 8, 32)), points)
    assert headline == {"kpi": "throughput", "value": pytest.approx(40_000.0), "unit": "items/s", "batch_size": 8}


def test_a_latency_headline_is_its_percentile_and_bound_of_the_samples_in_any_order() -> None:
    """single-stream's headline is the p90 of the calls (not their median), and its bound_99 is MLPerf's bound of
    the sorted samples: the samples are kept in the order they were timed, which is not sorted."""
    samples = [1_000 * k for k in range(1, 101)]
    random.Random(4).shuffle(samples)
    m = Measurement(samples)
    headline = headline_record(BenchConfig(scenario="single-stream"), [BenchPoint(1, m, 2**20, 100.0, 50.0)])
    assert headline["kpi"] == "p90_s" and headline["batch_size"] == 1
    assert headline["value"] == pytest.approx(90.1e-6) == m.p90_s
    bound = percentile_upper_bound(sorted(m.samples_s), 90)
    assert bound is not None and bound >= m.p90_s
    assert headline["bound_99"] == bound


def _tail_samples(calls: int, slow: int, seed: int = 0) -> list[int]:
    """`calls` samples of 2 ms with `slow` of them 20 ms, in a random order (a model 10x slower on some calls)."""
    samples = [20_000_000] * slow + [2_000_000 + k for k in range(calls - slow)]
    random.Random(seed).shuffle(samples)
    return samples


def test_a_loose_bound_says_mlperf_reports_it_and_how_many_calls_would_tighten_it() -> None:
    """A model 10x slower on 5% of its calls, 288 calls: the p90 is 2 ms but its 99%-confidence bound is a 20 ms
    call, and MLPerf's single-stream result is that bound; the headline said only '(<= 20 ms at 99% confidence)'."""
    point = BenchPoint(1, Measurement(_tail_samples(288, 18)), 2**20, 100.0, 50.0)
    headline = headline_record(BenchConfig(scenario="single-stream"), [point])
    assert headline["value"] == pytest.approx(2.0e-3, rel=0.001) and headline["bound_99"] == pytest.approx(0.02)
    note = headline["bound_note"]
    assert note.startswith("the bound is 10.0x the p90: 288 calls do not pin the p90 down, and MLPerf reports the "
                           "bound (single-stream's early-stopping estimate), not the sample p90")
    assert note.endswith("raise --min-iters or --min-duration (min_iters=, min_duration_s=)")
    # dlperf.bench's result lists it among its warnings (the CLI appends it to the headline line)
    result = BenchResult("tail", BenchConfig(scenario="single-stream"), [point], 0)
    assert result.warnings[0] == f"headline: {note}"
    calls = int(note.split("about ")[1].split(" calls")[0].replace(",", ""))
    assert "if 6.2% of calls stay above that" in note  # 18 of 288
    # the count it names is right: that many calls with the same share slow bound the p90 under 1.2x it, one
    # hundred fewer do not
    limit = 1.2 * headline["value"]
    for n, within in ((calls, True), (calls - 100, False)):
        bound = percentile_upper_bound(sorted(s / 1e9 for s in _tail_samples(n, math.ceil(18 / 288 * n))), 90)
        assert bound is not None and (bound <= limit) is within


def test_a_tight_bound_or_a_slow_share_no_run_fixes_gets_its_own_words() -> None:
    steady = BenchPoint(1, Measurement([2_000_000 + k for k in range(300)]), 2**20, 100.0, 50.0)
    assert "bound_note" not in headline_record(BenchConfig(scenario="single-stream"), [steady])
    assert BenchResult("steady", BenchConfig(scenario="single-stream"), [steady], 0).warnings == []
    # 10% of calls slow: the sample p90 falls between a fast and a slow call (3.8 ms), and the true p90 may be a slow
    # call's, so no longer run brings the bound down to 1.2x the sample p90; the note says so instead of a count
    mixed = BenchPoint(1, Measurement(_tail_samples(300, 30)), 2**20, 100.0, 50.0)
    note = headline_record(BenchConfig(scenario="single-stream"), [mixed])["bound_note"]
    assert note.endswith("10.0% of the calls took over 4.56 ms, so the true p90 may be above that: no longer run "
                         "brings the bound down to it")


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_bench_s_bf16_autocast_runs_an_encoder_with_a_padding_mask() -> None:
    """`dlperf bench attn_wl.py --precision bf16` failed: "the measured call raised RuntimeError: expected scalar type
    Float but found BFloat16" (torch's fused attention fast path checks only CUDA's autocast). The call turns the fast
    path off for itself, and puts it back."""
    import torch

    model = MaskedEncoder().eval()
    inputs = masked_inputs(4)
    out = make_call(model, inputs, "cpu", "bf16")()
    assert out.dtype == torch.bfloat16 and out.shape == (4, 10)
    assert torch.backends.mha.get_fastpath_enabled()
