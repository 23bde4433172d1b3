from __future__ import annotations

import dataclasses
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from torch.utils.data import DataLoader, TensorDataset

from dlperf.errors import ConfigError, TrainError
from dlperf.measure.ab import FASTER, SAME, ABConfig
from dlperf.report.terminal import fmt_count
from dlperf.report.train_view import measurement_view, tune_view
from dlperf.store import Store
from dlperf.train.knobs import Candidate, Knob, TuneContext
from dlperf.train.loop import StepConfig, TrainLoop
from dlperf.train.parity import ParityConfig
from dlperf.train.tune import (
    ACCEPTED,
    FAILED,
    NOT_FASTER,
    PARITY_FAILED,
    SKIPPED,
    Trial,
    TuneConfig,
    Tuner,
    ab_loops,
    code_settings,
    record_trial,
)

from ._workloads import padded, tiny

pytestmark = pytest.mark.unit


@dataclass
class FixedKnob:
    """A test knob proposing fixed changes."""

    name: str
    changes: tuple[dict[str, object], ...]
    sweep: bool = False
    skip: str | None = None
    required: bool = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return self.skip

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate(dict(c), f"test {c}", required=self.required) for c in self.changes]


def test_unknown_knob_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown knob"):
        TuneConfig(knobs=("warp-drive",))


def test_code_settings_are_the_exact_settings_with_their_gains() -> None:
    base = StepConfig(batch_size=64)
    best = base.replace(num_workers=2, persistent_workers=True, batch_size=16, accumulation_steps=4,
                        compile=True, threads=1)
    trials = [
        Trial("workers", {"num_workers": 2}, "", ACCEPTED, speedup=2.0),
        Trial("persistent", {"persistent_workers": True}, "", ACCEPTED, speedup=1.5),
        Trial("batch", {"batch_size": 16, "accumulation_steps": 4}, "", ACCEPTED, speedup=1.1),
        Trial("compile", {"compile": True}, "", ACCEPTED, speedup=1.2),
        Trial("threads", {"threads": 1}, "", ACCEPTED, speedup=1.3),
        Trial("precision", {"precision": "bf16"}, "", PARITY_FAILED),
    ]
    settings = {s.what: s for s in code_settings(base, best, trials)}
    assert set(settings) == {"DataLoader", "batch and accumulation", "compile", "threads"}
    assert "num_workers=2, persistent_workers=True" in settings["DataLoader"].code
    assert settings["DataLoader"].speedup == pytest.approx(3.0)
    assert "batch_size=16" in settings["batch and accumulation"].code
    assert "effective batch 64" in settings["batch and accumulation"].code
    assert settings["compile"].code == "model = torch.compile(model)"
    assert settings["threads"].code == "torch.set_num_threads(1)"


def test_pinned_memory_comes_with_the_non_blocking_copy_it_was_measured_with() -> None:
    """The trial copies pinned batches with non_blocking=True; the setting said only pin_memory=True, which without
    non-blocking copies overlaps nothing."""
    base = StepConfig(batch_size=64, device="cuda", num_workers=2)
    trials = [Trial("pin_memory", {"pin_memory": True}, "", ACCEPTED, speedup=1.2)]
    (setting,) = code_settings(base, base.replace(pin_memory=True), trials)
    assert setting.code == ("DataLoader(dataset, batch_size=64, ..., pin_memory=True); "
                            "x = x.to(device, non_blocking=True) (and the target alike)")
    (workers,) = code_settings(StepConfig(batch_size=64), StepConfig(batch_size=64, num_workers=2),
                               [Trial("workers", {"num_workers": 2}, "", ACCEPTED, speedup=2.0)])
    assert "non_blocking" not in workers.code


def test_the_fp16_setting_makes_the_grad_scaler_once_and_steps_it_in_order() -> None:
    """The line read 'with autocast(...): loss = ...; scaler = torch.amp.GradScaler('cuda'); scaler.scale(loss)...':
    a scaler made in every step loses its scale between steps."""
    base = StepConfig(batch_size=64, device="cuda")
    trials = [Trial("precision", {"precision": "fp16"}, "", ACCEPTED, speedup=1.8)]
    (setting,) = code_settings(base, base.replace(precision="fp16"), trials)
    assert setting.code.startswith("scaler = torch.amp.GradScaler('cuda') once, before the loop; each step: "
                                   "with torch.autocast('cuda', dtype=torch.float16): loss = loss_fn(model(x), y); ")
    calls = ["scaler.scale(loss).backward()", "scaler.unscale_(opt)", "scaler.step(opt)", "scaler.update()"]
    assert all(c in setting.code for c in calls)
    assert setting.code.index(calls[0]) < setting.code.index(calls[2]) < setting.code.index(calls[3])
    (bf16,) = code_settings(base, base.replace(precision="bf16"), trials)
    assert bf16.code == "with torch.autocast('cuda', dtype=torch.bfloat16): loss = loss_fn(model(x), y)"


