"""The curated public API: every name resolves, and no name is shadowed by a subpackage of the same name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dlperf


def test_every_public_name_resolves() -> None:
    for name in dlperf.__all__:
        assert getattr(dlperf, name) is not None, name


def test_comparing_and_reporting_are_public() -> None:
    """docs/compare.md's Python section uses them; they were reachable only through dlperf.compare.runs and
    dlperf.report.build."""
    from dlperf.compare.runs import compare_records
    from dlperf.report.build import build_report, write_report

    assert {"compare_records", "build_report", "write_report"} <= set(dlperf.__all__)
    assert (dlperf.compare_records, dlperf.build_report, dlperf.write_report) == (compare_records, build_report,
                                                                                  write_report)


def test_write_report_takes_a_str_path_and_refuses_a_missing_folder(tmp_path: Path) -> None:
    dlperf.write_report(str(tmp_path / "r.html"), "<html></html>")
    assert (tmp_path / "r.html").read_text() == "<html></html>"
    with pytest.raises(dlperf.DlperfError, match=r"the folder '.*nope' does not exist; create it or give "
                                                  r"another -o \(path\)$"):
        dlperf.write_report(str(tmp_path / "nope" / "r.html"), "")


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


def test_a_subpackage_is_an_attribute_on_first_use() -> None:
    """docs/train.md's `dlperf.calibrate.get_ceilings("cpu")` after `import dlperf` raised "module 'dlperf' has no
    attribute 'calibrate'" unless something had imported the subpackage; other names still raise."""
    code = ("import sys, dlperf; assert 'dlperf.calibrate' not in sys.modules; "
            "assert callable(dlperf.calibrate.get_ceilings); assert not hasattr(dlperf, 'nope')")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bench_records_the_thread_count_it_ran_at(tmp_path: object) -> None:
    import torch

    from dlperf.store.db import Store

    store = f"{tmp_path}/runs.db"
    before = torch.get_num_threads()
    target = 1 if before > 1 else 2
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), threads=target, min_duration_s=0.0, min_iters=3,
                 warmup_iters=0, store=store)
    (record,) = Store(store).list()
    assert record.environment["torch_threads"] == target and record.config["threads"] == target
    assert torch.get_num_threads() == before


def test_bench_with_a_minimum_duration_over_the_default_cap_raises_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # as `dlperf bench --min-duration 5m`; it was a ConfigError about max_duration_s, which bench() does not take
    import torch

    from dlperf import api

    seen = []
    monkeypatch.setattr(api, "run_bench", lambda workload, config: seen.append(config))
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), min_duration_s=300.0)
    assert seen[0].timer.min_duration_s == 300.0 and seen[0].timer.max_duration_s == 300.0
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), min_duration_s=0.5)
    assert seen[1].timer.max_duration_s == 120.0
    dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), min_iters=2_000_000)  # over the 1,000,000-call cap
    assert seen[2].timer.min_iters == 2_000_000 and seen[2].timer.max_iters == 2_000_000


def test_bench_refuses_batch_sizes_a_latency_scenario_would_ignore() -> None:
    # single-stream ran batch 1 and returned it as if batch 8 had been measured, with nothing said
    import torch

    from dlperf.errors import ConfigError

    with pytest.raises(ConfigError, match=r"batch_sizes \(8,\) is for the offline scenario; single-stream runs"):
        dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), scenario="single-stream", batch_sizes=(8,))
    with pytest.raises(ConfigError, match="multi-stream runs batch 8"):
        dlperf.bench(torch.nn.Linear(4, 2), (torch.ones(2, 4),), scenario="multi-stream", batch_sizes=(8,))
    with pytest.raises(ConfigError, match="unknown scenario 'burst'"):
        dlperf.bench(torch.nn.Linear(4, 2), scenario="burst")


