"""Per-layer int8 sensitivity and accuracy-driven fallback to fp32 (mixed precision).

Two steps, both measured, nothing hard-coded:
1. `rank_layers` simulates int8 in torch (weights per-output-channel symmetric, activations per-tensor
   asymmetric with ranges from calibration data) and measures, for each layer, how much output fidelity
   the model regains when that layer alone stays fp32 ("leave-one-out", the default) or loses when that
   layer alone is int8 ("one-at-a-time"). The result is a ranking, most sensitive first.
2. `fallback_search` asks the real engine: quantize with the top-k layers kept fp32 for k = 0, 1, 2, 4 ...
   and returns the first k whose metric (the workload's EvalSpec on its selection split, else output fidelity) is
   within budget; `workload_metric` says which data that is.
The int8 engine passes use this when their config says `keep_fp32="auto"`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlperf.errors import PassError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from dlperf.passes.base import ModelState, PassContext
    from dlperf.workload.base import Inputs, Predict

QUANTIZABLE = ("Linear", "Conv1d", "Conv2d", "Conv3d")


@dataclass(frozen=True)
class Metric:
    """How candidates are scored against the budget: `evaluate(predict)`, its baseline on the fp32 model."""

    name: str
    evaluate: Callable[[Predict], float]
    baseline: float
    higher_is_better: bool = True
    data: str = ""  # which data the trials are scored on, for the pass's note

    def drop(self, value: float) -> float:
        """How much worse `value` is than the baseline (positive = worse)."""
        return self.baseline - value if self.higher_is_better else value - self.baseline

    def within(self, value: float, max_drop: float) -> bool:
        return math.isfinite(value) and self.drop(value) <= max_drop + 1e-12


@dataclass(frozen=True)
class LayerScore:
    layer: str
    score: float  # leave-one-out: fidelity regained by keeping it fp32; one-at-a-time: fidelity lost


@dataclass
class SensitivityReport:
    mode: str
    all_int8_fidelity: float
    ranking: list[LayerScore]

    def top(self, k: int) -> tuple[str, ...]:
        return tuple(s.layer for s in self.ranking[:k])

    def describe(self, k: int = 5) -> str:
        head = ", ".join(f"{s.layer} ({s.score:+.4f})" for s in self.ranking[:k])
        return f"int8 sensitivity ({self.mode}, simulated all-int8 fidelity {self.all_int8_fidelity:.4f}): {head}"


@dataclass
class FallbackResult:
    kept_fp32: tuple[str, ...]
    metric: float
    met: bool
    trials: list[tuple[int, float]] = field(default_factory=list)
    artifact: Any = None  # whatever the engine's builder returned for the chosen trial

    def describe(self, metric_name: str, data: str = "") -> str:
        tried = ", ".join(f"{k} fp32 -> {m:.4f}" for k, m in self.trials)
        verdict = "budget met" if self.met else "budget NOT met"
        chosen = f"; chosen on {data}" if data else ""
        return (f"mixed precision: {len(self.kept_fp32)} layer(s) kept fp32, {metric_name} {self.metric:.4f} "
                f"({verdict}; tried {tried}{chosen})")


# ----------------------------------------------------------------------------------------------- metrics


def cosine_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of each row (sample) of two outputs, flattened after dim 0."""
    import torch

    a = a.reshape(a.shape[0], -1).double()
    b = b.reshape(b.shape[0], -1).double()
    return torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12)


def _first(out: Any) -> torch.Tensor:
    """The first tensor of a model's output: the tensor itself, the first of a tuple or list, the first value of a
    dict (a Hugging Face `ModelOutput` too: a transformer's `last_hidden_state`)."""
    if isinstance(out, dict):
        return _first(next(iter(out.values())))
    return out[0] if isinstance(out, (tuple, list)) else out


def output_fidelity(reference: Predict, samples: Sequence[Inputs], batch: int = 16) -> Callable[[Predict], float]:
    """evaluate(predict) -> mean cosine similarity of predict's outputs to `reference`'s on `samples`."""
    import torch

    batches = stack_samples(samples, batch)
    with torch.inference_mode():
        refs = [_first(reference(*b)).float() for b in batches]

    def evaluate(predict: Predict) -> float:
        sims = []
        with torch.inference_mode():
            for b, r in zip(batches, refs, strict=False):
                sims.append(cosine_rows(_first(predict(*b)).float(), r))
        return float(torch.cat(sims).mean())

    return evaluate