def test_the_best_configuration_s_mfu_uses_the_ceilings_of_its_thread_count(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads knob's best (1 thread) had its MFU taken against the baseline's 2-thread ceilings."""
    from dlperf.calibrate import Ceilings
    from dlperf.calibrate.ceilings import machine_key, write_cache
    from dlperf.measure import env
    from dlperf.measure.bench import torch_threads

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(env, "usable_cores", lambda: 4)
    with torch_threads(2):
        two = Ceilings("cpu", machine_key("cpu"), {"fp32": 8e9}, 1e9, "t", 2)
    with torch_threads(1):
        one = Ceilings("cpu", machine_key("cpu"), {"fp32": 3e9}, 1e9, "t", 1)
    write_cache(one)
    tuner = Tuner(tiny(), StepConfig(batch_size=32, threads=2), ceilings=two)
    assert tuner.ceilings_for(StepConfig(batch_size=32, threads=2)) is two
    assert tuner.ceilings_for(StepConfig(batch_size=32)) is two  # torch's default: the baseline's
    assert tuner.ceilings_for(StepConfig(batch_size=32, threads=1)) == one


def test_tuner_rejects_a_knob_that_breaks_training_and_records_every_trial(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    parent = store.create_run("train", "tiny")
    knobs: dict[str, Knob] = {
        "lr": FixedKnob("lr", ({"lr_scale": 5.0},)),
        "split": FixedKnob("split", ({"batch_size": 8, "accumulation_steps": 4},)),
        "off": FixedKnob("off", (), skip="not here"),
    }
    config = TuneConfig(parity=ParityConfig(steps=8), ab=ABConfig(blocks=4, iters_per_block=1, warmup_iters=1),
                        final_ab=ABConfig(blocks=4, iters_per_block=1, warmup_iters=1), measure_steps=3,
                        steps_per_call=1, count_flops=False)
    baseline = StepConfig(batch_size=32, threads=1)
    events: list[str] = []
    tuner = Tuner(tiny(), baseline, config, knobs=knobs, on_event=events.append,
                  on_trial=lambda t: record_trial(store, parent.id, "tiny", t))
    result = tuner.run()
    by_knob = {t.knob: t for t in result.trials}
    assert by_knob["lr"].status == PARITY_FAILED
    assert by_knob["lr"].parity is not None and not by_knob["lr"].parity.ok
    assert by_knob["lr"].speedup is None  # never timed: parity comes first
    assert by_knob["off"].status == SKIPPED and by_knob["off"].reason == "not here"
    assert by_knob["split"].parity is not None and by_knob["split"].parity.ok
    assert by_knob["split"].speedup is not None
    assert result.best.lr_scale == 1.0
    assert result.best.effective_batch_size == 32
    children = store.list(parent_id=parent.id)
    assert sorted(r.result["knob"] for r in children) == ["lr", "off", "split"]
    assert all(r.kind == "train-trial" for r in children)
    assert events[0].startswith("baseline loss curve")
    text = _render(tune_view(result.to_dict()))
    assert "lr_scale=5.0" in text and "parity failed" in text
    assert "off: skipped: not here" in text
    # the breakdown is a separate measurement: its title gives its own figure, and names no final A/B, as none
    # ran here (nothing was accepted)
    assert result.final_ab is None
    own = fmt_count(result.to_dict()["baseline_measurement"]["samples_per_s"])
    assert f"baseline step breakdown (its own measurement: {own} samples/s)" in " ".join(text.split())
    # and what that measurement said of itself: memory, and its notes and findings (printed nowhere before)
    assert "memory    peak RSS" in text
    data = result.to_dict()
    data["baseline_measurement"]["notes"] = ["the loss is nan from measured step 16: the training diverges"]
    data["baseline_measurement"]["findings"] = ["input-bound: 98% of the step waits for data"]
    text = _render(tune_view(data))
    assert "note: the loss is nan from measured step 16" in text and "finding: input-bound" in text


def test_a_required_change_is_kept_without_a_speedup_but_never_without_parity() -> None:
    # a required change (the batch does not fit the budget) is kept whatever its A/B says, because the
    # user's configuration breaks the constraint; a required change that trains differently is still rejected
    knobs: dict[str, Knob] = {
        "split": FixedKnob("split", ({"batch_size": 8, "accumulation_steps": 4},), required=True),
        "lr": FixedKnob("lr", ({"lr_scale": 5.0},), required=True),
    }
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=6), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    split, lr = result.trials
    assert split.status == ACCEPTED and split.speedup is not None
    assert split.verdict == FASTER or split.reason.startswith("required")
    assert lr.status == PARITY_FAILED
    # "gain none" over a batch that breaks the user's budget said nothing of it
    assert lr.reason.endswith("; it was required (test {'lr_scale': 5.0}), so the best so far still breaks the memory "
                              "budget")
    assert (result.best.batch_size, result.best.accumulation_steps, result.best.lr_scale) == (8, 4, 1.0)


def test_measurement_view_shows_the_breakdown() -> None:
    from dlperf.train.step import measure_training

    result = measure_training(tiny(), StepConfig(batch_size=16, threads=1), steps=3, warmup_steps=1,
                              count_flops=False)
    text = _render(measurement_view(result.to_dict()))
    for label in ("data wait", "host-to-device", "forward + loss", "backward", "optimizer", "samples/s"):
        assert label in text
    assert "3 steps)" in text
    # samples/s and the breakdown are over the time measured (the mean step), the headline step the median: a
    # noisy run printed a 131.6 ms median beside samples/s and phases of a 119.6 ms step, unlabelled
    mean_ms = result.measurement.mean_s * 1e3
    assert re.search(r"ms median \(p90 [0-9.]+ ms, mean ([0-9.]+) ms, 3 steps\)", text)
    shown = float(re.search(r"mean ([0-9.]+) ms, 3 steps", text).group(1))  # type: ignore[union-attr]
    assert shown == pytest.approx(mean_ms, rel=0.01)
    assert "mean ms / step" in text and "(samples over the time measured)" in text
    one = measure_training(tiny(), StepConfig(batch_size=16, threads=1), steps=1, warmup_steps=0, count_flops=False)
    text = _render(measurement_view(one.to_dict()))
    assert "p90" in text and "1 step)" in text


def _render(renderable: object) -> str:
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_a_diverging_baseline_stops_the_tuner_with_the_reason() -> None:
    """Against a nan loss curve every candidate failed parity ('+nan%'), which blamed the knobs."""
    knobs: dict[str, Knob] = {"split": FixedKnob("split", ({"batch_size": 8, "accumulation_steps": 4},))}
    config = TuneConfig(parity=ParityConfig(steps=4), measure_steps=2, count_flops=False)
    with pytest.raises(TrainError, match=r"workload 'tiny': the baseline's loss is (nan|inf) at step \d of 4: its "
                                         r"training diverges, so no candidate can be checked against it"):
        Tuner(tiny(lr=1e30), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()


def test_a_diverging_measurement_says_so() -> None:
    from dlperf.train.step import measure_training

    result = measure_training(tiny(lr=1e30), StepConfig(batch_size=16, threads=1), steps=3, warmup_steps=1,
                              count_flops=False)
    diverged = r"the loss is (nan|inf) from measured step \d: the training diverges"
    assert [n for n in result.notes if re.match(diverged, n)]


def test_a_tuning_where_every_knob_was_skipped_says_so_without_an_empty_table() -> None:
    knobs: dict[str, Knob] = {"off": FixedKnob("off", (), skip="not here")}
    config = TuneConfig(parity=ParityConfig(steps=2), measure_steps=2, measure_warmup=5, count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    assert result.baseline_measurement.measurement.warmup_iters == 5  # --warmup reaches the final measurements
    text = _render(tune_view(result.to_dict()))
    assert "gain      none: every knob was skipped (why below), nothing was tried" in text
    assert "trials (each A/B" not in text and "speedup (95% CI)" not in text
    assert "off: skipped: not here" in text


def test_the_batch_knob_says_why_it_changes_nothing() -> None:
    """A batch that fits whole is kept: the trial says so (it said 'nothing to change here', which on a large GPU
    read as if a larger batch had been overlooked)."""
    from dlperf.train.knobs.batch import LargestBatch

    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs={"batch": LargestBatch()}).run()
    (trial,) = result.trials
    assert trial.status == SKIPPED
    assert trial.reason == "batch 32 fits in memory: kept (--batch-size tries another)"


def _without_drop_last(samples: int = 100) -> Any:
    """The tiny workload over `samples` samples, its loader without drop_last (an epoch ends with a short batch)."""
    def loader(batch_size: int, **kwargs: object) -> DataLoader[tuple[torch.Tensor, ...]]:
        x = torch.randn(samples, 16, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=batch_size)

    spec = tiny().train
    assert spec is not None
    return dataclasses.replace(tiny(), train=dataclasses.replace(spec, make_loader=loader))


def test_the_ab_of_two_loops_counts_the_samples_they_trained() -> None:
    """Samples/s of a trial took every step as a full batch: 100 samples at batch 64 train 64, then 36."""
    w = _without_drop_last()
    a, b = TrainLoop(w, StepConfig(batch_size=64, threads=1)), TrainLoop(w, StepConfig(batch_size=32, threads=1))
    ab, trained = ab_loops(a, b, ABConfig(blocks=4, iters_per_block=1, warmup_iters=1), steps_per_call=1)
    # one warm-up call each, then 4 timed: A 64 | 36 64 36 64; B 32 | 32 32 4 32
    assert trained == (200, 100)
    assert (ab.a.n, ab.b.n) == (4, 4)


def test_the_tuning_result_gives_the_samples_per_second_trained() -> None:
    knobs: dict[str, Knob] = {"impl": FixedKnob("impl", ({"optimizer_impl": "foreach"},), required=True)}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(_without_drop_last(), StepConfig(batch_size=64, threads=1), config, knobs=knobs).run()
    (trial,) = result.trials
    assert trial.status == ACCEPTED and result.final_ab is not None
    assert result.final_samples == (200, 200)  # fresh loops: 64 | 36 64 36 64 each
    # 50 samples per timed call over the geometric mean of the blocks' call times (1 call a block here)
    geomean_s = math.exp(statistics.fmean(math.log(t / 1e9) for t in result.final_ab.a.samples_ns))
    assert result.baseline_samples_per_s == pytest.approx(50 / geomean_s)
    assert result.best_samples_per_s / result.baseline_samples_per_s == pytest.approx(result.speedup)
    assert trial.samples_per_s is not None and trial.reference_samples_per_s is not None



def test_the_view_gives_settings_as_advice_only_when_the_final_ab_confirms_them() -> None:
    knobs: dict[str, Knob] = {"impl": FixedKnob("impl", ({"optimizer_impl": "foreach"},), required=True)}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run().to_dict()
    assert result["settings"] and result["final_ab"] is not None
    (trial,) = result["trials"]
    result["trials"] = [{**trial, "status": "accepted", "reason": None}]  # accepted as faster by its own A/B
    for verdict in ("no significant difference", "slower"):
        text = _render(tune_view({**result, "final_ab": {**result["final_ab"], "verdict": verdict}}))
        assert "put this into your training code" not in text
        assert "what the trials accepted, unconfirmed by the final A/B" in text
        assert "which the final one did not confirm: keep your code as it is" in text
    text = _render(tune_view({**result, "final_ab": {**result["final_ab"], "verdict": "faster"}}))
    assert "put this into your training code" in text and "unconfirmed" not in text
    # a required change (the batch breaks the memory budget) is not "keep your code as it is"
    result["trials"] = [{**trial, "status": "accepted",
                         "reason": "required (batch 64 does not fit in 1.05 MiB); A/B: slower"}]
    text = " ".join(_render(tune_view({**result, "final_ab": {**result["final_ab"], "verdict": "slower"}})).split())
    lines = _render(tune_view({**result, "final_ab": {**result["final_ab"], "verdict": "slower"}}))
    assert "required (batch 64 does not fit in 1.05 MiB): that change is needed whatever the final A/B says\n" in lines
    assert "keep your code as it is" not in text and "other gains" not in text  # it was the only change
    other = {**trial, "knob": "threads", "change": {"threads": 1}, "status": "accepted", "reason": None}
    text = " ".join(_render(tune_view({**result, "trials": [*result["trials"], other],
                                       "final_ab": {**result["final_ab"], "verdict": "slower"}})).split())
    assert ("that change is needed whatever the final A/B says; the other gains are each trial's short A/B, which the "
            "final one did not confirm") in text


def test_a_tuning_stopped_in_its_final_measurements_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted while the best was measured, the run kept only its trials and said the baseline was never
    measured, though its full measurement had finished."""
    import dlperf.train.tune as tune_module
    from dlperf.report.train_view import partial_tune_view
    from dlperf.train.tune import partial_result

    real, calls = tune_module.measure_loop, [0]

    def measure_loop(loop: Any, steps: int, warmup: int, **kwargs: Any) -> Any:
        calls[0] += 1
        measured = real(loop, steps, warmup, **kwargs)
        if calls[0] == 2:  # the best's measurement, cut short after what it timed
            exc = KeyboardInterrupt()
            exc.dlperf_partial = measured  # type: ignore[attr-defined]
            raise exc
        return measured

    monkeypatch.setattr(tune_module, "measure_loop", measure_loop)
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=3, steps_per_call=1,
                        count_flops=False)
    knobs: dict[str, Knob] = {"split": FixedKnob("split", ({"batch_size": 8, "accumulation_steps": 4},),
                                                 required=True)}
    tuner = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs)
    with pytest.raises(KeyboardInterrupt):
        tuner.run()
    assert tuner.baseline_measurement is not None and tuner.best_measurement is not None
    result = partial_result("tiny", tuner.baseline, tuner.trials, tuner.best, tuner.baseline_measurement,
                            tuner.best_measurement)
    assert result["best_so_far"]["accumulation_steps"] == 4
    text = _render(partial_tune_view(result))
    assert "tuning tiny stopped after 1 trial, while the best configuration was measured" in text
    assert "best so far" in text and "baseline step breakdown" in text and "best step breakdown" in text


