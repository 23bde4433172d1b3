from __future__ import annotations

import pytest

from dlperf.errors import TrainError
from dlperf.train.knobs import DEFAULT_KNOBS, Knob, TuneContext, registry
from dlperf.train.knobs.batch import (
    LargestBatch,
    default_budget_bytes,
    nearby_split,
    search_largest_batch,
    split_batch,
    step_footprint_bytes,
)
from dlperf.train.knobs.channels_last import ChannelsLast
from dlperf.train.knobs.checkpointing import Checkpointing
from dlperf.train.knobs.compile import Compile
from dlperf.train.knobs.dataloader import Persistent, PinMemory, Prefetch, Workers
from dlperf.train.knobs.optimizer import OptimizerImpl
from dlperf.train.knobs.precision import MixedPrecision, bf16_supported
from dlperf.train.knobs.threads import Threads
from dlperf.train.loop import StepConfig

from ._workloads import BLOCK_WIDTH, blocks, char_lm, tiny

pytestmark = pytest.mark.unit


def test_registry_holds_every_default_knob_in_order() -> None:
    assert tuple(registry()) == DEFAULT_KNOBS
    assert DEFAULT_KNOBS[:2] == ("threads", "workers")


@pytest.mark.parametrize(("cpus", "counts"), [(1, [1]), (2, [2]), (6, [2, 4, 6]), (8, [2, 4, 8])])
def test_worker_counts_double_up_to_the_cpus(cpus: int, counts: list[int]) -> None:
    ctx = TuneContext(workload=tiny(), cpu_count=cpus)
    assert [c.change["num_workers"] for c in Workers().candidates(StepConfig(batch_size=4), ctx)] == counts


def test_loader_knobs_need_workers() -> None:
    ctx = TuneContext(workload=tiny(), cpu_count=4)
    none = StepConfig(batch_size=4)
    assert Prefetch().skip_reason(none, ctx) is not None
    assert Persistent().skip_reason(none, ctx) is not None
    two = none.replace(num_workers=2)
    assert Prefetch().skip_reason(two, ctx) is None
    assert [c.change for c in Prefetch().candidates(two.replace(prefetch_factor=4), ctx)] == [{"prefetch_factor": 8}]


def test_precision_is_skipped_without_bf16_on_cpu() -> None:
    ctx = TuneContext(workload=tiny(), bf16_supported=False)
    assert "bf16" in (MixedPrecision().skip_reason(StepConfig(batch_size=4), ctx) or "")
    ctx = TuneContext(workload=tiny(), bf16_supported=True)
    assert [c.change for c in MixedPrecision().candidates(StepConfig(batch_size=4), ctx)] == [{"precision": "bf16"}]


def test_binary_search_finds_the_largest_fitting_batch() -> None:
    calls: list[int] = []

    def fits(batch: int) -> tuple[bool, int]:
        calls.append(batch)
        return batch * 1000 * 1.1 <= 22_000, batch * 1000

    search = search_largest_batch(fits, wanted=64, budget_bytes=22_000, margin=0.1)
    assert search.largest_fitting == 20
    assert calls[0] == 64
    assert len(calls) <= 1 + 7  # the wanted batch, then log2(64) halvings
    assert search.probes[0] == (64, 64_000, False)


def test_search_stops_at_the_wanted_batch_when_it_fits() -> None:
    search = search_largest_batch(lambda b: (True, b), wanted=32, budget_bytes=10**9, margin=0.1)
    assert search.largest_fitting == 32 and len(search.probes) == 1


@pytest.mark.parametrize(("effective", "largest", "expected"),
                         [(64, 20, (16, 4)), (64, 64, (64, 1)), (60, 7, (6, 10)), (7, 3, (1, 7))])
def test_split_batch_keeps_the_effective_batch(effective: int, largest: int, expected: tuple[int, int]) -> None:
    assert split_batch(effective, largest) == expected


def test_split_batch_with_nothing_fitting_says_how_to_fix() -> None:
    with pytest.raises(TrainError, match="memory-budget"):
        split_batch(8, 0)


def test_footprint_grows_with_the_batch() -> None:
    w = tiny()
    small = step_footprint_bytes(w, StepConfig(batch_size=8, threads=1))
    large = step_footprint_bytes(w, StepConfig(batch_size=64, threads=1))
    params = (16 * 32 + 32 + 32 * 4 + 4) * 4
    assert small > 2 * params
    assert large > small


