"""Pass decisions a mutation audit found unchecked: which units pruning removes and how many, which configs the
passes offer, what the sensitivity search calibrates, scores and tries."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from dlperf.errors import ConfigError
from dlperf.passes import sensitivity as sens
from dlperf.passes.base import PassContext, apply_pass, initial_state
from dlperf.passes.pruning import PruneConfig, _magnitude
from dlperf.passes.pruning import search_space as pruning_space
from dlperf.workload.base import Workload

from .torch_models import cnn_workload

pytestmark = pytest.mark.unit

CPU = PassContext()


def _dead_units(model: nn.Sequential, producer: int, dead: list[int]) -> nn.Sequential:
    """`model` with the producer's `dead` units (output features / channels) zeroed: they contribute nothing."""
    layer: Any = model[producer]
    with torch.no_grad():
        layer.weight[dead] = 0.0
        layer.bias[dead] = 0.0
    return model


@pytest.mark.parametrize("kind", ["linear", "conv-flatten-linear"])
def test_pruning_units_that_contribute_nothing_leaves_the_outputs_unchanged(kind: str) -> None:
    """Half the producer's units are dead (all-zero weights and bias): structured pruning at 0.5 removes exactly those
    (the weakest) and must give the same outputs. A conv -> Flatten -> Linear pair maps each kept channel to its
    block of the Linear's input columns; the wrong columns give another model of the right shape."""
    torch.manual_seed(0)
    if kind == "linear":
        model = _dead_units(nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3)), 0, [1, 3])
        x = torch.randn(5, 6)
    else:
        model = _dead_units(nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                                          nn.Linear(4 * 2 * 2, 3)), 0, [0, 2])
        x = torch.randn(5, 2, 2, 2)
    model.eval()
    with torch.no_grad():
        ref = model(x)
    wl = Workload(name="dead", make_model=lambda: model, make_inputs=lambda b: (x[:b],))
    state = apply_pass(PruneConfig(amount=0.5, finetune_steps=0), initial_state(wl), CPU)
    pruned: Any = state.model
    assert pruned[0].weight.shape[0] == 2
    with torch.no_grad():
        torch.testing.assert_close(state.predict(x), ref)


def test_pruning_never_removes_every_unit_of_a_layer() -> None:
    """75% of a 2-unit layer rounds to 2 units: the layer keeps one, not none (an empty layer outputs only its
    consumer's bias)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 3))
    wl = Workload(name="narrow", make_model=lambda: model, make_inputs=lambda b: (torch.randn(b, 4),))
    state = apply_pass(PruneConfig(amount=0.75, finetune_steps=0), initial_state(wl), CPU)
    pruned: Any = state.model
    assert pruned[0].out_features == 1 and pruned[2].in_features == 1


def test_magnitude_pruning_zeros_exactly_its_share_of_the_smallest_weights() -> None:
    """50% of 10 distinct weights is 5 zeros, the 5 smallest in magnitude: not 4."""
    layer = nn.Linear(5, 2, bias=False)
    values = torch.tensor([[0.1, -0.2, 0.3, -0.4, 0.5], [-0.6, 0.7, -0.8, 0.9, -1.0]])
    with torch.no_grad():
        layer.weight.copy_(values)
    _magnitude(nn.Sequential(layer), 0.5)
    assert int((layer.weight == 0).sum()) == 5
    assert torch.equal(layer.weight != 0, values.abs() > 0.5)


def test_pruning_is_offered_to_a_generic_workload_without_a_fine_tune_it_cannot_run() -> None:
    """A user's workload is of kind 'generic' by default: it gets pruning; without a training spec the configs say 0
    fine-tune steps (100 in the label and the cost class is a fine-tune that never runs)."""
    wl = cnn_workload()
    generic = Workload(name="user", make_model=wl.make_model, make_inputs=wl.make_inputs)
    assert generic.kind == "generic"
    configs = pruning_space(generic, CPU)
    assert [(c.amount, c.finetune_steps) for c in configs] == [(0.25, 0), (0.5, 0)]


def test_a_pruning_amount_of_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"amount must be in \(0, 1\)"):
        PruneConfig(amount=0.0)


def test_an_infinite_metric_is_never_within_budget() -> None:
    """A trial whose metric came out infinite (a broken quantized model) met any budget: its drop is -inf."""
    up = sens.Metric("psnr", lambda p: 0.0, 30.0, higher_is_better=True)
    down = sens.Metric("loss", lambda p: 0.0, 0.5, higher_is_better=False)
    assert not up.within(float("inf"), 1.0) and not down.within(float("-inf"), 1.0)


def test_one_dimensional_and_three_dimensional_convolutions_are_ranked_too() -> None:
    """The int8 engines quantize Conv1d and Conv3d as they do Linear and Conv2d: left out of the ranking, they could
    never be kept fp32."""
    model = nn.Sequential(nn.Conv1d(2, 2, 1), nn.ReLU(), nn.Conv3d(2, 2, 1), nn.Conv2d(2, 2, 1), nn.Linear(2, 2))
    assert sens.quantizable_layers(model) == ["0", "2", "3", "4"]


def test_activation_ranges_span_every_calibration_batch() -> None:
    """The range of a layer's input is over all the samples (two batches of 16 here), not the last batch's."""
    model = nn.Sequential(nn.Linear(1, 1))
    samples = [(torch.tensor([[100.0 if i == 0 else -100.0 if i == 5 else float(i % 3)]]),) for i in range(20)]
    assert sens.activation_ranges(model, ["0"], samples) == {"0": (-100.0, 100.0)}


def test_the_fallback_never_tries_the_same_number_of_layers_twice() -> None:
    """4 layers and 8 trials allowed: 0, 1, 2, 4 fp32, each a full quantization and evaluation, once."""
    assert sens.fallback_schedule(4, 8) == [0, 1, 2, 4]
    assert sens.fallback_schedule(1, 8) == [0, 1]


def test_output_fidelity_is_the_mean_cosine_over_the_samples() -> None:
    """One sample of four with opposite outputs: a mean cosine of 0.5, not the worst sample's -1."""
    samples = [(torch.tensor([[float(i + 1), 1.0]]),) for i in range(4)]
    evaluate = sens.output_fidelity(lambda x: x, samples)

    def one_flipped(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x[:, :1] == 2.0, -x, x)

    assert evaluate(lambda x: x) == pytest.approx(1.0)
    assert evaluate(one_flipped) == pytest.approx(0.5)


