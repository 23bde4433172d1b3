"""The search space: discover pass modules, list their configs, and grow pipelines stage by stage.

A pipeline is a tuple of pass configs in canonical order (stage, then `order`, then discovery order),
with at most one config per pass and at most one engine pass, always last. The search grows pipelines
one pass at a time from pipelines that already met the constraints (`extensions`), so a prefix that
fails accuracy or is slower is never extended.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import math
import pkgutil
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import TORCH_TENSORRT_INSTALL, ConfigError, OptimizeError
from dlperf.passes.base import PassConfig, PassContext, registered

if TYPE_CHECKING:
    from dlperf.workload.base import Workload

STAGES = ("prepare", "transform", "engine")


@dataclass(frozen=True)
class Candidate:
    """One pipeline of pass configs; the empty pipeline is the baseline."""

    configs: tuple[PassConfig, ...] = ()

    @property
    def is_baseline(self) -> bool:
        return not self.configs

    @property
    def label(self) -> str:
        return "baseline" if not self.configs else " + ".join(c.label() for c in self.configs)

    @property
    def pass_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.configs)

    def to_list(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.configs]

    @property
    def key(self) -> str:
        """Stable id of the pipeline (a hash of its configs), used to resume and to name artifacts."""
        text = json.dumps(self.to_list(), sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    @property
    def prefix(self) -> Candidate:
        return Candidate(self.configs[:-1])


@dataclass
class PassOption:
    """A config the space offers, with the module it came from and, when it was left out, why."""

    config: PassConfig
    module: str


@dataclass
class SearchSpace:
    options: list[PassOption]
    # 'pass name: reason' for modules whose search_space offered nothing or failed.
    skipped: list[str]

    @property
    def configs(self) -> list[PassConfig]:
        return [o.config for o in self.options]


def pass_module_names() -> list[str]:
    """Every module of dlperf.passes except the interface."""
    import dlperf.passes as pkg

    names = (m.name for m in pkgutil.iter_modules(pkg.__path__))
    return sorted(f"dlperf.passes.{n}" for n in names if n != "base" and not n.startswith("_"))


def import_module(name: str) -> Any:
    """Import a pass module by dotted name or by file path (for test-only or user pass modules)."""
    if name.endswith(".py"):
        path = Path(name).resolve()
        mod_name = f"dlperf_passes_ext_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"pass module file '{name}' cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            # else the half-run module stayed cached: the next import of the file "succeeded" without its passes
            del sys.modules[mod_name]
            raise
        return module
    return importlib.import_module(name)


def load_pass_modules(extra: Sequence[str] = ()) -> list[tuple[str, Any]]:
    """Import the built-in pass modules and `extra` ones. A built-in module whose optional library is missing at
    import time is skipped (its passes are absent); one that fails on a name of dlperf's own (a new pass's misspelt
    import), or an `extra` module named explicitly, is an OptimizeError naming the module: skipped, its passes
    vanished and `--passes NAME` answered only "unknown passes NAME"."""
    loaded = []
    for name in [*pass_module_names(), *extra]:
        try:
            loaded.append((name, import_module(name)))
        except ImportError as exc:
            if name not in extra and (exc.name or "").split(".")[0] != "dlperf":
                continue
            raise OptimizeError(f"pass module '{name}' failed to import: {type(exc).__name__}: {exc}") from exc
    return loaded


def config_types() -> dict[str, type[PassConfig]]:
    """pass name -> config class, from the registry (after load_pass_modules)."""
    return {cls.name: cls for cls in registered()}


def config_from_dict(data: dict[str, Any]) -> PassConfig:
    """Rebuild a config saved with `to_dict()`; a wrong version or unknown pass fails with a clear message."""
    name = data.get("pass")
    cls = config_types().get(str(name))
    if cls is None:
        raise OptimizeError(
            f"pass '{name}' is not known to this dlperf: it may need an extra (pip install 'dlperf[all]') "
            "or a newer dlperf"
        )
    version = int(data.get("version", 1))
    if version != cls.version:
        raise OptimizeError(
            f"pass '{name}' was saved with config version {version}, but this dlperf has version "
            f"{cls.version}: re-run `dlperf optimize` to rebuild the artifact"
        )
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in fields}
    return cls(**{**cls.saved_defaults, **kwargs})


def candidate_from_list(items: Iterable[dict[str, Any]]) -> Candidate:
    return Candidate(tuple(config_from_dict(d) for d in items))


def build_space(workload: Workload, ctx: PassContext, only: Sequence[str] | None = None,
                extra_modules: Sequence[str] = ()) -> SearchSpace:
    """Ask every pass module for the configs worth trying on this workload."""
    options: list[PassOption] = []
    skipped: list[str] = []
    built: list[Any] = []  # the workload's initial state, built once if a reason needs it
    modules = load_pass_modules(extra_modules)
    # pass names each module registered, so `only` skips the search spaces of the others (they can be slow)
    names_by_module: dict[str, set[str]] = {}
    for cls in registered():
        names_by_module.setdefault(cls.__module__, set()).add(cls.name)
    for name, module in modules:
        fn = getattr(module, "search_space", None)
        if only and not names_by_module.get(module.__name__, set()) & set(only):
            continue
        # a user's pass module file by its stem: "/x/my_passes.py" was "py" in the skipped lines
        short = Path(name).stem if name.endswith(".py") else name.rsplit(".", 1)[-1]
        if fn is None:
            # a module of passes without one was left out unsaid: "no pass offered a configuration (see the skipped
            # passes)" and no pass listed; a module of no pass (sensitivity.py) has nothing to say
            if names_by_module.get(module.__name__):
                skipped.append(f"{short}: not applicable: its module defines no search_space(workload, ctx), so the "
                               "search has no configuration of it to try")
            continue
        try:
            configs = list(fn(workload, ctx))
        except Exception as exc:
            skipped.append(f"{short}: its search space failed: {type(exc).__name__}: {exc}")
            continue
        if not configs:
            reason = getattr(module, "UNAVAILABLE_REASON", None) or missing_library(short)
            if not reason and only:  # named in --passes: worth building the model to say why
                reason = _why_nothing_offered(module.__name__, workload, ctx, built)
            reason = reason or (f"it offers no configuration for this workload (kind '{workload.kind}') on "
                                f"{ctx.device}")
            skipped.append(f"{short}: not applicable: {reason}")
            continue
        for config in configs:
            options.append(PassOption(config, name))
    if only:
        wanted = set(only)
        known = {o.config.name for o in options} | {s.split(":", 1)[0] for s in skipped}
        unknown = sorted(wanted - known - set(config_types()))
        if unknown:
            raise _unknown_passes(unknown, wanted)
        options = [o for o in options if o.config.name in wanted]
    options.sort(key=lambda o: sort_key(o.config))
    return SearchSpace(options, skipped)


def check_pass_names(only: Sequence[str] | None, extra_modules: Sequence[str] = ()) -> None:
    """A ConfigError for a name in `only` (`--passes`) that no pass module registers, with the closest known one;
    cheap (it imports the pass modules, not the workload), so the search and the CLI call it before the workload
    loads: `--passes onnxruntim` was refused only after "loading the workload took 2.0 s"."""
    if not only:
        return
    load_pass_modules(extra_modules)
    unknown = sorted(set(only) - set(config_types()))
    if unknown:
        raise _unknown_passes(unknown, set(only))


def _unknown_passes(unknown: Sequence[str], wanted: set[str]) -> ConfigError:
    """The error for `--passes` names that are no pass: the known ones, and for each name the pass it is a
    configuration label of, or the pass it is a typo of."""
    import difflib

    names = sorted(set(config_types()))
    bases = {n: re.split(r"[(:]", n, maxsplit=1)[0] for n in unknown}
    # a label copied from the report's table, `onnxruntime(precision=int8-dynamic)`, was only "unknown"
    named = [base for base in bases.values() if base in names and base not in wanted]
    hint = (f"; --passes takes pass names, not configurations: give {', '.join(named)}: the search tries "
            "each configuration a pass offers for the workload" if named else "")
    guesses = {n: close[0] for n, base in bases.items()
               if base not in names and (close := difflib.get_close_matches(base, names, n=1))}
    if len(unknown) == 1 and guesses:
        hint += f"; did you mean {guesses[unknown[0]]}?"
    elif guesses:
        hint += f"; did you mean {', '.join(f'{g} for {n}' for n, g in guesses.items())}?"
    return ConfigError(f"--passes (passes) names unknown passes {', '.join(unknown)}: known passes are "
                       f"{', '.join(names)}{hint}")


def _why_nothing_offered(module_name: str, workload: Workload, ctx: PassContext, built: list[Any]) -> str | None:
    """Why a pass module's search space offered nothing: what its passes' `applicable` says of their default
    configs on the workload's model (`built` caches that model's state), or None."""
    from dlperf.passes.base import initial_state, why_not

    for cls in registered():
        if cls.__module__ != module_name:
            continue
        try:
            config = cls()
            if not built:
                built.append(initial_state(workload))
            reason = why_not(config, built[0], ctx)
        except Exception:  # a config without defaults, a model that does not build: no reason from here
            continue
        if reason:
            return reason
    return None


def with_metric_budget(space: SearchSpace, max_drop: float) -> SearchSpace:
    """The space with the search's metric budget (`max_drop`, absolute, in the metric's units) handed to the
    configs that search an fp32 fallback against a budget of their own (`keep_fp32="auto"`), so such a pass
    keeps as many layers fp32 as the search's constraint needs: no more (slower), no fewer (rejected).
    Rounded to 1e-6, or to 4 significant digits for a smaller budget, so that candidate keys stay stable from one run
    to the next (resume)."""
    options = []
    budget = round_budget(max_drop)
    for option in space.options:
        config = option.config
        if takes_metric_budget(config):
            config = dataclasses.replace(config, max_metric_drop=budget)  # type: ignore[call-arg]
        options.append(PassOption(config, option.module))
    return SearchSpace(options, list(space.skipped))


def takes_metric_budget(config: PassConfig) -> bool:
    """Whether `config` searches an fp32 fallback against a metric budget of its own (`keep_fp32="auto"`)."""
    return getattr(config, "keep_fp32", None) == "auto" and hasattr(config, "max_metric_drop")


def round_budget(max_drop: float) -> float:
    """A metric budget rounded to 1e-6, or to 4 significant digits below 1e-3 (0 for none left)."""
    budget = max(max_drop, 0.0)
    # 1e-6 alone handed a metric on a small scale no budget: 20% of an MSE of 1.06e-06 became 0.0, so the fallback
    # search kept every layer fp32 ("not applicable: every weighted layer is kept fp32")
    return round(budget, max(6, 3 - math.floor(math.log10(budget)))) if budget > 0 else 0.0


def without_metric_budget(config: PassConfig) -> PassConfig:
    """`config` with its metric budget set to 0: the same pass configuration whatever budget a pipeline hands it."""
    return dataclasses.replace(config, max_metric_drop=0.0) if takes_metric_budget(config) else config  # type: ignore[call-arg]


# pass module -> (the library it needs, what installs it)
LIBRARIES: dict[str, tuple[str, str]] = {
    "onnxruntime": ("onnxruntime", "dlperf[onnx]"),
    "openvino": ("openvino", "dlperf[openvino]"),
    "tensorrt": ("torch_tensorrt", TORCH_TENSORRT_INSTALL),
}


def missing_library(module_short_name: str) -> str | None:
    """'install dlperf[openvino]' when the library a pass module needs is not installed."""
    lib = LIBRARIES.get(module_short_name)
    if lib is None:
        return None
    if importlib.util.find_spec(lib[0]) is None:
        return f"{lib[0]} is not installed: install {lib[1]}"
    return None


def sort_key(config: PassConfig) -> tuple[int, int]:
    stage = STAGES.index(config.stage) if config.stage in STAGES else len(STAGES)
    return stage, config.order


def can_extend(candidate: Candidate, config: PassConfig) -> bool:
    """Whether `config` may follow the pipeline: a new pass, later in canonical order, nothing after an engine."""
    if any(c.name == config.name for c in candidate.configs):
        return False
    if not candidate.configs:
        return True
    last = candidate.configs[-1]
    if last.stage == "engine":
        return False
    if config.stage == "engine" and any(c.before_engine() for c in candidate.configs):
        # The engine would convert the same model as without that pass (or could not convert it at all).
        return False
    if config.sets_precision and any(c.sets_precision for c in candidate.configs):
        # each takes an fp32 model: 'dynamic_int8 + precision' was built to be refused ('already int8')
        return False
    return (sort_key(config), config.name) > (sort_key(last), last.name)


def extensions(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    return [Candidate((*candidate.configs, c)) for c in space.configs if can_extend(candidate, c)]