def test_footprint_counts_the_weights_and_the_batch_once() -> None:
    """Backward saves a Linear's weight and its input, which were counted again beside the parameters and the batch:
    zoo:mlp's batch 61 needed 1.11 MB where it needs 0.84, and --tune split batches that fit."""
    w = tiny()
    params = (16 * 32 + 32 + 32 * 4 + 4) * 4
    one = step_footprint_bytes(w, StepConfig(batch_size=1, threads=1))
    assert 2 * params < one < 2 * params + 1024  # weights + grads (plain SGD: no state), the rest a few activations


def test_largest_batch_knob_splits_a_batch_over_the_budget() -> None:
    w = tiny(batch_size=64)
    current = StepConfig(batch_size=64, threads=1)
    footprint_16 = step_footprint_bytes(w, current.replace(batch_size=16))
    footprint_17 = step_footprint_bytes(w, current.replace(batch_size=17))
    budget = int((footprint_16 + footprint_17) / 2 * 1.1)  # 16 fits with the 10% margin, 17 does not
    ctx = TuneContext(workload=w, memory_budget_bytes=budget, safety_margin=0.1)
    knob = LargestBatch()
    (candidate,) = knob.candidates(current, ctx)
    assert candidate.change == {"batch_size": 16, "accumulation_steps": 4}
    assert knob.last_search is not None and knob.last_search.largest_fitting == 16
    roomy = TuneContext(workload=w, memory_budget_bytes=10 * budget)
    assert knob.candidates(current, roomy) == []


@pytest.mark.parametrize(("effective", "largest", "expected"),
                         [(61, 36, (30, 2)), (61, 60, (60, 1)), (97, 10, (10, 10)), (64, 36, None), (7, 1, None)])
def test_nearby_split_offers_a_batch_that_splits_into_larger_micro_batches(
        effective: int, largest: int, expected: tuple[int, int] | None) -> None:
    assert nearby_split(effective, largest) == expected


def test_a_prime_batch_over_the_budget_names_a_batch_that_splits_better() -> None:
    """61 only splits as 1 x 61 (ten times slower here); the note now says which batch near it would not."""
    w = tiny(batch_size=61)
    current = StepConfig(batch_size=61, threads=1)
    footprint_40 = step_footprint_bytes(w, current.replace(batch_size=40))
    footprint_41 = step_footprint_bytes(w, current.replace(batch_size=41))
    budget = int((footprint_40 + footprint_41) / 2 * 1.1)  # 40 fits with the 10% margin, 41 does not
    (candidate,) = LargestBatch().candidates(current, TuneContext(workload=w, memory_budget_bytes=budget))
    assert candidate.change == {"batch_size": 1, "accumulation_steps": 61} and candidate.required
    assert candidate.note.endswith("61 has no divisor between 2 and 40, so its micro-batches are small: an "
                                   "effective batch of 60 would split into 30 x 2 (--batch-size 60 tunes that)")


def test_the_search_never_probes_batch_1_for_a_model_with_batch_norm() -> None:
    """BatchNorm cannot train on one sample: the search probed batch 1 when nothing larger fit, and the knob failed
    with torch's 'Expected more than 1 value per channel when training'. It now stops at 2 and says why."""
    import dataclasses

    from torch import nn

    w = tiny(batch_size=8)
    w = dataclasses.replace(w, make_model=lambda: nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32),
                                                                nn.Linear(32, 4)))
    current = StepConfig(batch_size=8, threads=1)
    knob = LargestBatch()
    with pytest.raises(TrainError, match=r"not even a batch of 2 fits in the memory budget \(batch 1 is not tried: "
                                         r"the model normalizes over the batch \(BatchNorm1d\), which cannot train on "
                                         r"one sample\): raise --memory-budget"):
        knob.candidates(current, TuneContext(workload=w, memory_budget_bytes=1))
    assert knob.last_search is not None and [p[0] for p in knob.last_search.probes] == [8, 4, 2]
    # 7 splits only into micro-batches of 1 below 7
    with pytest.raises(TrainError, match="batch 7 splits into no micro-batches of 2 to 6 samples"):
        split_batch(7, 6, smallest=2)
    assert split_batch(8, 3, smallest=2) == (2, 4)


