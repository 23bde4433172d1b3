"""Interleaved A/B: measure two callables in alternating paired blocks and decide if B differs from A.

Machine speed drifts (up to 1.7x within half an hour on a shared machine), so two measurements taken one
after the other are not comparable. Here A and B run in blocks A B B A A B ... inside one process; each
pair of adjacent blocks gives one ratio median(B)/median(A), which cancels drift slower than a block.
The verdict uses the 20%-trimmed mean of the log block ratios and Yuen's interval for it (Student's t on the
winsorized variance): a block that stalled (another process took the core for its whole length) is dropped with
the most extreme block at the other end, instead of pulling the estimate and widening the interval as it did
the plain geometric mean (an original-vs-original control read 0.22x-2.58x with 1 stalled block of 6). B is
called faster or slower only when the whole interval lies beyond `min_effect` (default 1%) on that side;
otherwise "no significant difference".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import ConfigError
from dlperf.measure.clock import Clock, CpuClock
from dlperf.measure.stats import Measurement, median, student_t_quantile

FASTER = "faster"
SLOWER = "slower"
SAME = "no significant difference"


@dataclass(frozen=True)
class ABConfig:
    blocks: int = 20
    iters_per_block: int = 5
    warmup_iters: int = 3
    confidence: float = 0.95
    min_effect: float = 0.01
    block_statistic: str = "median"
    """How a block is summed up for its ratio: 'median' of its calls (robust to a stray slow call), or 'mean'
    (its total time: for calls whose times are bimodal by design, such as training steps fed by loader
    workers, where most find a batch ready and some wait, the median flips between the two modes)."""
    settle_s: float = 0.0
    """At each switch between the sides, wait (untimed) up to this long for this process's other threads to stop
    running (`measure.system.wait_until_threads_idle`); 0: no wait. An engine's thread pool spins after its last
    call: ONNX Runtime's worker stays on a core for about 50 ms of CPU, through the whole of the other side's next
    block (in a demo run on 2 cores zoo:digits-cnn's original ran at 0.091 ms a call beside onnxruntime, 0.045 ms
    in its own process, and the ratio read onnxruntime's speedup as 4.34x where each side alone gave 2.15x)."""

    def __post_init__(self) -> None:
        if self.block_statistic not in ("median", "mean"):
            raise ConfigError(f"block_statistic must be 'median' or 'mean', got {self.block_statistic!r}")
        if self.blocks < 4:
            raise ConfigError(f"an A/B needs at least 4 blocks, got {self.blocks}")
        if self.warmup_iters < 0:
            raise ConfigError(f"warmup_iters must be >= 0, got {self.warmup_iters}")
        if self.iters_per_block < 1:
            raise ConfigError("iters_per_block must be >= 1")
        if not 0.5 < self.confidence < 1.0:
            raise ConfigError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if not 0.0 <= self.min_effect < 1.0:
            # decide() calls B faster when the interval lies below 1 - min_effect: a negative one calls a slower B
            # "faster", and one of 1 or more can never call B faster.
            raise ConfigError(f"min_effect must be a fraction in [0, 1), e.g. 0.01 for 1%; got {self.min_effect:g}")
        if not self.settle_s >= 0:
            raise ConfigError(f"settle_s must be >= 0 seconds, got {self.settle_s}")


SETTLE_S = 0.5
"""The wait at each switch of side that an A/B of two engines or thread counts uses (`ABConfig.settle_s`): long enough
for ONNX Runtime's spinning intra-op worker (about 50 ms of CPU, 100-200 ms of wall time on a loaded 2-core machine)
and torch's OpenMP workers (about 10 ms) to go idle; a cap, most switches wait far less."""


@dataclass
class ABResult:
    """B relative to A. `ratio` < 1 means B takes less time (B is faster); speedup = 1/ratio."""

    a: Measurement
    b: Measurement
    block_ratios: list[float]
    ratio: float
    ci: tuple[float, float]
    confidence: float
    verdict: str
    settle_waits_s: list[float] = field(default_factory=list)
    """The untimed waits at the switches between the sides (`ABConfig.settle_s`); empty without them."""

    @property
    def speedup(self) -> float:
        return 1.0 / self.ratio

    @property
    def speedup_ci(self) -> tuple[float, float]:
        return 1.0 / self.ci[1], 1.0 / self.ci[0]

    def __repr__(self) -> str:  # the dataclass's printed every block's ratio and settle wait
        return f"ABResult({self.describe()}; .a, .b, .block_ratios)"

    def describe(self, a_name: str = "A", b_name: str = "B") -> str:
        lo, hi = self.speedup_ci
        return (
            f"{b_name} vs {a_name}: {self.speedup:.2f}x speed ({self.confidence:.0%} CI {lo:.2f}-{hi:.2f}x, "
            f"{len(self.block_ratios)} paired blocks): {self.verdict}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "ci": list(self.ci),
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci),
            "confidence": self.confidence,
            "verdict": self.verdict,
            "block_ratios": self.block_ratios,
            "a": self.a.summary(),
            "b": self.b.summary(),
            **({"settle": self.settle_summary()} if self.settle_waits_s else {}),
        }

    def settle_summary(self) -> dict[str, Any]:
        """How long the switches between the sides waited for the process's other threads to go idle."""
        waits = self.settle_waits_s
        return {"switches": len(waits), "total_s": sum(waits), "max_s": max(waits, default=0.0)}