def test_with_no_final_ab_the_breakdown_title_names_none_and_a_required_reason_keeps_its_parenthesis() -> None:
    """Nothing accepted runs no final A/B, yet the titles said 'the figures above are the final A/B's'; and the
    'required' line was cut at the ';' inside its parenthesis, left open."""
    from dlperf.report.train_view import _breakdown_title, _first_clause

    assert _breakdown_title("baseline", {"samples_per_s": 93535.0}, final_ab=False) == \
        "baseline step breakdown (its own measurement: 93,535 samples/s)"
    assert _breakdown_title("best", {"samples_per_s": 10.0}).endswith("; the figures above are the final A/B's)")
    assert _first_clause("required (batch 61 does not fit in 1.1 MiB: 1 x 61 accumulation steps; 61 has no "
                         "divisor)") == "required (batch 61 does not fit in 1.1 MiB: 1 x 61 accumulation steps)"
    assert _first_clause("required; more") == "required"


def test_a_split_that_fails_parity_on_a_summed_loss_says_the_loss_looks_summed() -> None:
    """cross_entropy(reduction='sum') at 32 x 2 for 64: 'parity failed: tail mean 74.04 vs baseline 147.8' and
    nothing on why (accumulation assumes a mean-reduced loss)."""
    from dlperf.train.parity import compare_losses
    from dlperf.train.tune import summed_loss_hint

    summed = compare_losses([150.0, 148.0, 147.8, 147.8], [75.0, 74.5, 74.04, 74.04])
    assert not summed.ok
    hint = summed_loss_hint(64, 32, summed)
    assert hint is not None and hint.startswith("the loss looks summed over the batch, not averaged (the "
                                                "candidate's is 0.50x the baseline's at 32 of 64 items a step)")
    assert summed_loss_hint(64, 64, summed) is None  # same micro-batch: not the cause
    diverged = compare_losses([1.0, 0.9, 0.8, 0.8], [1.0, 1.2, 1.5, 1.5])
    assert summed_loss_hint(64, 32, diverged) is None  # another failure: no such hint