def test_checkpointed_footprint_keeps_block_inputs_and_one_recomputed_block() -> None:
    w = blocks()
    plain = step_footprint_bytes(w, StepConfig(batch_size=256, threads=1))
    checkpointed = step_footprint_bytes(w, StepConfig(batch_size=256, threads=1, checkpointing=True))
    activation = 256 * BLOCK_WIDTH * 4  # one [256, 128] fp32 activation
    # each block saves two such activations; checkpointed, the second one of each is the next module's input
    # (kept anyway) and only one block's first one is alive at a time, while backward recomputes that block
    assert activation <= plain - checkpointed < 2 * activation


def test_checkpointing_a_transformer_lm_fits_a_larger_micro_batch() -> None:
    """Its nn.TransformerEncoder, checkpointed whole, took more memory than not checkpointed (43.6 against 43.1 MiB
    for a 2-layer character-level LM at batch 8 here), so the knob read "the largest micro-batch that fits is 8, no
    larger than the 8 used now"; checkpointed per layer, the whole batch of 16 fits where only 8 did."""
    w = char_lm()
    current = StepConfig(batch_size=8, accumulation_steps=2, threads=1)
    plain = step_footprint_bytes(w, current.replace(batch_size=16))
    checkpointed = step_footprint_bytes(w, current.replace(batch_size=16, checkpointing=True))
    assert checkpointed < 0.8 * plain
    ctx = TuneContext(workload=w, memory_budget_bytes=int(checkpointed * 1.1) + 1, safety_margin=0.1)
    knob = Checkpointing()
    assert knob.skip_reason(current, ctx) is None
    (candidate,) = knob.candidates(current, ctx)
    assert candidate.change == {"checkpointing": True, "batch_size": 16, "accumulation_steps": 1}


def test_checkpointing_knob_proposes_a_larger_micro_batch_when_memory_is_the_limit() -> None:
    w = blocks()
    current = StepConfig(batch_size=16, accumulation_steps=4, threads=1)
    ctx = TuneContext(workload=w, memory_budget_bytes=1 << 30, safety_margin=0.1)
    assert Checkpointing().skip_reason(current.replace(accumulation_steps=1, batch_size=64), ctx) == (
        "memory is not the limit (the whole batch fits without accumulation)")
    budget = int(step_footprint_bytes(w, current.replace(batch_size=32, checkpointing=True)) * 1.1) + 1
    assert step_footprint_bytes(w, current.replace(batch_size=32)) * 1.1 > budget  # 32 fits only checkpointed
    ctx = TuneContext(workload=w, memory_budget_bytes=budget, safety_margin=0.1)
    assert Checkpointing().skip_reason(current, ctx) is None
    (candidate,) = Checkpointing().candidates(current, ctx)
    assert candidate.change == {"checkpointing": True, "batch_size": 32, "accumulation_steps": 2}
    # already at that micro-batch: no candidate, and the reason says what the search found ('nothing to change here')
    knob = Checkpointing()
    assert knob.candidates(current.replace(batch_size=32, accumulation_steps=2), ctx) == []
    assert knob.unchanged_reason(current) == ("with checkpointing the largest micro-batch that fits is 32, no larger "
                                              "than the 32 used now: recomputing activations would cost time for "
                                              "nothing")


def test_checkpointing_is_tried_when_the_unsplit_batch_does_not_fit() -> None:
    """Without a split (the batch knob did not run, or found no batch that fits) the knob said "memory is not the
    limit (the whole batch fits without accumulation)" without looking: with --knobs checkpointing, or after
    "not even a batch of 1 fits", where checkpointing was the one thing left to try."""
    w = blocks()
    current = StepConfig(batch_size=256, threads=1)
    plain = step_footprint_bytes(w, current)
    checkpointed = step_footprint_bytes(w, current.replace(checkpointing=True))
    budget = int(checkpointed * 1.1) + 1
    assert plain * 1.1 > budget  # 256 fits only checkpointed
    ctx = TuneContext(workload=w, memory_budget_bytes=budget, safety_margin=0.1)
    knob = Checkpointing()
    assert knob.skip_reason(current, ctx) is None
    (candidate,) = knob.candidates(current, ctx)
    assert candidate.change == {"checkpointing": True}  # the whole batch fits checkpointed: no accumulation
    assert candidate.required  # the unsplit batch breaks the budget: kept when parity holds, even if slower
    assert candidate.note == (f"batch 256 does not fit in {budget / 2**20:.4g} MiB (a step needs {plain / 2**20:.4g} "
                              "MiB) without checkpointing: checkpointed, 256 x 1 accumulation steps fit")
    # a tighter budget: checkpointed micro-batches with accumulation, but the same split, 64 x 4, fits without
    # checkpointing, which was proposed and "required" all the same, at the cost of recomputing every block
    tight = TuneContext(workload=w, memory_budget_bytes=int(checkpointed * 0.8), safety_margin=0.1)
    assert step_footprint_bytes(w, current.replace(batch_size=64)) * 1.1 <= int(checkpointed * 0.8)
    knob = Checkpointing()
    assert knob.skip_reason(current, tight) is None
    (candidate,) = knob.candidates(current, tight)
    assert candidate.change == {"batch_size": 64, "accumulation_steps": 4} and candidate.required
    assert candidate.note.endswith("without checkpointing: 64 x 4 accumulation steps fit without checkpointing, which "
                                   "would fit no larger micro-batch")
    # not even a batch of 1 fits: the knob fails with that reason (the tuner records it as a failed trial)
    knob = Checkpointing()
    nothing = TuneContext(workload=w, memory_budget_bytes=1, safety_margin=0.1)
    assert knob.skip_reason(current, nothing) is None
    with pytest.raises(TrainError, match="not even a batch of 1 fits"):
        knob.candidates(current, nothing)


