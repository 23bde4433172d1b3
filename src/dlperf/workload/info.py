"""What a workload is, in numbers: parameters, their bytes, FLOPs per sample, metric and kind."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dlperf.workload.base import Workload


@dataclass(frozen=True)
class WorkloadInfo:
    """Static facts about a workload's model.

    `parameter_bytes` counts parameters and buffers (as measure.memory.parameter_bytes does);
    `flops_per_sample` is one forward pass at batch 1.
    """

    name: str
    source: str
    kind: str
    summary: str
    params: int
    parameter_bytes: int
    flops_per_sample: int
    metric_name: str | None
    higher_is_better: bool | None
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def count_flops(model: Any, inputs: tuple[Any, ...]) -> int:
    """FLOPs of one forward pass (torch.utils.flop_counter; a multiply-add counts as 2).

    Attention runs on SDPA's math backend while counting: the fused CPU kernels have no FLOP formula and
    would be counted as zero. Only matmul/conv/attention-like ops are counted (elementwise ops are not).
    """
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), counter:
        model(*inputs)
    return int(counter.get_total_flops())


def describe(workload: Workload) -> WorkloadInfo:
    """Build the workload's model once and report its size and FLOPs per sample (at batch 1)."""
    model = workload.build_model().eval()
    inputs = workload.example_inputs(1)
    workload.check(model, inputs)
    params = sum(p.numel() for p in model.parameters())
    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    spec = workload.eval
    return WorkloadInfo(
        name=workload.name,
        source=workload.source,
        kind=workload.kind,
        summary=workload.description,
        params=int(params),
        parameter_bytes=int(size),
        flops_per_sample=count_flops(model, inputs),
        metric_name=spec.metric_name if spec is not None else None,
        higher_is_better=spec.higher_is_better if spec is not None else None,
        input_names=tuple(workload.input_names),
        output_names=tuple(workload.output_names),
    )



@dataclass(frozen=True)
class ZooEntry:
    """One built-in workload for `dlperf zoo`: its info, or why it cannot be built here (a missing extra)."""

    spec: str
    summary: str
    info: WorkloadInfo | None
    unavailable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.info is not None:
            return {**self.info.to_dict(), "unavailable": None}
        return {"name": self.spec.removeprefix("zoo:").split("?")[0], "source": self.spec, "summary": self.summary,
                "unavailable": self.unavailable}


def describe_zoo(names: list[str] | None = None) -> list[ZooEntry]:
    """describe() each zoo workload (all by default; a name may carry options, 'minilm?seq_len=64').

    A workload whose optional dependency is missing is listed as unavailable with the install hint, so the
    listing works on a base install; any other error propagates.
    """
    import importlib

    from dlperf.errors import MissingDependency
    from dlperf.workload import zoo
    from dlperf.workload.loader import load_workload

    entries = []
    for name in names if names is not None else zoo.names():
        spec = name if name.startswith("zoo:") else f"zoo:{name}"
        try:
            workload = load_workload(spec)
            entries.append(ZooEntry(spec, workload.description, describe(workload)))
        except MissingDependency as exc:
            module = zoo.ZOO[spec.removeprefix("zoo:").split("?")[0]]
            summary = str(getattr(importlib.import_module(f"dlperf.workload.zoo.{module}"), "SUMMARY", ""))
            entries.append(ZooEntry(spec, summary, None, str(exc)))
    return entries
