"""The same training-step measurement under DistributedDataParallel, launched with torchrun.

`run_ddp` launches `torch.distributed.run` twice, with 1 and with N processes (gloo on CPU, NCCL on CUDA),
each rank running this module's `main`. Every rank measures (1) normal DDP steps, (2) the same steps under
`no_sync()` (no gradient all-reduce: compute only) and (3) the gradient all-reduce alone, in buckets of
DDP's size. Then: scaling efficiency = samples/s on N / (N x samples/s on 1); exposed communication =
step time - no-sync step time (its share of the step is what communication costs); overlap = the part of
the standalone all-reduce that is hidden behind backward. Each rank trains on its own loader (weak
scaling: the per-process batch stays the user's); the slowest rank's median step time counts. The efficiency
is the product of compute scaling (no-sync step on 1 process / on N: the ranks slowing each other's compute) and
what is left, the all-reduce and DDP's work with other ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError, TrainError
from dlperf.measure.env import MIN_PROCESS_LIMIT, PROCESSES_PER_CPU, check_per_cpu, check_threads, usable_cores
from dlperf.train.loop import StepConfig

STOP_GRACE_S = 5.0
"""Seconds torchrun and its ranks get to exit after SIGTERM before the group is killed."""
EXPOSED_OVER_ALLREDUCE = 1.5
"""Exposed communication above this multiple of the standalone all-reduce is mostly not the all-reduce."""
FIRST_BUCKET_MB = 1.0
DEFAULT_BUCKET_CAP_MB = 25.0
"""DDP's own default bucket_cap_mb. Measured with it, DDP is built without the argument: given explicitly, torch
(2.13) makes the first bucket that size too, where the DistributedDataParallel(model) of a user's code starts with a
1 MiB one (a 4 MiB model: one bucket, where the user's DDP has two and overlaps the first)."""
CONTENDED_COMPUTE = 0.8
"""The ranks' no-sync step this much slower than the 1-process step (its inverse) is named as contention."""
"""DDP puts the last-created parameters' gradients in a first, small bucket (1 MiB) so reduction starts early."""

_COLLECTIVE_TENSORS: list[Any] = []
"""The tensors the rank's own collectives used, held for the life of the process. A gloo worker thread keeps the last
work it ran, and destroys it when the process group is destroyed, with the GIL held by the thread destroying it: a
work whose tensors Python had let go (only the work still held them) took the GIL to free them, and the two waited
on each other for good (a rank's run hung in ~ProcessGroupGloo, its worker in ~AsyncAllgatherWork, the allgather
`all_gather_object` had left). Held here, a work's tensors outlive it and it frees them without the GIL."""


@dataclass(frozen=True)
class DdpConfig:
    nproc: int
    steps: int = 20
    warmup_steps: int = 3
    backend: str | None = None
    """gloo or nccl; default gloo on CPU, nccl on CUDA."""
    threads_per_process: int | None = None
    """CPU: torch threads per rank, the same for the 1- and N-process runs (default: usable CPUs // N)."""
    bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ConfigError(f"--nproc must be >= 1, got {self.nproc}")
        if self.steps < 2:
            raise ConfigError(f"DDP measurement needs at least 2 steps, got {self.steps}")
        if self.backend not in (None, "gloo", "nccl"):
            raise ConfigError(f"unknown backend '{self.backend}': use gloo or nccl")
        check_threads(self.threads_per_process, "--threads")

    def backend_for(self, device: str) -> str:
        return self.backend or ("nccl" if device.startswith("cuda") else "gloo")

    def threads_for(self) -> int:
        return self.threads_per_process or max(1, usable_cores() // self.nproc)


@dataclass
class RankStats:
    """What one launch measured (rank 0 gathers every rank's medians; the slowest rank counts)."""

    world_size: int
    batch_size: int
    step_s: float
    nosync_step_s: float
    allreduce_s: float
    gradient_bytes: int
    buckets: int
    per_rank_step_s: list[float] = field(default_factory=list)
    bucket_bytes: list[int] = field(default_factory=list)
    """The bytes of each of DDP's gradient buckets (`_bucket_bytes`); empty when its logging data had none."""
    tokens_per_step: float | None = None
    """The tokens every rank together trains on in a step (each rank's tokens a sample over its steps, times its
    batch); None for inputs that are not token ids."""
    tokens_guessed: bool = False
    """Those tokens were counted from the inputs' shape (padding included), not by the workload's count_tokens."""
    step_samples_ns: list[int] = field(default_factory=list)
    """The DDP steps' times of the rank whose median `step_s` is (the slowest); empty in records from before them."""
    nosync_samples_ns: list[int] = field(default_factory=list)
    """The no-sync steps' times of the rank whose median `nosync_step_s` is."""

    @property
    def noise_notes(self) -> list[str]:
        """The noise warnings of the two step measurements whose medians count, from the same `Measurement` code as a
        single-process run's (IQR over 10% of the median, too few samples)."""
        from dlperf.measure.stats import Measurement

        notes = []
        for what, samples in (("DDP step", self.step_samples_ns), ("no-sync step", self.nosync_samples_ns)):
            warning = Measurement(samples).noise_warning if samples else None
            if warning is not None:
                notes.append(f"{what}: {warning}")
        return notes

    @property
    def samples_per_s(self) -> float:
        return self.world_size * self.batch_size / self.step_s

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens/s beside `samples_per_s` (the same step time); None for inputs that are not token ids."""
        return None if self.tokens_per_step is None else self.tokens_per_step / self.step_s

    def to_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "batch_size": self.batch_size, "step_s": self.step_s,
                "nosync_step_s": self.nosync_step_s, "allreduce_s": self.allreduce_s,
                "gradient_bytes": self.gradient_bytes, "buckets": self.buckets,
                "per_rank_step_s": self.per_rank_step_s, "bucket_bytes": self.bucket_bytes,
                "samples_per_s": self.samples_per_s, "tokens_per_step": self.tokens_per_step,
                "tokens_guessed": self.tokens_guessed, "tokens_per_s": self.tokens_per_s,
                "step_samples_ns": self.step_samples_ns, "nosync_samples_ns": self.nosync_samples_ns}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankStats:
        return cls(int(data["world_size"]), int(data["batch_size"]), float(data["step_s"]),
                   float(data["nosync_step_s"]), float(data["allreduce_s"]), int(data["gradient_bytes"]),
                   int(data["buckets"]), [float(x) for x in data.get("per_rank_step_s", [])],
                   [int(x) for x in data.get("bucket_bytes", [])],
                   None if data.get("tokens_per_step") is None else float(data["tokens_per_step"]),
                   bool(data.get("tokens_guessed", False)),
                   [int(x) for x in data.get("step_samples_ns", [])],
                   [int(x) for x in data.get("nosync_samples_ns", [])])


@dataclass
class DdpResult:
    workload: str
    backend: str
    threads_per_process: int
    bucket_cap_mb: float
    single: RankStats
    multi: RankStats
    findings: list[str] = field(default_factory=list)

    @property
    def scaling_efficiency(self) -> float | None:
        """Samples/s on N over N x samples/s on 1; None with one process (nothing was scaled)."""
        if self.multi.world_size < 2:
            return None
        return self.multi.samples_per_s / (self.multi.world_size * self.single.samples_per_s)

    @property
    def compute_scaling(self) -> float | None:
        """The 1-process no-sync step over the N ranks' no-sync step (compute only, same batch and threads); None
        with one process. Below 1 the ranks slow each other's compute down (shared cores, memory bandwidth, loader
        workers); above 1 the machine changed between the two launches.

        With the per-process batch the same, efficiency = 1-process step / N-process step = this x
        `communication_scaling` (what is left: the all-reduce and DDP's work with other ranks).
        """
        if self.multi.world_size < 2 or self.multi.nosync_step_s <= 0:
            return None
        return self.single.nosync_step_s / self.multi.nosync_step_s

    @property
    def communication_scaling(self) -> float | None:
        """Scaling efficiency over `compute_scaling`: what the all-reduce and DDP's work with other ranks leave."""
        compute, efficiency = self.compute_scaling, self.scaling_efficiency
        if compute is None or efficiency is None or compute <= 0:
            return None
        return efficiency / compute

    @property
    def single_ddp_over_nosync(self) -> float | None:
        """The 1-process DDP step over its no-sync step; None with one process. One process all-reduces with no
        other rank, so this is about 1 (DDP's own work per step adds a little): far from it, that launch was
        disturbed, and `communication_scaling`, which takes the 1-process DDP step as its baseline, is off by as
        much (efficiency / compute = this x the N ranks' no-sync step over their DDP step)."""
        if self.multi.world_size < 2 or self.single.nosync_step_s <= 0:
            return None
        return self.single.step_s / self.single.nosync_step_s

    @property
    def communication_resolved(self) -> bool:
        """False where the N ranks' DDP step measured no longer than their no-sync step: what communication adds is
        below this run's noise, and neither the exposed share (clipped to 0) nor the communication factor (the
        rest of the efficiency, noise included) can say what it costs. True with one process (nothing to resolve)."""
        return self.multi.world_size < 2 or self.multi.step_s > self.multi.nosync_step_s

    @property
    def communication_note(self) -> str | None:
        """What the communication line says in place of an exposed share it could not measure; None where it could."""
        if self.communication_resolved:
            return None
        return (f"not measured: the DDP step ({self.multi.step_s * 1e3:.3g} ms) took no longer than the no-sync step "
                f"({self.multi.nosync_step_s * 1e3:.3g} ms, compute alone), so what the all-reduce adds to a step is "
                f"within this run's noise (the all-reduce alone takes {self.multi.allreduce_s * 1e3:.3g} ms)")

    @property
    def factors_note(self) -> str | None:
        """What the factor line says when the communication factor cannot be told from noise: the N ranks' DDP step
        no longer than their no-sync step (see `communication_resolved`), or the 1-process DDP and no-sync steps
        disagree (see `single_ddp_over_nosync`); None otherwise."""
        if not self.communication_resolved:
            return ("unreliable: the ranks' DDP step took no longer than their no-sync step, so the communication "
                    "factor is the two launches' noise, not communication (see the communication line)")
        ratio = self.single_ddp_over_nosync
        if ratio is None or CONTENDED_COMPUTE <= ratio <= 1 / CONTENDED_COMPUTE:
            return None
        return (f"unreliable: the 1-process DDP step took {ratio:.2f}x its no-sync step, which communication counts "
                f"as its own; the ranks' exposed all-reduce leaves {1 - self.comm_share:.0%} (see the finding)")

    @property
    def notes(self) -> list[str]:
        """Each launch's noise warnings (see `RankStats.noise_notes`), named by launch."""
        launches = [(self.single, "1 process")]
        if self.multi.world_size > 1:
            launches.append((self.multi, f"{self.multi.world_size} processes (the slowest rank)"))
        return [f"{label}, {note}" for stats, label in launches for note in stats.noise_notes]

    @property
    def exposed_comm_s(self) -> float:
        """DDP step minus no-sync step. One process has no other rank to all-reduce with: 0, whatever the two
        separately measured medians differ by."""
        if self.multi.world_size < 2:
            return 0.0
        return max(self.multi.step_s - self.multi.nosync_step_s, 0.0)

    @property
    def comm_share(self) -> float:
        return self.exposed_comm_s / self.multi.step_s

    @property
    def overlap(self) -> float | None:
        """Share of the standalone all-reduce hidden behind compute (None with one process).

        With one bucket the all-reduce can only start once backward has finished, so nothing is hidden: 0,
        whatever the timings say (the standalone all-reduce also pays rank skew that the step hides).
        """
        if self.multi.world_size < 2 or self.multi.allreduce_s <= 0:
            return None
        if self.multi.buckets == 1:
            return 0.0
        if not self.communication_resolved:  # an exposed time of 0 is noise, not an all-reduce hidden in full
            return None
        return min(max(1.0 - self.exposed_comm_s / self.multi.allreduce_s, 0.0), 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "nproc": self.multi.world_size, "backend": self.backend,
            "threads_per_process": self.threads_per_process, "batch_size": self.multi.batch_size,
            "single_samples_per_s": self.single.samples_per_s, "single_step_s": self.single.step_s,
            "samples_per_s": self.multi.samples_per_s, "step_s": self.multi.step_s,
            "single_tokens_per_s": self.single.tokens_per_s, "tokens_per_s": self.multi.tokens_per_s,
            "tokens_guessed": self.multi.tokens_guessed,
            "nosync_step_s": self.multi.nosync_step_s, "scaling_efficiency": self.scaling_efficiency,
            "compute_scaling": self.compute_scaling, "communication_scaling": self.communication_scaling,
            "single_ddp_over_nosync": self.single_ddp_over_nosync, "factors_note": self.factors_note,
            "exposed_comm_s": self.exposed_comm_s, "comm_share": self.comm_share,
            "communication_note": self.communication_note,
            "allreduce_s": self.multi.allreduce_s, "overlap": self.overlap, "buckets": self.multi.buckets,
            "bucket_bytes": self.multi.bucket_bytes,
            "bucket_cap_mb": self.bucket_cap_mb, "gradient_bytes": self.multi.gradient_bytes,
            "findings": self.findings, "notes": self.notes, "single": self.single.to_dict(),
            "multi": self.multi.to_dict(),
        }


def expected_buckets(gradient_bytes: int, bucket_cap_mb: float) -> int:
    """DDP's bucket count for this much gradient: a 1 MiB first bucket, then buckets of bucket_cap_mb."""
    first = int(FIRST_BUCKET_MB * 2**20)
    if gradient_bytes <= first:
        return 1
    return 1 + math.ceil((gradient_bytes - first) / (bucket_cap_mb * 2**20))


def findings_for(result: DdpResult, cpus: int, device: str, loader_workers: int = 0) -> list[str]:
    out = []
    n = result.multi.world_size
    busy = result.threads_per_process + loader_workers  # each rank's DataLoader workers are processes too
    if not device.startswith("cuda") and n > cpus:
        # 3 ranks on 2 CPUs read "communication 88%" beside "0% of the step is exposed all-reduce": a rank waiting
        # for a core slows its own compute and every all-reduce its peers wait in
        out.append(f"{n} ranks on {cpus} usable CPUs: more ranks than cores: ranks compete for cores, and at any "
                   "moment one waits for a core. Each rank's compute slows from sharing cores, not from "
                   "communication, and the all-reduce (alone and in the step) waits for a rank that is not running: "
                   f"the efficiency, its factors and the exposed share measure this machine, not DDP; use --nproc "
                   f"{cpus} or fewer here")
    elif not device.startswith("cuda") and n > 1 and n * busy > cpus:
        workers = f" and {loader_workers} loader worker{'s' if loader_workers > 1 else ''}" if loader_workers else ""
        out.append(f"{n} processes x {result.threads_per_process} thread{'s' if result.threads_per_process > 1 else ''}"
                   f"{workers} on {cpus} usable CPUs: ranks compete for cores, so the efficiency measures this "
                   "machine, not DDP")
    compute, comm = result.compute_scaling, result.communication_scaling
    alone_n, alone_1 = result.multi.nosync_step_s * 1e3, result.single.nosync_step_s * 1e3
    if compute is not None and comm is not None and compute < CONTENDED_COMPUTE:
        blame = ("more than communication does" if compute < comm else "though less than communication does")
        blame = f"{blame} ({compute:.0%} against {comm:.0%})" if result.communication_resolved else f"to {compute:.0%}"
        out.append(f"the ranks slow each other down: their compute alone (the no-sync step, {alone_n:.3g} ms) takes "
                   f"{1 / compute:.2f}x what it takes on 1 process ({alone_1:.3g} ms) at the same batch and threads, "
                   f"which costs the efficiency {blame}; they share cores, caches "
                   "and memory bandwidth, which communication tuning would not fix")
    elif compute is not None and compute > 1 / CONTENDED_COMPUTE:
        out.append(f"the ranks' compute alone (the no-sync step, {alone_n:.3g} ms) ran {compute:.2f}x as fast as on 1 "
                   f"process ({alone_1:.3g} ms) at the same batch and threads: the machine was busier while the "
                   "1-process launch ran (the two run one after the other), so the efficiency is off by about as "
                   "much; repeat on a quieter machine")
    ratio = result.single_ddp_over_nosync
    if not result.communication_resolved:
        out.append(f"the {n} ranks' DDP step ({result.multi.step_s * 1e3:.3g} ms) took no longer than their no-sync "
                   f"step ({alone_n:.3g} ms), though it all-reduces what takes {result.multi.allreduce_s * 1e3:.3g} ms "
                   "alone: the steps' noise is larger than what communication adds, so this run cannot tell its cost "
                   "(the exposed share reads 0, and the communication factor"
                   f"{f', {comm:.0%},' if comm is not None else ''} is what is left of the efficiency's noise); "
                   "measure more steps (--steps) on a quieter machine")
    elif comm is not None and result.factors_note is not None and ratio is not None:
        # 2 ranks x 2 threads on 2 CPUs read "communication 97%" beside "43% of the step is exposed all-reduce": the
        # 1-process DDP step (317 ms) was 1.70x its no-sync step (186 ms), which the factor took for communication's
        out.append(f"the 1-process DDP step ({result.single.step_s * 1e3:.3g} ms) took {ratio:.2f}x its no-sync step "
                   f"({alone_1:.3g} ms), though one process has no rank to all-reduce with: that launch was disturbed "
                   "(other load on the machine between its two measurements) or DDP's own work per step is that "
                   f"large. The efficiency and its communication factor take that step as their baseline, so "
                   f"communication reads {comm:.0%}, where the {n} ranks' own steps leave {1 - result.comm_share:.0%} "
                   f"({result.comm_share:.0%} of their step is exposed all-reduce, measured within the same launch); "
                   "rely on the exposed share, and repeat on a quieter machine for the efficiency")
    grad_mib = result.multi.gradient_bytes / 2**20
    if result.multi.buckets == 1 and n > 1 and grad_mib >= FIRST_BUCKET_MB:
        out.append(f"all {grad_mib:.2f} MiB of gradients fit one bucket: the all-reduce "
                   "starts only after the whole backward, so nothing overlaps; lower bucket_cap_mb to overlap")
    elif result.multi.buckets == 1 and n > 1:
        # advised for 0.07 MiB too, where more buckets only add calls: torch's own first bucket is 1 MiB for that reason
        took = (f" (the all-reduce alone takes {result.multi.allreduce_s * 1e3:.3g} ms for them)"
                if result.multi.allreduce_s > 0 else "")
        out.append(f"all {grad_mib:.2f} MiB of gradients fit one bucket, so nothing overlaps, but they are too few for "
                   f"buckets to matter: DDP splits nothing under {FIRST_BUCKET_MB:g} MiB off, as each all-reduce call "
                   f"costs a fixed latency that smaller buckets would pay once each{took}; what costs here is that "
                   "latency, paid every step: larger per-process batches or gradient accumulation with no_sync() "
                   "pay it less often (bucket_cap_mb would not)")
    overlap = result.overlap
    if overlap is not None and result.comm_share > 0.1 and overlap < 0.3:
        out.append(f"bucketing/overlap is not effective: {overlap:.0%} of the all-reduce is hidden and it costs "
                   f"{result.comm_share:.0%} of the step; larger per-process batches or gradient accumulation with "
                   "no_sync() amortize it")
    elif overlap is not None and overlap >= 0.5:
        out.append(f"overlap is effective: {overlap:.0%} of the all-reduce is hidden behind backward")
    exposed, alone = result.exposed_comm_s, result.multi.allreduce_s
    if n > 1 and alone > 0 and exposed > EXPOSED_OVER_ALLREDUCE * alone:
        out.append(f"the DDP step costs {exposed * 1e3:.3g} ms more than the no-sync step, but the all-reduce alone "
                   f"takes {alone * 1e3:.3g} ms: the rest is DDP's own work (copying gradients into buckets, autograd "
                   "hooks) and waiting for the slowest rank, which a faster interconnect would not remove")
    efficiency = result.scaling_efficiency
    if efficiency is not None and efficiency < 0.8 and result.comm_share > 0.2:
        out.append(f"communication-bound: {result.comm_share:.0%} of the step is exposed all-reduce")
    return out


def check_launch(config: StepConfig, nproc: int) -> None:
    """Refuse what no launch of `nproc` ranks of `config` could run (compile, a named GPU, too few GPUs, too many
    ranks for the CPUs), before anything starts: `dlperf train` calls it before it records a run, as a bad option is
    not a failed training run."""
    if config.compile:
        raise ConfigError("--nproc measures eager DDP; drop torch.compile for the scaling run")
    if config.device.startswith("cuda"):
        import torch

        if ":" in config.device:  # rank r runs on cuda:r: a GPU named here was ignored without a word
            raise ConfigError(f"--device {config.device} with --nproc: rank r runs on cuda:r of the GPUs visible, so "
                              "give --device cuda, and CUDA_VISIBLE_DEVICES to choose which GPUs")
        if torch.cuda.device_count() < nproc:
            raise ConfigError(f"--nproc {nproc} on CUDA needs {nproc} GPUs; "
                              f"{torch.cuda.device_count()} are visible")
    else:
        check_per_cpu(nproc, "--nproc (on CPU)", PROCESSES_PER_CPU, MIN_PROCESS_LIMIT,
                      "each rank is a process with its own torch and model; a CPU scaling measurement wants at most "
                      "the usable CPUs")


def run_ddp(workload_spec: str, config: StepConfig, ddp: DdpConfig,
            on_launch: Callable[[str], None] | None = None,
            on_single: Callable[[dict[str, Any]], None] | None = None) -> DdpResult:
    """Launch 1 then N processes under torchrun and compare them (see the module docstring).

    `on_launch(label)` before each launch (progress); `on_single(partial)` once the 1-process launch is done, with
    its figures as a result to keep should the N-process launch fail, time out or be interrupted."""
    check_launch(config, ddp.nproc)
    threads = ddp.threads_for()
    if on_launch is not None:
        on_launch("1 process")
    single = launch(workload_spec, config, ddp, 1, threads)
    if ddp.nproc > 1 and on_single is not None:
        on_single({"workload": workload_spec, "nproc": ddp.nproc, "backend": ddp.backend_for(config.device),
                   "threads_per_process": threads, "batch_size": single.batch_size,
                   "single_samples_per_s": single.samples_per_s, "single_step_s": single.step_s,
                   "single_tokens_per_s": single.tokens_per_s, "tokens_guessed": single.tokens_guessed,
                   "single": single.to_dict(),
                   "partial": f"stopped before the {ddp.nproc}-process launch finished: the 1-process figures only"})
    if ddp.nproc > 1 and on_launch is not None:
        on_launch(f"{ddp.nproc} processes")
    multi = launch(workload_spec, config, ddp, ddp.nproc, threads) if ddp.nproc > 1 else single
    name = workload_spec
    result = DdpResult(name, ddp.backend_for(config.device), threads, ddp.bucket_cap_mb, single, multi)
    result.findings = findings_for(result, usable_cores(), config.device, config.num_workers)
    return result


def launch(workload_spec: str, config: StepConfig, ddp: DdpConfig, nproc: int, threads: int) -> RankStats:
    """One torchrun launch of `nproc` ranks; returns rank 0's gathered statistics."""
    with tempfile.TemporaryDirectory(prefix="dlperf-ddp-") as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc_per_node", str(nproc), "-m", "dlperf.train.ddp",
            "--workload", workload_spec, "--config", json.dumps(config.to_dict()), "--out", str(out),
            "--steps", str(ddp.steps), "--warmup", str(ddp.warmup_steps),
            "--backend", ddp.backend_for(config.device), "--threads", str(threads),
            "--bucket-cap-mb", str(ddp.bucket_cap_mb),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
        try:
            returncode, stdout, stderr = run_process_group(command, env, ddp.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise TrainError(f"torchrun with {nproc} process(es) did not finish in {ddp.timeout_s:g} s: "
                             "raise --timeout or lower --steps") from exc
        if returncode != 0 or not out.exists():
            raise TrainError(f"torchrun with {nproc} process(es) failed (exit {returncode}):\n"
                             f"{rank_error(stderr or stdout or '')}")
        return RankStats.from_dict(json.loads(out.read_text()))


def rank_error(output: str, max_lines: int = 15) -> str:
    """What a failed launch's ranks raised: the exception lines of the last traceback they printed.

    torchrun prefixes each rank's output with `[rankN]: ` and ends with its own summary of exit codes, which
    says nothing about why; without rank lines (torchrun itself failed) the output's last lines are returned.
    """
    lines = [line.split("]: ", 1)[1] for line in output.splitlines()
             if line.startswith("[rank") and "]: " in line]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return "\n".join((lines or output.strip().splitlines())[-max_lines:])
    # frames and their source lines are indented; the exception (and its message's lines) are not
    raised = [line for line in lines[starts[-1] + 1:] if line.strip() and not line.startswith(" ")]
    return "\n".join(raised[-max_lines:])


def run_process_group(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str]:
    """Run `command` in its own process group; (exit code, stdout, stderr).

    On a timeout, Ctrl-C or SIGTERM the whole group is stopped before the exception goes on: killing only
    torchrun (what `subprocess.run` does) leaves its rank processes running, training, with no parent.
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except BaseException:
        stop_process_group(proc)
        raise
    return proc.returncode, stdout, stderr


def stop_process_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the group `proc` leads (torchrun passes it on to its ranks), then SIGKILL whatever is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=STOP_GRACE_S)
    # ranks that outlived torchrun are still in the group (a group id is not reused while it has members)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=STOP_GRACE_S)


# --- the rank's side (run by torchrun as `python -m dlperf.train.ddp`) --------------------------------


def _step_measurement(loop: Any, steps: int, warmup: int) -> Any:
    """The loop's steps' `Measurement` (its median is a single-process run's step_s)."""
    from dlperf.train.step import measure_loop

    return measure_loop(loop, steps, warmup, count_flops=False).measurement


def _padded(samples_ns: list[int], n: int) -> list[float]:
    """`samples_ns` as `n` floats for a gathered tensor of one size on every rank (nan where there are fewer)."""
    return [float(x) for x in samples_ns[:n]] + [math.nan] * max(n - len(samples_ns), 0)


def _allreduce_s(grads: list[Any], bucket_cap_mb: float, iters: int = 10,
                 bucket_bytes: list[int] | None = None) -> float:
    """Median time of all-reducing the gradients in DDP-sized buckets, without compute: `bucket_bytes` (DDP's own,
    `_bucket_bytes`) when known, else a 1 MiB first bucket and then `bucket_cap_mb` ones."""
    import torch
    import torch.distributed as dist

    from dlperf.measure.stats import median

    flat = torch.cat([g.detach().reshape(-1).clone() for g in grads]) if grads else torch.zeros(1)
    if bucket_bytes and sum(bucket_bytes) == flat.numel() * flat.element_size():
        chunks = list(flat.split([n // flat.element_size() for n in bucket_bytes]))
    else:
        first = max(int(FIRST_BUCKET_MB * 2**20) // flat.element_size(), 1)
        cap = max(int(bucket_cap_mb * 2**20) // flat.element_size(), 1)
        chunks = [flat[:first], *flat[first:].split(cap)] if flat.numel() > first else [flat]
    _COLLECTIVE_TENSORS.extend(chunks)  # the tensors the all-reduce works hold (views have their own Python objects)
    times = []
    for i in range(iters + 2):
        dist.barrier()
        t0 = time.perf_counter_ns()
        works = [dist.all_reduce(c, async_op=True) for c in chunks]
        for w in works:
            if w is not None:
                w.wait()
        if flat.is_cuda:
            torch.cuda.synchronize()
        if i >= 2:
            times.append(float(time.perf_counter_ns() - t0))
    return median(times) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlperf.train.ddp")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from dlperf.train.loop import TrainLoop
    from dlperf.workload.loader import load_workload

    torch.set_num_threads(args.threads)
    dist.init_process_group(args.backend)
    loop: TrainLoop | None = None
    ddp_model: Any = None
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        config = StepConfig.from_dict(json.loads(args.config))
        if config.device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            config = config.replace(device=f"cuda:{local}")
        config = config.replace(threads=args.threads)
        loop = TrainLoop(load_workload(args.workload), config, seed=0)
        device_ids = [torch.cuda.current_device()] if config.device.startswith("cuda") else None
        cap = None if args.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB else args.bucket_cap_mb  # see DEFAULT_BUCKET_CAP_MB
        ddp_model = DistributedDataParallel(loop.model, device_ids=device_ids, bucket_cap_mb=cap)
        loop.forward_model = ddp_model
        dist.barrier()
        steps_m = _step_measurement(loop, args.steps, args.warmup)
        dist.barrier()
        with ddp_model.no_sync():
            nosync_m = _step_measurement(loop, args.steps, args.warmup)
        step_s, nosync_s = steps_m.median_s, nosync_m.median_s
        dist.barrier()
        params = [p for p in loop.model.parameters() if p.requires_grad]
        grads = [torch.zeros_like(p) for p in params]
        gradient_bytes = sum(g.numel() * g.element_size() for g in grads)
        logging = ddp_model._get_ddp_logging_data()
        bucket_bytes = _bucket_bytes(logging)
        allreduce_s = _allreduce_s(grads, args.bucket_cap_mb, bucket_bytes=bucket_bytes) if world > 1 else 0.0
        buckets = len(bucket_bytes) if bucket_bytes else expected_buckets(gradient_bytes, args.bucket_cap_mb)
        # each rank's figures, in tensors held past the process group (_COLLECTIVE_TENSORS), not
        # all_gather_object's, which Python drops as the call returns; its tokens a step (nan: not token ids), then
        # its steps' times, for the noise warnings of the slowest rank's measurements
        per_sample = loop.tokens_per_sample
        tokens = math.nan if per_sample is None else per_sample * config.batch_size * config.accumulation_steps
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
        figures = [step_s, nosync_s, allreduce_s, tokens, *_padded(steps_m.samples_ns, args.steps),
                   *_padded(nosync_m.samples_ns, args.steps)]
        mine = torch.tensor(figures, dtype=torch.float64, device=device)
        theirs = [torch.zeros(len(figures), dtype=torch.float64, device=device) for _ in range(world)]
        _COLLECTIVE_TENSORS.extend([mine, *theirs])
        dist.all_gather(theirs, mine)
        gathered = [t.tolist() for t in theirs]
        loop.close()
        if rank == 0:
            slowest_step, slowest_nosync = max(gathered, key=lambda g: g[0]), max(gathered, key=lambda g: g[1])
            stats = RankStats(
                world_size=world, batch_size=config.batch_size * config.accumulation_steps,
                step_s=max(g[0] for g in gathered), nosync_step_s=max(g[1] for g in gathered),
                allreduce_s=max(g[2] for g in gathered), gradient_bytes=gradient_bytes, buckets=buckets,
                per_rank_step_s=[g[0] for g in gathered], bucket_bytes=bucket_bytes,
                tokens_per_step=None if any(math.isnan(g[3]) for g in gathered) else sum(g[3] for g in gathered),
                tokens_guessed=loop.spec.count_tokens is None,
                step_samples_ns=[int(x) for x in slowest_step[4:4 + args.steps] if not math.isnan(x)],
                nosync_samples_ns=[int(x) for x in slowest_nosync[4 + args.steps:] if not math.isnan(x)],
            )
            Path(args.out).write_text(json.dumps(stats.to_dict()))
        dist.barrier()
    finally:
        dist.destroy_process_group()
        # DDP holds the process group last: it dies here, while the collectives' tensors are held (see above), and
        # not at some later collection of DDP's reference cycles
        if loop is not None:
            loop.forward_model = loop.model
        ddp_model = None
        gc.collect()
    return 0


def _bucket_bytes(logging: dict[str, Any]) -> list[int]:
    """The bytes of each of DDP's gradient buckets from its logging data, [] when it has none. The buckets DDP
    rebuilds after its first iteration (in the order gradients become ready), which it then uses, come first: the
    initial assignment ('bucket_sizes') gave one 4.2 MB bucket for a model DDP then reduced in two (1.05 + 3.15 MB).
    """
    for key in ("rebuilt_bucket_sizes", "bucket_sizes"):
        sizes = logging.get(key)
        if isinstance(sizes, str) and sizes.strip():
            return [int(s) for s in sizes.split(",") if s.strip()]
        if isinstance(sizes, (list, tuple)) and sizes:
            return [int(s) for s in sizes]
    return []


if __name__ == "__main__":
    sys.exit(main())
