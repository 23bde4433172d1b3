"""The notebook-friendly API: `dlperf.bench(model, example_inputs)` and `dlperf.load(artifact_dir)`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError
from dlperf.measure.bench import BenchConfig, BenchResult, run_bench
from dlperf.measure.scenarios import scenario as scenario_of
from dlperf.measure.timer import TimerConfig
from dlperf.workload.base import Workload
from dlperf.workload.loader import load_workload, split_canonical


def bench(
    model: Any,
    example_inputs: Any = None,
    *,
    batch_sizes: tuple[int, ...] | None = None,
    scenario: str = "offline",
    device: str | None = None,
    threads: int | None = None,
    precision: str = "fp32",
    min_duration_s: float = 1.0,
    min_iters: int | None = None,
    warmup_iters: int = 5,
    store: Any = None,
) -> BenchResult:
    """Benchmark a workload spec ('zoo:mlp', 'file.py:name'), a Workload, or an nn.Module with inputs.

    `min_iters` defaults to the scenario's (`Scenario.default_min_iters`): 10, or 44 and 459 calls for the
    single- and multi-stream scenarios, so their p90/p99 headline can be bounded at 99% confidence.

    `batch_sizes` is the offline scenario's sweep; single-stream runs batch 1 and multi-stream batch 8, so giving
    it with either is a ConfigError (`dlperf bench` prints a note and goes on; here nothing would be printed).

    `device` defaults to an exported artifact's own (as `dlperf bench DIR` does), else the CPU.

    With `store` (a path, URL or Store) the run is recorded there too.
    """
    from dlperf.optimize.artifact import default_device

    device = default_device(model, _device_arg(device))
    fixed = scenario_of(scenario).batch_sizes(None)
    if batch_sizes is not None and scenario != "offline":
        raise ConfigError(f"batch_sizes {tuple(batch_sizes)} is for the offline scenario; {scenario} runs batch "
                          f"{fixed[0]}: leave batch_sizes out, or use scenario='offline'")
    if isinstance(batch_sizes, (tuple, list)) and not batch_sizes:  # () measured the defaults 1, 8, 32 silently
        raise ConfigError("batch_sizes is empty: give at least one batch size, or leave it out")
    workload = bench_workload(model, example_inputs, threads=threads, precision=precision, device=device)
    batch_sizes = artifact_batch_sizes(model, batch_sizes, scenario)
    if batch_sizes is None and example_inputs is not None and scenario == "offline":
        # (the single- and multi-stream scenarios fix their own batch: recorded as this, they ran another)
        batch_sizes = (workload.default_batch_size,)
    if min_iters is None:
        min_iters = scenario_of(scenario).default_min_iters
    config = BenchConfig(
        batch_sizes=batch_sizes, scenario=scenario, device=device, threads=threads, precision=precision,
        timer=TimerConfig.at_least(min_duration_s, min_iters, warmup_iters),
    )
    if store is None:
        return run_bench(workload, config)
    from dlperf.store.db import Store

    st = store if isinstance(store, Store) else Store(store, create=True)
    in_memory = workload.source in (None, "", "python")
    name = recorded_name(workload)
    recorded = bench_config_dict(config, None if in_memory else workload.source)
    artifact = artifact_settings(model)
    if artifact is not None:  # as `dlperf bench DIR` records it
        recorded["artifact"] = artifact
    environment = bench_environment(config, None if in_memory else workload.source)
    with st.recording("bench", name, recorded, environment) as run:
        result = run_bench(workload, config)
        run.result = result.to_dict()
    result.run_id = run.id  # for `dlperf baseline set` of the run just recorded
    return result


def recorded_name(workload: Workload) -> str:
    """The workload name a bench or check run of `workload` is stored under: its spec, or `python:NAME` for one made
    in memory (a module, or a `Workload` built in code), which has no spec ('python' for every one mixed them in one
    history: its name says more)."""
    if workload.source in (None, "", "python"):
        return f"python:{workload.name}"
    return str(workload.source)


def bench_workload(spec: Any, example_inputs: Any = None, *, threads: int | None = None, precision: str = "fp32",
                   device: str = "cpu") -> Workload:
    """What `bench` measures: a workload (`load_workload`), or an artifact folder exported by `dlperf optimize`
    (`artifact_workload`: the loaded artifact on its workload's inputs; an engine artifact runs at `threads` of
    its own, in the precision and on the device it was exported for, so other ones are refused). A device this
    machine lacks is refused in the library's words (`dlperf bench` checks it before)."""
    from dlperf._device import check_device
    from dlperf.optimize.artifact import manifest_at

    manifest = manifest_at(spec)
    if manifest is not None:
        from dlperf.errors import OptimizeError
        from dlperf.optimize.artifact import artifact_workload, check_artifact_device

        folder = Path(spec)
        engine = str(manifest["engine"])
        if engine != "torch" and precision != "fp32":
            raise ConfigError(f"--precision {precision} (precision={precision!r}): the {engine} artifact '{spec}' runs "
                              "in the precision it was exported in; leave --precision (precision) out (optimize's "
                              "precision pass makes a bf16/fp16 one)")
        try:
            check_artifact_device(folder, manifest, device)
        except OptimizeError as exc:
            raise ConfigError(str(exc)) from exc
        check_device(device, f"device={device!r}")  # before a torch recipe is rebuilt there
        # a torch recipe is rebuilt on the device measured (it stayed on the export's: a GPU recipe got CPU inputs)
        workload: Workload = artifact_workload(folder, threads if engine != "torch" else None,
                                               device if engine == "torch" else None)
        return workload
    check_device(device, f"device={device!r}")
    return load_workload(spec, example_inputs)


