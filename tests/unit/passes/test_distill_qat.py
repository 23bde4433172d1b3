"""Distillation (narrow, shallow students) and QAT to dynamic int8, with their artifacts' round trips."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import ConfigError
from dlperf.measure.memory import parameter_bytes
from dlperf.optimize.evaluate import EvalSettings, evaluate_here, fidelity_of
from dlperf.optimize.space import Candidate
from dlperf.passes.base import PassContext, apply_pass, initial_state, why_not
from dlperf.passes.distill import DistillConfig, block_stack, make_student
from dlperf.passes.distill import search_space as distill_space
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.qat import QatConfig
from dlperf.passes.torch_dynamic_int8 import int8_linear_class
from dlperf.workload.base import Workload
from dlperf.workload.zoo import get

from .torch_models import mlp_workload

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]

CPU = PassContext()


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
        return x


def test_shallow_student_keeps_first_and_last_blocks() -> None:
    teacher = Stack()
    assert block_stack(teacher) is not None
    student = make_student(teacher, DistillConfig(student="shallow", ratio=0.5))
    ours: Any = student.blocks
    theirs: Any = teacher.blocks
    assert len(ours) == 2
    torch.testing.assert_close(ours[0].weight, theirs[0].weight)
    torch.testing.assert_close(ours[1].weight, theirs[3].weight)


@pytest.mark.slow
def test_narrow_distillation_moves_the_student_towards_the_teacher() -> None:
    workload = get("mlp")
    x = workload.example_inputs(64)
    teacher = workload.build_model().eval()
    with torch.no_grad():
        ref = teacher(*x)
        untrained = make_student(teacher, DistillConfig(ratio=0.5))(*x)
    state = apply_pass(DistillConfig(ratio=0.5, steps=60, lr=1e-2), initial_state(workload), CPU)
    assert parameter_bytes(state.model) < parameter_bytes(teacher) / 2
    with torch.no_grad():
        out = state.predict(*x)
    assert out.shape == ref.shape
    assert torch.nn.functional.mse_loss(out, ref) < 0.8 * torch.nn.functional.mse_loss(untrained, ref)
    assert any("distilled 60 steps" in n for n in state.notes)


def test_the_training_passes_say_where_their_loss_started_and_ended() -> None:
    """QAT's, pruning's and distillation's notes gave the last step's loss alone (`QAT: 100 steps through fake int8
    (last loss 0.0104)`), which says nothing of whether training lowered it; distilling a digits MLP went from 16.0
    to 0.12 (the first and last 10 steps), and its note read `last loss 0.09848`. Each note now gives both means."""
    import re

    from dlperf.passes.pruning import PruneConfig

    curve = re.compile(r"\(loss ([0-9.e+-]+) -> ([0-9.e+-]+), mean of the first and last (\d+) steps\)")
    workload = get("mlp")
    distilled = apply_pass(DistillConfig(ratio=0.5, steps=40, lr=1e-2), initial_state(workload), CPU)
    found = [curve.search(n) for n in distilled.notes if n.startswith("distilled 40 steps")]
    assert found and found[0] is not None, distilled.notes
    first, last, k = float(found[0][1]), float(found[0][2]), int(found[0][3])
    assert k == 10 and last < first / 2
    pruned = apply_pass(PruneConfig(finetune_steps=8), initial_state(workload), CPU)
    assert any(curve.search(n) and "fine-tuned 8 steps" in n and "mean of the first and last 2 steps)" in n
               for n in pruned.notes), pruned.notes
    qat = apply_pass(QatConfig(steps=4), initial_state(workload), CPU)
    assert any(n.startswith("QAT: 4 steps through fake int8 (loss ") and "last 1 step)" in n for n in qat.notes)
    from dlperf.passes.pruning import LossCurve

    assert LossCurve((4.0, 3.0, 2.0, 1.0, 0.5)).describe() == "loss 4 -> 0.5, mean of the first and last 1 step"
    assert LossCurve(()).describe() == "no steps" and LossCurve((1.0, 2.0)).last == 2.0


def test_distill_needs_data_and_validates() -> None:
    assert "no training data" in (why_not(DistillConfig(), initial_state(mlp_workload()), CPU) or "")
    assert distill_space(mlp_workload(), CPU) == []
    assert distill_space(get("mlp"), CPU) == [DistillConfig()]
    wl = Workload(name="s", make_model=Stack, make_inputs=lambda b: (torch.randn(b, 8),), train=get("mlp").train)
    assert "no Linear/Conv2d chain" in (why_not(DistillConfig(), initial_state(wl), CPU) or "")
    with pytest.raises(ConfigError):
        DistillConfig(student="tiny")


def test_qat_converts_to_dynamic_int8_layers() -> None:
    workload = get("mlp")
    state = apply_pass(HygieneConfig(), initial_state(workload), CPU)
    state = apply_pass(QatConfig(steps=5), state, CPU)
    cls = int8_linear_class()
    assert sum(isinstance(m, cls) for m in state.model.modules()) == 2  # type: ignore[union-attr]
    assert state.precision == "int8"
    x = workload.example_inputs(4)
    assert state.predict(*x).shape == (4, 10)
    assert "no training spec" in (why_not(QatConfig(), initial_state(mlp_workload()), CPU) or "")


def test_qat_does_not_apply_where_dynamic_int8_replaces_no_linear() -> None:
    """The Linears of torch's transformer layers are left to fp32 by dynamic_int8: QAT fake-quantized them while it
    fine-tuned, then left them in fp32 and called the model int8 ('0 Linear layers in dynamic int8')."""
    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 1,
                                                 enable_nested_tensor=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.encoder(x).mean(1)

    wl = Workload(name="enc", make_model=Encoder, make_inputs=lambda b: (torch.randn(b, 8, 32),),
                  train=get("mlp").train)
    assert "inside nn.TransformerEncoderLayer/DecoderLayer" in (why_not(QatConfig(), initial_state(wl), CPU) or "")


@pytest.mark.parametrize("config", [QatConfig(steps=5), DistillConfig(steps=10)], ids=["qat", "distill"])
def test_trained_artifacts_reload_to_the_candidate(tmp_path: Path, config: Any) -> None:
    settings = EvalSettings(source="zoo:mlp", batch_size=2, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    cand = Candidate((config,))
    row = evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": cand.to_list(),
                         "out_dir": str(tmp_path)}, lambda phase: None)
    assert "trained.pt" in row["artifact"]["fields"]["files"]
    # its training is training: a distilled student's read as compile_s, which a recipe pays again on load
    assert row["train_s"] > 0 and row["compile_s"] == 0.0 and row["build_s"] >= row["train_s"]
    loaded = dlperf.load(tmp_path / "artifact")
    x = get("mlp").example_inputs(2)
    with torch.no_grad():
        ref = get("mlp").build_model().eval()(*x)
        out = loaded(*x)
    assert fidelity_of([out], [ref], 2)["mean_cosine"] == pytest.approx(row["fidelity"]["mean_cosine"], abs=1e-6)