TRIM = 0.2
"""The fraction of block ratios `decide` drops at each end (rounded down: none below 5 blocks, 1 of 5-9, 2 of 10-14...).
Simulated on this module's synthetic ratios (600 trials each, 5% noise a block unless said): with identical sides
it calls a difference in 1-2% of trials at 6-20 blocks (5.5% at 6 blocks of 20% noise), as the untrimmed
interval did; with one block stalled 3x it keeps that rate, and a real 10% gain at 10 blocks is found in 584 of
600 trials where the geometric mean with Student's t found it in 2; the price is some power at 5-9 blocks without
a stall (a 10% gain at 6 blocks found in 496 trials instead of 573)."""


def _trimmed(n: int) -> int:
    """How many of n block ratios `decide` drops at each end."""
    return int(TRIM * n)


def kept_blocks(block_ratios: list[float]) -> list[int]:
    """The indices, in order, of the blocks whose ratios `decide`'s trimmed estimate keeps (ties broken by index):
    a side's mean log block time over these, B's minus A's, is the log of the estimate, so per-side figures taken
    over them agree with the ratio (`train.tune.paired_rates`)."""
    n = len(block_ratios)
    cut = _trimmed(n)
    by_ratio = sorted(range(n), key=lambda k: (block_ratios[k], k))
    return sorted(by_ratio[cut:n - cut])


def decide(block_ratios: list[float], confidence: float = 0.95,
           min_effect: float = 0.01) -> tuple[float, tuple[float, float], str]:
    """Trimmed geometric-mean ratio, its confidence interval (Yuen's), and the verdict, from per-block ratios B/A.

    The TRIM fraction of the log ratios at each end is dropped for the estimate; for its spread they are set to the
    nearest kept value (winsorized), and the interval is Student's t with (kept - 1) degrees of freedom on that
    spread (Yuen 1974). Without trimming (under 5 blocks) this is Student's t interval of the log ratios' mean.
    """
    if len(block_ratios) < 2:
        raise ValueError("need at least two block ratios")
    logs = sorted(math.log(r) for r in block_ratios)
    n = len(logs)
    cut = _trimmed(n)
    kept = logs[cut:n - cut]
    h = len(kept)
    center = sum(kept) / h
    winsorized = [kept[0]] * cut + kept + [kept[-1]] * cut
    w_mean = sum(winsorized) / n
    w_var = sum((v - w_mean) ** 2 for v in winsorized) / (n - 1)
    alpha = (1 - confidence) / 2
    half = student_t_quantile(1 - alpha, h - 1) * math.sqrt((n - 1) * w_var / (h * (h - 1)))
    lo, hi = math.exp(center - half), math.exp(center + half)
    if hi < 1.0 - min_effect:
        verdict = FASTER
    elif lo > 1.0 + min_effect:
        verdict = SLOWER
    else:
        verdict = SAME
    return math.exp(center), (lo, hi), verdict


