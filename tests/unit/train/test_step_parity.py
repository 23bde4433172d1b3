from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dlperf.calibrate import Ceilings
from dlperf.errors import ConfigError, TrainError
from dlperf.train.loop import PHASES, StepConfig, TrainLoop
from dlperf.train.parity import ParityConfig, check_parity, compare_losses, loss_curve, tail_mean
from dlperf.train.step import count_step_flops, measure_loop, measure_training

from ._workloads import forward_flops, tiny

pytestmark = pytest.mark.unit


def _ceilings(fp32: float) -> Ceilings:
    return Ceilings(device="cpu", machine_key="test", gemm_flops={"fp32": fp32}, memory_bandwidth_bytes_s=1e10,
                    measured_at="now", threads=1)


def test_step_flops_are_the_analytic_count() -> None:
    loop = TrainLoop(tiny(), StepConfig(batch_size=16, accumulation_steps=2, threads=1))
    assert count_step_flops(loop) == 2 * forward_flops(16)


class _Attention(torch.nn.Module):
    """Each sample's 16 features as q, k and v of 4 positions x 4 dims (one head), through SDPA, then a head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(16, 48)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(-1, 3, 1, 4, 4).unbind(1)
        return self.head(torch.nn.functional.scaled_dot_product_attention(q, k, v).flatten(1))


def test_step_flops_count_attention_on_the_cpu() -> None:
    """SDPA's fused CPU kernel has no formula in FlopCounterMode: a transformer's attention counted zero FLOPs, and
    a char-level LM's MFU read 14% low."""
    w = tiny()
    assert w.train is not None
    workload = dataclasses.replace(w, make_model=_Attention)
    loop = TrainLoop(workload, StepConfig(batch_size=16, threads=1))
    linear = 2 * (2 * 16 * 16 * 48) + 3 * (2 * 16 * 16 * 4)  # the input needs no gradient
    one_bmm = 2 * 16 * 4 * 4 * 4  # a [4 x 4] @ [4 x 4] per sample
    # model FLOPs: 2 matmuls forward, 4 backward (dV, dP, dQ, dK); torch's backward formula counted a fifth, the
    # scores the flash kernel recomputes, which MFU does not count (as it does not count checkpointing's recompute)
    assert count_step_flops(loop) == linear + 2 * one_bmm + 4 * one_bmm
    # CUDA's fused kernels' backward too (their arguments begin as the CPU kernel's: grad_out, query, key, value)
    from dlperf.train.step import attention_flop_formulas

    formulas, shape = attention_flop_formulas(), (16, 1, 4, 4)
    aten = torch.ops.aten
    for op in (aten._scaled_dot_product_flash_attention_backward, aten._scaled_dot_product_efficient_attention_backward,
               aten._scaled_dot_product_cudnn_attention_backward):
        assert formulas[op](shape, shape, shape, shape) == 4 * one_bmm


def test_measure_keeps_every_step_and_its_phases() -> None:
    result = measure_training(tiny(), StepConfig(batch_size=16, threads=1), steps=6, warmup_steps=2,
                              ceilings=_ceilings(1e9))
    m = result.measurement
    assert m.n == 6
    assert m.items_per_call == 16
    assert all(len(result.phases_ns[p]) == 6 for p in PHASES)
    assert len(result.losses) == 6
    phases = result.breakdown_s()
    assert sum(phases[p] for p in PHASES) <= m.mean_s  # the phases are timed inside the step
    assert sum(result.breakdown_share().values()) == pytest.approx(1.0)
    assert result.flops_per_step == forward_flops(16)
    expected_mfu = forward_flops(16) * 6 / m.total_s / 1e9
    assert result.mfu == pytest.approx(expected_mfu)
    assert result.samples_per_s == pytest.approx(16 * 6 / m.total_s)
    data = result.to_dict()
    assert data["mfu"] == result.mfu and set(data["breakdown_s"]) == {*PHASES, "other"}


def test_mfu_needs_the_dtype_ceiling() -> None:
    loop = TrainLoop(tiny(), StepConfig(batch_size=16, threads=1, precision="bf16"))
    result = measure_loop(loop, steps=2, warmup_steps=1, ceilings=_ceilings(1e9))
    assert result.mfu is None
    assert any("no bf16 GEMM ceiling" in n for n in result.notes)


