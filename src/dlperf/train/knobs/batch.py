"""Largest micro-batch that fits, then gradient accumulation to keep the effective batch the user asked for.

On CUDA a trial step runs for real: an out-of-memory error, or a peak allocation (plus the safety margin)
above the budget, means "does not fit". On CPU nothing fails before the machine swaps, so the step's
footprint is counted from its tensors: parameters, gradients, optimizer state, the batch and every tensor
saved for backward (deduplicated by storage), and the batches a loader's workers hold queued. RSS is not used
for the search because the allocator keeps freed memory, so it only grows from one trial to the next. The
search is Lightning's: the user's batch is tried first; if it does not fit, a binary search finds the largest
that does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import TrainError
from dlperf.measure.memory import cuda_peak, cuda_release_cached, cuda_reset_peak
from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig, TrainLoop, checkpointed_blocks
from dlperf.workload.base import Workload

FitFn = Callable[[int], tuple[bool, int]]
"""fits(batch) -> (fits, footprint bytes); the footprint is 0 when unknown (an OOM)."""


@dataclass
class BatchSearch:
    """The search's probes and its answer."""

    budget_bytes: int
    margin: float
    probes: list[tuple[int, int, bool]] = field(default_factory=list)
    """(batch, footprint bytes, fits) in the order tried."""
    largest_fitting: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"budget_bytes": self.budget_bytes, "margin": self.margin, "largest_fitting": self.largest_fitting,
                "probes": [list(p) for p in self.probes]}


def step_footprint_bytes(workload: Workload, config: StepConfig, seed: int = 0) -> int:
    """Bytes one training step holds at its peak, counted from tensors (CPU; see the module docstring).

    With activation checkpointing, each checkpointed block keeps only its inputs until backward, then
    recomputes its activations there, one block at a time: the count is what the other modules save, plus
    the blocks' inputs, plus the largest block's own activations. The step is run without checkpointing so
    that every block's saved tensors can be attributed to it (checkpointing hides them from the hooks).
    """
    import torch

    loop = TrainLoop(workload, config.replace(accumulation_steps=1, num_workers=0, prefetch_factor=None,
                                              persistent_workers=False, compile=False, checkpointing=False),
                     seed=seed)
    blocks = checkpointed_blocks(loop.model) if config.checkpointing else []
    # outside: storages kept until backward (saved outside the blocks, and the blocks' inputs);
    # inside[i]: what block i saves, which with checkpointing lives only while backward recomputes it
    outside: dict[int, int] = {}
    inside: list[dict[int, int]] = [{} for _ in blocks]
    current: list[int | None] = [None]

    def keep(t: torch.Tensor, into: dict[int, int]) -> None:
        storage = t.untyped_storage()
        into[storage.data_ptr()] = storage.nbytes()

    def pack(t: torch.Tensor) -> torch.Tensor:
        keep(t, outside if current[0] is None else inside[current[0]])
        return t

    def enter(i: int) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            for t in _tensors(args):
                keep(t, outside)
            current[0] = i
        return hook

    def leave(module: Any, args: Any, output: Any) -> None:
        current[0] = None

    handles = [h for i, block in enumerate(blocks)
               for h in (block.register_forward_pre_hook(enter(i)), block.register_forward_hook(leave))]
    fetched: list[Any] = []  # the batch the step runs on
    next_batch = loop.next_batch

    def fetch() -> Any:
        fetched.append(next_batch())
        return fetched[-1]

    loop.next_batch = fetch  # type: ignore[method-assign]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loop.step()
    finally:
        for handle in handles:
            handle.remove()
    params = [p for p in loop.model.parameters()]
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    grad_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state_bytes = sum(_tensor_bytes(s) for s in loop.optimizer.state.values())
    # counted once: backward saves the weights and the batch too (a Linear saves its weight and its input), which
    # are counted above; counted again they made zoo:mlp's batch 61 need 1.11 MB where it needs 0.84
    weights = {p.untyped_storage().data_ptr() for p in params}
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in params + _tensors(fetched)}
    batch_bytes = sum(n for ptr, n in held.items() if ptr not in weights)
    # with workers, up to num_workers x prefetch_factor more batches wait in the loader's queue (shared memory the
    # main process maps): they grow with the batch, unlike the workers' own memory (see `queued_batches`)
    batch_bytes *= 1 + queued_batches(config)
    loop.close()
    saved = {ptr: n for ptr, n in outside.items() if ptr not in held}
    recomputed = max((sum(n for ptr, n in block.items() if ptr not in outside and ptr not in held)
                      for block in inside), default=0)
    return param_bytes + grad_bytes + state_bytes + batch_bytes + sum(saved.values()) + recomputed