def stack_samples(samples: Sequence[Inputs], batch: int) -> list[Inputs]:
    """Single-sample inputs -> batches of up to `batch` (concatenated on dim 0)."""
    import torch

    out = []
    for i in range(0, len(samples), batch):
        chunk = samples[i : i + batch]
        out.append(tuple(torch.cat([s[j] for s in chunk]) for j in range(len(chunk[0]))))
    return out


SELECTION_DATA = ("the workload's selection split (EvalSpec.selection_evaluate), not the eval data the metric is "
                  "judged on")


def workload_metric(state: ModelState, ctx: PassContext, heldout: int = 32) -> Metric:
    """What a pass that chooses by the metric scores its trials on: the workload's metric on its selection split
    (`EvalSpec.selection_evaluate`), never on the eval data the search then judges the candidate by, where the
    workload has one; else the eval metric itself (a choice fitted to the data that judges it: `data` says so);
    without an eval metric, output fidelity (mean cosine vs fp32) on inputs neither the search's held-out fidelity
    nor the default calibration uses: the first `heldout` rows of one `example_inputs(heldout)` (`selection_rows`;
    the search's are rows 32 and on of a larger batch, and the calibration rows come after those). Batch sizes 9, 10
    ..., used before, all began with the same rows for a `make_inputs` that seeds its own generator: the "32
    inputs" were 11 distinct rows. A factory that refuses so large a batch gets those growing batches, and the note
    says how many of the rows differ."""
    from dlperf.passes._engine import distinct_rows, example_rows, selection_rows

    wl = state.workload
    if wl.eval is not None:
        # through Workload.score, as every other metric: an evaluate that raises or returns no number is named
        # with the user's frame (these passes build CPU engines: inputs stay on the host)
        if wl.eval.selection_evaluate is not None:
            return Metric(wl.eval.metric_name, wl.score_selection, wl.score_selection(state.predict),
                          wl.eval.higher_is_better, SELECTION_DATA)
        return Metric(wl.eval.metric_name, wl.score, wl.score(state.predict), wl.eval.higher_is_better,
                      "the eval data, which then judges the candidate too (its EvalSpec has no selection_evaluate): "
                      "the candidate's metric may be optimistic")
    # Not the calibration rows (rows past the search's held-out ones, `_engine.example_rows`), nor the search's.
    rows = selection_rows(heldout)
    samples = example_rows(wl, len(rows), first=rows.start, first_batch_size=9)
    evaluate = output_fidelity(state.predict, samples)
    distinct = distinct_rows(samples)
    what = (f"{len(samples)} distinct inputs (rows {rows.start} to {rows.start + len(samples) - 1} of the example "
            "inputs)" if distinct == len(samples) else
            f"{len(samples)} inputs of which only {distinct} differ (the workload's example inputs repeat rows)")
    return Metric("fidelity", evaluate, 1.0, True,
                  f"output fidelity on {what}, not the held-out inputs the search judges fidelity on nor the "
                  "calibration rows")


# ------------------------------------------------------------------------------------- simulated int8


def quantizable_layers(model: nn.Module) -> list[str]:
    """Names of the modules int8 engines quantize (Linear, Conv), in model order."""
    return [n for n, m in model.named_modules() if n and type(m).__name__ in QUANTIZABLE]


def layer_group(name: str) -> str:
    """'encoder.layer.3.output.dense' -> 'encoder.layer.*.output.dense' (the layer's role in each block)."""
    return re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", name)


def _fake_quant_weight(w: torch.Tensor) -> torch.Tensor:
    import torch

    flat = w.reshape(w.shape[0], -1)
    scale = flat.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.clamp(torch.round(flat / scale[:, None]), -127, 127)
    return (q * scale[:, None]).reshape(w.shape)


def _fake_quant_act(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    import torch

    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-12) / 255.0
    zp = round(-lo / scale)
    q = torch.clamp(torch.round(x / scale) + zp, 0, 255)
    return (q - zp) * scale


def activation_ranges(
    model: nn.Module, layers: Sequence[str], samples: Sequence[Inputs]
) -> dict[str, tuple[float, float]]:
    """Min/max of each layer's input over the calibration samples."""
    import torch

    mods = dict(model.named_modules())
    ranges: dict[str, tuple[float, float]] = {}
    handles = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(_m: Any, args: tuple[Any, ...]) -> None:
            x = args[0]
            lo, hi = float(x.min()), float(x.max())
            old = ranges.get(name)
            ranges[name] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

        return hook

    for name in layers:
        handles.append(mods[name].register_forward_pre_hook(hook_for(name)))
    try:
        with torch.inference_mode():
            for b in stack_samples(samples, 16):
                model(*b)
    finally:
        for h in handles:
            h.remove()
    return ranges