def test_an_implausible_mfu_points_at_the_ceiling() -> None:
    """A ceiling measured while the machine was busy, and cached, gave a tiny CNN 85-100% MFU without a word."""
    loop = TrainLoop(tiny(), StepConfig(batch_size=16, threads=1))
    low = measure_loop(loop, steps=2, warmup_steps=1, ceilings=_ceilings(1.0))  # 1 FLOP/s: any step beats it
    assert low.mfu is not None and low.mfu > 1
    assert any(n.startswith(f"MFU {low.mfu:.0%} of the fp32 GEMM ceiling is implausibly high") and
               "dlperf calibrate --force" in n for n in low.notes)
    fair = measure_loop(loop, steps=2, warmup_steps=1, ceilings=_ceilings(1e15))
    assert not any("implausibly high" in n for n in fair.notes)


def test_mfu_from_ceilings_recorded_with_a_warning_says_so() -> None:
    """`dlperf calibrate` on a busy machine caches its warning with the ceilings; `dlperf train` then printed 'MFU
    2.2% of the fp32 GEMM ceiling' with no word of it (profile passed it on, train did not)."""
    loop = TrainLoop(tiny(), StepConfig(batch_size=16, threads=1))
    busy = dataclasses.replace(_ceilings(1e15), details={"warnings": [
        "the machine was busy while measuring (load average 2.2 on 2 CPUs): these ceilings are likely low"]})
    result = measure_loop(loop, steps=2, warmup_steps=1, ceilings=busy)
    assert result.mfu is not None
    (note,) = [n for n in result.notes if "recorded with a warning" in n]
    assert note.startswith("the ceilings behind MFU (measured at now)") and "load average 2.2" in note
    assert "dlperf calibrate --force --threads 1" in note
    assert not any("recorded with a warning" in n for n in measure_loop(loop, steps=2, warmup_steps=1,
                                                                        ceilings=_ceilings(1e15)).notes)
    # a warning about another dtype's ceiling says nothing of an fp32 MFU (a docs audit's bf16 GEMM run smaller)
    other = dataclasses.replace(_ceilings(1e15), details={"warnings": [
        "the bf16 GEMM ran at 1024x1024 instead of 2048x2048 (a 256x256 probe was too slow for the full size): a "
        "slow or busy machine"]})
    assert not any("recorded with a warning" in n for n in measure_loop(loop, steps=2, warmup_steps=1,
                                                                        ceilings=other).notes)


def test_compare_losses_uses_the_tail_mean() -> None:
    base = [4.0, 3.0, 2.0, 2.0]
    assert tail_mean(base) == 2.0
    ok = compare_losses(base, [9.0, 9.0, 2.05, 2.05], rtol=0.05)
    assert ok.ok and ok.relative_difference == pytest.approx(0.025)
    bad = compare_losses(base, [4.0, 3.0, 2.2, 2.2], rtol=0.05)
    assert not bad.ok and bad.tolerance == pytest.approx(0.1)
    nan = compare_losses(base, [4.0, 3.0, math.nan, 2.0])
    assert not nan.ok
    with pytest.raises(ConfigError, match="different lengths"):
        compare_losses(base, [1.0])


def test_same_seed_gives_the_same_curve_and_a_learning_rate_change_is_caught() -> None:
    w = tiny(lr=0.1)
    base = StepConfig(batch_size=32, threads=1)
    curve = loss_curve(w, base, steps=10)
    assert loss_curve(w, base, steps=10) == curve
    assert curve[-1] < curve[0]  # it learns
    parity = ParityConfig(steps=10)
    assert check_parity(w, base, base.replace(batch_size=8, accumulation_steps=4), parity, curve).ok
    broken = check_parity(w, base, base.replace(lr_scale=5.0), parity, curve)
    assert not broken.ok
    assert "FAILED" in broken.describe()


def test_a_dataset_augmenting_with_python_and_numpy_random_gives_the_same_curve_twice() -> None:
    """Seeded with torch alone, a Dataset that shifted each sample by random.randint trained on other shifts in
    each loop of the same configuration (no loader workers, which seed both themselves), so loss parity compared
    the augmentation's noise as well as the knob's effect."""
    import random

    import numpy as np

    from dlperf.workload.base import TrainSpec, Workload

    class Augmented(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(256, 8, generator=g)
            self.y = self.x[:, :2].argmax(dim=1)

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            shift = random.randint(-2, 2) + float(np.random.uniform(-1, 1))
            return self.x[i] + shift, self.y[i]

    w = Workload(name="augmented", make_model=lambda: torch.nn.Linear(8, 2),
                 make_inputs=lambda b: (torch.randn(b, 8),),
                 train=TrainSpec(make_loader=lambda b, **kw: DataLoader(Augmented(), batch_size=b, **kw),
                                 loss_fn=torch.nn.functional.cross_entropy,
                                 make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1), batch_size=16))
    config = StepConfig(batch_size=16, threads=1)
    curve = loss_curve(w, config, steps=6)
    random.random()  # whatever the process drew in between
    np.random.uniform()
    assert loss_curve(w, config, steps=6) == curve


