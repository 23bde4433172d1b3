"""The parts of the Torch-TensorRT pass that run without TensorRT: how a strongly typed engine (TensorRT 11 has
no weak typing, so an fp16/bf16 engine is built from the model cast to that dtype) is called and described.
The compile itself is in tests/gpu/test_engines_gpu.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from dlperf.passes.base import PassContext, initial_state, why_not
from dlperf.passes.tensorrt import TensorRtConfig, _input_specs, _predictor, target_device
from dlperf.workload.zoo import get

pytestmark = pytest.mark.unit


def test_a_strongly_typed_engine_takes_fp32_inputs_and_returns_fp32() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    typed = torch.nn.Linear(8, 3).to(torch.bfloat16)
    typed.load_state_dict({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    seen: list[torch.dtype] = []

    def engine(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.extend([x.dtype, ids.dtype])
        return typed(x.to(torch.bfloat16)), ids

    x, ids = torch.randn(4, 8), torch.arange(4)
    out, out_ids = _predictor(engine, "cpu", torch.bfloat16)(x, ids)
    assert seen == [torch.bfloat16, torch.int64]  # floating inputs cast, integer ones untouched
    assert out.dtype == torch.float32 and out_ids.dtype == torch.int64
    torch.testing.assert_close(out, model(x).detach(), atol=0.05, rtol=0.05)
    # a weakly typed engine (no cast) gets the inputs as they are
    seen.clear()
    _predictor(engine, "cpu", None)(x, ids)
    assert seen == [torch.float32, torch.int64]


def test_input_specs_cast_floating_inputs_and_span_the_batch_range() -> None:
    trt: Any = SimpleNamespace(Input=lambda **kw: kw)
    example = (torch.zeros(4, 3, 8, 8), torch.zeros(4, 5, dtype=torch.int64))
    # a max equal to the example's batch still spans 1..max (it made a one-size engine, which serve refused)
    same = _input_specs(trt, example, 4, torch.float16)
    assert same == [{"min_shape": (1, 3, 8, 8), "opt_shape": (4, 3, 8, 8), "max_shape": (4, 3, 8, 8),
                     "dtype": torch.float16},
                    {"min_shape": (1, 5), "opt_shape": (4, 5), "max_shape": (4, 5), "dtype": torch.int64}]
    one = (torch.zeros(1, 5),)
    assert _input_specs(trt, one, 1, None) == [{"shape": (1, 5), "dtype": torch.float32}]
    ranged = _input_specs(trt, example, 16, None)
    assert ranged[0] == {"min_shape": (1, 3, 8, 8), "opt_shape": (4, 3, 8, 8), "max_shape": (16, 3, 8, 8),
                         "dtype": torch.float32}


def test_the_engine_is_built_for_a_gpu_named_by_its_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch-TensorRT's Device parses 'cuda:N' and has no default index: plain 'cuda' raised IndexError in compile,
    so every TensorRT candidate on --device cuda failed. Plain 'cuda' is torch's current device."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert target_device("cuda") == "cuda:1"
    assert target_device("cuda:0") == "cuda:0"
    assert target_device("cuda:3") == "cuda:3"


def test_an_engine_capped_below_the_measured_batch_is_not_applicable() -> None:
    """max_batch_size 8 at a batch of 16 asked TensorRT for an Input range optimized at 16 with a max of 8, which its
    builder refuses (opt above max): the compile failed with TensorRT's words instead of the pass saying why."""
    state = initial_state(get("mlp"))
    reason = why_not(TensorRtConfig(max_batch_size=8), state, PassContext(device="cuda", batch_size=16))
    assert reason == "an engine for batches up to max_batch_size 8 cannot run the batch of 16 it is measured at"
    assert why_not(TensorRtConfig(max_batch_size=16), state, PassContext(device="cpu", batch_size=16)) == (
        "TensorRT needs a CUDA device (target device is cpu)")