def test_a_split_that_fails_parity_on_a_model_with_batch_norm_says_it_normalizes_over_the_batch() -> None:
    """digits' MLP with BatchNorm1d at 16 x 4 for 64: 'parity FAILED: ... (+14.6%)' and nothing on why (each
    micro-batch is normalized by its own statistics, which accumulation does not undo)."""
    from dlperf.train.tune import batch_norm_hint

    w = tiny()
    normed = dataclasses.replace(w, make_model=lambda: torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    assert batch_norm_hint(normed, 64, 16) == (
        "the model normalizes over the batch (BatchNorm1d): micro-batches of 16 give it other statistics than batches "
        "of 64, which gradient accumulation does not undo; keep the batch (raise --memory-budget), or allow the "
        "difference (--parity-tolerance)")
    assert batch_norm_hint(normed, 64, 64) is None  # same micro-batch: not the cause
    assert batch_norm_hint(w, 64, 16) is None  # no batch norm


def test_a_candidate_no_faster_is_not_kept_and_its_speedup_counts_its_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call takes the same time (a fake clock): a batch of 64 against 32 trains 2x the samples/s, its CI with
    it, yet the A/B finds no difference per call, so the candidate is not kept (only a required one would be)."""
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    knobs: dict[str, Knob] = {"batch": FixedKnob("batch", ({"batch_size": 64},))}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4, rtol=10.0), ab=quick, final_ab=quick, measure_steps=2,
                        steps_per_call=1, count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    (trial,) = result.trials
    assert trial.verdict == SAME
    assert trial.status == NOT_FASTER and result.best.batch_size == 32
    assert trial.speedup == pytest.approx(2.0)
    assert trial.speedup_ci == (pytest.approx(2.0), pytest.approx(2.0))


def test_the_final_measurements_know_which_loader_trials_the_tuning_measured_without_gain(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """So that their input-bound finding does not advise tuning the workers the tuning had just found not faster."""
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    knobs: dict[str, Knob] = {"workers": FixedKnob("workers", ({"num_workers": 1},), sweep=True),
                              "optimizer": FixedKnob("optimizer", ({"optimizer_impl": "foreach"},))}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    assert [t.status for t in result.trials] == [NOT_FASTER, NOT_FASTER]  # the optimizer's is not a loader's
    assert result.baseline_measurement.loader_trials == ["num_workers=1 (1.00x, not faster)"]


def test_a_sweep_goes_on_past_a_candidate_that_failed_and_stops_at_one_not_faster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed proposal says nothing of the next one (fp16 cannot run on a CPU); one measured no faster ends the
    sweep, as the next would be further along the same direction."""
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    knobs: dict[str, Knob] = {"sweep": FixedKnob("sweep", ({"precision": "fp16"}, {"optimizer_impl": "foreach"},
                                                           {"optimizer_impl": "fused"}), sweep=True)}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    assert [t.status for t in result.trials] == [FAILED, NOT_FASTER]


def test_a_setting_changed_by_two_accepted_trials_carries_both_gains() -> None:
    base = StepConfig(batch_size=64)
    trials = [Trial("workers", {"num_workers": 2}, "", ACCEPTED, speedup=1.5),
              Trial("workers", {"num_workers": 4}, "", ACCEPTED, speedup=1.2)]
    (setting,) = code_settings(base, base.replace(num_workers=4), trials)
    assert setting.speedup == pytest.approx(1.8)


class _TickingTime:
    """`time` for dlperf.train.tune whose clocks advance 10 s at each reading: each trial takes 10 s or more."""

    def __init__(self) -> None:
        self.now = 0.0

    def _tick(self) -> float:
        self.now += 10.0
        return self.now

    monotonic = perf_counter = _tick


def test_a_time_budget_stops_starting_trials_and_says_which_knobs_were_not_tried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`train --tune` had no time bound: a slow workload could not be tuned within a budget."""
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    monkeypatch.setattr("dlperf.train.tune.time", _TickingTime())
    knobs: dict[str, Knob] = {"opt": FixedKnob("opt", ({"optimizer_impl": "foreach"}, {"optimizer_impl": "fused"},
                                                       {"threads": 2})),
                              "batch": FixedKnob("batch", ({"batch_size": 64},))}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False, time_budget_s=35.0)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    first, rest, batch = result.trials
    assert first.knob == "opt" and first.status == NOT_FASTER  # the one trial the budget allowed
    assert rest.knob == "opt" and rest.status == SKIPPED
    assert rest.reason.startswith("2 more proposal(s) not tried: the time budget (35s) would be exceeded")
    assert rest.reason.endswith(": optimizer_impl=fused; threads=2")
    assert batch.knob == "batch" and batch.status == SKIPPED and batch.reason.startswith("not tried: the time budget")
    assert result.not_tried == ["opt", "batch"]
    assert result.best_measurement is result.baseline_measurement  # the final measurements still ran
    text = _render(tune_view(result.to_dict()))
    assert "time budget spent: not tried opt, batch (why below)" in text
    assert "batch: skipped: not tried: the time budget (35s) would be exceeded" in text


def test_a_knob_that_does_not_apply_is_skipped_for_its_own_reason_after_the_budget_is_spent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU with no loader workers, prefetch, persistent, pin_memory and channels_last (no Conv2d) were listed as
    'not tried: the time budget ... would be exceeded; raise --time-budget, or try this knob alone with --knobs', and in
    the headline's 'time budget spent: not tried ...', though none of them could have run there."""
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    monkeypatch.setattr("dlperf.train.tune.time", _TickingTime())
    knobs: dict[str, Knob] = {"opt": FixedKnob("opt", ({"optimizer_impl": "foreach"},)),
                              "pin": FixedKnob("pin", ({"pin_memory": True},), skip="device is cpu"),
                              "batch": FixedKnob("batch", ({"batch_size": 64},))}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False, time_budget_s=35.0)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    assert [(t.knob, t.status, t.reason[:20]) for t in result.trials] == [
        ("opt", NOT_FASTER, "A/B: no significant "), ("pin", SKIPPED, "device is cpu"),
        ("batch", SKIPPED, "not tried: the time ")]
    assert result.not_tried == ["batch"]


