"""Shared CLI plumbing: the store option, consoles, JSON output, parsing of lists and sizes."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from rich.console import Console

from dlperf.errors import ConfigError


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None,
                        help="run store: a path or SQLAlchemy URL (default $DLPERF_STORE or .dlperf/runs.db)")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


PIPED_WIDTH = 160
"""Columns when stdout is not a terminal and COLUMNS is unset (a CI log, `| tee`): Rich's 80 would squeeze
the wider tables (dlperf load's has 14 columns) into truncated headers."""


def console() -> Console:
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(highlight=False, width=PIPED_WIDTH if piped else None)


def error_console() -> Console:
    # soft_wrap: an error message stays one line (greppable) instead of being wrapped at 80 columns.
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def int_list(text: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32), with a clear error."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,8,32, got '{text}'") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def duration_s(text: str) -> float:
    """'90', '90s', '10m', '1h' -> seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 30s, 10m or 1h, got '{text}'")
    value = float(match.group(1))
    return value * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2) or "s"]


def percent_or_float(text: str) -> float:
    """'1%' -> 0.01; '0.01' -> 0.01."""
    try:
        return float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a fraction or a percentage like 1%, got '{text}'") from exc


def open_store(args: argparse.Namespace) -> Any:
    from dlperf.store import Store

    return Store(getattr(args, "store", None))


def require_positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
