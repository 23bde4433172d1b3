"""The built-in workloads. Each module defines `workload(**options) -> Workload` and `SUMMARY`."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from dlperf.errors import WorkloadError
from dlperf.workload.base import Workload
from dlperf.workload.loader import as_rebuilt, check_option_names

# zoo name -> module under dlperf.workload.zoo
ZOO: dict[str, str] = {
    "mlp": "mlp",
    "digits-cnn": "digits_cnn",
    "resnet18": "resnet18",
    "minilm": "minilm",
}


def names() -> list[str]:
    return list(ZOO)


def guess(name: str) -> str:
    """'did you mean mlp? ' where `name` is close to a zoo workload's name ('mpl'), else '': what every message about
    an unknown zoo name says (`dlperf zoo mpl` and `bench zoo:mpl` listed the choices without it, where `--passes
    hygeine` suggested hygiene)."""
    close = difflib.get_close_matches(name, list(ZOO), n=1)
    return f"did you mean {close[0]}? " if close else ""


def factory(name: str) -> Any:
    """The function that builds the zoo workload `name` (its module's `workload`)."""
    module_name = ZOO.get(name)
    if module_name is None:
        raise WorkloadError(f"no zoo workload '{name}': {guess(name)}choose one of {', '.join(ZOO)} (`dlperf zoo` "
                            "lists them)")
    return importlib.import_module(f"dlperf.workload.zoo.{module_name}").workload


def get(name: str, **options: Any) -> Workload:
    """The zoo workload `name`, built with `options` (e.g. seq_len=64 for minilm)."""
    make = factory(name)
    check_option_names(make, options, f"zoo:{name}")
    workload: Workload = make(**options)
    return as_rebuilt(workload)
