"""The built-in workloads. Each module defines `workload(**options) -> Workload` and `SUMMARY`."""

from __future__ import annotations

import importlib
from typing import Any

from dlperf.errors import WorkloadError
from dlperf.workload.base import Workload
from dlperf.workload.loader import check_option_names

# zoo name -> module under dlperf.workload.zoo
ZOO: dict[str, str] = {
    "mlp": "mlp",
    "digits-cnn": "digits_cnn",
    "resnet18": "resnet18",
    "minilm": "minilm",
}


def names() -> list[str]:
    return list(ZOO)


def get(name: str, **options: Any) -> Workload:
    """The zoo workload `name`, built with `options` (e.g. seq_len=64 for minilm)."""
    module_name = ZOO.get(name)
    if module_name is None:
        raise WorkloadError(f"no zoo workload '{name}': choose one of {', '.join(ZOO)} (`dlperf zoo` lists them)")
    module = importlib.import_module(f"dlperf.workload.zoo.{module_name}")
    check_option_names(module.workload, options, f"zoo:{name}")
    workload: Workload = module.workload(**options)
    return workload