@contextlib.contextmanager
def simulated_int8(model: nn.Module, layers: Sequence[str], ranges: dict[str, tuple[float, float]]) -> Iterator[None]:
    """Within the block, `layers` compute with int8-rounded weights and input activations."""

    mods = dict(model.named_modules())
    saved: list[tuple[Any, torch.Tensor]] = []
    handles = []
    try:
        for name in layers:
            m = mods[name]
            w = m.weight
            saved.append((m, w.data))
            w.data = _fake_quant_weight(w.data)
            lo, hi = ranges.get(name, (-1.0, 1.0))
            handles.append(m.register_forward_pre_hook(
                lambda _m, args, lo=lo, hi=hi: (_fake_quant_act(args[0], lo, hi), *args[1:])
            ))
        yield
    finally:
        for h in handles:
            h.remove()
        for m, data in saved:
            m.weight.data = data


def rank_layers(
    model: nn.Module,
    samples: Sequence[Inputs],
    layers: Sequence[str] | None = None,
    mode: str = "leave-one-out",
    eval_samples: int = 32,
) -> SensitivityReport:
    """Rank `layers` (default: every Linear/Conv) by their int8 sensitivity, most sensitive first.

    Calibrates activation ranges on `samples`, then scores output fidelity (mean cosine vs the fp32 model)
    on up to `eval_samples` of them with simulated int8.
    """
    if mode not in ("leave-one-out", "one-at-a-time"):
        raise PassError(f"sensitivity mode must be 'leave-one-out' or 'one-at-a-time', got {mode!r}")
    layers = list(layers) if layers is not None else quantizable_layers(model)
    if not layers:
        return SensitivityReport(mode, 1.0, [])
    with _unfused_attention():
        ranges = activation_ranges(model, layers, samples)
        evaluate = output_fidelity(model, samples[:eval_samples])
        with simulated_int8(model, layers, ranges):
            all_int8 = evaluate(model)
        scores = []
        for name in layers:
            if mode == "leave-one-out":
                with simulated_int8(model, [n for n in layers if n != name], ranges):
                    scores.append(LayerScore(name, evaluate(model) - all_int8))
            else:
                with simulated_int8(model, [name], ranges):
                    scores.append(LayerScore(name, 1.0 - evaluate(model)))
    scores.sort(key=lambda s: s.score, reverse=True)
    return SensitivityReport(mode, all_int8, scores)


@contextlib.contextmanager
def _unfused_attention() -> Iterator[None]:
    """nn.MultiheadAttention's fast path (nn.TransformerEncoder in eval mode without gradients) off for the block:
    it runs a layer's projections inside one fused operator, on nested tensors where a padding mask is given, so
    the hooks on its Linear modules saw nested tensors ('Could not run aten::min ... NestedTensorCPU', and every
    keep_fp32="auto" candidate of such a model failed) or never ran. The layers compute the same without it."""
    import torch

    mha = getattr(torch.backends, "mha", None)
    if mha is None or not hasattr(mha, "set_fastpath_enabled"):
        yield
        return
    before = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(before)


# ---------------------------------------------------------------------------------- fallback search


def fallback_schedule(n_layers: int, max_trials: int) -> list[int]:
    """How many top-ranked layers to keep fp32 in successive trials: 0, 1, 2, 4, 8 ... (at most n)."""
    ks, k = [0], 1
    while k <= n_layers and len(ks) < max_trials:
        ks.append(k)
        k *= 2
    if ks[-1] != n_layers and len(ks) < max_trials and n_layers > 0:
        ks.append(n_layers)
    return ks


def fallback_search(
    ranking: Sequence[str],
    build: Callable[[tuple[str, ...]], tuple[Predict, Any]],
    metric: Metric,
    max_drop: float,
    max_trials: int = 5,
) -> FallbackResult:
    """Build with the top-k ranked layers in fp32 for growing k; stop at the first within budget.

    `build(kept_fp32) -> (predict, artifact)`. When no trial meets the budget, the result is the trial with
    the best metric, marked `met=False`.
    """
    trials: list[tuple[int, float]] = []
    best: FallbackResult | None = None
    for k in fallback_schedule(len(ranking), max_trials):
        kept = tuple(ranking[:k])
        predict, artifact = build(kept)
        value = float(metric.evaluate(predict))
        trials.append((k, value))
        met = metric.within(value, max_drop)
        if best is None or met or -metric.drop(value) > -metric.drop(best.metric):
            best = FallbackResult(kept, value, met, artifact=artifact)
        if met:
            break
    assert best is not None
    best.trials = trials
    return best
