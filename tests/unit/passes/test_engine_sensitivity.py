"""Sensitivity ranking (simulated int8) and the fp32 fallback search."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from dlperf.errors import PassError, WorkloadError
from dlperf.passes import sensitivity as sens

from .engine_models import PaddedEncoder, padded_inputs

pytestmark = pytest.mark.unit


class OutlierNet(nn.Module):
    """`mid` sees inputs with one huge channel, so per-tensor int8 of its input loses the small ones."""

    scale: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(16, 32)
        self.mid = nn.Linear(32, 32)
        self.last = nn.Linear(32, 8)
        scale = torch.ones(32)
        scale[3] = 2000.0
        self.register_buffer("scale", scale)
        with torch.no_grad():
            self.mid.weight[:, 3] /= 2000.0  # the outlier channel contributes like the others

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.first(x)) * self.scale
        return self.last(torch.relu(self.mid(h)))


def _samples(n: int = 24) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(1, 16, generator=g),) for _ in range(n)]


@pytest.mark.parametrize("mode", ["leave-one-out", "one-at-a-time"])
def test_rank_layers_puts_the_outlier_layer_first(mode: str) -> None:
    model = OutlierNet().eval()
    report = sens.rank_layers(model, _samples(), mode=mode)
    assert report.ranking[0].layer == "mid"
    assert sorted(s.layer for s in report.ranking) == ["first", "last", "mid"]
    assert report.all_int8_fidelity < 0.999
    # The simulation restores the model: fp32 outputs are unchanged afterwards.
    x = _samples(1)[0]
    torch.testing.assert_close(model(*x), OutlierNet().eval()(*x))


def test_rank_layers_rejects_unknown_mode() -> None:
    with pytest.raises(PassError, match="leave-one-out"):
        sens.rank_layers(OutlierNet(), _samples(), mode="random")


def test_fallback_schedule() -> None:
    assert sens.fallback_schedule(0, 5) == [0]
    assert sens.fallback_schedule(3, 5) == [0, 1, 2, 3]
    assert sens.fallback_schedule(36, 5) == [0, 1, 2, 4, 8]
    assert sens.fallback_schedule(6, 8) == [0, 1, 2, 4, 6]


def _simulated_build(model: nn.Module, samples: list[tuple[torch.Tensor, ...]]):
    layers = sens.quantizable_layers(model)
    ranges = sens.activation_ranges(model, layers, samples)

    def build(kept: tuple[str, ...]):
        def predict(*x: torch.Tensor) -> torch.Tensor:
            with sens.simulated_int8(model, [n for n in layers if n not in kept], ranges):
                return model(*x)

        return predict, kept

    return build


def test_fallback_search_stops_at_first_trial_within_budget() -> None:
    model = OutlierNet().eval()
    samples = _samples()
    metric = sens.Metric("fidelity", sens.output_fidelity(model, samples), 1.0)
    ranking = sens.rank_layers(model, samples).top(3)
    result = sens.fallback_search(ranking, _simulated_build(model, samples), metric, max_drop=1e-3)
    assert result.met and result.kept_fp32 == ("mid",) and result.artifact == ("mid",)
    assert [k for k, _ in result.trials] == [0, 1]
    assert result.trials[0][1] < 1 - 1e-3 <= result.trials[1][1]
    assert "1 layer(s) kept fp32" in result.describe("fidelity")


def test_fallback_search_reports_unmet_budget_with_best_trial() -> None:
    model = OutlierNet().eval()
    samples = _samples()
    metric = sens.Metric("fidelity", sens.output_fidelity(model, samples), 2.0)  # unreachable baseline
    result = sens.fallback_search(("mid", "first", "last"), _simulated_build(model, samples), metric, max_drop=0.0)
    assert not result.met and "budget NOT met" in result.describe("fidelity")
    assert result.kept_fp32 == ("mid", "first", "last")  # all fp32: the best fidelity
    assert [k for k, _ in result.trials] == [0, 1, 2, 3]


def test_metric_drop_direction() -> None:
    up = sens.Metric("acc", lambda p: 0.0, 0.9, higher_is_better=True)
    down = sens.Metric("loss", lambda p: 0.0, 0.5, higher_is_better=False)
    assert up.drop(0.85) == pytest.approx(0.05) and up.within(0.895, 0.01) and not up.within(0.85, 0.01)
    assert down.drop(0.6) == pytest.approx(0.1) and down.within(0.45, 0.0) and not down.within(float("nan"), 1.0)


def test_layer_group() -> None:
    assert sens.layer_group("encoder.layer.3.output.dense") == "encoder.layer.*.output.dense"
    assert sens.layer_group("0") == "*"


def test_the_workload_metric_scores_through_the_workload_and_names_a_bad_evaluate() -> None:
    """workload_metric called the user's evaluate directly: one returning a tensor of several values failed
    as float(...)'s bare "a Tensor with 2 elements cannot be converted to Scalar", naming no workload."""
    from dlperf.passes.base import PassContext, initial_state
    from dlperf.workload.base import EvalSpec, Workload

    def make(evaluate: Any) -> Workload:
        return Workload(name="scored", make_model=lambda: nn.Linear(4, 2),
                        make_inputs=lambda b: (torch.ones(b, 4),), eval=EvalSpec(evaluate, "acc"))

    good = sens.workload_metric(initial_state(make(lambda predict: 0.75)), PassContext())
    assert good.name == "acc" and good.baseline == 0.75 and good.evaluate(lambda *x: x) == 0.75
    with pytest.raises(WorkloadError, match=r"^workload 'scored': its evaluate function returned Tensor float32\[2\], "
                                            r"not a number: return the metric 'acc' as a float"):
        sens.workload_metric(initial_state(make(lambda predict: torch.ones(2))), PassContext())


