"""Loss parity on a baseline whose loss does not fall cannot tell a candidate that stops training: the tuning says so
(zoo:mlp's random labels: a learning rate of 1e-9 passed parity at -0.1%, printed as 'loss -0.0%' like any other)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from rich.console import Console

from dlperf.measure.ab import ABConfig
from dlperf.report.train_view import tune_view
from dlperf.train.knobs import Candidate, Knob, TuneContext
from dlperf.train.loop import StepConfig
from dlperf.train.parity import ParityConfig, blind_reason, compare_losses, frozen_curve, loss_curve
from dlperf.train.tune import ACCEPTED, NOT_FASTER, TuneConfig, Tuner

from ._workloads import tiny

pytestmark = pytest.mark.unit


def _random_labels() -> Any:
    """The tiny workload on labels drawn at random: nothing to learn, its loss stays near log(4)."""

    def loader(batch_size: int, **kwargs: Any) -> Any:
        from torch.utils.data import DataLoader, TensorDataset

        g = torch.Generator().manual_seed(0)
        x = torch.randn(512, 16, generator=g)
        y = torch.randint(0, 4, (512,), generator=g)
        kwargs.setdefault("generator", torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, drop_last=True, **kwargs)

    w = tiny(lr=0.01)
    assert w.train is not None
    return dataclasses.replace(w, train=dataclasses.replace(w.train, make_loader=loader))


@dataclasses.dataclass
class _StopsTraining:
    """A broken knob: the candidate's learning rate is 1e-9, so it does not train at all."""

    name: str = "frozen"
    sweep: bool = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"lr_scale": 1e-9}, "no training")]


def test_parity_is_blind_where_a_candidate_that_does_not_train_passes_it() -> None:
    base = StepConfig(batch_size=32, threads=1)
    parity = ParityConfig(steps=16)
    for workload, blind in ((_random_labels(), True), (tiny(), False)):
        baseline = loss_curve(workload, base, 16)
        stopped = compare_losses(baseline, loss_curve(workload, base.replace(lr_scale=1e-9), 16))
        assert stopped.ok == blind  # where the loss falls, the candidate that does not train fails parity
        reason = blind_reason(baseline, frozen_curve(workload, base, parity))
        assert (reason is not None) == blind, reason


def test_the_blind_reason_gives_the_figures() -> None:
    baseline = [2.31, 2.30, 2.30, 2.31, 2.29, 2.30, 2.31, 2.30]
    said = blind_reason(baseline, [2.31, 2.30, 2.30, 2.31, 2.30, 2.31, 2.31, 2.31])
    assert said is not None
    assert said.startswith("a model that does not train at all (learning rate x1e-09) passes it too: tail mean 2.308 "
                           "vs the baseline's 2.3 (+0.3%, allowed ±0.115), as the baseline's loss hardly falls over "
                           "the 8 parity steps")
    assert "raise --parity-steps" in said
    falling = [2.3, 2.0, 1.8, 1.6, 1.5, 1.4, 1.3, 1.2]
    assert blind_reason(falling, [2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3]) is None
    assert blind_reason([2.3, float("nan"), 1.0, 1.0], [2.3] * 4) is None  # a diverging baseline stops the tuner


def test_a_tuning_whose_parity_is_blind_says_so() -> None:
    knobs: dict[str, Knob] = {"frozen": _StopsTraining()}
    quick = ABConfig(blocks=4, iters_per_block=1, warmup_iters=1)
    config = TuneConfig(parity=ParityConfig(steps=16), ab=quick, final_ab=quick, measure_steps=2, steps_per_call=1,
                        count_flops=False)
    result = Tuner(_random_labels(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    (trial,) = result.trials
    assert trial.status in (ACCEPTED, NOT_FASTER)  # it passed parity: the loss cannot tell
    assert result.parity_blind is not None
    data = result.to_dict()
    assert data["parity_blind"] == result.parity_blind
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(tune_view(data))
    text = " ".join(console.export_text().split())
    assert "note: loss parity: a model that does not train at all (learning rate x1e-09) passes it too" in text
    learnable = Tuner(tiny(), StepConfig(batch_size=32, threads=1), config, knobs=knobs).run()
    assert learnable.parity_blind is None
    assert learnable.trials[0].status == "parity failed"
