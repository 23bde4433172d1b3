"""torch.compile pass: compiles, counts compile time, keeps outputs. Slow: Inductor compiles C++ here."""

from __future__ import annotations

import shutil

import pytest
import torch

from dlperf.errors import PassError
from dlperf.passes.base import PassContext, apply_pass, initial_state, why_not
from dlperf.passes.compile import CompileConfig, recompiles_on, search_space
from dlperf.passes.hygiene import HygieneConfig

from .torch_models import mlp_workload, value_dependent_workload

pytestmark = [pytest.mark.unit]

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="Inductor on CPU needs g++")


def test_compile_config_validation_and_space() -> None:
    with pytest.raises(Exception, match="mode must be one of"):
        CompileConfig(mode="fast")
    space = search_space(mlp_workload(), PassContext())
    if shutil.which("g++"):
        assert CompileConfig(freezing=True) in space
    state = initial_state(mlp_workload())
    assert "GPU only" in (why_not(CompileConfig(mode="reduce-overhead"), state, PassContext()) or "")


def test_compile_on_cuda_needs_triton_and_a_c_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """Inductor on CUDA writes Triton kernels; Triton builds its launcher with CC, gcc or clang. The check reads
    the environment: Triton's presence from torch's own helper (patched here: this machine has no GPU)."""
    import torch.utils._triton as triton_helper

    from dlperf.passes.compile import compiler_reason

    monkeypatch.setattr(triton_helper, "has_triton", lambda: False)
    assert "needs Triton" in (compiler_reason("cuda") or "")
    monkeypatch.setattr(triton_helper, "has_triton", lambda: True)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler on it
    assert "C compiler" in (compiler_reason("cuda:1") or "")
    assert "C++ compiler" in (compiler_reason("cpu") or "")
    monkeypatch.setenv("CC", "/opt/cc")
    assert compiler_reason("cuda") is None


@pytest.mark.slow
@needs_compiler
def test_compile_keeps_outputs_and_counts_compile_time() -> None:
    torch._dynamo.reset()
    state = initial_state(mlp_workload())
    inputs = state.workload.example_inputs(2)
    with torch.no_grad():
        ref = state.model(*inputs)  # type: ignore[misc]
    state = apply_pass(HygieneConfig(), state, PassContext(batch_size=2))
    state = apply_pass(CompileConfig(), state, PassContext(batch_size=2))
    assert state.build_s > 0
    assert any("compile (default) took" in n for n in state.notes)
    out = state.predict(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert "already compiled" in (why_not(CompileConfig(), state, PassContext()) or "")
    torch._dynamo.reset()


@pytest.mark.slow
@needs_compiler
def test_a_model_that_would_recompile_for_each_new_input_fails_the_pass_naming_the_guard() -> None:
    """Timed on the one input it was compiled for, such a model looked 2.24x faster; each new input then compiled
    again (the first had not returned after 145 s). The pass now calls it once on other rows, with Dynamo told
    to fail rather than recompile, and fails with the guard and the line it came from."""
    torch._dynamo.reset()
    state = apply_pass(HygieneConfig(), initial_state(value_dependent_workload()), PassContext(batch_size=2))
    with pytest.raises(PassError, match="recompiles on a second input of the same shape") as caught:
        apply_pass(CompileConfig(), state, PassContext(batch_size=2))
    assert "math.tanh" in str(caught.value)  # the source line of the failed guard
    torch._dynamo.reset()


def test_an_error_that_is_not_a_recompile_is_raised_as_it_is() -> None:
    def broken() -> None:
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        recompiles_on(broken)
    assert recompiles_on(lambda: None) is None
