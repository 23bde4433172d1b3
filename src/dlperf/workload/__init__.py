"""Workloads: what dlperf measures, from the user's file, an nn.Module, or the built-in zoo."""

from dlperf.workload.base import EvalSpec, Inputs, Predict, TrainSpec, Workload, describe_inputs
from dlperf.workload.loader import from_module, load_workload

__all__ = [
    "EvalSpec",
    "Inputs",
    "Predict",
    "TrainSpec",
    "Workload",
    "describe_inputs",
    "from_module",
    "load_workload",
]
