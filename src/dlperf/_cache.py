"""Where dlperf keeps what it measured or built once (the machine's ceilings, zoo:digits-cnn's weights), and what
it says when it cannot keep them.

A cache that cannot be written costs time, not results: the caller goes on with what it measured or built and
warns (`DlperfWarning`, a `warning:` line from the CLI) that the next command does that work again.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from dlperf.errors import DlperfWarning

CACHE_ENV_VAR = "DLPERF_CACHE_DIR"


def cache_dir() -> Path:
    """$DLPERF_CACHE_DIR (a leading ~ expanded), else platformdirs' user cache dir for dlperf."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("dlperf"))


def warn_not_cached(what: str, path: Path, exc: BaseException, redo: str) -> None:
    """Warn that `what` could not be written to `path` (`exc` says why: an OSError's message without its path) and
    is used uncached, so the next command will `redo` it."""
    reason = getattr(exc, "strerror", None) or exc
    warnings.warn(f"cannot cache {what} at '{path}' ({reason}); used without caching, so the next "
                  f"command {redo} again: set {CACHE_ENV_VAR} to a writable folder", DlperfWarning,
                  stacklevel=_caller_level())


def _caller_level() -> int:
    """The `stacklevel` that points a warning given here at the first caller outside dlperf (the user's line that
    asked for the ceilings or the model), however deep in dlperf the cache was written."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(2)  # warn_not_cached's caller: stacklevel 2
    level = 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
        level += 1
    return level
