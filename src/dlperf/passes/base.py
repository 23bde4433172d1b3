"""The pass interface: a frozen config dataclass per optimization, plus an implementation found by config type.

Each pass module may define `search_space(workload, ctx) -> list[PassConfig]`: the configs of that pass
worth trying for this workload; `dlperf.optimize` discovers the modules of this package and builds
pipelines from them, so a new pass is one new module here.

A pipeline is a list of configs applied in order to a `ModelState`. Torch passes transform `state.model`;
an engine pass (ONNX Runtime, OpenVINO, TensorRT) converts it and replaces `state.predict` with the
engine's callable, after which torch passes are no longer applicable. Passes never measure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from dlperf.errors import DlperfError, PassError, PassNotApplicable

if TYPE_CHECKING:
    from torch import nn

    from dlperf.workload.base import Inputs, Predict, Workload


@dataclass(frozen=True)
class PassConfig:
    """Base of every pass config. Subclasses are frozen dataclasses that only validate their fields."""

    name: ClassVar[str] = "pass"
    version: ClassVar[int] = 1
    # Pipelines are ordered by stage: "prepare" (eval mode, threads, layout) -> "transform" (quantize,
    # prune, compile, precision) -> "engine" (convert to ONNX Runtime / OpenVINO / TensorRT; last).
    stage: ClassVar[str] = "transform"
    # True for passes that train (fine-tune, distill, QAT): a torch artifact then saves the trained weights.
    trains: ClassVar[bool] = False
    # True for passes that set the model's numeric precision (int8, bf16/fp16/tf32): each takes an fp32 model, so
    # the search puts at most one in a pipeline.
    sets_precision: ClassVar[bool] = False
    # True for passes whose model has other layers than the one they were given (distill's student; structured
    # pruning's narrower layers): a pass not applicable to the original model may apply after one of them, so the
    # search still builds that pipeline (it skips the others: `optimize.search._worth_extending`).
    changes_modules: ClassVar[bool] = False
    # Order inside a stage (lower first): weight-changing passes (distill, prune, QAT) before quantize and
    # precision, which come before compile. Ties keep discovery order.
    order: ClassVar[int] = 50
    # Fields the search fills in from its own settings (e.g. an int8 pass's metric budget, which is the
    # search's constraint in the metric's units): left out of the label, which the report already heads
    # with the constraints, but kept in `to_dict` and so in the candidate's key.
    label_omits: ClassVar[tuple[str, ...]] = ()
    # Values for fields a config saved before they existed lacks (`optimize.space.config_from_dict`), where the
    # field's default would replay something else: dynamic_int8's `recurrent` (default True) is False for a recipe
    # saved when the pass quantized nn.Linear only.
    saved_defaults: ClassVar[dict[str, Any]] = {}

    def to_dict(self) -> dict[str, Any]:
        return {"pass": self.name, "version": self.version, **dataclasses.asdict(self)}

    def relative_cost(self) -> int:
        """How long building this config takes, before it was ever measured: 0 seconds (a conversion), 1 tens of
        seconds (a compile, a calibration), 2 a minute or two (a calibration repeated by a fallback search,
        training), 3 several minutes (max-autotune, inductor's int8 kernels on a small CPU). The search
        tries cheap candidates first and skips what its time budget cannot fit."""
        return 0

    def before_engine(self) -> str | None:
        """Why an engine pass (ONNX Runtime, OpenVINO, TensorRT) is not worth building after this one; None
        when it is. An engine converts the torch module itself: a pass that changes only how the module is
        called (grad mode, threads, input layout, autocast, a compiled wrapper) gives the same engine model
        as the engine alone, and one that leaves torch-only int8 or half-precision layers leaves nothing
        the engine can convert. The search does not build such pipelines; weight-changing fp32 passes
        (pruning, distillation) return None."""
        return None

    def label(self) -> str:
        """Short human label, e.g. 'onnxruntime(precision=int8-static,keep_fp32=auto)': the fields that differ
        from their defaults, but for those in `label_omits`; tuples joined with '+'."""
        changed = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in self.label_omits or (f.default is not dataclasses.MISSING and value == f.default):
                continue
            changed.append(f"{f.name}={'+'.join(map(str, value)) if isinstance(value, tuple) else value}")
        return f"{self.name}({','.join(changed)})" if changed else self.name


@dataclass(frozen=True)
class PassContext:
    """What a pass may need to know beyond the model: target device, batch size, threads, data."""

    device: str = "cpu"
    batch_size: int = 1
    threads: int | None = None
    cpu_flags: tuple[str, ...] = ()
    calibration_inputs: Callable[[], Iterable[Inputs]] | None = None
    workdir: Path | None = None
    # True when a saved artifact is being rebuilt: passes redo their structural changes but skip training
    # (fine-tuning, distillation, QAT), whose resulting weights the artifact loads afterwards.
    replay: bool = False


@dataclass
class ModelState:
    """A candidate model as passes build it up."""

    workload: Workload
    model: nn.Module | None
    predict: Predict
    engine: str = "torch"
    precision: str = "fp32"
    applied: list[PassConfig] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Writes the artifact in its engine's native format into a folder; returns manifest fields.
    exporter: Callable[[Path], dict[str, Any]] | None = None
    # Extra one-off cost of building this candidate (conversion, compile, training), in seconds.
    build_s: float = 0.0
    # Of build_s, the time spent training (fine-tune, distillation, QAT): not a compile, nor paid again on load.
    train_s: float = 0.0


class PassImpl(Protocol):
    def applicable(self, config: Any, state: ModelState, ctx: PassContext) -> str | None:
        """None when the pass applies; otherwise the reason it does not (shown to the user)."""

    def apply(self, config: Any, state: ModelState, ctx: PassContext) -> ModelState: ...


_REGISTRY: dict[type[PassConfig], PassImpl] = {}


def register(config_type: type[PassConfig]) -> Callable[[type], type]:
    """Class decorator: `@register(MyConfig) class MyPass: ...` makes MyPass implement MyConfig."""

    def deco(impl_cls: type) -> type:
        _REGISTRY[config_type] = impl_cls()
        return impl_cls

    return deco


def implementation(config: PassConfig) -> PassImpl:
    impl = _REGISTRY.get(type(config))
    if impl is None:
        raise PassError(f"no implementation registered for pass config {type(config).__name__}")
    return impl


def registered() -> dict[type[PassConfig], PassImpl]:
    return dict(_REGISTRY)


def why_not(config: PassConfig, state: ModelState, ctx: PassContext) -> str | None:
    return implementation(config).applicable(config, state, ctx)


def apply_pass(config: PassConfig, state: ModelState, ctx: PassContext) -> ModelState:
    """Apply one pass; PassNotApplicable with the reason when it does not apply, PassError on failure."""
    impl = implementation(config)
    reason = impl.applicable(config, state, ctx)
    if reason is not None:
        raise PassNotApplicable(f"{config.label()}: not applicable: {reason}")
    try:
        new_state = impl.apply(config, state, ctx)
    except (PassError, PassNotApplicable):
        raise
    except DlperfError as exc:  # written to be read whole (a workload's error names the user's frame)
        raise PassError(f"{config.label()} failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        from dlperf.passes._engine import first_line

        # a library's, by its first line: a NotImplementedError of a NestedTensor op ran to 50 lines of dispatcher
        # keys in the search's table (the whole text stays on the chained exception)
        text = str(exc).strip()
        said = first_line(text)
        more = " [...]" if said != text and not said.endswith("...") else ""
        raise PassError(f"{config.label()} failed: {type(exc).__name__}: {said}{more}") from exc
    new_state.applied = [*state.applied, config]
    return new_state


def apply_pipeline(configs: Iterable[PassConfig], state: ModelState, ctx: PassContext) -> ModelState:
    for config in configs:
        state = apply_pass(config, state, ctx)
    return state


def initial_state(workload: Workload, device: str = "cpu") -> ModelState:
    model = workload.build_model().eval().to(device)
    return ModelState(workload=workload, model=model, predict=model)