def _rows_workload(most: int | None = None) -> tuple[Workload, list[int]]:
    """A make_inputs that seeds one generator: row i is i at every batch size, as a deterministic user workload's;
    with `most`, larger batches are refused. Also the batch sizes asked of it."""
    asked: list[int] = []

    def make_inputs(b: int) -> tuple[torch.Tensor, ...]:
        asked.append(b)
        if most is not None and b > most:
            raise IndexError(f"only {most} rows")
        return (torch.arange(b, dtype=torch.float32)[:, None].repeat(1, 4),)

    return Workload(name="rows", make_model=lambda: nn.Linear(4, 2), make_inputs=make_inputs), asked


def test_the_fidelity_metric_is_scored_on_distinct_rows_that_neither_the_held_out_nor_the_calibration_use() -> None:
    """Without an eval spec the fallback search scored its trials on "32 inputs from example_inputs(9), (10) ...": for
    a make_inputs that seeds its own generator those batches all begin with the same rows, 11 distinct of the 32.
    They are now the first rows of one batch, before the search's held-out rows and the calibration rows after them."""
    from dlperf.passes import _engine

    wl, asked = _rows_workload()
    state = initial_state(wl)
    scored: list[float] = []
    asked.clear()
    metric = sens.workload_metric(state, CPU)
    assert asked == [32]

    def recording(x: torch.Tensor) -> Any:
        scored.extend(x[:, 0].tolist())
        return state.predict(x)

    assert metric.evaluate(recording) == pytest.approx(1.0)
    assert scored == [float(r) for r in range(32)]
    for batch_size in (1, 8, 32, 64):
        held = _engine.heldout_rows(batch_size)
        calibration = [float(s[0][0, 0]) for s in _engine.calibration_samples(state, PassContext(batch_size=batch_size),
                                                                              64)]
        assert not set(scored) & {float(r) for r in held} and not set(scored) & set(calibration)
    assert metric.name == "fidelity" and metric.baseline == 1.0
    assert metric.data == ("output fidelity on 32 distinct inputs (rows 0 to 31 of the example inputs), not the "
                           "held-out inputs the search judges fidelity on nor the calibration rows")
    # a make_inputs that refuses a batch of 32 gets batch sizes 9, 10 ... as before, and the note says what they hold
    few = sens.workload_metric(initial_state(_rows_workload(most=16)[0]), CPU)
    assert few.data.startswith("output fidelity on 32 inputs of which only 11 differ (the workload's example inputs "
                               "repeat rows)")


def test_dynamic_int8_leaves_the_layers_named_in_skip_in_fp32() -> None:
    """`skip` names layers to keep fp32 (a recipe's choice): they must stay nn.Linear."""
    from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config, int8_linear_class

    from .torch_models import mlp_workload

    state = apply_pass(DynamicInt8Config(min_features=1, skip=("2",)), initial_state(mlp_workload()), CPU)
    model: Any = state.model
    assert type(model[2]) is nn.Linear
    assert isinstance(model[0], int8_linear_class()) and isinstance(model[4], int8_linear_class())


