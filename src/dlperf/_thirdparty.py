"""Import-time chatter of libraries dlperf does not use directly, kept off the user's console.

Importing transformers' model classes imports torchao where it is installed, and on a CPU build torchao logs
that its optional CUDA kernels cannot load ("Failed to load .../_C_mxfp8...so"), and torch logs notices about
torchao's pytree registrations: four lines of noise in every `dlperf.bench("zoo:minilm")` and in the CLI.
Errors still show.

Also torch's DataLoader warning about more workers than it suggests (`quiet_worker_warning`), which it repeats at
each DataLoader() and iter(): dlperf says it once, in its own words (`too_many_workers`)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


def quiet_third_party_logs() -> None:
    """For the CLI's process: the noisy loggers show errors only, from now on."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    """For library calls: the noisy loggers show errors only inside the block, and their levels are put back."""
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


TORCH_WORKER_WARNING = r"This DataLoader will create \d+ worker processes in total"
"""The start of torch's UserWarning for more workers than the usable CPUs."""


@contextlib.contextmanager
def quiet_worker_warning() -> Iterator[None]:
    """Hide torch's warning about more loader workers than it suggests: `--num-workers 3` on 2 CPUs printed it twice
    in `dlperf train` (DataLoader() warns, and so does iter() on it, from another line), four times in `dlperf
    profile --train`; `too_many_workers` says it once, as a note."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCH_WORKER_WARNING, category=UserWarning)
        yield


def too_many_workers(num_workers: int | None, cpus: int) -> str | None:
    """A note when a loader has more workers than usable CPUs (torch's suggested maximum), or None."""
    if not num_workers or num_workers <= cpus:
        return None
    plural = "" if cpus == 1 else "s"
    return (f"{num_workers} DataLoader workers on {cpus} usable CPU{plural}: more than PyTorch suggests (one "
            "per usable CPU). More help only where loading waits on I/O (disk, network, a sleep) rather than on the "
            "CPU; otherwise the extra processes compete with each other and with the training step for the CPUs")
