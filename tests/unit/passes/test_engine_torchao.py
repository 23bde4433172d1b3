"""torchao int8 pass: quantize_ configs and the PT2E static flow stay close to fp32; applicability."""

from __future__ import annotations

import sys

import pytest
import torch

from dlperf.errors import ConfigError
from dlperf.measure.memory import parameter_bytes
from dlperf.passes.base import ModelState, PassContext, apply_pass, initial_state, why_not
from dlperf.passes.sensitivity import cosine_rows
from dlperf.passes.torchao_quant import TorchAoConfig, search_space
from dlperf.workload.zoo import get

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::UserWarning")]

CTX = PassContext(threads=1)


@pytest.mark.parametrize("method", ["int8-dynamic", "int8-weight-only"])
def test_quantize_configs_are_close_and_leave_the_original_alone(method: str) -> None:
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(TorchAoConfig(method=method, compile=False, keep_fp32=("4",)), state, CTX)
    assert new.precision == "int8" and new.engine == "torch"
    assert type(new.model[4].weight) is torch.nn.Parameter  # type: ignore[index]  # kept fp32
    assert type(new.model[0].weight) is not torch.nn.Parameter  # type: ignore[index]  # quantized tensor subclass
    assert type(state.model[0].weight) is torch.nn.Parameter  # type: ignore[index]  # original untouched
    x = wl.example_inputs(6)
    with torch.no_grad():
        assert 0.999 < float(cosine_rows(new.predict(*x), state.predict(*x)).min()) < 1.0


@pytest.mark.slow
def test_pt2e_static_int8_is_close_at_any_batch_size() -> None:
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(TorchAoConfig(compile=False, calibration_samples=16), state, CTX)
    for b in (1, 5):
        x = wl.example_inputs(b)
        with torch.no_grad():
            assert 0.995 < float(cosine_rows(new.predict(*x), state.predict(*x)).min()) < 1.0


def test_applicability_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    state = initial_state(get("mlp"))
    converted = ModelState(workload=state.workload, model=None, predict=state.predict, engine="openvino")
    assert "already converted to openvino" in (why_not(TorchAoConfig(), converted, CTX) or "")
    with pytest.raises(ConfigError):
        TorchAoConfig(method="int3")
    assert [c.label() for c in search_space(state.workload, CTX)] == ["torchao", "torchao(method=int8-dynamic)"]
    monkeypatch.setitem(sys.modules, "torchao", None)
    assert why_not(TorchAoConfig(), state, CTX) == "install dlperf[quant] (torchao is not installed)"
    assert search_space(state.workload, CTX) == []


def test_int8_dynamic_weights_count_as_int8_in_the_size() -> None:
    """torchao's int8 weights are tensor subclasses whose dtype reads fp32: counted by it, the quantized model was as
    large as the fp32 one (size 1.00x), and `--objective size` never preferred it."""
    wl = get("mlp")
    state = initial_state(wl)
    before = parameter_bytes(state.model)
    new = apply_pass(TorchAoConfig(method="int8-dynamic", compile=False), state, CTX)
    assert parameter_bytes(new.model) < before / 3  # int8 weights, fp32 biases and per-channel scales


@pytest.mark.slow
def test_pt2e_static_int8_keeps_no_fp32_weights() -> None:
    """convert_pt2e folds each weight into an int8 constant and kept the fp32 one too: the int8 model read 1.28x
    the fp32 model's size."""
    wl = get("mlp")
    state = initial_state(wl)
    new = apply_pass(TorchAoConfig(compile=False, calibration_samples=16), state, CTX)
    assert not [name for name, p in new.model.named_parameters() if name.endswith("weight")]  # type: ignore[union-attr]
    assert parameter_bytes(new.model) < parameter_bytes(state.model) / 3
    x = wl.example_inputs(3)
    with torch.no_grad():
        assert float(cosine_rows(new.predict(*x), state.predict(*x)).min()) > 0.995