def queued_batches(config: StepConfig) -> int:
    """Batches a loader with workers holds ready besides the one being trained on: `prefetch_factor` (DataLoader's
    default 2) per worker. The workers' own memory (a forked copy of the process, touched pages of the dataset)
    does not depend on the batch, so it is not part of a step's footprint: `dlperf train` reports it."""
    if not config.num_workers:
        return 0
    return config.num_workers * (config.prefetch_factor or 2)


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _tensor_bytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def cuda_fits(workload: Workload, config: StepConfig, budget_bytes: int, margin: float) -> FitFn:
    """A CUDA probe: run two steps at the batch; an OOM or a peak above budget / (1 + margin) does not fit. The peak
    is the probe's own, above what the device held before it: the tuner keeps its best configuration's loop (the
    model's weights and optimizer state) alive meanwhile, which the allocator's peak counted as the probe's, so the
    largest batch found was too small by that much."""
    import torch

    def fits(batch: int) -> tuple[bool, int]:
        cuda_reset_peak(config.device, release_cached=True)  # the cache of the probe's device, not the current one
        held = torch.cuda.memory_allocated(torch.device(config.device))
        loop = None
        try:
            loop = TrainLoop(workload, config.replace(batch_size=batch, accumulation_steps=1), seed=0)
            for _ in range(2):
                loop.step()
            peak = max(0, cuda_peak(config.device).max_allocated_bytes - held)
        except torch.cuda.OutOfMemoryError:
            return False, 0
        finally:
            if loop is not None:
                loop.close()
            del loop
            cuda_release_cached(config.device)
        return peak * (1 + margin) <= budget_bytes, peak

    return fits


def cpu_fits(workload: Workload, config: StepConfig, budget_bytes: int, margin: float) -> FitFn:
    def fits(batch: int) -> tuple[bool, int]:
        footprint = step_footprint_bytes(workload, config.replace(batch_size=batch))
        return footprint * (1 + margin) <= budget_bytes, footprint

    return fits


def search_largest_batch(fits: FitFn, wanted: int, budget_bytes: int, margin: float, smallest: int = 1) -> BatchSearch:
    """Try `wanted`; if it does not fit, binary-search [smallest, wanted) for the largest batch that does (0: none
    does). `smallest` is 2 for a model that normalizes over the batch, which cannot train on one sample."""
    search = BatchSearch(budget_bytes, margin)

    def probe(batch: int) -> bool:
        ok, footprint = fits(batch)
        search.probes.append((batch, footprint, ok))
        return ok

    if probe(wanted):
        search.largest_fitting = wanted
        return search
    lo, hi = smallest - 1, wanted  # lo fits (below smallest: nothing known to fit), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    search.largest_fitting = lo if lo >= smallest else 0
    return search