def test_parity_needs_the_same_effective_batch() -> None:
    base = StepConfig(batch_size=32, threads=1)
    with pytest.raises(ConfigError, match="same effective batch"):
        check_parity(tiny(), base, base.replace(batch_size=16), ParityConfig(steps=2))


def test_an_input_bound_step_is_reported() -> None:
    from dlperf.measure.stats import Measurement
    from dlperf.train.step import TrainMeasurement

    m = Measurement([10_000_000] * 4, items_per_call=8)
    phases = {"data": [6_000_000] * 4, "h2d": [0] * 4, "forward": [1_000_000] * 4, "backward": [2_000_000] * 4,
              "optimizer": [500_000] * 4}
    result = TrainMeasurement("w", StepConfig(batch_size=8), m, phases, peak_rss_bytes=0)
    assert result.breakdown_share()["data"] == pytest.approx(0.6)
    assert result.breakdown_s()["other"] == pytest.approx(0.0005)
    (finding,) = result.findings
    assert finding.startswith("input-bound: 60% of the step waits for the loader; more DataLoader workers or "
                              "prefetching should help")
    # with as many workers as CPUs (what --tune had just tried), not the advice to tune them
    from dlperf.measure.env import usable_cores

    cpus = usable_cores()
    crowded = dataclasses.replace(result, config=StepConfig(batch_size=8, num_workers=cpus))
    (finding,) = crowded.findings
    assert finding == (f"input-bound: 60% of the step waits for the loader; its {cpus} DataLoader workers already "
                       f"match the {cpus} usable CPUs: more help only where loading waits on I/O rather than the "
                       "CPU; otherwise make each sample cheaper to load (decoding, augmentation, a dataset cached in "
                       "memory)")
    assert "--tune" not in finding
    phases["data"] = [1_000_000] * 4
    assert result.findings == []


def test_an_input_bound_step_after_a_tuning_whose_loader_trials_failed_does_not_advise_them_again() -> None:
    """Under a tuning that had just measured num_workers=2 at 0.36x and kept 0 workers, the baseline's finding said
    "more DataLoader workers or prefetching should help (`dlperf train --tune --knobs workers,prefetch,persistent`)"."""
    from dlperf.measure.stats import Measurement
    from dlperf.train.step import TrainMeasurement

    m = Measurement([10_000_000] * 4, items_per_call=8)
    phases = {"data": [6_000_000] * 4, "h2d": [0] * 4, "forward": [1_000_000] * 4, "backward": [2_000_000] * 4,
              "optimizer": [500_000] * 4}
    result = TrainMeasurement("w", StepConfig(batch_size=8), m, phases, peak_rss_bytes=0,
                              loader_trials=["num_workers=2 (0.36x, not faster)"])
    (finding,) = result.findings
    assert finding == ("input-bound: 60% of the step waits for the loader; this tuning tried num_workers=2 (0.36x, "
                       "not faster), so more loader workers or prefetching are not the fix here: make each sample "
                       "cheaper to load (decoding, augmentation, a dataset cached in memory, reading a batch at once "
                       "rather than sample by sample)")
    assert result.to_dict()["findings"] == [finding]


def test_a_batch_larger_than_the_data_says_so_once_with_the_fix() -> None:
    """The loader's own message came wrapped twice ('a training step failed: the measured call raised ...')."""
    with pytest.raises(TrainError) as raised:
        measure_training(tiny(), StepConfig(batch_size=1000, threads=1), steps=2, warmup_steps=0, count_flops=False)
    assert str(raised.value) == (
        "workload 'tiny': its loader yields no batch at batch size 1000 (a drop_last loader over fewer samples?): "
        "pass a smaller batch size (--batch-size)"
    )


def _with_loader(loader: Any) -> Any:
    spec = tiny().train
    assert spec is not None
    return dataclasses.replace(tiny(), train=dataclasses.replace(spec, make_loader=loader))


def test_a_one_shot_loader_is_named_as_such() -> None:
    """A generator gave its batches, then none for the next epoch: the advice was a smaller batch size, which cannot
    help."""
    def loader(batch_size: int, **kwargs: object) -> object:
        return ((torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))) for _ in range(3))

    with pytest.raises(TrainError, match=r"its loader gave 3 batches, then none when iterated again for the next "
                                         r"epoch: make_loader returned a one-shot iterator"):
        measure_training(_with_loader(loader), StepConfig(batch_size=8, threads=1), steps=6,
                         warmup_steps=0, count_flops=False)


