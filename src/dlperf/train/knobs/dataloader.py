"""DataLoader knobs: worker processes, prefetch depth, persistent workers, pinned memory (CUDA)."""

from __future__ import annotations

from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig


class Workers:
    """num_workers 2, 4, 8, ... up to the usable CPUs; stops at the first count that does not help.

    One worker is not tried first (unless there is one CPU): it only moves the loading to another process,
    so it rarely beats zero and the sweep would stop before the counts that overlap loading do.
    """

    name = "workers"
    sweep = True

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if current.num_workers >= ctx.cpu_count:
            return f"num_workers is already {current.num_workers} with {ctx.cpu_count} usable CPUs"
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        counts = []
        n = 2 if ctx.cpu_count > 1 else 1
        while n <= ctx.cpu_count:
            if n > current.num_workers:
                counts.append(n)
            n *= 2
        if ctx.cpu_count not in counts and ctx.cpu_count > current.num_workers:
            counts.append(ctx.cpu_count)
        return [Candidate({"num_workers": n}, f"{n} loader worker process{'es' if n > 1 else ''}")
                for n in counts]


class Prefetch:
    """prefetch_factor 4 then 8 batches per worker (the default is 2)."""

    name = "prefetch"
    sweep = True

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return "no loader workers (prefetching needs num_workers > 0)" if current.num_workers == 0 else None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        now = current.prefetch_factor or 2
        return [Candidate({"prefetch_factor": f}, f"{f} batches prefetched per worker") for f in (4, 8) if f > now]


class Persistent:
    """persistent_workers=True: keep the workers between epochs instead of starting them each epoch."""

    name = "persistent"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if current.num_workers == 0:
            return "no loader workers to keep alive"
        if current.persistent_workers:
            return "workers are already persistent"
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"persistent_workers": True}, "keep workers alive across epochs")]


class PinMemory:
    """pin_memory=True (CUDA): page-locked batches, copied to the GPU asynchronously."""

    name = "pin_memory"
    sweep = False

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        if not ctx.device.startswith("cuda"):
            return "pinned memory only speeds host-to-GPU copies (device is cpu)"
        return "already pinned" if current.pin_memory else None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        return [Candidate({"pin_memory": True}, "page-locked batches, non_blocking copies")]
