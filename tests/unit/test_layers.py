"""The layer rule of docs/architecture.md: data flows one way, so no module imports from a layer above its own, at
module level or inside a function. Every import of dlperf's is read from the source (ast), none is executed."""

from __future__ import annotations

import ast
from pathlib import Path

import dlperf

SRC = Path(dlperf.__file__).parent

TIERS: dict[str, int] = {
    # the helpers every layer may use
    **dict.fromkeys(("errors", "_cache", "_device", "_files", "_findings", "_stdio", "_thirdparty"), 0),
    "workload": 1,
    "measure": 2,
    "store": 2,
    "calibrate": 3,  # the machine's ceilings, measured with measure's timer; read by passes, profile and train
    "passes": 4,
    # the commands' libraries, which may use each other (serve loads optimize's artifacts, report renders their
    # records, optimize runs its trials on ray)
    **dict.fromkeys(("optimize", "profile", "serve", "loadgen", "train", "compare", "report", "ray", "testing",
                     "api"), 5),
    "cli": 6,
    "__init__": 6,  # the curated public API imports from every layer (lazily)
    "__version__": 0,  # `from dlperf import __version__`: a constant of the package, imported before any module of it
}
"""A top-level module or package of src/dlperf and its tier: a module imports from its own tier or the ones below."""

EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(importing module, imported module) -> why this import goes up a layer. Each one must still be in the source."""


def layer_of(module: str) -> str:
    """The layer of a dotted name inside dlperf: 'dlperf.measure.bench' -> 'measure', 'dlperf' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """The dlperf modules the source of `module` imports anywhere in it, as dotted names (relative imports
    resolved against `module`'s package)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "dlperf"}
        elif isinstance(node, ast.ImportFrom):
            base = (package[:len(package) - node.level + 1] if node.level else []) + (
                node.module.split(".") if node.module else [])
            if base and base[0] == "dlperf":
                name = ".".join(base)
                # `from dlperf import errors` imports the module dlperf.errors, `from dlperf import bench` the API
                found |= {f"{name}.{a.name}" if name == "dlperf" and a.name in TIERS else name for a in node.names}
    return found


def upward_imports() -> dict[tuple[str, str], str]:
    """(importing module, imported module) -> 'layer (tier) -> layer (tier)' for every import that goes up."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        mine = layer_of(module)
        for imported in imports_of(path.read_text(), module, path.name == "__init__.py"):
            theirs = layer_of(imported)
            if TIERS[theirs] > TIERS[mine]:
                found[module, imported] = f"{mine} ({TIERS[mine]}) -> {theirs} ({TIERS[theirs]})"
    return found


def test_every_layer_has_a_tier() -> None:
    layers = {"__version__"} | {p.stem if p.is_file() else p.name for p in SRC.iterdir()
              if (p.suffix == ".py" or (p / "__init__.py").is_file())}
    assert layers == set(TIERS), "a new top-level module or package needs its tier in TIERS"


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = upward_imports()
    unexplained = {k: v for k, v in upward.items() if k not in EXCEPTIONS}
    assert not unexplained, f"imports against the layer order (move the code down, or list it in EXCEPTIONS): " \
                            f"{unexplained}"
    assert not set(EXCEPTIONS) - set(upward), "an exception no longer in the source: take it out of EXCEPTIONS"


def test_the_reader_sees_function_level_and_relative_imports() -> None:
    # the import this test was written for sat inside a method: measure's BenchResult.warnings imported report
    source = """
from dlperf.errors import ConfigError
from . import clock
from .stats import Measurement

class Result:
    def warnings(self):
        from dlperf.report.terminal import bench_warnings
        import dlperf.serve.app
        from dlperf import errors, bench, __version__
"""
    assert imports_of(source, "dlperf.measure.bench") == {
        "dlperf.errors", "dlperf.measure", "dlperf.measure.stats", "dlperf.report.terminal", "dlperf.serve.app",
        "dlperf", "dlperf.__version__"}
    assert imports_of("from ..workload import base\nfrom . import x\n", "dlperf.measure", is_package=True) == {
        "dlperf.workload", "dlperf.measure"}