def test_checkpointing_is_not_tried_on_a_model_with_batchnorm() -> None:
    """Checkpointing recomputes BatchNorm's training forward in backward: its running statistics were updated
    twice a step (num_batches_tracked 8 for 4 steps), the losses identical, so loss parity passed a different
    eval-mode model."""
    import dataclasses

    from torch import nn

    from dlperf.train.knobs.checkpointing import running_stat_modules

    base = blocks()
    normed = dataclasses.replace(base, make_model=lambda: nn.Sequential(base.build_model(), nn.BatchNorm1d(4)))
    current = StepConfig(batch_size=16, accumulation_steps=4, threads=1)
    reason = Checkpointing().skip_reason(current, TuneContext(workload=normed, memory_budget_bytes=1 << 30,
                                                              safety_margin=0.1))
    assert reason is not None and "running statistics (BatchNorm1d)" in reason
    assert running_stat_modules(nn.Sequential(nn.InstanceNorm1d(4), nn.Linear(4, 4))) == []  # tracks nothing
    assert running_stat_modules(nn.InstanceNorm1d(4, track_running_stats=True)) == ["InstanceNorm1d"]


def test_worker_counts_start_above_the_current_count() -> None:
    ctx = TuneContext(workload=tiny(), cpu_count=8)
    two = StepConfig(batch_size=4, num_workers=2)
    assert [c.change["num_workers"] for c in Workers().candidates(two, ctx)] == [4, 8]
    assert Workers().skip_reason(two.replace(num_workers=8), ctx) == "num_workers is already 8 with 8 usable CPUs"


def test_prefetch_starts_above_the_default_of_two() -> None:
    two = StepConfig(batch_size=4, num_workers=2)
    ctx = TuneContext(workload=tiny(), cpu_count=4)
    assert [c.change for c in Prefetch().candidates(two, ctx)] == [{"prefetch_factor": 4}, {"prefetch_factor": 8}]


@pytest.mark.parametrize(("knob", "current", "reason"), [
    (Persistent(), {"num_workers": 2, "persistent_workers": True}, "workers are already persistent"),
    (PinMemory(), {"pin_memory": True}, "already pinned"),
    (OptimizerImpl(), {"optimizer_impl": "fused"}, "already fused"),
    (MixedPrecision(), {"precision": "bf16"}, "already bf16"),
    (ChannelsLast(), {"channels_last": True}, "already channels_last"),
    (Compile(), {"compile": True}, "already compiled"),
])
def test_a_knob_already_set_is_skipped(knob: Knob, current: dict[str, object], reason: str) -> None:
    ctx = TuneContext(workload=tiny(), device="cuda", cpu_count=4, bf16_supported=True, conv_model=True)
    assert knob.skip_reason(StepConfig(batch_size=4, **current), ctx) == reason  # type: ignore[arg-type]


def test_pinned_memory_is_tried_on_cuda_only() -> None:
    config = StepConfig(batch_size=4)
    assert PinMemory().skip_reason(config, TuneContext(workload=tiny(), device="cuda")) is None
    assert "device is cpu" in (PinMemory().skip_reason(config, TuneContext(workload=tiny())) or "")