def test_bench_of_an_in_memory_module_from_a_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every in-memory module was recorded as workload 'python' (one history for unrelated models; the new
    workload_key even made a path of it), the result had no run id to set a baseline with and printed every sample;
    a model working in place changed the caller's inputs; the latency scenarios recorded the example's batch."""
    import torch

    from dlperf.errors import ConfigError, WorkloadError
    from dlperf.store import Store

    class InPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.add_(1)

    store = str(tmp_path / "runs.db")
    x = torch.zeros(4, 3)
    result = dlperf.bench(InPlace(), (x,), min_duration_s=0.01, min_iters=5, store=store)
    assert torch.equal(x, torch.zeros(4, 3))  # the caller's tensor untouched
    (record,) = Store(store).list()
    assert record.workload == "python:InPlace" and "workload_key" not in record.config
    assert result.run_id == record.id and len(repr(result)) < 200 and record.id in repr(result)
    single = dlperf.bench(torch.nn.Linear(3, 3), (torch.randn(4, 3),), scenario="single-stream", min_duration_s=0.01)
    assert [p.batch_size for p in single.points] == [1] and single.config.batch_sizes is None
    with pytest.raises(ConfigError, match="batch_sizes is empty"):
        dlperf.bench(torch.nn.Linear(3, 3), (torch.randn(4, 3),), batch_sizes=())
    # inputs with no batch dimension at all: every figure per item would count batch_size items of one call
    with pytest.raises(WorkloadError, match=r"example inputs hold no tensor batched on dim 0 \(input 0: float32\[\]\)"):
        dlperf.bench(torch.nn.Identity(), (torch.tensor(1.0),), batch_sizes=(8,))


def test_the_api_takes_a_workload_spec_and_a_store_path_where_bench_does(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """profile_workload and tune raised AttributeError on 'zoo:mlp'; optimize on a store path."""
    import dlperf.profile.session as session
    import dlperf.train.tune as tune_module

    seen: list[object] = []

    def stop(workload: object, *args: object, **kwargs: object) -> None:
        seen.append(workload)
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "capture", stop)
    monkeypatch.setattr(tune_module.Tuner, "run", lambda self: stop(self.workload))
    with pytest.raises(KeyboardInterrupt):
        dlperf.profile_workload("zoo:mlp", dlperf.ProfileConfig(), ceilings=object())  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        dlperf.tune("zoo:mlp", dlperf.StepConfig(batch_size=8))
    assert [getattr(w, "name", None) for w in seen] == ["mlp", "mlp"]
    from dlperf.optimize.search import _find_resumable  # the first use of the store

    monkeypatch.setattr("dlperf.optimize.search._find_resumable",
                        lambda store, *a: stop(store) if not hasattr(store, "list") else _find_resumable(store, *a))
    with pytest.raises(KeyboardInterrupt):
        from dlperf.optimize.search import OptimizeConfig, optimize

        optimize("zoo:mlp", OptimizeConfig(passes=("hygiene",), max_depth=1), store=str(tmp_path / "o.db"),
                 on_event=lambda kind, data: stop(kind) if kind == "start" else None)
    assert seen[-1] == "start"  # reached the search with the path made a Store


def test_wrong_argument_types_are_dlperfs_errors_named_by_argument() -> None:
    """None, '2', 8 or a dict where a number, a tuple or a config goes came out as TypeError/AttributeError from
    deep inside (or, for ab_test's items_per_call, only after the whole A/B had run)."""
    import torch

    from dlperf.errors import ConfigError

    model, x = torch.nn.Linear(8, 2), (torch.randn(2, 8),)
    cases: list[tuple[dict[str, Any], str]] = [({"min_duration_s": None}, "min_duration_s must be a number, got None"),
                            ({"threads": "2"}, "threads must be an integer >= 1 or None, got '2'"),
                            ({"batch_sizes": 8}, r"batch sizes must be a tuple of integers, e.g. \(1, 8\), got 8"),
                            ({"batch_sizes": (1.5,)}, "batch sizes must be a tuple of integers"),
                            ({"device": 0}, "device must be a string")]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            dlperf.bench(model, x, **kwargs)
    calls = [0]

    def count() -> None:
        calls[0] += 1

    with pytest.raises(ConfigError, match="items_per_call must be an integer >= 1, got 0"):
        dlperf.ab_test(count, count, items_per_call=0)
    assert calls == [0]  # refused before anything ran
    with pytest.raises(ConfigError, match=r"config must be a dlperf\.ABConfig, got dict"):
        dlperf.ab_test(count, count, {"blocks": 4})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="warmup_iters must be >= 0"):
        dlperf.ABConfig(warmup_iters=-1)
    assert dlperf.ab_test(count, count, dlperf.ABConfig(blocks=4, iters_per_block=2, warmup_iters=0)).a.n == 8


