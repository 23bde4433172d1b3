"""The settings one side of an A/B runs with: 'threads=1,precision=bf16,batch_size=8,channels_last=1'.

Keys (all optional; an empty string means the workload's defaults):

- `threads=N`          torch intra-op threads (torch.set_num_threads), N >= 1
- `precision=P`        fp32, bf16 or fp16 (autocast, as in `dlperf bench --precision`)
- `batch_size=N`       batch size of the inputs, N >= 1
- `channels_last=0|1`  model and 4-D inputs in channels-last memory format
- `device=D`           cpu, cuda or cuda:N
- `option.NAME=VALUE`  an option passed to the workload (`zoo:mlp` takes `option.hidden=512`)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import ConfigError
from dlperf.measure.bench import PRECISIONS
from dlperf.measure.env import check_threads

KEYS = ("threads", "precision", "batch_size", "channels_last", "device")
OPTION_PREFIX = "option."
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class ABSettings:
    """One side of an A/B. `None` means: leave as the workload / process has it."""

    threads: int | None = None
    precision: str = "fp32"
    batch_size: int | None = None
    channels_last: bool = False
    device: str = "cpu"
    options: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_threads(self.threads)
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision '{self.precision}': choose one of {', '.join(PRECISIONS)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"unknown device '{self.device}': use cpu, cuda or cuda:N")

    def to_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "channels_last": self.channels_last,
            "device": self.device,
            "options": dict(self.options),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ABSettings:
        """`to_dict`'s output back (a stored A/B's settings)."""
        return cls(threads=data.get("threads"), precision=str(data.get("precision", "fp32")),
                   batch_size=data.get("batch_size"), channels_last=bool(data.get("channels_last", False)),
                   device=str(data.get("device", "cpu")), options=tuple((data.get("options") or {}).items()))

    def describe(self) -> str:
        """The settings back in the parser's syntax, defaults left out ('defaults' when all are)."""
        parts = []
        if self.threads is not None:
            parts.append(f"threads={self.threads}")
        if self.precision != "fp32":
            parts.append(f"precision={self.precision}")
        if self.batch_size is not None:
            parts.append(f"batch_size={self.batch_size}")
        if self.channels_last:
            parts.append("channels_last=1")
        if self.device != "cpu":
            parts.append(f"device={self.device}")
        parts += [f"{OPTION_PREFIX}{k}={v}" for k, v in self.options]
        return ",".join(parts) or "defaults"


def parse_settings(text: str, where: str = "settings") -> ABSettings:
    """Parse 'key=value,key=value' into ABSettings; unknown keys and bad values raise ConfigError.

    `where` names the option in messages (e.g. '--a').
    """
    values: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if "=" not in part:
            raise ConfigError(f"{where}: '{part}' has no value: write key=value, e.g. threads=1")
        key, value = (s.strip() for s in part.split("=", 1))
        if key.startswith(OPTION_PREFIX) and len(key) > len(OPTION_PREFIX):
            if key[len(OPTION_PREFIX):] in options:  # the last one silently won, unlike a setting given twice
                raise ConfigError(f"{where}: '{key}' is given twice")
            # kept as typed: the loader reads it as a spec's ?NAME=VALUE, by the parameter it is for
            # (`compare.ab.load_side`), which only the workload knows ('nan' for a str parameter stays text)
            options[key[len(OPTION_PREFIX):]] = value
            continue
        if key not in KEYS:
            raise ConfigError(
                f"{where}: unknown key '{key}': use {', '.join(KEYS)} or option.NAME=VALUE "
                "(see `dlperf ab --help`)"
            )
        if key in values:
            raise ConfigError(f"{where}: '{key}' is given twice")
        values[key] = _convert(key, value, where)
    return ABSettings(options=tuple(sorted(options.items())), **values)


def _convert(key: str, value: str, where: str) -> Any:
    if key in ("threads", "batch_size"):
        try:
            number = int(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {key} must be an integer >= 1, got '{value}'") from exc
        if number < 1:
            raise ConfigError(f"{where}: {key} must be an integer >= 1, got '{value}'")
        return number
    if key == "channels_last":
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"{where}: channels_last must be 0 or 1, got '{value}'")
    if key == "precision" and value not in PRECISIONS:
        raise ConfigError(f"{where}: unknown precision '{value}': choose one of {', '.join(PRECISIONS)}")
    if key == "device" and not (value == "cpu" or value.startswith("cuda")):
        raise ConfigError(f"{where}: unknown device '{value}': use cpu, cuda or cuda:N")
    return value

