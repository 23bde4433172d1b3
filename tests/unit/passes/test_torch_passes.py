"""Torch-side passes: applicability (with the reason) and outputs that still match the original model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dlperf
from dlperf.errors import ConfigError, PassNotApplicable
from dlperf.measure.memory import parameter_bytes
from dlperf.passes.base import ModelState, PassContext, apply_pass, apply_pipeline, initial_state, why_not
from dlperf.passes.channels_last import ChannelsLastConfig
from dlperf.passes.channels_last import search_space as channels_last_space
from dlperf.passes.cuda_graphs import CudaGraphsConfig
from dlperf.passes.cuda_graphs import search_space as cuda_graphs_space
from dlperf.passes.hygiene import HygieneConfig
from dlperf.passes.precision import PrecisionConfig, hardware_reason
from dlperf.passes.precision import search_space as precision_space
from dlperf.passes.torch_dynamic_int8 import DynamicInt8Config, int8_linear_class
from dlperf.workload.base import Workload

from .torch_models import cnn_workload, cosine, masked_encoder_workload, mlp_workload

pytestmark = pytest.mark.unit

CPU = PassContext()


def _reference(state: ModelState, batch: int = 4) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    inputs = state.workload.example_inputs(batch)
    with torch.no_grad():
        return inputs, state.model(*inputs)  # type: ignore[misc]


def test_hygiene_turns_off_autograd_and_keeps_outputs() -> None:
    state = initial_state(mlp_workload())
    inputs, ref = _reference(state)
    state = apply_pass(HygieneConfig(), state, CPU)
    out = state.predict(*inputs)
    assert torch.equal(out, ref)
    assert out.is_inference()
    assert not any(p.requires_grad for p in state.model.parameters())  # type: ignore[union-attr]
    assert [c.name for c in state.applied] == ["hygiene"]


def test_hygiene_threads_are_set_and_validated() -> None:
    old = torch.get_num_threads()
    try:
        state = apply_pass(HygieneConfig(threads=1), initial_state(mlp_workload()), CPU)
        assert torch.get_num_threads() == 1
        assert "torch threads set to 1" in state.notes
    finally:
        torch.set_num_threads(old)
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        HygieneConfig(threads=0)


def test_channels_last_applies_to_conv_models_only() -> None:
    mlp_state = initial_state(mlp_workload())
    assert "no 2-D convolution" in (why_not(ChannelsLastConfig(), mlp_state, CPU) or "")
    with pytest.raises(PassNotApplicable, match="no 2-D convolution"):
        apply_pass(ChannelsLastConfig(), mlp_state, CPU)
    assert channels_last_space(mlp_workload(), CPU) == []
    assert channels_last_space(cnn_workload(), CPU) == [ChannelsLastConfig()]

    state = initial_state(cnn_workload())
    inputs, ref = _reference(state)
    state = apply_pass(ChannelsLastConfig(), state, CPU)
    conv = state.model[0]  # type: ignore[index]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        out = state.predict(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_dynamic_int8_replaces_linears_and_stays_close() -> None:
    state = initial_state(mlp_workload())
    inputs, ref = _reference(state, batch=16)
    state = apply_pass(DynamicInt8Config(), state, CPU)
    cls = int8_linear_class()
    kinds = [type(m) for m in state.model.modules()]  # type: ignore[union-attr]
    # 32->64 and 64->8 are quantized... except 64->8 and 8->4 fall under min_features=16.
    assert kinds.count(cls) == 1
    assert state.precision == "int8"
    with torch.no_grad():
        out = state.predict(*inputs)
    assert out.shape == ref.shape
    assert cosine(out, ref) > 0.99
    assert not torch.equal(out, ref)  # it really is quantized


def test_dynamic_int8_s_note_names_the_linears_it_kept_in_fp32_and_why() -> None:
    """The note read '1 Linear layers in dynamic int8' for a model of three: it did not say that two stayed fp32,
    nor which, nor why."""
    state = apply_pass(DynamicInt8Config(), initial_state(mlp_workload()), CPU)
    assert state.notes[-1] == ("1 of 3 Linear layers in dynamic int8; kept fp32: 2 (fewer than 16 features), "
                               "4 (fewer than 16 features)")
    state = apply_pass(DynamicInt8Config(min_features=1, skip=("2",)), initial_state(mlp_workload()), CPU)
    assert state.notes[-1] == "2 of 3 Linear layers in dynamic int8; kept fp32: 2 (skipped)"
    state = apply_pass(DynamicInt8Config(), initial_state(_encoder_workload(head=True)), CPU)
    assert state.notes[-1] == ("1 of 5 Linear layers in dynamic int8; kept fp32: encoder.layers.0.linear1 (inside a "
                               "transformer layer), encoder.layers.0.linear2 (inside a transformer layer), "
                               "encoder.layers.1.linear1 (inside a transformer layer), encoder.layers.1.linear2 "
                               "(inside a transformer layer)")


def test_dynamic_int8_state_dict_is_plain_tensors_and_weights_only_loadable(tmp_path) -> None:
    state = apply_pass(DynamicInt8Config(min_features=1), initial_state(mlp_workload()), CPU)
    sd = state.model.state_dict()  # type: ignore[union-attr]
    assert sd["0.weight_int8"].dtype == torch.int8
    torch.save(sd, tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt", weights_only=True)
    assert set(loaded) == set(sd)


def test_dynamic_int8_not_applicable_without_big_linears_or_twice() -> None:
    state = initial_state(mlp_workload())
    assert "no nn.Linear with at least 1000" in (why_not(DynamicInt8Config(min_features=1000), state, CPU) or "")
    # a Linear(512, 10) head: "no nn.Linear with at least 16 features" read as false; the widest is named
    head = initial_state(dlperf.Workload(name="head", make_model=lambda: torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(512, 10)).eval(), make_inputs=lambda b: (torch.randn(b, 512),)))
    assert why_not(DynamicInt8Config(), head, CPU) == ("the model has no nn.Linear with at least 16 input and output "
                                                      "features (the widest, 1, is 512 -> 10), and no nn.GRU or "
                                                      "nn.LSTM")
    state = apply_pass(DynamicInt8Config(), state, CPU)
    assert "already int8" in (why_not(DynamicInt8Config(), state, CPU) or "")
    assert "already int8" in (why_not(PrecisionConfig(), state, PassContext(cpu_flags=("avx512_bf16",))) or "")
    with pytest.raises(ConfigError):
        DynamicInt8Config(min_features=0)


def _recurrent_workload(cls: type, hidden: int = 64) -> Workload:
    class Recurrent(torch.nn.Module):  # gru_wl.py's shape: a GRU over 8 rows of 8, its last state to a 64 -> 10 head
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.rnn = cls(8, hidden, batch_first=True)
            self.head = torch.nn.Linear(hidden, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0][:, -1])

    return Workload(name="recurrent", make_model=lambda: Recurrent().eval(),
                    make_inputs=lambda b: (torch.randn(b, 8, 8, generator=torch.Generator().manual_seed(b)),))


@pytest.mark.parametrize("cls", [torch.nn.GRU, torch.nn.LSTM], ids=["gru", "lstm"])
def test_dynamic_int8_quantizes_gru_and_lstm_layers(cls: type) -> None:
    """A GRU classifier whose only Linear is its 64 -> 10 head was "not applicable: the model has no nn.Linear with at
    least 16 input and output features": torch's quantize_dynamic takes nn.GRU and nn.LSTM too."""
    from torch.ao.nn.quantized import dynamic as qdynamic

    state = initial_state(_recurrent_workload(cls))
    inputs, ref = _reference(state, batch=4)
    assert why_not(DynamicInt8Config(), state, CPU) is None
    state = apply_pass(DynamicInt8Config(), state, CPU)
    assert isinstance(state.model.rnn, getattr(qdynamic, cls.__name__))  # type: ignore[union-attr]
    assert state.precision == "int8"
    assert state.notes[-2:] == ["0 of 1 Linear layers in dynamic int8; kept fp32: head (fewer than 16 features)",
                                "1 of 1 GRU/LSTM layers in dynamic int8"]
    with torch.no_grad():
        assert cosine(state.predict(*inputs), ref) > 0.99
    # its int8 weights are packed outside parameters and buffers: the size counted the fp32 head alone (2600 bytes)
    gates = 3 if cls is torch.nn.GRU else 4
    assert parameter_bytes(state.model) == gates * 64 * (8 + 64) + 2 * gates * 64 * 4 + (64 * 10 + 10) * 4
    narrow = initial_state(_recurrent_workload(cls, hidden=8))
    assert why_not(DynamicInt8Config(), narrow, CPU) == (
        "the model has no nn.Linear with at least 16 input and output features (the widest, head, is 8 -> 10); its "
        "GRU/LSTM layers (rnn) have a hidden size under 16, an LSTM projection or are skipped")
    assert "no nn.Linear with at least 16" in (why_not(DynamicInt8Config(recurrent=False),
                                                       initial_state(_recurrent_workload(cls)), CPU) or "")


