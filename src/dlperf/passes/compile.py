"""torch.compile (Inductor), default or max-autotune, with weight freezing on CPU; compile time counts.

Compilation is lazy in torch, so `apply` runs the compiled model twice on the example inputs and adds
that time to `state.build_s`: the search charges it against the time budget and reports it. It then calls it
once on other rows of the same shape with Dynamo told to fail rather than recompile (`recompiles_on`): a
model whose code depends on its inputs' values (a `.tolist()` fed to Python arithmetic) would otherwise be
timed on the one input it was compiled for while every new input compiles again (minutes on a busy CPU).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError, PassError
from dlperf.passes._torch_call import torch_call, torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from dlperf.workload.base import Workload

MODES = ("default", "reduce-overhead", "max-autotune")
UNAVAILABLE_REASON = ""
RECOMPILE_MARK = "Detected recompile"
"""How torch's `fail_on_recompile` stance begins its error (a plain RuntimeError in torch 2.6-2.13)."""


@dataclass(frozen=True)
class CompileConfig(PassConfig):
    """mode: a torch.compile mode; freezing: constant-fold the weights into the graph (Inductor, inference)."""

    name: ClassVar[str] = "compile"
    order: ClassVar[int] = 90

    mode: str = "default"
    freezing: bool = False
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"compile: mode must be one of {', '.join(MODES)}, got '{self.mode}'")

    def before_engine(self) -> str | None:
        return "an engine converts the module, not its compiled wrapper"

    def relative_cost(self) -> int:
        return 3 if self.mode == "max-autotune" else 1


def compiler_reason(device: str) -> str | None:
    """Why torch.compile's Inductor cannot build code for `device` here, or None. On the CPU it compiles C++;
    on CUDA it generates Triton kernels, and Triton builds its launcher with a C compiler (CC, gcc or clang)."""
    if not device.startswith("cuda"):
        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return "torch.compile on CPU needs a C++ compiler (g++ or clang++) on PATH"
        return None
    try:
        from torch.utils._triton import has_triton
    except ImportError:  # a torch without this helper: let torch.compile report it
        return None
    if not has_triton():
        return ("torch.compile on CUDA needs Triton (the 'triton' package that matches this torch) and a GPU of "
                "compute capability 7.0 or newer")
    if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")):  # what Triton looks for
        return "torch.compile on CUDA needs a C compiler for Triton's launcher: gcc or clang on PATH, or CC set"
    return None


@register(CompileConfig)
class Compile:
    def applicable(self, config: CompileConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        call = state.predict
        if getattr(call, "compiled", None) is not None:
            return "the model is already compiled"
        if config.mode == "reduce-overhead" and not ctx.device.startswith("cuda"):
            return "mode reduce-overhead uses CUDA graphs: GPU only"
        return compiler_reason(ctx.device)

    def apply(self, config: CompileConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import torch

        if config.freezing:
            import torch._inductor.config as inductor_config

            # Process-wide; the candidate runs in its own process and a loaded artifact sets it again.
            inductor_config.freezing = True
        call = torch_call(state)
        call.compiled = torch.compile(call.model, mode=config.mode, dynamic=config.dynamic or None)
        inputs = state.workload.example_inputs(ctx.batch_size)
        if ctx.device != "cpu":
            from dlperf.measure.bench import to_device

            inputs = to_device(inputs, ctx.device)
        start = time.perf_counter()
        with torch.no_grad():
            call(*inputs)
            call(*inputs)
        compile_s = time.perf_counter() - start
        state.build_s += compile_s
        others = other_inputs(state.workload, ctx.batch_size, ctx.device)
        if others is not None:
            def run_others() -> None:
                with torch.no_grad():
                    call(*others)

            guard = recompiles_on(run_others)
            if guard is not None:
                raise PassError(f"{config.label()}: {recompile_message(guard)}")
        state.notes.append(f"compile ({config.mode}{', freezing' if config.freezing else ''}) took "
                           f"{compile_s:.1f} s")
        return state


def other_inputs(workload: Workload, batch_size: int, device: str = "cpu") -> tuple[Any, ...] | None:
    """Inputs of the same shapes as `workload.example_inputs(batch_size)` but other rows (the second
    `batch_size` of twice as many), on `device`; None where the inputs are not batch-first tensors."""
    try:
        more = workload.example_inputs(2 * batch_size)
        if any(int(x.shape[0]) < 2 * batch_size for x in more):
            return None
        others = tuple(x[batch_size:2 * batch_size].clone() for x in more)
    except (AttributeError, IndexError, TypeError):
        return None
    if device != "cpu":
        from dlperf.measure.bench import to_device

        others = to_device(others, device)
    return others


def recompiles_on(run: Callable[[], Any]) -> str | None:
    """Call `run` (a torch.compile'd model on an input it has not seen, of shapes it has) with Dynamo told to fail
    rather than recompile: the first guard that failed when it would have recompiled, else None. None too where
    this torch cannot tell without compiling (no `torch.compiler.set_stance` before 2.6)."""
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        return None
    try:
        with set_stance("fail_on_recompile"):
            run()
    except RuntimeError as exc:
        if RECOMPILE_MARK not in str(exc):
            raise
        return _first_guard(str(exc))
    return None


def _first_guard(text: str) -> str:
    """The first guard failure of Dynamo's recompile error, its spaces collapsed and its frame/compile numbers
    dropped ('___stack0[0] == -1.19 # s = sum(...) # model.py:7 in forward'), or the error's first line where it
    lists none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "guard failure" in line:
            for guard in lines[i + 1:]:
                if guard.strip().startswith("- "):  # '- 1/0: guard  # source  # file:line in frame'
                    return re.sub(r"^\d+/\d+: ", "", " ".join(guard.strip()[2:].split()))[:300]
    return " ".join(lines[0].split())[:300] if lines else text


def recompile_message(guard: str) -> str:
    return (f"torch.compile recompiles on a second input of the same shape (Dynamo's failed guard: {guard}): the "
            "compiled code depends on the input's values, so a timing on one input would hide a compile for each "
            "new input")


def search_space(workload: Workload, ctx: PassContext) -> list[CompileConfig]:
    global UNAVAILABLE_REASON
    reason = compiler_reason(ctx.device)
    if reason:
        UNAVAILABLE_REASON = reason
        return []
    if ctx.device == "cpu":
        return [CompileConfig(), CompileConfig(freezing=True), CompileConfig(mode="max-autotune", freezing=True)]
    return [CompileConfig(), CompileConfig(mode="max-autotune")]