def ab_test(
    fn_a: Callable[[], Any],
    fn_b: Callable[[], Any],
    config: ABConfig | None = None,
    clock: Clock | None = None,
    items_per_call: int = 1,
    on_block: Callable[[int, int], None] | None = None,
    *,
    before_a: Callable[[], Any] | None = None,
    before_b: Callable[[], Any] | None = None,
) -> ABResult:
    """Run A and B interleaved in paired blocks (ABBA order) and return the ratio B/A with its verdict.

    `before_a` / `before_b` run, untimed, before each block of A / B (and before their warm-up): the place
    for process-wide settings such as `torch.set_num_threads` that differ between the two sides.
    """
    config = config or ABConfig()
    if not isinstance(config, ABConfig):  # a dict gave "'dict' object has no attribute 'warmup_iters'"
        raise ConfigError(f"config must be a dlperf.ABConfig, got {type(config).__name__}")
    for side, fn in (("A", fn_a), ("B", fn_b)):
        if not callable(fn):
            raise ConfigError(f"side {side} must be a function to call, got {type(fn).__name__}")
    if not isinstance(items_per_call, int) or items_per_call < 1:  # it was refused only after the whole A/B
        raise ConfigError(f"items_per_call must be an integer >= 1, got {items_per_call!r}")
    clock = clock or CpuClock()
    befores = (before_a, before_b)
    for which, fn in ((0, fn_a), (1, fn_b)):
        hook = befores[which]
        if hook is not None:
            hook()
        for _ in range(config.warmup_iters):
            fn()
    a_samples: list[int] = []
    b_samples: list[int] = []
    ratios: list[float] = []
    waits: list[float] = []
    stat = median if config.block_statistic == "median" else statistics.fmean
    try:
        _blocks(fn_a, fn_b, config, clock, befores, stat, on_block, a_samples, b_samples, ratios, waits)
    except KeyboardInterrupt as exc:
        # the paired blocks finished so far go on with the interrupt (`dlperf_measured`), for a caller to keep
        if len(ratios) >= 2:
            partial = _result(a_samples, b_samples, ratios, items_per_call, config, clock, waits)
            exc.dlperf_measured = partial  # type: ignore[attr-defined]
        raise
    return _result(a_samples, b_samples, ratios, items_per_call, config, clock, waits)


def _blocks(fn_a: Callable[[], Any], fn_b: Callable[[], Any], config: ABConfig, clock: Clock,
            befores: tuple[Callable[[], Any] | None, Callable[[], Any] | None], stat: Callable[[list[float]], float],
            on_block: Callable[[int, int], None] | None, a_samples: list[int], b_samples: list[int],
            ratios: list[float], waits: list[float]) -> None:
    """The paired blocks, appended to the three lists as each block completes; with `config.settle_s`, the waits
    for the other side's threads to go idle at each switch of side to `waits`."""
    last = 1  # the warm-up ran B last
    for block in range(config.blocks):
        order = ((0, fn_a), (1, fn_b)) if block % 2 == 0 else ((1, fn_b), (0, fn_a))
        per: list[list[int]] = [[], []]
        for which, fn in order:
            if config.settle_s > 0 and which != last:
                from dlperf.measure.system import wait_until_threads_idle

                waits.append(wait_until_threads_idle(config.settle_s))
            last = which
            hook = befores[which]
            if hook is not None:
                hook()
            for _ in range(config.iters_per_block):
                token = clock.start()
                fn()
                per[which].append(clock.stop(token))
        a_block, b_block = per
        a_samples += a_block
        b_samples += b_block
        ratios.append(stat([float(t) for t in b_block]) / max(stat([float(t) for t in a_block]), 1.0))
        if on_block is not None:
            on_block(block + 1, config.blocks)


def _result(a_samples: list[int], b_samples: list[int], ratios: list[float], items_per_call: int, config: ABConfig,
            clock: Clock, waits: list[float]) -> ABResult:
    ratio, ci, verdict = decide(ratios, config.confidence, config.min_effect)
    return ABResult(
        a=Measurement(a_samples, items_per_call, config.warmup_iters, clock.name, "A"),
        b=Measurement(b_samples, items_per_call, config.warmup_iters, clock.name, "B"),
        block_ratios=ratios,
        ratio=ratio,
        ci=ci,
        confidence=config.confidence,
        verdict=verdict,
        settle_waits_s=list(waits),
    )


STALL_FACTOR = 10.0
"""A median call this many times the fastest, or a mean call this many times the median, says the calls stalled (on
a shared machine a model's OpenMP threads stall on each other's preemption, about 1000x for whole blocks)."""