def test_a_dynamic_int8_config_saved_before_recurrent_layers_were_covered_replays_linears_only() -> None:
    """A recipe saved when the pass quantized nn.Linear only has no `recurrent`: its default (True) would quantize the
    GRU the measured candidate kept fp32."""
    from dlperf.optimize.space import config_from_dict

    old = {"pass": "dynamic_int8", "version": 1, "min_features": 16, "skip": []}
    assert config_from_dict(old) == DynamicInt8Config(recurrent=False)
    assert config_from_dict(DynamicInt8Config().to_dict()) == DynamicInt8Config()


def _encoder_workload(head: bool) -> Workload:
    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(32, 32) if head else torch.nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x).mean(1))

    return Workload(name="encoder", make_model=Encoder,
                    make_inputs=lambda b: (torch.randn(b, 8, 32, generator=torch.Generator().manual_seed(b)),))


def test_dynamic_int8_leaves_the_linears_of_torch_s_transformer_layers_alone() -> None:
    """nn.TransformerEncoderLayer reads linear1.weight and linear2.weight in its forward (the fused fast path's
    arguments): the pass replaced them and every call failed with "'DynamicInt8Linear' object has no attribute
    'weight'". Now it quantizes the other Linears, and says why it does not apply when there are none."""
    state = initial_state(_encoder_workload(head=True))
    inputs, ref = _reference(state, batch=4)
    state = apply_pass(DynamicInt8Config(), state, CPU)
    kinds = [type(m) for m in state.model.modules()]  # type: ignore[union-attr]
    assert kinds.count(int8_linear_class()) == 1  # the head
    with torch.no_grad():
        assert cosine(state.predict(*inputs), ref) > 0.99
    reason = why_not(DynamicInt8Config(), initial_state(_encoder_workload(head=False)), CPU) or ""
    assert "inside nn.TransformerEncoderLayer/DecoderLayer, which read their weights directly" in reason


