"""One exception hierarchy for dlperf; library exceptions are wrapped once, at the boundary."""

from __future__ import annotations


class DlperfError(Exception):
    """Base of every error dlperf raises on purpose. The message says what, where, and how to fix it."""

    exit_code = 2


class DlperfWarning(UserWarning):
    """Something the user should hear that does not stop the work (a cache that cannot be written); the CLI prints
    it as a `warning:` line."""


class ConfigError(DlperfError):
    """A bad option, setting or config value given by the user."""


class WorkloadError(DlperfError):
    """A workload could not be found, loaded, built or run on its example inputs."""


class MeasurementError(DlperfError):
    """A measurement could not be taken (the function raised, no samples, bad timer settings)."""


class CalibrationError(DlperfError):
    """The machine's ceilings could not be measured or read from the cache."""


class PassError(DlperfError):
    """An optimization pass failed while being applied."""


class PassNotApplicable(PassError):
    """A pass does not apply to this workload or environment; the message says why."""


class ProfileError(DlperfError):
    """A profile could not be captured or analysed."""


class OptimizeError(DlperfError):
    """The optimization search could not run or its artifact could not be exported or loaded."""


class ExecutorLost(OptimizeError):
    """The executor lost every place a trial could run (a Ray cluster's nodes gone, a local instance's raylet killed):
    nothing about the candidates, so the next identical search resumes this one, as after an interrupt."""


class ServingError(DlperfError):
    """The server could not start or a request could not be served."""


class LoadGenError(DlperfError):
    """The load generator could not run against the target."""


class StoreError(DlperfError):
    """The run store could not be opened, migrated, read or written."""


class TrainError(DlperfError):
    """The training loop could not be measured or tuned."""


# torch-tensorrt is no dlperf extra: its wheel has to match the installed torch build (dlperf[gpu] is NVML only)
TORCH_TENSORRT_INSTALL = "torch-tensorrt (the build that matches your torch; no dlperf extra brings it)"


class MissingDependency(DlperfError):
    """An optional dependency is not installed; the message names the extra that brings it, or, for a
    library no extra brings, what to install (`install`)."""

    def __init__(self, module: str, extra: str, install: str | None = None) -> None:
        how = install if install is not None else f"it with `pip install 'dlperf[{extra}]'`"
        super().__init__(f"{module} is not installed: install {how}")
        self.module = module
        self.extra = extra


def require_installed(module: str, extra: str) -> None:
    """Raise MissingDependency unless top-level `module` can be imported, without importing it (Ray takes seconds):
    for a command to refuse before it prints its progress or loads anything."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingDependency(module, extra)


def require(module: str, extra: str, install: str | None = None) -> object:
    """Import an optional dependency, or raise MissingDependency with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(module, extra, install) from exc