def test_the_optimizer_knob_proposes_the_implementations_not_in_use() -> None:
    ctx = TuneContext(workload=tiny())
    default = StepConfig(batch_size=4)
    assert [c.change for c in OptimizerImpl().candidates(default, ctx)] == [{"optimizer_impl": "foreach"},
                                                                           {"optimizer_impl": "fused"}]
    assert [c.change for c in OptimizerImpl().candidates(default.replace(optimizer_impl="foreach"), ctx)] == [
        {"optimizer_impl": "fused"}]


def test_cuda_without_bf16_tries_fp16() -> None:
    ctx = TuneContext(workload=tiny(), device="cuda", bf16_supported=False)
    config = StepConfig(batch_size=4)
    assert MixedPrecision().skip_reason(config, ctx) is None
    assert [c.change for c in MixedPrecision().candidates(config, ctx)] == [{"precision": "fp16"}]
    both = TuneContext(workload=tiny(), device="cuda", bf16_supported=True)
    assert [c.change for c in MixedPrecision().candidates(config, both)] == [{"precision": "bf16"},
                                                                           {"precision": "fp16"}]


@pytest.mark.parametrize(("flags", "supported"), [(["avx2", "avx512_bf16"], True), (["avx2", "amx_bf16"], True),
                                                  (["avx2"], False)])
def test_either_cpu_bf16_flag_means_bf16_is_supported(flags: list[str], supported: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dlperf.measure import env

    monkeypatch.setattr(env, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)  # oneDNN's own check, after
    assert bf16_supported("cpu") is supported


def test_thread_counts_are_one_half_and_all_cpus_but_the_current_one() -> None:
    ctx = TuneContext(workload=tiny(), cpu_count=8)
    assert [c.change["threads"] for c in Threads().candidates(StepConfig(batch_size=4, threads=4), ctx)] == [1, 8]
    assert [c.change["threads"] for c in Threads().candidates(StepConfig(batch_size=4, threads=3), ctx)] == [1, 4, 8]
    assert Threads().skip_reason(StepConfig(batch_size=4), TuneContext(workload=tiny(), cpu_count=2)) is None
    assert Threads().skip_reason(StepConfig(batch_size=4), TuneContext(workload=tiny(), cpu_count=1)) == (
        "only one usable CPU")
    on_cuda = TuneContext(workload=tiny(), device="cuda", cpu_count=8)
    assert Threads().skip_reason(StepConfig(batch_size=4), on_cuda) == "thread settings are a CPU knob"


def test_channels_last_is_tried_on_convolutional_models_only() -> None:
    config = StepConfig(batch_size=4)
    assert ChannelsLast().skip_reason(config, TuneContext(workload=tiny(), conv_model=True)) is None
    assert ChannelsLast().skip_reason(config, TuneContext(workload=tiny())) == "the model has no 2-D convolutions"


def test_compile_is_skipped_where_no_compiler_builds_code() -> None:
    config = StepConfig(batch_size=4)
    missing = TuneContext(workload=tiny(), compiler_missing="no C++ compiler found (install gcc)")
    assert Compile().skip_reason(config, missing) == "no C++ compiler found (install gcc)"
    assert Compile().skip_reason(config, TuneContext(workload=tiny())) is None


def test_a_batch_split_by_accumulation_that_fits_whole_is_merged() -> None:
    w = tiny(batch_size=64)
    knob = LargestBatch()
    (candidate,) = knob.candidates(StepConfig(batch_size=16, accumulation_steps=4, threads=1),
                                   TuneContext(workload=w, memory_budget_bytes=1 << 30))
    assert candidate.change == {"batch_size": 64, "accumulation_steps": 1} and not candidate.required
    assert candidate.note == "the whole batch of 64 fits: no accumulation"


def test_the_footprint_counts_the_optimizer_state() -> None:
    """Adam keeps two moments per parameter: a batch search that left them out took batches that do not fit."""
    params = (16 * 32 + 32 + 32 * 4 + 4) * 4
    sgd = step_footprint_bytes(tiny(), StepConfig(batch_size=8, threads=1))
    adam = step_footprint_bytes(tiny(optimizer="adam"), StepConfig(batch_size=8, threads=1))
    assert 2 * params <= adam - sgd <= 2 * params + 64  # exp_avg and exp_avg_sq, and a scalar step count each


def test_the_default_cpu_budget_is_half_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=16 << 30, available=6 << 30))
    assert default_budget_bytes("cpu") == 3 << 30