def test_precision_needs_hardware_support() -> None:
    assert "no native bf16" in (hardware_reason("bf16", "cpu", ()) or "")
    assert hardware_reason("bf16", "cpu", ("avx512_bf16",)) is None
    assert "no native fp16" in (hardware_reason("fp16", "cpu", ("avx2",)) or "")
    assert precision_space(mlp_workload(), PassContext(cpu_flags=("avx2",))) == []
    with pytest.raises(ConfigError):
        PrecisionConfig(dtype="int4")


def test_tf32_is_a_gpu_mode_without_a_cast() -> None:
    assert "not of a CPU" in (hardware_reason("tf32", "cpu", ("avx512_bf16", "amx_bf16")) or "")
    assert all(c.dtype != "tf32" for c in precision_space(mlp_workload(), PassContext(cpu_flags=("amx_bf16",))))
    with pytest.raises(ConfigError, match="no cast mode"):
        PrecisionConfig(dtype="tf32", mode="cast")


def test_tf32_holds_for_the_call_only() -> None:
    """The matmul precision is process-wide: set for the call, and put back after it, also when it raises (an A/B
    runs the original model in the same process)."""
    from dlperf.passes._torch_call import TorchCall

    seen: list[str] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.get_float32_matmul_precision())
            if not bool(x.all()):
                raise ValueError("zero input")
            return x

    call = TorchCall(Probe())
    call.tf32 = True
    before = torch.get_float32_matmul_precision()
    assert before != "high"
    call(torch.ones(2))
    with pytest.raises(ValueError):
        call(torch.zeros(2))
    assert seen == ["high", "high"] and torch.get_float32_matmul_precision() == before
    call.tf32 = False
    call(torch.ones(2))
    assert seen[-1] == before