def test_dynamic_int8_is_offered_on_the_cpu_only() -> None:
    from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config
    from dlperf.passes.torch_dynamic_int8 import search_space as int8_space

    from .torch_models import mlp_workload

    assert int8_space(mlp_workload(), CPU) == [DynamicInt8Config()]
    assert int8_space(mlp_workload(), PassContext(device="cuda")) == []


def test_channels_last_takes_transposed_convolutions_and_generic_workloads() -> None:
    """A decoder of ConvTranspose2d layers has 2-D convolutions too, and a user's workload is of kind 'generic'."""
    from dlperf.passes.channels_last import ChannelsLastConfig
    from dlperf.passes.channels_last import search_space as channels_last_space

    def make_model() -> nn.Module:
        return nn.Sequential(nn.ConvTranspose2d(3, 4, 2, stride=2), nn.ReLU())

    wl = Workload(name="decoder", make_model=make_model, make_inputs=lambda b: (torch.randn(b, 3, 4, 4),))
    assert wl.kind == "generic"
    assert channels_last_space(wl, CPU) == [ChannelsLastConfig()]


def test_qat_and_distill_are_offered_by_whether_there_is_training_data() -> None:
    """QAT needs the training spec (offered with it, not without); distillation is offered to a generic workload that
    has one."""
    pytest.importorskip("torchao")
    from dlperf.passes.distill import DistillConfig
    from dlperf.passes.distill import search_space as distill_space
    from dlperf.passes.qat import QatConfig
    from dlperf.passes.qat import search_space as qat_space
    from dlperf.workload.zoo import get

    from .torch_models import mlp_workload

    trained = get("mlp")
    assert qat_space(trained, CPU) == [QatConfig()]
    assert qat_space(mlp_workload(), CPU) == []
    generic = Workload(name="user", make_model=trained.make_model, make_inputs=trained.make_inputs,
                       train=trained.train)
    assert distill_space(generic, CPU) == [DistillConfig()]


def test_a_dtype_whose_calibrated_gemm_is_slower_than_fp32_is_not_offered(tmp_path: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With this machine's ceilings cached, precision offers a dtype only where its GEMM beats fp32's: bf16 at half
    fp32's speed (a CPU without AMX) is left out with the figures, fp16 at twice is offered."""
    from dlperf.calibrate import CACHE_ENV_VAR, Ceilings, machine_key
    from dlperf.calibrate.ceilings import write_cache
    from dlperf.passes import precision
    from dlperf.passes.precision import PrecisionConfig

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    write_cache(Ceilings("cpu", machine_key("cpu"), {"fp32": 100e9, "bf16": 50e9, "fp16": 200e9}, 1e10, "t",
                         torch.get_num_threads()))
    ctx = PassContext(cpu_flags=("avx512_bf16", "avx512_fp16"))
    assert precision.search_space(Workload(name="w", make_model=lambda: nn.Linear(2, 2),
                                           make_inputs=lambda b: (torch.randn(b, 2),)), ctx) == [
        PrecisionConfig(dtype="fp16", mode="autocast")]
    assert precision.UNAVAILABLE_REASON == "bf16 GEMM here peaks at 50 GFLOP/s vs fp32 100 (dlperf calibrate)"


def test_a_pass_that_raises_is_named_with_the_first_line_of_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NotImplementedError of a NestedTensor op (an int8 calibration hook on nn.TransformerEncoder's fast path) put
    50 lines of dispatcher keys into the search's table; the whole text stays on the chained exception."""
    from dlperf.errors import PassError
    from dlperf.passes import base
    from dlperf.passes.hygiene import HygieneConfig

    long = "Could not run 'aten::min' with arguments from the 'NestedTensorCPU' backend.\n\nCPU: registered at x\n" * 3

    class Raising:
        def applicable(self, config: object, state: object, ctx: object) -> None:
            return None

        def apply(self, config: object, state: object, ctx: object) -> object:
            raise NotImplementedError(long)

    monkeypatch.setattr(base, "implementation", lambda config: Raising())
    with pytest.raises(PassError) as info:
        base.apply_pass(HygieneConfig(), object(), base.PassContext())  # type: ignore[arg-type]
    assert str(info.value) == ("hygiene failed: NotImplementedError: Could not run 'aten::min' with arguments from the "
                               "'NestedTensorCPU' backend. [...]")
    assert isinstance(info.value.__cause__, NotImplementedError) and str(info.value.__cause__) == long
