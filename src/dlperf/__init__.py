"""dlperf: profile, diagnose, optimize, serve and track PyTorch model performance, with evidence.

The public API is listed in `__all__`. Names are imported on first use so that `import dlperf` (and
`dlperf --help`) does not import torch.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees (`X as X`: re-exported); through __getattr__ alone every name was Any
    from dlperf.api import bench as bench
    from dlperf.api import load as load
    from dlperf.compare.runs import compare_records as compare_records
    from dlperf.errors import DlperfError as DlperfError
    from dlperf.errors import DlperfWarning as DlperfWarning
    from dlperf.errors import WorkloadError as WorkloadError
    from dlperf.measure.ab import ABConfig as ABConfig
    from dlperf.measure.ab import ab_test as ab_test
    from dlperf.measure.stats import Measurement as Measurement
    from dlperf.measure.timer import TimerConfig as TimerConfig
    from dlperf.measure.timer import time_callable as time_callable
    from dlperf.optimize.constraints import Constraints as Constraints
    from dlperf.optimize.search import OptimizeConfig as OptimizeConfig
    from dlperf.optimize.search import optimize_workload as optimize_workload
    from dlperf.profile.session import ProfileConfig as ProfileConfig
    from dlperf.profile.session import profile_workload as profile_workload
    from dlperf.report.build import build_report as build_report
    from dlperf.report.build import write_report as write_report
    from dlperf.serve.service import ServeConfig as ServeConfig
    from dlperf.store.db import Store as Store
    from dlperf.testing import assert_no_regression as assert_no_regression
    from dlperf.train.loop import StepConfig as StepConfig
    from dlperf.train.tune import TuneConfig as TuneConfig
    from dlperf.train.tune import tune as tune
    from dlperf.workload.base import EvalSpec as EvalSpec
    from dlperf.workload.base import TrainSpec as TrainSpec
    from dlperf.workload.base import Workload as Workload
    from dlperf.workload.loader import load_workload as load_workload

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
    "compare_records": "dlperf.compare.runs",
    "build_report": "dlperf.report.build",
    "write_report": "dlperf.report.build",
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
