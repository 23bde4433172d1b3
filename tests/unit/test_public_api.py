"""The curated public API: every name resolves, and no name is shadowed by a subpackage of the same name."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import dlperf


def test_every_public_name_resolves() -> None:
    for name in dlperf.__all__:
        assert getattr(dlperf, name) is not None, name


def test_no_public_name_is_also_a_subpackage() -> None:
    # importing dlperf.X sets the attribute dlperf.X to the module, which would hide a function called X
    subpackages = {info.name for info in pkgutil.iter_modules(dlperf.__path__)}
    assert not subpackages & set(dlperf.__all__)


def test_load_stays_the_artifact_loader_after_every_subpackage_is_imported() -> None:
    for info in pkgutil.iter_modules(dlperf.__path__):
        if info.name not in {"ray", "__main__"}:
            importlib.import_module(f"dlperf.{info.name}")
    assert callable(dlperf.load) and dlperf.load.__module__ == "dlperf.api"


def test_import_dlperf_does_not_import_torch() -> None:
    code = "import sys, dlperf; dlperf.__all__; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