def test_a_meta_model_and_a_path_that_is_not_one_are_named() -> None:
    import torch

    from dlperf.errors import OptimizeError, WorkloadError

    with pytest.raises(WorkloadError, match="its model's weights are on the 'meta' device"):
        dlperf.bench(torch.nn.Linear(4, 4).to("meta"), (torch.randn(2, 4),), min_duration_s=0.01)
    with pytest.raises(OptimizeError, match=r"dlperf\.load takes the path of an artifact folder .*, got NoneType"):
        dlperf.load(None)


def test_the_search_is_public_beside_its_package() -> None:
    """`dlperf.optimize` is the package; `dlperf.optimize(...)` raised "'module' object is not callable" and no
    public name led to the search."""
    from dlperf.optimize.search import optimize

    assert dlperf.optimize_workload is optimize and "optimize_workload" in dlperf.__all__


def test_every_entry_point_names_a_config_or_callable_of_the_wrong_type(tmp_path: Path) -> None:
    """A dict config, a non-callable or an int baseline came out as AttributeError/TypeError from deep inside
    (time_callable's even as "the measured call raised AttributeError"), and profile_workload alone required its
    config where the other entry points default theirs."""
    from dlperf.errors import ConfigError

    calls = [0]

    def count() -> None:
        calls[0] += 1

    with pytest.raises(ConfigError, match=r"config must be a dlperf\.TimerConfig, got dict"):
        dlperf.time_callable(count, {"min_duration_s": 0.1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"fn must be a function to call, got int: pass `lambda: model\(x\)`"):
        dlperf.time_callable(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="items_per_call must be an integer >= 1, got 0"):
        dlperf.time_callable(count, items_per_call=0)
    assert calls == [0]  # refused before anything ran
    with pytest.raises(ConfigError, match=r"config must be a dlperf\.ProfileConfig, got dict"):
        dlperf.profile_workload("zoo:mlp", {"verify": True})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"config must be a dlperf\.OptimizeConfig, got dict"):
        dlperf.optimize_workload("zoo:mlp", {"time_budget_s": 5}, store=tmp_path / "runs.db")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"baseline must be a dlperf\.StepConfig, e\.g\. StepConfig\(batch_size=32\), "
                                          "or None for the workload's own, got int"):
        dlperf.tune("zoo:mlp", 32)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"config must be a dlperf\.TuneConfig, got dict"):
        dlperf.tune("zoo:mlp", dlperf.StepConfig(batch_size=8), {"knobs": ("threads",)})  # type: ignore[arg-type]
    assert inspect.signature(dlperf.profile_workload).parameters["config"].default is None


def test_a_type_checker_sees_every_public_name_with_its_own_type() -> None:
    """The names are imported lazily through `__getattr__`, which returns Any: `dlperf.bench(...)` was Any to mypy
    and IDEs despite py.typed, so a typo in `result.pionts` passed a type check. An `if TYPE_CHECKING:` block imports
    each name from the module `_API` says defines it."""
    import ast

    tree = ast.parse(Path(dlperf.__file__).read_text())
    block = next(node for node in tree.body
                 if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    seen = {alias.asname or alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == dlperf._API