class _Corrupt(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i >= 40:
            raise OSError(f"corrupt record {i}")
        return torch.randn(16), torch.tensor(i % 4)


def test_an_error_in_a_loader_worker_gives_its_own_message_and_line() -> None:
    """torch re-raises a worker's error as 'Caught OSError in DataLoader worker process 0.' with the worker's
    traceback as text: the first line was all that was shown, without the message or the user's line."""
    def loader(batch_size: int, **kwargs: object) -> object:
        return DataLoader(_Corrupt(), batch_size=batch_size, num_workers=1)

    with pytest.raises(TrainError) as raised:
        measure_training(_with_loader(loader), StepConfig(batch_size=8, threads=1), steps=8,
                         warmup_steps=0, count_flops=False)
    message = str(raised.value)
    assert "a training step raised OSError: corrupt record 40 (in DataLoader worker process 0)" in message
    assert f'File "{__file__}"' in message and 'raise OSError(f"corrupt record {i}")' in message


def test_samples_per_s_counts_the_short_last_batch_of_an_epoch() -> None:
    """Without drop_last, 100 samples at batch 64 train 64 then 36 per epoch; every step counted as 64."""
    def loader(batch_size: int, **kwargs: object) -> DataLoader[tuple[torch.Tensor, ...]]:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(100, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=batch_size)

    spec = tiny().train
    assert spec is not None
    w = dataclasses.replace(tiny(), train=dataclasses.replace(spec, make_loader=loader))
    result = measure_training(w, StepConfig(batch_size=64, threads=1), steps=4, warmup_steps=1,
                              ceilings=_ceilings(1e9))
    assert result.samples_per_step == [36, 64, 36, 64]  # after the FLOP-counted step (the warm-up step)
    total_s = result.measurement.total_s
    assert result.samples_per_s == pytest.approx(200 / total_s)
    assert result.flops_per_step == forward_flops(64)  # counted on a full step...
    assert result.achieved_flops == pytest.approx(forward_flops(64) / 64 * 200 / total_s)  # ...scaled per sample
    assert [n for n in result.notes if n.startswith("2 of 4 measured steps trained on fewer samples than the batch "
                                                    "of 64 (down to 36")]


def test_a_measurement_failing_partway_carries_the_steps_it_timed() -> None:
    """A loader that raised at step 6 of 10 left the run with nothing; an interrupt already kept its steps."""
    def loader(batch_size: int, **kwargs: object) -> object:
        return DataLoader(_Corrupt(), batch_size=batch_size)

    with pytest.raises(TrainError, match="corrupt record 40") as raised:
        measure_training(_with_loader(loader), StepConfig(batch_size=8, threads=1), steps=10, warmup_steps=0,
                         count_flops=False)
    partial = raised.value.dlperf_partial  # type: ignore[attr-defined]
    assert len(partial.measurement.samples_ns) == 5  # 5 batches of 8 before record 40
    assert "failed after 5 of 10 measured steps: every figure here is from those steps" in partial.notes


def test_a_checkpointed_step_counts_model_flops_not_the_recomputed_forward() -> None:
    """FlopCounterMode also counted the forward that checkpointing recomputes in backward: 26.1 MFLOP a step against
    19.6 without checkpointing, so a checkpointed configuration's MFU was a third too high."""
    from ._workloads import blocks

    counts = {}
    for checkpointed in (False, True):
        loop = TrainLoop(blocks(), StepConfig(batch_size=64, threads=1, checkpointing=checkpointed))
        try:
            counts[checkpointed] = count_step_flops(loop)
        finally:
            loop.close()
    assert counts[True] == counts[False]


def test_checkpointing_is_off_only_inside_checkpointing_off() -> None:
    from dlperf.train.loop import checkpointing_off

    from ._workloads import blocks

    loop = TrainLoop(blocks(), StepConfig(batch_size=64, threads=1, checkpointing=True))
    try:
        plain = count_step_flops(loop)
        assert count_step_flops(loop, recompute=True) > plain * 1.2  # the measured steps still recompute
        with checkpointing_off(loop.model) as wrapped:
            assert wrapped == 3  # two blocks and the head
            assert not any("forward" in c.__dict__ for c in loop.model.children())
        assert all("forward" in c.__dict__ for c in loop.model.children())  # wrapped again
    finally:
        loop.close()


def test_parity_config_refuses_one_step_and_negative_tolerances() -> None:
    with pytest.raises(ConfigError, match="at least 2 steps, got 1"):
        ParityConfig(steps=1)
    with pytest.raises(ConfigError, match="tolerances must be >= 0"):
        ParityConfig(rtol=-0.01)
    with pytest.raises(ConfigError, match="tolerances must be >= 0"):
        ParityConfig(atol=-0.01)


@pytest.mark.parametrize(("losses", "expected"), [([1.0, 2.0, 3.0, 4.0], 3.5), ([1.0, 2.0, 3.0], 2.5), ([5.0], 5.0)])
def test_the_tail_is_the_second_half_of_the_steps(losses: list[float], expected: float) -> None:
    assert tail_mean(losses) == expected


def test_a_candidate_far_below_the_baseline_fails_parity_too() -> None:
    """A loss well under the baseline's is a different training (a lost regularizer, a leaked label), not a win."""
    low = compare_losses([2.0, 2.0], [1.0, 1.0], rtol=0.05)
    assert not low.ok and low.relative_difference == pytest.approx(-0.5)


def test_a_negative_loss_gets_a_positive_tolerance_and_a_relative_difference_of_the_right_sign() -> None:
    """A Gaussian negative log-likelihood goes below zero: rtol x baseline made the tolerance negative."""
    result = compare_losses([-2.0, -2.0], [-2.05, -2.05], rtol=0.05)
    assert result.ok and result.tolerance == pytest.approx(0.1)
    assert result.relative_difference == pytest.approx(-0.025)  # the candidate's loss is lower


def test_the_absolute_tolerance_adds_to_the_relative_one() -> None:
    result = compare_losses([0.1, 0.1], [0.3, 0.3], rtol=0.05, atol=0.25)
    assert result.ok and result.tolerance == pytest.approx(0.255)
    assert not compare_losses([0.1, 0.1], [0.3, 0.3], rtol=0.05).ok


def test_empty_loss_curves_are_refused() -> None:
    with pytest.raises(ConfigError, match="loss curves of different lengths: 0 vs 0"):
        compare_losses([], [])


def test_an_mfu_above_the_cached_ceiling_has_it_measured_again_once_as_profile_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dlperf train zoo:mlp` against a cached fp32 ceiling of 200 MFLOP/s printed "MFU 12157.7% of the fp32 GEMM
    ceiling" and told the user to run `dlperf calibrate --force`, where profile measures such ceilings again itself
    (an operator above 110% of them)."""
    import dlperf.calibrate.kernels as kernels
    from dlperf.calibrate import CACHE_ENV_VAR, get_ceilings

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    measured: list[str] = []

    def measure(device: str, key: str, *, quick: bool = False, on_progress: Any = None) -> Ceilings:
        measured.append(key)
        fp32 = 1.0 if len(measured) == 1 else 1e15  # the first as a busy machine measured it: any step beats it
        return Ceilings(device, key, {"fp32": fp32}, 1e10, f"t{len(measured)}", 1)

    monkeypatch.setattr(kernels, "measure_ceilings", measure)
    low = get_ceilings("cpu", threads=1)
    loop = TrainLoop(tiny(), StepConfig(batch_size=16, threads=1))
    monkeypatch.setattr(kernels, "busy_warnings", lambda: ["busy"])
    busy = measure_loop(loop, steps=2, warmup_steps=1, ceilings=low)  # a measurement now would be as low
    assert len(measured) == 1 and busy.mfu is not None and busy.mfu > 1.1
    assert any("implausibly high" in n for n in busy.notes)
    monkeypatch.setattr(kernels, "busy_warnings", lambda: [])
    result = measure_loop(loop, steps=2, warmup_steps=1, ceilings=low)
    assert len(measured) == 2 and result.ceiling_flops == 1e15 and result.mfu is not None and result.mfu < 0.8
    assert any(n.startswith("the cached ceilings were measured again: a training step (fp32) ran at MFU ")
               and n.endswith("of the fp32 GEMM ceiling measured at t1") for n in result.notes), result.notes
    assert not any("implausibly high" in n for n in result.notes)
    # measured again once: ceilings that a step still beats are not measured every run, nor the first ones again
    # where a caller kept them (the tuner measures its best configuration against those it read first)
    measure_loop(loop, steps=2, warmup_steps=1, ceilings=low)
    assert len(measured) == 2
    again = get_ceilings("cpu", threads=1)
    again.gemm_flops["fp32"] = 1.0
    measure_loop(loop, steps=2, warmup_steps=1, ceilings=again)
    assert len(measured) == 2
    measure_loop(loop, steps=2, warmup_steps=1, ceilings=_ceilings(1.0))  # hand-made: no cache file holds them
    assert len(measured) == 2
