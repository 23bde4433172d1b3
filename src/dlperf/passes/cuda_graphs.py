"""CUDA graphs: capture one call of the model on static input buffers and replay it (GPU only).

Removes per-kernel launch overhead, which dominates small batches on a GPU. The graph is captured for
the exact input shapes of the candidate's batch size; another shape falls back to the eager model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlperf.errors import ConfigError
from dlperf.passes._torch_call import torch_reason
from dlperf.passes.base import ModelState, PassConfig, PassContext, register

if TYPE_CHECKING:
    from dlperf.workload.base import Workload

UNAVAILABLE_REASON = "CUDA graphs need a CUDA device (--device cuda)"


@dataclass(frozen=True)
class CudaGraphsConfig(PassConfig):
    name: ClassVar[str] = "cuda_graphs"
    order: ClassVar[int] = 95

    warmup_iters: int = 3

    def __post_init__(self) -> None:
        if self.warmup_iters < 1:
            raise ConfigError(f"cuda_graphs: warmup_iters must be >= 1, got {self.warmup_iters}")

    def before_engine(self) -> str | None:
        return "an engine converts the module, not its captured graph"


class GraphedCall:
    """Replays a captured CUDA graph when the inputs match the captured shapes, else calls eagerly."""

    def __init__(self, fallback: Any, graph: Any, static_inputs: tuple[Any, ...], static_output: Any) -> None:
        self.fallback = fallback
        self.graph = graph
        self.static_inputs = static_inputs
        self.static_output = static_output
        self.model = getattr(fallback, "model", None)
        self.compiled = getattr(fallback, "compiled", None)

    def __call__(self, *inputs: Any) -> Any:
        import torch

        if len(inputs) != len(self.static_inputs) or any(
            not isinstance(x, torch.Tensor) or x.shape != s.shape or x.dtype != s.dtype or x.device != s.device
            for x, s in zip(inputs, self.static_inputs, strict=False)
        ):
            return self.fallback(*inputs)
        for dst, src in zip(self.static_inputs, inputs, strict=False):
            dst.copy_(src)
        self.graph.replay()
        return _clone(self.static_output)


def _clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


GRAPHING_MODES = ("reduce-overhead", "max-autotune")
"""torch.compile modes whose Inductor output replays CUDA graphs itself (its `triton.cudagraphs` option)."""


@register(CudaGraphsConfig)
class CudaGraphs:
    def applicable(self, config: CudaGraphsConfig, state: ModelState, ctx: PassContext) -> str | None:
        reason = torch_reason(state)
        if reason:
            return reason
        if not ctx.device.startswith("cuda"):
            return UNAVAILABLE_REASON
        import torch

        if not torch.cuda.is_available():
            return "torch.cuda.is_available() is False"
        if isinstance(state.predict, GraphedCall):
            return "the model is already captured in a CUDA graph"
        compiled = [c for c in state.applied if c.name == "compile" and getattr(c, "mode", "") in GRAPHING_MODES]
        if compiled:
            return f"torch.compile mode '{compiled[0].mode}' already runs the model as CUDA graphs"  # type: ignore[attr-defined]
        return None

    def apply(self, config: CudaGraphsConfig, state: ModelState, ctx: PassContext) -> ModelState:
        import torch

        from dlperf.measure.bench import to_device

        fallback = state.predict
        inputs = to_device(state.workload.example_inputs(ctx.batch_size), ctx.device)
        static_inputs = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)
        start = time.perf_counter()
        with torch.cuda.device(torch.device(ctx.device)):  # streams and the capture on the model's GPU
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                for _ in range(config.warmup_iters):
                    fallback(*static_inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), torch.no_grad():
                static_output = fallback(*static_inputs)
            torch.cuda.synchronize()
        state.build_s += time.perf_counter() - start
        state.predict = GraphedCall(fallback, graph, static_inputs, static_output)
        state.notes.append(f"CUDA graph captured for batch {ctx.batch_size}")
        return state


def search_space(workload: Workload, ctx: PassContext) -> list[CudaGraphsConfig]:
    if not ctx.device.startswith("cuda"):
        return []
    return [CudaGraphsConfig()]