def test_overlapping_tf32_calls_put_the_precision_back_once_the_last_ends() -> None:
    """Two tf32 calls in two threads (a server's instances): each restored what it had found, so when the first
    ended before the second, the precision went back under the running second, which then left 'high' for good."""
    import threading

    from dlperf.passes._torch_call import TorchCall

    first_in, second_in, first_done = threading.Event(), threading.Event(), threading.Event()
    during: list[str] = []

    class Wait(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if float(x[0]) == 1.0:  # the first call: waits for the second to start, then ends
                first_in.set()
                assert second_in.wait(5)
            else:  # the second: ends after the first
                second_in.set()
                assert first_done.wait(5)
            during.append(torch.get_float32_matmul_precision())
            return x

    call = TorchCall(Wait())
    call.tf32 = True
    before = torch.get_float32_matmul_precision()

    def first() -> None:
        call(torch.ones(1))
        first_done.set()

    t = threading.Thread(target=first)
    t.start()
    assert first_in.wait(5)
    second_started = threading.Thread(target=call, args=(torch.full((1,), 2.0),))
    second_started.start()
    t.join(5)
    second_started.join(5)
    assert during == ["high", "high"] and torch.get_float32_matmul_precision() == before


@pytest.mark.parametrize("mode", ["autocast", "cast"])
def test_precision_bf16_outputs_fp32_close_to_original(mode: str) -> None:
    ctx = PassContext(cpu_flags=("avx512_bf16",))  # capability asserted; the kernels run everywhere
    state = initial_state(mlp_workload())
    inputs, ref = _reference(state)
    state = apply_pass(PrecisionConfig(dtype="bf16", mode=mode), state, ctx)
    with torch.no_grad():
        out = state.predict(*inputs)
    assert out.dtype == torch.float32
    assert state.precision == "bf16"
    assert cosine(out, ref) > 0.98


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_bf16_autocast_runs_an_encoder_with_a_padding_mask_and_leaves_the_fast_path_on() -> None:
    """A padding-masked nn.TransformerEncoder in eval under no_grad takes torch's fused fast path, which checks only
    CUDA's autocast: under CPU autocast it got bf16 activations and every call failed ("expected scalar type Float but
    found BFloat16"), so `dlperf optimize` recorded the bf16 candidate as failed. The call now turns the fast path off
    for itself only."""
    state = initial_state(masked_encoder_workload())
    ref_inputs, ref = _reference(state)
    state = apply_pass(PrecisionConfig(dtype="bf16", mode="autocast"), state, PassContext(cpu_flags=("avx512_bf16",)))
    with torch.no_grad():
        out = state.predict(*ref_inputs)
    assert out.dtype == torch.float32 and cosine(out, ref) > 0.98
    assert torch.backends.mha.get_fastpath_enabled()  # for the original model timed beside it


def test_passes_compose_in_one_torch_call() -> None:
    state = initial_state(cnn_workload())
    inputs, ref = _reference(state)
    state = apply_pipeline([HygieneConfig(), ChannelsLastConfig(), DynamicInt8Config(min_features=4)], state, CPU)
    call = state.predict
    assert call.inference_mode and call.channels_last  # type: ignore[attr-defined]
    out = state.predict(*inputs)
    assert cosine(out, ref) > 0.99


def test_cuda_graphs_not_applicable_on_cpu() -> None:
    state = initial_state(mlp_workload())
    assert "CUDA" in (why_not(CudaGraphsConfig(), state, CPU) or "")
    assert cuda_graphs_space(mlp_workload(), CPU) == []


def test_torch_passes_refuse_an_engine_state() -> None:
    state = initial_state(mlp_workload())
    engine_state = dataclasses.replace(state, engine="onnxruntime", model=None)
    for config in (HygieneConfig(), DynamicInt8Config(), ChannelsLastConfig()):
        assert "already converted to onnxruntime" in (why_not(config, engine_state, CPU) or "")


def test_labels_show_only_non_default_fields() -> None:
    assert HygieneConfig().label() == "hygiene"
    assert HygieneConfig(threads=2).label() == "hygiene(threads=2)"
    assert HygieneConfig(inference_mode=False).label() == "hygiene(inference_mode=False)"  # False, not the default
    assert DynamicInt8Config().to_dict() == {"pass": "dynamic_int8", "version": 1, "min_features": 16, "skip": (),
                                             "recurrent": True}