def artifact_settings(spec: Any) -> dict[str, Any] | None:
    """What a bench run of an artifact folder records of it: its engine, its label ('onnxruntime(precision=int8-
    dynamic)' where optimize exported it), and the artifact's precision, which is the one it runs in (bench's
    `precision` is torch autocast's, and read 'fp32' for an int8 artifact), and the intra-op threads it runs with
    when none are given (those it was exported with, at most this machine's CPUs: an artifact of `optimize --threads
    1` ran on 1 thread under an environment line of torch's 2, with nothing saying so), and the workload and
    optimize run it came from where its manifest names them. None for a workload."""
    from dlperf.optimize.artifact import manifest_at, own_threads

    manifest = manifest_at(spec)
    if manifest is None:
        return None
    engine = str(manifest["engine"])
    # a torch recipe records it since 2026-12-06; bench's own (torch autocast's) setting applies to an older one
    precision = manifest.get("precision")
    # its lineage: the workload `dlperf optimize` made it from and that run, so `dlperf compare` of it against a bench
    # of that workload reads as the optimization compared, not as "different workloads" (None where not exported)
    return {"engine": engine, "label": manifest.get("label"), "precision": precision,
            "threads": own_threads(manifest) if engine != "torch" else None,
            "source_workload": manifest.get("workload"), "optimize_run_id": manifest.get("run_id")}


def artifact_batch_sizes(spec: Any, batch_sizes: Any, scenario: str = "offline") -> Any:
    """The offline sweep for an artifact whose engine runs some batch sizes only (a TensorRT engine's
    `batch_range`): the sizes given when it runs them (else a ConfigError naming its range), or the default sweep cut
    to it. A latency scenario's own batch (1, or 8 for multi-stream) is checked the same way, and `batch_sizes`
    returned as given, as it is for anything else (None: the default sweep; BenchConfig checks them)."""
    from dlperf.errors import OptimizeError
    from dlperf.optimize.artifact import batch_sizes_for, manifest_at

    manifest = manifest_at(spec)
    if manifest is None:
        return batch_sizes
    folder = Path(spec)
    try:
        if scenario != "offline":
            batch_sizes_for(folder, manifest, scenario_of(scenario).batch_sizes(None), ())
            return batch_sizes
        return batch_sizes_for(folder, manifest, batch_sizes, scenario_of("offline").batch_sizes(None))
    except OptimizeError as exc:
        raise ConfigError(str(exc)) from exc


def bench_environment(config: BenchConfig, spec: str | None = None) -> dict[str, Any]:
    """The environment a bench run is recorded with: the thread count it ran at, not torch's default, and the git
    commit of the checkout holding the workload's file (`spec`'s, where it names one; else the working folder's):
    run from another repository, a bench recorded that one's commit, code it did not measure."""
    import os

    from dlperf.measure.env import capture_environment
    from dlperf.workload.loader import split_canonical

    parts = split_canonical(spec) if spec else None
    folder = os.path.dirname(os.path.abspath(parts[0])) if parts is not None else None
    return capture_environment(config.device, config.threads,
                               folder if folder is not None and os.path.isdir(folder) else None).to_dict()


def bench_config_dict(config: BenchConfig, workload: str | None = None) -> dict[str, Any]:
    """A bench or check run's config as stored; with `workload` (the spec measured), its `workload_key`: the spec as
    it names the workload from any folder (`canonical_spec`), which histories and check match runs by."""
    import dataclasses

    data = dataclasses.asdict(config)
    data["version"] = 1
    if workload:
        from dlperf.workload.loader import canonical_spec

        data["workload_key"] = canonical_spec(workload)
    return data


def load(path: Any, threads: int | None = None, device: str | None = None) -> Any:
    """Load an artifact exported by `dlperf optimize --export DIR` as a callable with the model's interface.
    `threads`: an engine artifact's (onnxruntime, OpenVINO) intra-op threads instead of those it was exported with,
    as `dlperf serve --threads` sets them; a torch artifact runs with torch's, which the caller sets. `device`: where
    a torch recipe is rebuilt (default: the device it was exported on); an engine artifact runs on its own only."""
    from dlperf.optimize.artifact import load_artifact

    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""
    if text.startswith("zoo:") or (split_canonical(text) is not None and not os.path.isdir(text)):
        # the two loaders' names are alike: 'artifact folder 'zoo:mlp' does not exist' did not say which one was meant
        from dlperf.errors import OptimizeError

        raise OptimizeError(f"dlperf.load loads an artifact folder written by dlperf optimize --export; '{text}' is a "
                            f"workload: load it with dlperf.load_workload({text!r})")
    return load_artifact(path, threads=threads, device=_device_arg(device))


def _device_arg(device: Any) -> str | None:
    """`device` as `bench` and `load` take it: a string, or None for the artifact's own (a 0 would have been taken
    as no device given)."""
    if device is not None and not isinstance(device, str):
        raise ConfigError(f"device must be a string such as 'cpu' or 'cuda:0', got {type(device).__name__}")
    return device