def split_batch(effective: int, largest: int, smallest: int = 1, why: str = "") -> tuple[int, int]:
    """(micro-batch, accumulation steps) with micro * steps == effective and smallest <= micro <= largest, micro
    largest. `why` says why batches below `smallest` are not tried (a model normalizing over the batch)."""
    if largest < smallest:
        raise TrainError(f"not even a batch of {smallest} fits in the memory budget{why}: raise --memory-budget")
    for steps in range(math.ceil(effective / largest), effective // smallest + 1):
        if effective % steps == 0:
            return effective // steps, steps
    raise TrainError(f"batch {effective} splits into no micro-batches of {smallest} to {largest} samples{why}: "
                     "pass a --batch-size that does, or raise --memory-budget")


def batch_norm_kinds(model: Any) -> list[str]:
    """The kinds of module in `model` that normalize over the batch in training (BatchNorm), sorted: such a model
    cannot train on a batch of 1 ('Expected more than 1 value per channel when training')."""
    from torch.nn.modules.batchnorm import _BatchNorm

    return sorted({type(m).__name__ for m in model.modules() if isinstance(m, _BatchNorm)})


def smallest_batch(workload: Workload) -> tuple[int, str]:
    """The smallest micro-batch the batch search may probe, and why when it is not 1: the search probed batch 1 for
    a model with BatchNorm, whose step raised torch's ValueError, which the knob showed as its failure."""
    kinds = batch_norm_kinds(workload.build_model())
    if not kinds:
        return 1, ""
    return 2, (f" (batch 1 is not tried: the model normalizes over the batch ({', '.join(kinds)}), which cannot train "
               "on one sample)")


def nearby_split(effective: int, largest: int) -> tuple[int, int] | None:
    """(micro-batch, steps) of an effective batch near `effective` that splits into as few micro-batches as
    the memory allows, when `effective` itself only splits into micro-batches of at most half of `largest` (a
    prime like 61 with at most 36 fitting: 1 x 61); None when its own split is good enough."""
    micro, _ = split_batch(effective, largest)
    if micro * 2 > largest:
        return None
    steps = math.ceil(effective / largest)
    options = {(min(largest, m), steps) for m in (effective // steps, -(-effective // steps))}
    options.add((largest, steps - 1))
    options = {(m, n) for m, n in options if m >= 1 and n >= 1 and m * n != effective}
    # the nearest effective batch; between equally near ones, fewer micro-batches, then the smaller batch
    return min(options, key=lambda o: (abs(o[0] * o[1] - effective), o[1], o[0] * o[1]), default=None)


def default_budget_bytes(device: str, fraction: float = 0.5) -> int:
    """CPU: `fraction` of the available host memory. CUDA: the device's total memory."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(device).total_memory)
    import psutil

    return int(psutil.virtual_memory().available * fraction)


def fit_function(ctx: TuneContext, config: StepConfig) -> tuple[FitFn, int]:
    budget = ctx.memory_budget_bytes or default_budget_bytes(ctx.device)
    maker = cuda_fits if ctx.device.startswith("cuda") else cpu_fits
    return maker(ctx.workload, config, budget, ctx.safety_margin), budget


class LargestBatch:
    """Keeps the user's effective batch; splits it into micro-batches with accumulation when it does not fit."""

    name = "batch"
    sweep = False

    def __init__(self) -> None:
        self.last_search: BatchSearch | None = None

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return None

    def unchanged_reason(self, current: StepConfig) -> str:
        """Why no candidate: the batch fits whole, and a larger one would change the training, not speed it up."""
        return f"batch {current.effective_batch_size} fits in memory: kept (--batch-size tries another)"

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        fits, budget = fit_function(ctx, current)
        wanted = current.effective_batch_size
        smallest, why = smallest_batch(ctx.workload)
        search = search_largest_batch(fits, wanted, budget, ctx.safety_margin, min(smallest, wanted))
        self.last_search = search
        if search.largest_fitting >= wanted:
            if current.accumulation_steps == 1:
                return []
            return [Candidate({"batch_size": wanted, "accumulation_steps": 1},
                              f"the whole batch of {wanted} fits: no accumulation", search.to_dict())]
        micro, steps = split_batch(wanted, search.largest_fitting, smallest, why)
        note = f"batch {wanted} does not fit in {budget / 2**20:.4g} MiB: {micro} x {steps} accumulation steps"
        nearby = nearby_split(wanted, search.largest_fitting)
        if nearby is not None:
            near_micro, near_steps = nearby
            near = near_micro * near_steps
            note += (f"; {wanted} has no divisor between {micro + 1} and {search.largest_fitting}, so its "
                     f"micro-batches are small: an effective batch of {near} would split into {near_micro} x "
                     f"{near_steps} (--batch-size {near} tunes that)")
        return [Candidate({"batch_size": micro, "accumulation_steps": steps}, note, search.to_dict(), required=True)]
