"""Files written whole: beside the target, then renamed over it, so a reader (another process, the driver of a Ray
trial, a concurrent `dlperf` command) sees the old file, or none, or the new one, never a part of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """`write(f)` into a temporary file in `path`'s folder (a name of its own per call), then renamed over `path`;
    the temporary file is removed when anything fails. The folder must exist; an OSError goes to the caller."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """`text` (UTF-8) into `path` whole (`write_atomic`)."""
    write_atomic(path, lambda f: f.write(text.encode()))