def stalled_blocks(a_blocks: list[float], b_blocks: list[float]) -> dict[int, tuple[str, float]]:
    """The paired blocks of an A/B where a side stalled, each with the side ('a' or 'b') and how many times its side's
    fastest block it took: a block STALL_FACTOR times that, as `optimize.explain.stalled_timing` judges a row's median
    call against its fastest. Against the fastest, not the median block: where most blocks stalled the median is a
    stalled one."""
    found: dict[int, tuple[str, float]] = {}
    for side, blocks in (("a", a_blocks), ("b", b_blocks)):
        typical = min(float(t) for t in blocks) if blocks else 0.0
        if typical <= 0:
            continue
        for k, t in enumerate(blocks):
            if t >= STALL_FACTOR * typical and (k not in found or t / typical > found[k][1]):
                found[k] = (side, t / typical)
    return dict(sorted(found.items()))


def block_medians(samples_ns: list[int], per_block: int, blocks: int) -> list[float]:
    """Each paired block's median call of one side (`ab_test` appends a side's calls block by block)."""
    return [median([float(t) for t in samples_ns[k * per_block:(k + 1) * per_block]]) for k in range(blocks)]


@dataclass(frozen=True)
class StallJudged:
    """An A/B judged without the paired blocks where a side stalled (`without_stalled_blocks`)."""

    result: ABResult
    """Judged on the other blocks; with none stalled the A/B itself; with too few left it, its verdict SAME."""
    stalled: dict[int, tuple[str, float]]
    """The left-out blocks (0-based) with the side that stalled and by how much (`stalled_blocks`)."""
    over_all: ABResult
    """The A/B over every block, as measured."""

    @property
    def too_few(self) -> bool:
        """Fewer than half the blocks (or 4) left: nothing judged."""
        n = len(self.over_all.block_ratios)
        return bool(self.stalled) and n - len(self.stalled) < max(4, n // 2)

    def left_out(self, names: tuple[str, str] = ("A", "B")) -> str:
        """'5 of 16 blocks left out, a side stalled in them: blocks 1 (baseline 995x), ...' (blocks 1-based)."""
        side_names = {"a": names[0], "b": names[1]}
        where = ", ".join(f"{k + 1} ({side_names[side]} {factor:,.0f}x)" for k, (side, factor) in self.stalled.items())
        return (f"{len(self.stalled)} of {len(self.over_all.block_ratios)} blocks left out, a side stalled in them: "
                f"blocks {where}")

    def note(self, names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
        """What a record keeps of it: the blocks left out, how many there were, where, and the figures over all."""
        every = self.over_all
        return {"blocks": sorted(self.stalled), "of": len(every.block_ratios),
                "where": self.left_out(names).split(": blocks ", 1)[1],
                "all_blocks": {"speedup": every.speedup, "speedup_ci": list(every.speedup_ci),
                               "verdict": every.verdict}}


def without_stalled_blocks(result: ABResult, min_effect: float = 0.01) -> StallJudged:
    """`result` judged without the paired blocks where a side stalled: `decide`'s 20% trim drops 3 blocks an end of
    16 and can keep stalled ones (an onnxruntime winner read "11.38x speed (95% CI 1.07-120.58x): faster", its
    baseline stalled about 1000x in 5 of 16 blocks, where its paired gain was 4.78x). Where fewer than half the blocks
    (or 4) are left, nothing is judged: the result over all blocks with the verdict SAME."""
    n = len(result.block_ratios)
    per = len(result.a.samples_ns) // max(n, 1)
    stalled = stalled_blocks(block_medians(result.a.samples_ns, per, n), block_medians(result.b.samples_ns, per, n))
    judged = StallJudged(result, stalled, result)
    if not stalled:
        return judged
    if judged.too_few:
        return dataclasses.replace(judged, result=dataclasses.replace(result, verdict=SAME))
    kept = [r for k, r in enumerate(result.block_ratios) if k not in stalled]
    ratio, ci, verdict = decide(kept, result.confidence, min_effect)
    return dataclasses.replace(judged, result=dataclasses.replace(result, block_ratios=kept, ratio=ratio, ci=ci,
                                                                  verdict=verdict))