def test_a_budget_spent_before_any_trial_says_so_rather_than_a_mean_trial_of_0s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--time-budget 1s` read 'not tried: the time budget (1s) would be exceeded (2s spent, a trial took 0s on
    average)', though no trial had run: the baseline's loss curves spent it."""
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    monkeypatch.setattr("dlperf.train.tune.time", _TickingTime())
    knobs: dict[str, Knob] = {"opt": FixedKnob("opt", ({"optimizer_impl": "foreach"},))}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False, time_budget_s=5.0)
    (trial,) = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run().trials
    assert trial.status == SKIPPED
    assert trial.reason.startswith("not tried: the time budget (5s) would be exceeded (10s spent, before any trial, on "
                                   "the baseline's loss curves); raise --time-budget")


class _StoppedTime:
    """`time` for dlperf.train.tune that stands still until a loss curve moves it (see _slow_curves)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic


def _slow_curves(monkeypatch: pytest.MonkeyPatch, budget_s: float) -> tuple[TuneConfig, dict[str, Knob]]:
    """Four knobs whose trials take 1 s each, then one ('slow') whose two take 10 s each: each loss curve (the real
    one) moves the clock by its trial's length, 1 s for the baseline's."""
    from dlperf.measure.clock import FakeClock
    from dlperf.train import tune as tune_module

    clock = _StoppedTime()
    real_curve = tune_module.loss_curve

    def loss_curve(workload: Any, config: StepConfig, steps: int, seed: int) -> list[float]:
        clock.now += 10.0 if config.optimizer_impl not in (None, "default") else 1.0
        return real_curve(workload, config, steps, seed)

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    monkeypatch.setattr("dlperf.train.tune.time", clock)
    monkeypatch.setattr("dlperf.train.tune.loss_curve", loss_curve)
    knobs: dict[str, Knob] = {f"fast{i}": FixedKnob(f"fast{i}", ({"batch_size": 33 + i},)) for i in range(4)}
    knobs["slow"] = FixedKnob("slow", ({"optimizer_impl": "foreach"}, {"optimizer_impl": "fused"}))
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    return TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                      count_flops=False, time_budget_s=budget_s), knobs


def test_a_knob_s_next_trial_is_expected_to_last_as_long_as_its_own_first_not_the_mean(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After four 1 s trials, a knob's 10 s first trial made the mean 2.8 s, so its second started at 15 s under a
    20 s budget and the tuning ran 25 s (compile's long trial overran a small budget the same way)."""
    config, knobs = _slow_curves(monkeypatch, 20.0)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    slow = [t for t in result.trials if t.knob == "slow"]
    assert [t.status for t in slow] == [NOT_FASTER, SKIPPED]
    assert slow[1].reason.startswith("1 more proposal(s) not tried: the time budget (20s) would be exceeded (15s "
                                     "spent, its last 1 trial(s) took 10s on average)")
    assert result.not_tried == ["slow"]
    assert result.time_budget is not None
    assert result.time_budget.to_dict() == {"budget_s": 20.0, "spent_s": 15.0, "overrun_s": 0.0, "overrun_by": None}
    assert "time budget 20s: the loss curves and trials took 15.0s\n" in _render(tune_view(result.to_dict()))


def test_a_trial_that_ends_past_the_time_budget_is_recorded_with_the_overrun(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget bounds when a trial starts: one longer than expected ran past it, and neither the JSON, the stored
    run nor the printed result said by how much, or which trial."""
    config, knobs = _slow_curves(monkeypatch, 14.5)
    store = Store("sqlite://")
    with store.recording("train", "tiny", {}) as run:
        result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
        run.result = result.to_dict()
    kept = store.get(run.id).result["time_budget"]
    assert kept == {"budget_s": 14.5, "spent_s": 15.0, "overrun_s": 0.5,
                    "overrun_by": "slow: test {'optimizer_impl': 'foreach'} (started at 5.0s, took 10.0s)"}
    assert ("time budget 14.5s: the loss curves and trials took 15.0s, 0.5s over, during slow: test "
            "{'optimizer_impl': 'foreach'} (started at 5.0s, took 10.0s)") in _render(tune_view(result.to_dict()))


@pytest.mark.parametrize(("budget_s", "overrun_by"), [
    (60.0, None), (14.5, "slow: test {'optimizer_impl': 'foreach'} (started at 5.0s, interrupted after 10.0s)")])
def test_a_tuning_interrupted_in_a_trial_keeps_its_time_against_the_budget(
        monkeypatch: pytest.MonkeyPatch, budget_s: float, overrun_by: str | None) -> None:
    """Ctrl-C or SIGTERM during a trial kept the finished trials but not the time spent against --time-budget, nor
    the trial the budget ran out in. Here the slow knob's first trial is interrupted after its 10 s."""
    from dlperf.report.train_view import partial_tune_view
    from dlperf.train import tune as tune_module
    from dlperf.train.tune import partial_result

    config, knobs = _slow_curves(monkeypatch, budget_s)
    counting = tune_module.loss_curve

    def interrupted(workload: Any, step: StepConfig, steps: int, seed: int) -> list[float]:
        losses = counting(workload, step, steps, seed)  # moves the clock
        if step.optimizer_impl == "foreach":
            raise KeyboardInterrupt
        return losses

    monkeypatch.setattr("dlperf.train.tune.loss_curve", interrupted)
    tuner = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs)
    store = Store("sqlite://")
    with pytest.raises(KeyboardInterrupt), store.recording("train", "tiny", {}) as run:
        try:
            tuner.run()
        except KeyboardInterrupt:
            run.result = partial_result("tiny", tuner.baseline, tuner.trials, tuner.best, tuner.baseline_measurement,
                                        tuner.best_measurement, tuner.time_budget)
            raise
    kept = store.get(run.id).result
    assert len(kept["trials"]) == 4  # the fast knobs'
    assert kept["time_budget"] == {"budget_s": budget_s, "spent_s": 15.0, "overrun_s": max(0.0, 15.0 - budget_s),
                                   "overrun_by": overrun_by}
    text = _render(partial_tune_view(kept))
    assert f"time budget {budget_s:g}s: the loss curves and trials took 15.0s" in text
    assert (overrun_by is None) == ("over, during" not in text)


@pytest.mark.parametrize(("change", "per_sample"), [({"threads": 1}, (4.5, 4.5)),
                                                   ({"batch_size": 4, "accumulation_steps": 2}, (4.5, 2.5))])
def test_a_tuned_result_gives_tokens_per_s_beside_samples_per_s(change: dict[str, object],
                                                                  per_sample: tuple[float, float]) -> None:
    """A tuned workload of token ids printed and kept samples/s only, where its plain measurement gives tokens/s.
    Row i of padded()'s batches has i % 16 + 1 real tokens: 4.5 a sample at batch 8, 2.5 at micro-batch 4, where
    the tokens/s gain is no longer the samples/s one and says so."""
    from dlperf.report.html_kinds import _tune_view

    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=3, steps_per_call=1,
                        count_flops=False)
    knobs: dict[str, Knob] = {"k": FixedKnob("k", (change,), required=True)}
    result = Tuner(padded(8), StepConfig(batch_size=8, threads=2), config, knobs=knobs).run()
    assert result.best != result.baseline
    out = result.to_dict()
    assert out["baseline_tokens_per_s"] == pytest.approx(out["baseline_samples_per_s"] * per_sample[0])
    assert out["best_tokens_per_s"] == pytest.approx(out["best_samples_per_s"] * per_sample[1])
    text = _render(tune_view(out))
    assert (f"samples/s, {fmt_count(out['baseline_tokens_per_s'])} tokens/s\n" in text
            and f"samples/s, {fmt_count(out['best_tokens_per_s'])} tokens/s\n" in text), text
    gain = (f"tokens/s  {out['best_tokens_per_s'] / out['baseline_tokens_per_s']:.2f}x: the best trained on 2.5 "
            "tokens a sample, the baseline on 4.5")
    assert (gain in text) == (per_sample[0] != per_sample[1]), text
    assert ">tokens/s</th>" in _tune_view(out)
    # each trial too, at the tokens a sample its own loop trained on (the trials table showed samples/s only)
    trial = out["trials"][0]
    assert trial["tokens_per_s"] == pytest.approx(trial["samples_per_s"] * per_sample[1])
    assert not trial["tokens_guessed"]
    row = next(line for line in text.splitlines() if line.strip().startswith("k "))
    cells = row.split()
    assert cells.index(fmt_count(trial["tokens_per_s"])) == cells.index(fmt_count(trial["samples_per_s"])) + 1, row
    assert "tokens/s" in text.split("trials (each A/B")[1].splitlines()[2], text  # the trials table's header
    trials_html = _tune_view(out).split("Trials, each an A/B")[1].split("</table>")[0]
    assert ">tokens/s</th>" in trials_html and f">{fmt_count(trial['tokens_per_s'])}<" in trials_html
    plain = Tuner(tiny(), StepConfig(batch_size=32, threads=2), config, knobs=knobs if "threads" in change else {})
    plain_out = plain.run().to_dict()
    assert plain_out["best_tokens_per_s"] is None
    assert all(t["tokens_per_s"] is None for t in plain_out["trials"])
    assert "tokens/s" not in _render(tune_view(plain_out))  # no token ids in: no column


def test_without_a_time_budget_every_knob_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.measure.clock import FakeClock

    monkeypatch.setattr("dlperf.train.tune.clock_for", lambda device: FakeClock())
    monkeypatch.setattr("dlperf.train.tune.time", _TickingTime())
    knobs: dict[str, Knob] = {"opt": FixedKnob("opt", ({"optimizer_impl": "foreach"}, {"optimizer_impl": "fused"}))}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=4), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    assert [t.status for t in result.trials] == [NOT_FASTER, NOT_FASTER] and result.not_tried == []
    with pytest.raises(ConfigError, match="time budget must be positive, got 0"):
        TuneConfig(time_budget_s=0)


def test_tune_without_a_baseline_starts_from_the_workload_s_own_configuration() -> None:
    """`tune` needed a StepConfig, which the docs built with `base_config`, a name outside `dlperf.__all__`; with
    none it starts where `dlperf train W --tune` does with no options: the TrainSpec's batch size, eager fp32."""
    from dlperf.train.loop import base_config
    from dlperf.train.tune import tune

    config = TuneConfig(knobs=(), parity=ParityConfig(steps=4), measure_steps=2, measure_warmup=0,
                        count_flops=False)
    workload = tiny(batch_size=16)
    result = tune(workload, config=config)
    assert result.baseline == base_config(workload) == StepConfig(batch_size=16)
    assert result.best == result.baseline and result.trials == []