def test_the_workload_metric_chooses_on_the_selection_split_and_says_which_data_chose() -> None:
    """keep_fp32="auto" scored its trials with the workload's evaluate, on the eval data the search then judged the
    candidate by: the fp32 layers were fitted to that data and the reported metric was optimistic. A workload with a
    selection split is scored on it alone; one without is still scored on its eval data, and the note says so."""
    from dlperf.passes.base import PassContext, initial_state
    from dlperf.workload.base import EvalSpec, Workload

    calls: list[str] = []

    def scored(name: str, value: float) -> Any:
        def evaluate(predict: Any) -> float:
            calls.append(name)
            return value

        return evaluate

    def make(selection: bool) -> Workload:
        spec = EvalSpec(scored("eval", 0.75), "acc",
                        selection_evaluate=scored("selection", 0.5) if selection else None)
        return Workload(name="scored", make_model=lambda: nn.Linear(4, 2), make_inputs=lambda b: (torch.ones(b, 4),),
                        eval=spec)

    metric = sens.workload_metric(initial_state(make(True)), PassContext())
    assert metric.evaluate(lambda *x: x) == 0.5 and metric.baseline == 0.5
    assert calls == ["selection", "selection"]  # the eval data never chose
    assert metric.data.startswith("the workload's selection split")
    calls.clear()
    fitted = sens.workload_metric(initial_state(make(False)), PassContext())
    assert fitted.baseline == 0.75 and calls == ["eval"]
    assert fitted.data.startswith("the eval data, which then judges the candidate too") and "optimistic" in fitted.data
    result = sens.FallbackResult(("a",), 0.74, True, [(0, 0.7), (1, 0.74)])
    assert result.describe("acc", metric.data).endswith(f"tried 0 fp32 -> 0.7000, 1 fp32 -> 0.7400; chosen on "
                                                        f"{metric.data})")


def test_a_selection_evaluate_that_fails_is_named_as_such() -> None:
    from dlperf.passes.base import PassContext, initial_state
    from dlperf.workload.base import EvalSpec, Workload

    wl = Workload(name="scored", make_model=lambda: nn.Linear(4, 2), make_inputs=lambda b: (torch.ones(b, 4),),
                  eval=EvalSpec(lambda predict: 0.75, "acc", selection_evaluate=lambda predict: "high"))  # type: ignore[arg-type,return-value]
    with pytest.raises(WorkloadError, match=r"^workload 'scored': its selection_evaluate function returned str"):
        sens.workload_metric(initial_state(wl), PassContext())
    with pytest.raises(WorkloadError, match="has no selection split"):
        Workload(name="plain", make_model=lambda: nn.Linear(4, 2), make_inputs=lambda b: (torch.ones(b, 4),),
                 eval=EvalSpec(lambda predict: 0.75, "acc")).score_selection(lambda *x: x)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's nested tensors are a prototype
def test_layers_inside_a_fused_attention_fast_path_are_ranked() -> None:
    """nn.TransformerEncoder's fast path ran its Linear modules' work inside one fused operator, on nested tensors
    where a padding mask is given: the calibration hooks failed ('Could not run aten::min ... NestedTensorCPU'),
    and every keep_fp32="auto" candidate of such a model with them. The ranking runs with the fast path off, then
    puts it back as it was."""
    torch.manual_seed(0)
    model = PaddedEncoder().eval()
    samples = [padded_inputs(1) for _ in range(4)]
    with torch.no_grad():
        report = sens.rank_layers(model, samples, eval_samples=4)
    names = [s.layer for s in report.ranking]
    assert names and set(names) == {"enc.layers.0.linear1", "enc.layers.0.linear2"}
    assert torch.backends.mha.get_fastpath_enabled()


class _Named(nn.Module):
    """OutlierNet's outputs by name, as a transformer returns `last_hidden_state` and an embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.net = OutlierNet()

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.net(x)
        return {"hidden": out, "pooled": out.mean(1)}


def test_rank_layers_scores_a_model_that_returns_a_dict() -> None:
    """The fidelity behind keep_fp32="auto" took a dict output for a tensor: every
    onnxruntime(precision=int8-static,keep_fp32=auto) candidate of a model returning a dict failed with
    "AttributeError: 'dict' object has no attribute 'float'". It scores the dict's first tensor, as a tuple's."""
    report = sens.rank_layers(_Named().eval(), _samples())
    assert report.ranking[0].layer == "net.mid" and report.all_int8_fidelity < 0.999
