"""dlperf: profile, diagnose, optimize, serve and track PyTorch model performance, with evidence.

The public API is listed in `__all__`. Names are imported on first use so that `import dlperf` (and
`dlperf --help`) does not import torch.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_API: dict[str, str] = {
    "Workload": "dlperf.workload.base",
    "EvalSpec": "dlperf.workload.base",
    "TrainSpec": "dlperf.workload.base",
    "load_workload": "dlperf.workload.loader",
    "bench": "dlperf.api",
    "load": "dlperf.api",
    "Store": "dlperf.store.db",
    "Measurement": "dlperf.measure.stats",
    "TimerConfig": "dlperf.measure.timer",
    "time_callable": "dlperf.measure.timer",
    "ab_test": "dlperf.measure.ab",
    "ABConfig": "dlperf.measure.ab",
    "profile_workload": "dlperf.profile.session",
    "ProfileConfig": "dlperf.profile.session",
    "OptimizeConfig": "dlperf.optimize.search",
    "optimize_workload": "dlperf.optimize.search",
    "Constraints": "dlperf.optimize.constraints",
    "tune": "dlperf.train.tune",
    "TuneConfig": "dlperf.train.tune",
    "StepConfig": "dlperf.train.loop",
    "ServeConfig": "dlperf.serve.service",
    "assert_no_regression": "dlperf.testing",
    "DlperfError": "dlperf.errors",
    "DlperfWarning": "dlperf.errors",
    "WorkloadError": "dlperf.errors",
}

__all__ = ["__version__", *sorted(_API)]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        # a subpackage, imported on first use as the names are: `import dlperf; dlperf.calibrate.get_ceilings(...)`
        # failed with "no attribute 'calibrate'" unless something had imported it before
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'dlperf' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
