"""One training configuration (`StepConfig`) and the loop that runs it the way a user's loop does (`TrainLoop`).

A step is one optimizer step: `accumulation_steps` micro-batches, each fetched from the user's loader, copied
to the device, run forward (loss included) and backward, then the optimizer step and `zero_grad`. Each phase
is timed by a `PhaseTimer`: host `perf_counter_ns` on CPU; on CUDA, events on the current stream for the
device phases (read after the step's final synchronization) and host time for the data wait.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlperf._device import check_device
from dlperf._thirdparty import quiet_worker_warning
from dlperf.errors import ConfigError, DlperfError, TrainError
from dlperf.measure.bench import torch_threads
from dlperf.measure.env import MIN_PROCESS_LIMIT, PROCESSES_PER_CPU, check_per_cpu, check_threads
from dlperf.workload.base import (
    TrainSpec,
    Workload,
    _user_frame,
    call_loss,
    call_user_factory,
    error_text,
    ignored_loader_kwargs,
    loader_problem,
    loss_problem,
    map_tensors_copied,
    optimizer_problem,
    split_batch,
    with_optimizer_impl,
)
from dlperf.workload.loader_workers import LoaderWorkers, start_loader

if TYPE_CHECKING:
    import torch
    from torch import nn

TRAINABLE_ZOO = ("zoo:mlp", "zoo:digits-cnn")
"""The zoo workloads with a TrainSpec (named in the error for one without; checked by a test)."""
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZER_IMPLS = ("default", "foreach", "fused")
PHASES = ("data", "h2d", "forward", "backward", "optimizer")
"""Step phases, in order: waiting for the loader, host-to-device copy, forward + loss, backward, optimizer."""
PAUSE_WAIT_S = 0.5
"""How long `pause_loader` waits, in all, for its stopped workers to show as stopped."""
STEP_PARTS = {
    "data": "its loader (fetching a batch)",
    "h2d": "the copy of the batch to the device",
    "forward": "its model's forward",
    "loss": "its loss_fn(output, target)",
    "backward": "backward",
    "optimizer": "its optimizer's step() or zero_grad()",
}
"""What a step's error names as the part that raised, by the phase running (a loss_fn of torch's own, such as
F.cross_entropy, has no line of the workload to show)."""


@dataclass(frozen=True)
class StepConfig:
    """Every setting of a training step that dlperf measures or tunes. Validates only."""

    batch_size: int
    """Micro-batch size: what the loader yields per call."""
    accumulation_steps: int = 1
    device: str = "cpu"
    precision: str = "fp32"
    """'fp32', 'bf16' (autocast) or 'fp16' (autocast + GradScaler, CUDA only)."""
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    compile: bool = False
    channels_last: bool = False
    optimizer_impl: str = "default"
    """'default' (what the user's optimizer factory builds), 'foreach' or 'fused'."""
    checkpointing: bool = False
    """Activation checkpointing of each top-level child module, or of each layer of the stacks of repeated blocks a
    child holds at any depth (recompute in backward to save memory; see `checkpointed_blocks`)."""
    threads: int | None = None
    """torch intra-op threads on CPU; None keeps the process's setting."""
    lr_scale: float = 1.0
    """Multiplies every parameter group's learning rate (the linear scaling rule when the batch changes)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")
        if self.accumulation_steps < 1:
            raise ConfigError(f"accumulation steps must be >= 1, got {self.accumulation_steps}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision '{self.precision}': choose one of {', '.join(PRECISIONS)}")
        if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", self.device):
            raise ConfigError(f"unknown device '{self.device}': use cpu, cuda or cuda:N")
        if self.precision == "fp16" and not self.device.startswith("cuda"):
            raise ConfigError("fp16 training (autocast + GradScaler) needs a CUDA device; use bf16 on CPU")
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")
        check_per_cpu(self.num_workers, "num_workers", PROCESSES_PER_CPU, MIN_PROCESS_LIMIT,
                      "each DataLoader worker is a process (PyTorch suggests at most the usable CPUs)")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise ConfigError("prefetch_factor and persistent_workers need num_workers > 0")
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ConfigError(f"prefetch_factor must be >= 1, got {self.prefetch_factor}")
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise ConfigError(
                f"unknown optimizer implementation '{self.optimizer_impl}': choose one of "
                f"{', '.join(OPTIMIZER_IMPLS)}"
            )
        check_threads(self.threads)
        if self.lr_scale <= 0:
            raise ConfigError(f"lr_scale must be > 0, got {self.lr_scale}")

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size * self.accumulation_steps

    def loader_kwargs(self) -> dict[str, Any]:
        """The DataLoader keyword arguments this config sets (only those that differ from the defaults)."""
        kwargs: dict[str, Any] = {}
        if self.num_workers:
            kwargs["num_workers"] = self.num_workers
            if self.prefetch_factor is not None:
                kwargs["prefetch_factor"] = self.prefetch_factor
            if self.persistent_workers:
                kwargs["persistent_workers"] = True
        if self.pin_memory:
            kwargs["pin_memory"] = True
        return kwargs

    def replace(self, **changes: Any) -> StepConfig:
        return dataclasses.replace(self, **changes)

    def diff(self, other: StepConfig) -> dict[str, Any]:
        """Fields whose value in `other` differs from this one: {name: other's value}."""
        return {f.name: getattr(other, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def train_spec(workload: Workload) -> TrainSpec:
    """The workload's TrainSpec, or a TrainError saying how to add one."""
    if workload.train is None:
        raise TrainError(
            f"workload '{workload.name}' has no training spec, which training needs: give its Workload a "
            "`train=dlperf.TrainSpec(make_loader=..., loss_fn=..., make_optimizer=...)`, or pick a workload "
            f"that has one (in the zoo: {', '.join(TRAINABLE_ZOO)})"
        )
    return workload.train


def base_config(workload: Workload, batch_size: int | None = None, device: str = "cpu",
                **settings: Any) -> StepConfig:
    """The user's own configuration: the TrainSpec's batch size (or `batch_size`), eager fp32, no workers."""
    spec = train_spec(workload)
    return StepConfig(batch_size=batch_size or spec.batch_size, device=device, **settings)


class PhaseTimer:
    """Times the phases of one step. CPU: host clock at each mark. CUDA: events, read by `finish()`."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self._device = device
        self.totals_ns: dict[str, int] = dict.fromkeys(PHASES, 0)
        self._events: list[tuple[str, Any, Any]] = []
        self._phase: str | None = None
        self._t0 = 0
        self._begin: Any = None

    def start(self, phase: str) -> None:
        self._phase = phase
        if self.cuda and phase != "data":
            import torch

            self._begin = torch.cuda.Event(enable_timing=True)
            self._begin.record(torch.cuda.current_stream(self._device))  # the trained device's, not the current one
        else:
            self._t0 = time.perf_counter_ns()

    def stop(self) -> None:
        phase = self._phase
        if phase is None:
            return
        if self.cuda and phase != "data":
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(self._device))
            self._events.append((phase, self._begin, end))
        else:
            self.totals_ns[phase] += time.perf_counter_ns() - self._t0
        self._phase = None

    def finish(self) -> dict[str, int]:
        """Per-phase nanoseconds of the step (synchronizes on CUDA)."""
        for phase, begin, end in self._events:
            end.synchronize()
            self.totals_ns[phase] += int(begin.elapsed_time(end) * 1e6)
        self._events.clear()
        return dict(self.totals_ns)


class TrainLoop:
    """A model, optimizer and loader built from a workload under one StepConfig; `step()` runs one step."""

    def __init__(self, workload: Workload, config: StepConfig, seed: int = 0) -> None:
        import torch

        self.workload = workload
        self.config = config
        self.spec = train_spec(workload)
        check_device(config.device)
        self.threads = config.threads or torch.get_num_threads()
        self.seed = seed
        with torch_threads(self.threads):
            torch.manual_seed(seed)
            model = workload.build_model().to(config.device)
            model.train()
            if config.channels_last:
                model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            if config.checkpointing:
                apply_checkpointing(model)
            self.model: nn.Module = model
            self.optimizer = self._build_optimizer(model)
            self.forward_model: Any = torch.compile(model) if config.compile else model
            self.scaler = torch.amp.GradScaler("cuda") if config.precision == "fp16" else None
            seed_everything(seed)
            with quiet_worker_warning():
                self.loader = self._call_user("its loader factory", self.spec.make_loader, config.batch_size,
                                              **config.loader_kwargs())
            problem = loader_problem(self.loader) or ignored_loader_kwargs(self.loader, config.loader_kwargs())
            if problem is not None:
                raise TrainError(f"workload '{workload.name}': {problem}")
        self.workers = LoaderWorkers(self.loader)
        """The loader's worker processes, a wrapped DataLoader's included."""
        self._iter: Iterator[Any] | None = None
        self._paused_pids: list[int] = []
        self._batches_read = 0
        self.steps_done = 0
        self.last_step_samples = 0
        """Samples the last step trained on: the effective batch, less when the loader's last batch is short."""
        self.last_step_tokens: int | None = None
        """Tokens the last step trained on (`token_count`); None for inputs that are not token ids."""
        self.samples_trained = 0
        self.tokens_trained: int | None = 0
        """The samples and tokens of every step so far (tokens None once a step had none): a trial's tokens a sample
        where an A/B counts samples only."""
        self._batch_samples: int | None = None
        """Samples in the micro-batch the step is on (None before it is fetched): named when the step raises."""
        self._part: str | None = None
        """The part of the step running (a key of STEP_PARTS), for its error."""

    def _call_user(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return call_user_factory(self.workload.name, what, fn, *args, error=TrainError, **kwargs)

    def _build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        optimizer = self._call_user("its optimizer factory", self.spec.make_optimizer, model.parameters())
        problem = optimizer_problem(optimizer, model)
        if problem is not None:  # a training step raised "'str' object has no attribute 'step'"
            raise TrainError(f"workload '{self.workload.name}': {problem}")
        if self.config.optimizer_impl != "default":
            try:
                optimizer = with_optimizer_impl(optimizer, self.config.optimizer_impl)
            except (TypeError, RuntimeError, ValueError) as exc:
                raise TrainError(
                    f"{type(optimizer).__name__} has no {self.config.optimizer_impl} implementation here: {exc}"
                ) from exc
        if self.config.lr_scale != 1.0:
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * self.config.lr_scale
        return optimizer

    def next_batch(self) -> Any:
        """The next (inputs, target) batch; a new epoch starts when the loader is exhausted."""
        if self._iter is None:
            self._iter = start_loader(self.loader)
        try:
            batch = next(self._iter)
        except StopIteration:
            self._iter = start_loader(self.loader)
            try:
                batch = next(self._iter)
            except StopIteration:
                if self._batches_read:  # it gave batches before: the loader object itself was used up
                    raise TrainError(
                        f"workload '{self.workload.name}': its loader gave {self._batches_read} batches, then none "
                        "when iterated again for the next epoch: make_loader returned a one-shot iterator (a "
                        "generator?); return something iterable anew each time, such as a DataLoader or an object "
                        "with __iter__"
                    ) from None
                raise TrainError(
                    f"workload '{self.workload.name}': its loader yields no batch at batch size "
                    f"{self.config.batch_size} (a drop_last loader over fewer samples?): pass a smaller "
                    "batch size (--batch-size)"
                ) from None
        self._batches_read += 1
        return batch

    def _to_device(self, value: Any) -> Any:
        """The batch's tensors on the device, in tuples, lists and dicts too (a dict of inputs stayed on the host:
        on CUDA the model then met CPU tensors)."""
        import torch

        def move(t: torch.Tensor) -> torch.Tensor:
            t = t.to(self.config.device, non_blocking=self.config.pin_memory)
            if self.config.channels_last and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
            return t

        return map_tensors_copied(value, move)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        if self.config.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.config.precision == "bf16" else torch.float16
        return torch.autocast("cuda" if self.config.device.startswith("cuda") else "cpu", dtype=dtype)

    def step(self, timer: PhaseTimer | None = None, eager: bool = False) -> torch.Tensor:
        """One optimizer step; returns the (detached) mean loss of its micro-batches.

        `eager=True` runs the uncompiled model (used to count FLOPs). What the user's code raises (model, loss,
        loader) comes back as a TrainError naming the line in their code; an out-of-memory error is left as is,
        since the batch search and the tuner act on it.
        """
        import torch

        self._batch_samples = self._part = None
        try:
            return self._step(timer, eager)
        except (DlperfError, torch.cuda.OutOfMemoryError):
            raise
        except Exception as exc:
            part = STEP_PARTS.get(self._part or "")
            raised_by = f"\n  raised by {part}" if part else ""
            raise TrainError(f"workload '{self.workload.name}': a training step raised {error_text(exc)}"
                             f"{self._short_batch_hint()}{raised_by}\n{_user_frame(exc)}") from exc

    def _short_batch_hint(self) -> str:
        """What to add to a step's error when it ran on a batch shorter than the batch size (a loader's last batch
        of an epoch): BatchNorm on a batch of 1 raised 'Expected more than 1 value per channel when training' 449
        steps into a run at batch 4, and nothing said which batch it was."""
        n = self._batch_samples
        if n is None or n >= self.config.batch_size:
            return ""
        return (f" (on a batch of {n} sample{'' if n == 1 else 's'}, shorter than the batch size "
                f"{self.config.batch_size}: the loader's last of an epoch? if the model cannot train on it, "
                "drop_last=True in the DataLoader leaves it out)")

    def _tokens(self, inputs: Any) -> int | None:
        """The tokens in one micro-batch's inputs: the TrainSpec's `count_tokens`, else every position of token ids
        (`token_count`); None for other inputs."""
        import torch

        if self.spec.count_tokens is None:
            return token_count(inputs)
        n = self._call_user("count_tokens", self.spec.count_tokens, inputs)
        if isinstance(n, torch.Tensor) and n.numel() == 1:
            n = int(n.item())
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TrainError(f"workload '{self.workload.name}': TrainSpec.count_tokens returned {n!r}: it must "
                             "return the batch's token count, an int >= 0")
        return n

    def _pair(self, batch: Any) -> tuple[Any, Any]:
        pair = split_batch(batch)
        if isinstance(pair, str):
            raise TrainError(f"workload '{self.workload.name}': {pair}")
        return pair

    def _step(self, timer: PhaseTimer | None, eager: bool) -> torch.Tensor:

        timer = timer or PhaseTimer(self.config.device)
        model = self.model if eager else self.forward_model
        accumulation = self.config.accumulation_steps
        total_loss: Any = 0.0
        samples = 0
        tokens: int | None = 0
        with torch_threads(self.threads):
            for _ in range(accumulation):
                self._part = "data"
                timer.start("data")
                self._batch_samples = None
                inputs, target = self._pair(self.next_batch())
                timer.stop()
                self._batch_samples = batch_length(target, inputs, self.config.batch_size)
                samples += self._batch_samples
                counted = self._tokens(inputs)
                tokens = None if counted is None or tokens is None else tokens + counted
                self._part = "h2d"
                timer.start("h2d")
                inputs, target = self._to_device(inputs), self._to_device(target)
                timer.stop()
                self._part = "forward"
                timer.start("forward")
                with self._autocast():
                    out = model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)
                    self._part = "loss"
                    loss = call_loss(self.workload.name, self.spec.loss_fn, out, target)
                problem = loss_problem(loss)
                if problem is not None:
                    raise TrainError(f"workload '{self.workload.name}': {problem}")
                timer.stop()
                self._part = "backward"
                timer.start("backward")
                scaled = loss / accumulation if accumulation > 1 else loss
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
                timer.stop()
                total_loss = total_loss + loss.detach()
            self._part = "optimizer"
            timer.start("optimizer")
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            timer.stop()
        self.steps_done += 1
        self.last_step_samples = samples
        self.last_step_tokens = tokens
        self.samples_trained += samples
        self.tokens_trained = None if tokens is None or self.tokens_trained is None else self.tokens_trained + tokens
        result: torch.Tensor = total_loss / accumulation
        return result

    @property
    def tokens_per_sample(self) -> float | None:
        """Tokens a sample over every step so far; None for inputs that are not token ids, or before a step."""
        if self.tokens_trained is None or self.samples_trained <= 0:
            return None
        return self.tokens_trained / self.samples_trained

    def worker_pids(self) -> list[int]:
        """The process ids of the loader's worker processes now (none before the first batch or without workers)."""
        return self.workers.pids(self._iter)

    def pause_loader(self) -> None:
        """Stop the loader's worker processes (SIGSTOP) until `resume_loader`; nothing without workers.

        For an A/B of two loops in one process: the idle side's workers would otherwise go on loading while the
        other side is timed, taking CPU from it, and fill their prefetch queue (num_workers x prefetch_factor
        batches), which the idle side's next block then trains on without waiting. A loader-bound candidate
        with 2 workers and prefetch_factor 8 measured 25x its baseline that way, where each alone ran 2.1x.
        Paused, each side starts a block with its loader as its previous block left it.
        """
        import signal

        stop = getattr(signal, "SIGSTOP", None)
        if stop is None:  # Windows: no way to stop a process; the comparison keeps the bias described above
            return
        for worker in self.workers.processes(self._iter):
            pid = getattr(worker, "pid", None)
            if pid is None or pid in self._paused_pids or not worker.is_alive():
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, stop)
                self._paused_pids.append(pid)
        # SIGSTOP takes effect when the worker next enters the kernel: a worker running on the other core went on
        # (the test read it 'R' right after the kill under load), into the block that was to be timed without it
        deadline = time.monotonic() + PAUSE_WAIT_S
        for pid in self._paused_pids:
            while not _stopped(pid) and time.monotonic() < deadline:
                time.sleep(0.0005)

    def resume_loader(self) -> None:
        """Continue the worker processes `pause_loader` stopped (those still running)."""
        import signal

        pids, self._paused_pids = self._paused_pids, []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop the loader's workers now rather than at garbage collection.

        A DataLoader with persistent workers keeps its iterator (and so its worker processes) on itself. Paused
        workers are resumed first: a stopped process would not act on the shutdown until killed.
        """
        self.resume_loader()
        current, self._iter = self._iter, None
        self.workers.shutdown(current)


def seed_everything(seed: int) -> None:
    """Seed torch's generator and Python's and NumPy's global ones, which a Dataset's augmentation draws from
    (`random.randint` for a shift): seeded by torch alone, two loops of the same configuration trained on other
    augmentations, so loss parity compared its own noise (a DataLoader worker seeds both from torch's seed, but
    with no workers the main process's state ran on from wherever the previous loop left it)."""
    import random
    import sys

    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")  # a dataset using it has imported it
    if numpy is not None:
        numpy.random.seed(seed)


@contextlib.contextmanager
def kept_random_state() -> Iterator[None]:
    """Give torch's CPU generator, Python's and NumPy's global ones back as they were after the block: a loop seeds
    them (`seed_everything`), and `measure_training` or `tune` in a notebook left the caller's generators reseeded
    (after `torch.manual_seed(42)`, the next `torch.rand(1)` read 0.3074 where it reads 0.8823). CUDA's generators
    too where CUDA has started."""
    import random
    import sys

    import torch

    cpu, py = torch.random.get_rng_state(), random.getstate()
    numpy = sys.modules.get("numpy")
    np_state = numpy.random.get_state() if numpy is not None else None
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        random.setstate(py)
        if numpy is not None:
            numpy.random.set_state(np_state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _stopped(pid: int) -> bool:
    """The process is stopped (or stopped under a tracer), gone, or its state cannot be read."""
    import psutil

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP,
                                                psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except (psutil.Error, NotImplementedError):
        return True


def too_many_workers(config: StepConfig) -> str | None:
    """A note when the config has more loader workers than usable CPUs (torch's suggested maximum), or None."""
    from dlperf._thirdparty import too_many_workers as note
    from dlperf.measure.env import usable_cores

    return note(config.num_workers, usable_cores())


def batch_length(target: Any, inputs: Any, default: int) -> int:
    """Samples in a batch: the first dimension of its target (or of its first input tensor), else `default`.

    A loader without drop_last ends each epoch with a shorter batch; counting it as a full one overstates
    samples/s (100 samples at batch 64 train 64, then 36).
    """
    for value in (target, inputs):
        while isinstance(value, (tuple, list)) and value:
            value = value[0]
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return default


def apply_checkpointing(model: nn.Module) -> int:
    """Wrap each block's forward (`checkpointed_blocks`) in non-reentrant activation checkpointing; returns how
    many."""
    from torch.utils.checkpoint import checkpoint

    blocks = checkpointed_blocks(model)
    if len(blocks) < 2:
        raise TrainError(
            f"activation checkpointing needs a model with at least two blocks to checkpoint (top-level children "
            f"holding parameters, or the layers of a stack of repeated blocks); {type(model).__name__} has "
            f"{len(blocks)}"
        )
    for child in blocks:
        original = child.forward

        def forward(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            return checkpoint(_original, *args, use_reentrant=False, **kwargs)

        forward.dlperf_checkpointed = True  # type: ignore[attr-defined]  # for checkpointing_off
        child.forward = forward
    return len(blocks)


@contextlib.contextmanager
def checkpointing_off(model: nn.Module) -> Iterator[int]:
    """Run the blocks `apply_checkpointing` wrapped with their own forward (no recomputation in backward) for
    the duration; yields how many were wrapped."""
    wrapped = [m for m in model.modules() if getattr(m.__dict__.get("forward"), "dlperf_checkpointed", False)]
    forwards = [c.__dict__.pop("forward") for c in wrapped]  # the class's forward shows through again
    try:
        yield len(wrapped)
    finally:
        for child, forward in zip(wrapped, forwards, strict=True):
            child.forward = forward


def checkpointed_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules activation checkpointing wraps: the top-level children holding parameters, except that a child
    holding a stack of repeated blocks at any depth (a ModuleList or Sequential of two or more modules of one class
    that have modules of their own, as `nn.TransformerEncoder.layers` or `model.backbone.encoder.layers`) gives
    those blocks instead, for each such stack (`_repeated_blocks`).

    Checkpointed whole, such a child keeps only its input until backward but then recomputes every layer at once,
    so its peak is no lower: a 2-layer `nn.TransformerEncoder` saved nothing (43.6 against 43.1 MiB at batch 8);
    checkpointed per layer, as users do, it keeps the layers' inputs and one layer's activations. Until 2026-12-07
    only a child that was, or directly held, the stack was split: a model with 6 blocks at backbone.encoder.layers
    was checkpointed as [backbone, head], and its step needed 9.95 MiB at batch 256 with or without it (7.45 now)."""
    blocks: list[nn.Module] = []
    for child in model.children():
        if _holds_parameters(child):
            blocks.extend(_repeated_blocks(child) or [child])
    return blocks


def _repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The blocks of the stacks of repeated blocks in `module` (itself included), at any depth, in module order: the
    largest stack first, then each other one that is neither inside nor around a stack already chosen (a stack of
    6 layers inside each of 2 repeated stages gives the 12 layers, not the 2 stages); empty where there is none."""
    from torch import nn

    stacks: list[tuple[nn.Module, list[nn.Module]]] = []
    for stack in module.modules():
        if isinstance(stack, (nn.ModuleList, nn.Sequential)):
            layers = [c for c in stack.children() if _holds_parameters(c)]
            # blocks, not single layers: a Sequential(Linear, ReLU, Linear) is one block, checkpointed whole
            if (len(layers) >= 2 and len({type(c) for c in layers}) == 1
                    and all(any(True for _ in c.children()) for c in layers)):
                stacks.append((stack, layers))
    chosen: list[tuple[nn.Module, list[nn.Module]]] = []
    for stack, layers in sorted(stacks, key=lambda s: -len(s[1])):  # stable: module order among equal sizes
        inside = {id(m) for m in stack.modules()}
        if not any(id(other) in inside or any(m is stack for m in other.modules()) for other, _ in chosen):
            chosen.append((stack, layers))
    order = {id(m): i for i, m in enumerate(module.modules())}
    return [layer for _, layers in sorted(chosen, key=lambda s: order[id(s[0])]) for layer in layers]


def _holds_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def has_conv(model: nn.Module) -> bool:
    from torch import nn

    return any(isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)) for m in model.modules())


GUESSED_TOKENS = ("tokens/s guessed: the first input is an integer tensor [batch, seq], taken for token ids, and every "
                  "position is counted, padding included; set TrainSpec(count_tokens=...) to count them yourself "
                  "(e.g. an attention mask's sum)")


def token_count(inputs: Any) -> int | None:
    """Every position of the batch's token ids, where its first input is an integer tensor of shape [batch, seq]
    (a guess: padding is counted too); None for other inputs."""
    import torch

    first = inputs[0] if isinstance(inputs, (tuple, list)) and inputs else inputs
    if not isinstance(first, torch.Tensor) or first.dim() != 2:
        return None
    if first.dtype.is_floating_point or first.dtype.is_complex or first.dtype == torch.bool:
        return None
    return first.numel()
