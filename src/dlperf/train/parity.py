"""Loss parity: a tuned configuration must train like the baseline, not just run faster.

Both configurations train from the same seed (same initial weights, same data order: the loader is built
right after `loop.seed_everything(seed)`, which seeds torch's, Python's and NumPy's generators) for the same
number of optimizer steps over the same samples; the mean loss over the second half of the steps must stay
within `rtol` (relative) + `atol` of the baseline's.
A non-finite loss always fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dlperf.errors import ConfigError
from dlperf.train.loop import StepConfig, TrainLoop
from dlperf.workload.base import Workload

DEFAULT_STEPS = 16
DEFAULT_RTOL = 0.05


@dataclass(frozen=True)
class ParityConfig:
    steps: int = DEFAULT_STEPS
    rtol: float = DEFAULT_RTOL
    atol: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise ConfigError(f"the loss-parity check needs at least 2 steps, got {self.steps}")
        if self.rtol < 0 or self.atol < 0:
            raise ConfigError("parity tolerances must be >= 0")


@dataclass
class ParityResult:
    """The candidate's loss curve against the baseline's; `ok` when the tail means agree within tolerance."""

    baseline_losses: list[float]
    candidate_losses: list[float]
    baseline_tail_mean: float
    candidate_tail_mean: float
    relative_difference: float
    tolerance: float
    """Allowed absolute difference of the tail means: rtol * |baseline tail mean| + atol."""
    ok: bool

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (f"loss parity {verdict}: tail mean {self.candidate_tail_mean:.4g} vs baseline "
                f"{self.baseline_tail_mean:.4g} ({self.relative_difference:+.1%}, allowed "
                f"±{self.tolerance:.3g})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "baseline_tail_mean": self.baseline_tail_mean,
            "candidate_tail_mean": self.candidate_tail_mean,
            "relative_difference": self.relative_difference,
            "tolerance": self.tolerance,
            "baseline_losses": self.baseline_losses,
            "candidate_losses": self.candidate_losses,
        }


def loss_curve(workload: Workload, config: StepConfig, steps: int = DEFAULT_STEPS, seed: int = 0) -> list[float]:
    """The loss of each of `steps` optimizer steps, training from `seed`."""
    loop = TrainLoop(workload, config, seed=seed)
    try:
        return [float(loop.step()) for _ in range(steps)]
    finally:
        loop.close()


def tail_mean(losses: list[float]) -> float:
    tail = losses[len(losses) // 2:]
    return sum(tail) / len(tail)


FROZEN_LR_SCALE = 1e-9
"""The learning-rate scale of the candidate that does not train, which `blind_reason` checks parity against."""


def frozen_curve(workload: Workload, baseline: StepConfig, config: ParityConfig) -> list[float]:
    """The loss curve of the baseline with its learning rate scaled by FROZEN_LR_SCALE: the same batches seen by a
    model that does not train."""
    frozen = baseline.replace(lr_scale=baseline.lr_scale * FROZEN_LR_SCALE)
    return loss_curve(workload, frozen, config.steps, config.seed)


def blind_reason(baseline: list[float], frozen: list[float], rtol: float = DEFAULT_RTOL,
                 atol: float = 0.0) -> str | None:
    """Why loss parity cannot tell a candidate that stops training from the baseline, or None.

    `frozen` is the loss curve of a model that does not train (`frozen_curve`): when it passes parity against the
    baseline, so would any candidate that broke training, and parity vouches for nothing (zoo:mlp's random labels:
    the baseline's tail mean 2.304, the frozen model's 2.302, against a tolerance of 0.115).
    """
    if not all(math.isfinite(x) for x in baseline):
        return None
    check = compare_losses(baseline, frozen, rtol, atol)
    if not check.ok:
        return None
    return (f"a model that does not train at all (learning rate x{FROZEN_LR_SCALE:g}) passes it too: tail mean "
            f"{check.candidate_tail_mean:.4g} vs the baseline's {check.baseline_tail_mean:.4g} "
            f"({check.relative_difference:+.1%}, allowed ±{check.tolerance:.3g}), as the baseline's loss hardly falls "
            f"over the {len(baseline)} parity steps; so it vouches for no candidate here: raise --parity-steps, or "
            "tune on data the model learns from")


def compare_losses(baseline: list[float], candidate: list[float], rtol: float = DEFAULT_RTOL,
                   atol: float = 0.0) -> ParityResult:
    """Judge a candidate's loss curve against the baseline's (same length, same seed)."""
    if len(baseline) != len(candidate) or not baseline:
        raise ConfigError(f"loss curves of different lengths: {len(baseline)} vs {len(candidate)}")
    base = tail_mean(baseline)
    cand = tail_mean(candidate)
    tolerance = rtol * abs(base) + atol
    finite = all(math.isfinite(x) for x in candidate)
    diff = cand - base if finite else math.inf
    relative = diff / abs(base) if base != 0 else (0.0 if diff == 0 else math.inf)
    return ParityResult(baseline, candidate, base, cand, relative, tolerance, finite and abs(diff) <= tolerance)


def check_parity(workload: Workload, baseline: StepConfig, candidate: StepConfig,
                 config: ParityConfig | None = None,
                 baseline_losses: list[float] | None = None) -> ParityResult:
    """Train both from the same seed for the same steps and compare (pass `baseline_losses` to reuse them).

    The baseline and candidate must see the same samples per step: their effective batch must match.
    """
    config = config or ParityConfig()
    if baseline.effective_batch_size != candidate.effective_batch_size:
        raise ConfigError(
            f"loss parity needs the same effective batch: baseline {baseline.effective_batch_size}, "
            f"candidate {candidate.effective_batch_size}"
        )
    base = baseline_losses or loss_curve(workload, baseline, config.steps, config.seed)
    cand = loss_curve(workload, candidate, config.steps, config.seed)
    return compare_losses(base, cand, config.rtol, config.atol)
