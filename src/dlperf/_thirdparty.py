"""Import-time chatter of libraries dlperf does not use directly, kept off the user's console.

Importing transformers' model classes imports torchao where it is installed, and on a CPU build torchao logs
that its optional CUDA kernels cannot load ("Failed to load .../_C_mxfp8...so"), and torch logs notices about
torchao's pytree registrations: four lines of noise in every `dlperf.bench("zoo:minilm")` and in the CLI.
Errors still show."""

from __future__ import annotations

import contextlib
import logging
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
