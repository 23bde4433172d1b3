"""Export and load optimized artifacts: a folder with the engine's files plus manifest.json.

`load_artifact(dir)` reads manifest.json and dispatches on its "engine" to that engine's loader. Loading
never unpickles code: engines load their native files; torch artifacts are a *recipe*: the original
weights as a state_dict read with `torch.load(weights_only=True)`, the workload spec that builds the
architecture (the user's own workload file or a zoo model: code the user already runs), and the pass
configs (plain JSON) that are applied again on load. See docs/optimize.md for why not pickled modules.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import (
    TORCH_TENSORRT_INSTALL,
    ConfigError,
    OptimizeError,
    PassError,
    PassNotApplicable,
    WorkloadError,
)
from dlperf.measure.env import check_threads, thread_limit, usable_cores
from dlperf.workload.names import tensor_name

if TYPE_CHECKING:
    from dlperf.optimize.evaluate import EvalSettings
    from dlperf.optimize.space import Candidate
    from dlperf.passes.base import ModelState

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
TORCH_FORMAT = "dlperf-torch-recipe"


@dataclass(frozen=True)
class Engine:
    """What dlperf knows of an artifact engine, keyed in `ENGINES` by the manifest's `engine`."""

    loader: str
    """`module:function` that loads the artifact: `function(folder, manifest)` -> the predict callable."""
    install: str = "it with `pip install 'dlperf[all]'`"
    """What to install when the loader's module does not import (words after 'install')."""


ENGINES: dict[str, Engine] = {
    "torch": Engine("dlperf.optimize.artifact:load_torch"),
    "onnxruntime": Engine("dlperf.passes.onnxruntime:load_artifact", "it with `pip install 'dlperf[onnx]'`"),
    "openvino": Engine("dlperf.passes.openvino:load_artifact", "it with `pip install 'dlperf[openvino]'`"),
    "tensorrt": Engine("dlperf.passes.tensorrt:load_artifact", TORCH_TENSORRT_INSTALL),
}
"""The artifact engines `dlperf.load`, `dlperf serve` and the manifest checks know: one row each."""


def io_spec(values: Any, names: Any = (), prefix: str = "input") -> list[dict[str, Any]]:
    """[{"name", "dtype", "shape" (dim 0 = -1: any batch)}] for a tuple of tensors; an unnamed one is `prefix`__i, as
    the engine artifacts and `dlperf serve WORKLOAD` name theirs (`tensor_name`)."""
    spec = []
    for i, value in enumerate(values):
        shape = list(getattr(value, "shape", []))
        if shape:
            shape[0] = -1
        name = names[i] if i < len(names) else tensor_name(prefix, i)
        spec.append({"name": name, "dtype": str(getattr(value, "dtype", "")).replace("torch.", ""),
                     "shape": shape})
    return spec


def last_training_step(candidate: Candidate) -> int:
    """Index of the last pass that trains in the pipeline, or -1."""
    return max((i for i, c in enumerate(candidate.configs) if type(c).trains), default=-1)


def export_state(state: ModelState, candidate: Candidate, settings: EvalSettings,
                 original_weights: dict[str, Any] | None, out_dir: Path,
                 trained_weights: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the candidate's artifact into `out_dir` (its engine's exporter, or a torch recipe)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if state.exporter is not None:
        fields = dict(state.exporter(out_dir))
        if settings.source and settings.source != "python":
            # which workload (and options: zoo:minilm?seq_len=64) it was made from, as a torch recipe says; informative
            # only: an engine artifact is loaded from its own files
            fields.setdefault("workload", settings.source)
    elif state.engine == "torch":
        fields = export_torch_recipe(state, candidate, settings, original_weights, out_dir, trained_weights)
    else:
        raise OptimizeError(f"engine '{state.engine}' set no exporter: its candidates cannot be exported")
    for key in ("engine", "files"):
        if key not in fields:
            raise OptimizeError(f"the exporter of engine '{state.engine}' returned no '{key}' field")
    # the name `dlperf serve` serves it under: the workload's (an engine artifact was served under its folder's name,
    # every candidate of a search's workdir as 'artifact'; a torch recipe under its file's, 'tiny_encoder' for the
    # workload 'tiny-encoder')
    fields.setdefault("name", state.workload.name)
    fields.setdefault("batch_size", settings.batch_size)
    fields.setdefault("device", settings.device)
    write_manifest(out_dir, fields)
    return fields


def export_torch_recipe(state: ModelState, candidate: Candidate, settings: EvalSettings,
                        original_weights: dict[str, Any] | None, out_dir: Path,
                        trained_weights: dict[str, Any] | None = None) -> dict[str, Any]:
    import torch

    workload = state.workload
    source = settings.source
    if not source or source == "python":
        raise OptimizeError(
            f"workload '{workload.name}' was given as an in-memory module, so a torch artifact cannot rebuild "
            "it: define the workload in a file and pass file.py:NAME"
        )
    if original_weights is None:
        raise OptimizeError("the original weights were not kept: export needs settings.export=True")
    torch.save(original_weights, out_dir / "weights.pt")
    files = ["weights.pt"]
    trained_after = last_training_step(candidate)
    if trained_after >= 0:
        if trained_weights is None:
            raise OptimizeError("the weights after training were not kept: cannot export this candidate")
        # Trained weights (fine-tune, distillation, QAT) cannot be replayed: they are saved as they were right
        # after the last training pass, plain tensors only, and loaded there when the recipe is replayed.
        torch.save(trained_weights, out_dir / "trained.pt")
        files.append("trained.pt")
    inputs = workload.example_inputs(settings.batch_size)
    model = workload.build_model().eval()
    with torch.no_grad():
        from dlperf.optimize.evaluate import _flatten

        returned = model(*inputs)
        outputs = _flatten(returned)
    out_names = tuple(workload.output_names)
    if not out_names and isinstance(returned, dict) and len(returned) == len(outputs):
        out_names = tuple(str(k) for k in returned)  # a dict of tensors names its outputs, as an engine's manifest
    fields = {
        "engine": "torch",
        "format": TORCH_FORMAT,
        "files": files,
        "trained_after": trained_after,
        "workload": source,
        "recipe": candidate.to_list(),
        # what the replayed model computes in (int8 after dynamic_int8): `dlperf bench DIR` read bench's own 'fp32'
        "precision": state.precision,
        "inputs": io_spec(inputs, tuple(workload.input_names)),
        "outputs": io_spec(outputs, out_names, "output"),
    }
    if settings.extra_modules:
        # The recipe may use passes of the search's own pass modules: a fresh process must import them to
        # replay it (files by absolute path, as the workload file is).
        fields["pass_modules"] = [str(Path(m).resolve()) if m.endswith(".py") else m for m in settings.extra_modules]
    return fields


def write_manifest(out_dir: Path, fields: dict[str, Any]) -> Path:
    data = {"format_version": FORMAT_VERSION, **fields}
    path = out_dir / MANIFEST
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def read_manifest(path: str | Path) -> dict[str, Any]:
    folder = Path(path)
    file = folder / MANIFEST
    if not folder.exists():
        raise OptimizeError(f"artifact folder '{folder}' does not exist (dlperf optimize --export DIR writes one)")
    if not folder.is_dir():
        raise OptimizeError(f"'{folder}' is a file, not an artifact folder: give the folder that holds {MANIFEST}")
    if not file.exists():
        raise OptimizeError(
            f"'{folder}' is not a dlperf artifact: it has no {MANIFEST} (write one with dlperf optimize --export)"
        )
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise OptimizeError(f"cannot read '{file}': {exc}") from exc
    except ValueError as exc:  # a copy cut short: the JSON parser's message alone said nothing of what to do
        raise OptimizeError(f"'{file}' is not valid JSON ({exc}): the artifact is damaged (a copy cut short?); "
                            "export it again") from exc
    if not isinstance(data, dict) or "engine" not in data:
        raise OptimizeError(f"'{file}' names no engine: the artifact is damaged; export it again")
    if data["engine"] not in ENGINES:  # bench recorded a failed run ("its model factory raised"), serve refused it
        raise OptimizeError(f"artifact '{folder}' is for engine '{data['engine']}', which this dlperf cannot "
                            f"load (known: {', '.join(ENGINES)})")
    if _is_int(data.get("format_version", 1)) and int(data.get("format_version", 1)) > FORMAT_VERSION:
        raise OptimizeError(f"'{file}' has format version {data['format_version']}, newer than this dlperf "
                            f"reads ({FORMAT_VERSION}): upgrade dlperf")
    _check_fields(file, data)
    files = data.get("files")
    # a folder copied without its weights failed deep in the loader as a model factory's FileNotFoundError
    missing = [f for f in files if isinstance(f, str) and not (folder / f).exists()] if isinstance(files, list) else []
    if missing:
        raise OptimizeError(f"artifact '{folder}' is incomplete: its {MANIFEST} lists {', '.join(missing)}, which "
                            "the folder does not hold: copy the whole folder, or export it again")
    return data


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)


def _tensor_specs(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("dtype"), str)
        and isinstance(d.get("shape"), list) and all(_is_int(n) for n in d["shape"]) for d in value)


def _check_fields(file: Path, data: dict[str, Any]) -> None:
    """Refuse a manifest whose fields the loaders read are missing or of the wrong kind, naming the field: a damaged
    or hand-edited file came out as a KeyError or TypeError from deep inside a loader."""
    problems: list[str] = []

    def need(name: str, ok: Callable[[Any], bool], what: str, required: bool = True) -> None:
        if name not in data:
            if required:
                problems.append(f"field '{name}' is missing")
        elif not ok(data[name]):
            problems.append(f"field '{name}' is {json.dumps(data[name])}, not {what}")

    need("format_version", _is_int, "an integer", required=False)
    need("threads", lambda v: v is None or (_is_int(v) and int(v) >= 1), "a thread count >= 1", required=False)
    need("device", lambda v: isinstance(v, str), "a device name", required=False)
    # every exporter writes both; serve builds the model's interface from them (a torch recipe without them was
    # benched, and served with "has no 'inputs' list")
    need("inputs", _tensor_specs, "a list of {name, dtype, shape}")
    need("outputs", _tensor_specs, "a list of {name, dtype, shape}")
    if data["engine"] == "torch":
        need("workload", lambda v: isinstance(v, str) and bool(v), "a workload spec")
        need("workload_relative", lambda v: isinstance(v, str), "a path", required=False)
        need("pass_modules", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
             "a list of module names or files", required=False)
        need("pass_modules_relative", lambda v: isinstance(v, list) and all(x is None or isinstance(x, str) for x in v),
             "a list of paths", required=False)
        need("recipe", lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v), "a list of passes",
             required=False)
        need("batch_size", lambda v: _is_int(v) and int(v) >= 1, "a batch size >= 1", required=False)
    if data["engine"] == "onnxruntime":
        from dlperf.passes.onnxruntime import OPT_LEVELS

        need("opt_level", lambda v: v in OPT_LEVELS, f"one of {', '.join(OPT_LEVELS)}", required=False)
    if problems:
        raise OptimizeError(f"'{file}': {'; '.join(problems)}: the artifact is damaged or edited; export it again")


def peek_manifest(spec: str | Path) -> dict[str, Any] | None:
    """The manifest of `spec` when it is an artifact folder whose manifest reads, else None: for choices made
    before loading (the allocator, notes); `read_manifest` judges a damaged one when the model loads."""
    file = Path(spec) / MANIFEST
    try:
        data = json.loads(file.read_text()) if file.is_file() else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _load_weights(file: Path, device: str) -> Any:
    """A torch artifact's saved tensors, read without unpickling code; a damaged file is an OptimizeError
    naming it (torch's own message advised loading it with weights_only=False, which runs whatever it holds)."""
    import torch

    try:
        return torch.load(file, map_location=device, weights_only=True)
    except Exception as exc:
        # an UnpicklingError's text is that advice; others (a missing file, a cut zip archive) say what is wrong
        first = "" if isinstance(exc, pickle.UnpicklingError) else next(
            (line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise OptimizeError(f"cannot load {file}: {type(exc).__name__}{': ' + first if first else ''}; it is damaged, "
                            "or not written by dlperf (weights are read as plain tensors, never as code): export the "
                            "artifact again") from exc


def artifact_device(manifest: dict[str, Any]) -> str:
    """The device an artifact was exported for: its manifest's, or its ONNX Runtime provider's (cuda, tensorrt)."""
    provider = str(manifest.get("provider") or "")
    return str(manifest.get("device") or ("cuda" if provider in ("cuda", "tensorrt") else "cpu"))


def manifest_at(spec: Any) -> dict[str, Any] | None:
    """The manifest of the artifact folder `spec` names, or None where `spec` is no such folder (a workload spec, a
    module); a damaged manifest is an OptimizeError (`read_manifest`)."""
    if not isinstance(spec, (str, os.PathLike)) or not (Path(spec) / MANIFEST).is_file():
        return None
    return read_manifest(Path(spec))


def default_device(spec: Any, given: str | None) -> str:
    """The device a command runs `spec` on: the one given, else an exported artifact's own (a torch recipe exported
    on a GPU was rebuilt on the CPU without a word, where an engine artifact was refused), else the CPU."""
    if given:
        return given
    try:  # a damaged manifest is reported where the artifact is loaded
        manifest = manifest_at(spec)
    except OptimizeError:
        return "cpu"
    return artifact_device(manifest).split(":")[0] if manifest is not None else "cpu"


def check_artifact_device(folder: str | Path, manifest: dict[str, Any], device: str, option: str = "--device") -> None:
    """An engine artifact runs on the device it was exported for: another one is an OptimizeError naming it. A torch
    recipe is rebuilt on any device (`load_artifact(device=)`)."""
    engine, made_for = str(manifest["engine"]), artifact_device(manifest)
    if engine != "torch" and device.split(":")[0] != made_for.split(":")[0]:
        # the argument a library caller wrote beside the option (dlperf.bench, dlperf.load, ServeConfig: device=)
        raise OptimizeError(f"{option} {device} (device={device!r}): the {engine} artifact '{folder}' was exported "
                            f"for {made_for}; use it with {option} {made_for} (device={made_for!r})")


def artifact_batch_range(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """The batch sizes an artifact runs (its manifest's `batch_range`, a TensorRT engine's), or None: any."""
    found = manifest.get("batch_range")
    if (isinstance(found, list) and len(found) == 2 and all(isinstance(v, int) and v >= 1 for v in found)
            and found[0] <= found[1]):
        return int(found[0]), int(found[1])
    return None


def batch_sizes_for(folder: str | Path, manifest: dict[str, Any], given: Sequence[int] | None,
                    default: Sequence[int]) -> tuple[int, ...] | None:
    """The batch sizes to measure an artifact at: `given` when it runs them all (else an OptimizeError naming its
    range), or `default` cut to its range; None for an artifact that runs any batch (the caller's sizes stand)."""
    found = artifact_batch_range(manifest)
    if found is None:
        return tuple(given) if given is not None else None
    lo, hi = found
    runs = f"batch {lo} only" if lo == hi else f"batches {lo} to {hi}"
    if given is not None:
        outside = [b for b in given if not lo <= b <= hi]
        if outside:
            raise OptimizeError(f"the {manifest.get('engine')} artifact '{folder}' runs {runs} (its engine was built "
                                f"for them), not {', '.join(map(str, outside))}: give batch sizes in that range")
        return tuple(given)
    return tuple(b for b in default if lo <= b <= hi) or (lo,)


def load_artifact(path: str | Path, threads: int | None = None, device: str | None = None) -> Callable[..., Any]:
    """A callable with the original model's interface: torch tensors in, torch tensors out. `threads`: an
    engine artifact's intra-op threads instead of those it was exported with, which are capped at the CPUs this
    process may use (a torch artifact runs with torch's, which the caller sets). An engine artifact's callable
    has the threads it runs with as its `threads` attribute. `device`: where a torch recipe is rebuilt and its
    passes replayed, instead of the device it was exported on (`dlperf serve --device`, `bench --device`: the model
    stayed on the export's device while the caller sent inputs to its own, so a GPU recipe failed on CPU inputs);
    an engine artifact is refused on another device (`check_artifact_device`)."""
    if not isinstance(path, (str, os.PathLike)):  # None or a number gave Path's TypeError
        raise OptimizeError(f"dlperf.load takes the path of an artifact folder (dlperf optimize --export DIR), got "
                            f"{type(path).__name__}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise OptimizeError(f"threads must be an integer >= 1 (or None: the artifact's own), got {threads!r}")
    check_threads(threads)
    folder = Path(path)
    manifest = read_manifest(folder)
    if threads is not None or _is_int(manifest.get("threads")):
        manifest = {**manifest, "threads": threads if threads is not None else own_threads(manifest)}
    engine = str(manifest["engine"])
    if device is not None:
        check_artifact_device(folder, manifest, device)
        if engine == "torch":
            manifest = {**manifest, "device": device, "exported_device": artifact_device(manifest)}
    known = ENGINES[engine]  # read_manifest refused an engine it does not know
    module_name, func_name = known.loader.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptimizeError(f"artifact '{folder}' needs {engine}: install {known.install} ({exc})") from exc
    loader = getattr(module, func_name, None)
    if loader is None:
        raise OptimizeError(f"{module_name} defines no {func_name}: this dlperf cannot load {engine} artifacts")
    result: Callable[..., Any] = loader(folder, manifest)
    return result


def own_threads(manifest: dict[str, Any]) -> int | None:
    """The intra-op threads an engine artifact runs with when none are given: those it was exported with, at most the
    CPUs this process may use (exported on a larger machine: ONNX Runtime with 16 threads on 2 cores ran
    zoo:digits-cnn 11x slower), unless torch here is set to as many (the search's A/Bs of a --threads
    oversubscription experiment). None when the manifest records none."""
    if not _is_int(manifest.get("threads")):
        return None
    recorded = int(manifest["threads"])
    return usable_cores() if usable_cores() < recorded != _torch_threads() else recorded


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def load_torch(folder: Path, manifest: dict[str, Any]) -> Callable[..., Any]:
    """Rebuild the model from its workload spec, load the weights (weights_only), re-apply the passes."""

    from dlperf.measure.env import cpu_flags
    from dlperf.optimize.space import candidate_from_list, import_module, load_pass_modules
    from dlperf.passes.base import ModelState, PassContext, apply_pass
    from dlperf.workload.loader import load_workload

    if manifest.get("format") != TORCH_FORMAT:
        raise OptimizeError(f"artifact '{folder}': unknown torch format '{manifest.get('format')}'")
    load_pass_modules()
    modules = manifest.get("pass_modules") or []
    relatives = manifest.get("pass_modules_relative") or [None] * len(modules)
    for name, relative in zip(modules, relatives, strict=False):
        moved = _moved_file(folder, name, relative)
        try:
            import_module(name if moved is None or not os.path.isfile(moved) else moved)
        except Exception as exc:
            also = f" (nor is it at '{moved}', where it was relative to the artifact)" if moved else ""
            raise OptimizeError(f"artifact '{folder}': its recipe replays passes of the module '{name}', which "
                                f"cannot be imported here ({type(exc).__name__}: {exc}){also}") from exc
    spec, moved = _workload_spec(folder, manifest)
    try:
        workload = load_workload(spec)
    except WorkloadError as exc:
        also = f" (nor is it at '{moved}', where it was relative to the artifact)" if moved else ""
        raise OptimizeError(f"artifact '{folder}': its recipe rebuilds the model from the workload "
                            f"'{manifest['workload']}', which does not load here: {exc}{also}") from exc
    device = str(manifest.get("device", "cpu"))
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise OptimizeError(f"artifact '{folder}' was exported for {device}, and this torch sees no CUDA device: "
                                "load it on a GPU machine, or export it again with --device cpu")
    model = workload.build_model().eval()
    weights = _load_weights(folder / "weights.pt", "cpu")
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise OptimizeError(
            f"artifact '{folder}': the weights do not fit the model built by '{manifest['workload']}' "
            f"(did the workload change since the export?): {exc}"
        ) from exc
    model = model.to(device)
    state = ModelState(workload=workload, model=model, predict=model)
    ctx = PassContext(device=device, batch_size=int(manifest.get("batch_size", 1)), cpu_flags=tuple(cpu_flags()),
                      workdir=folder, replay=True)
    trained_after = int(manifest.get("trained_after", -1))
    try:
        configs = candidate_from_list(_replayable(item) for item in manifest.get("recipe", [])).configs
    except ConfigError as exc:  # a value this dlperf refuses anywhere (an edited recipe: threads 0)
        raise OptimizeError(f"artifact '{folder}': its recipe cannot be replayed: {exc}; export it again with "
                            "dlperf optimize") from exc
    for i, config in enumerate(configs):
        try:
            state = apply_pass(config, state, ctx)
        except PassError as exc:  # PassNotApplicable too: said as "precision: not applicable: ...", naming no artifact
            raise OptimizeError(_replay_error(folder, manifest, config.label(), exc)) from exc
        if i == trained_after and state.model is not None:
            trained = _load_weights(folder / "trained.pt", device)
            try:
                state.model.load_state_dict(trained)
            except RuntimeError as exc:
                raise OptimizeError(f"artifact '{folder}': the trained weights do not fit the rebuilt model: "
                                    f"{exc}") from exc
    return state.predict


def _replayable(item: dict[str, Any]) -> dict[str, Any]:
    """A recipe's pass as this machine can build it: hygiene's threads, the physical cores of the machine it was
    exported on, above what this one accepts (`thread_limit`: a recipe from a 128-core machine failed to load on a
    2-CPU one, "hygiene: threads 128 is more than 64") become this machine's CPUs, at most what the replay sets
    anyway (Hygiene.apply caps them there)."""
    threads = item.get("threads")
    if item.get("pass") == "hygiene" and isinstance(threads, int) and threads > thread_limit():
        return {**item, "threads": usable_cores()}
    return item


def _replay_error(folder: Path, manifest: dict[str, Any], label: str, exc: PassError) -> str:
    """Why a recipe's pass does not replay here, naming the artifact and the machine it was exported on: a bf16
    recipe loaded on a CPU without bf16 said only "precision: not applicable: no native bf16 on this CPU ..."."""
    text = str(exc)
    prefix = f"{label}: not applicable: "
    reason = text[len(prefix):] if text.startswith(prefix) else text
    env = manifest.get("environment") if isinstance(manifest.get("environment"), dict) else {}
    cpu = env.get("cpu_model") or env.get("gpu_name") if env else None
    where = f" ({cpu}, where it was exported)" if cpu else ""
    what = "does not apply here" if isinstance(exc, PassNotApplicable) else "fails here"
    exported, device = manifest.get("exported_device"), str(manifest.get("device", "cpu"))
    if exported and str(exported).split(":")[0] != device.split(":")[0]:
        # rebuilt on another device than its export's: the device asked for is the cause, not the machine
        return (f"artifact '{folder}': its recipe replays {label}, which {what} on {device}: {reason}; it was "
                f"exported for {exported}: use it with --device {exported}")
    return (f"artifact '{folder}': its recipe replays {label}, which {what}: {reason}; load it on a machine like "
            f"the one it was measured on{where}, or run dlperf optimize on this one")


def relative_workload(spec: str, folder: Path) -> str | None:
    """The path of a file workload's file relative to the artifact `folder` (None for a zoo workload): a recipe
    records its workload by absolute path, so a project moved whole (cloned elsewhere, copied into a container at
    /app) broke every torch artifact in it."""
    from dlperf.workload.loader import split_canonical

    parts = split_canonical(spec)
    if parts is None or not os.path.isabs(parts[0]):
        return None
    try:
        return os.path.relpath(parts[0], os.path.abspath(folder))
    except ValueError:  # another drive (Windows)
        return None


def relative_file(path: str, folder: Path) -> str | None:
    """A pass module file's path relative to the artifact `folder` (None for a dotted module name): the recipe
    records it by absolute path, as its workload, so a project moved whole lost its own passes."""
    if not path.endswith(".py") or not os.path.isabs(path):
        return None
    try:
        return os.path.relpath(path, os.path.abspath(folder))
    except ValueError:  # another drive (Windows)
        return None


def _moved_file(folder: Path, recorded: str, relative: Any) -> str | None:
    """Where a recorded absolute file that is gone would be if it moved together with the artifact `folder` (None
    while it is where it was recorded, or when nothing says where else: a dotted name, an edited entry)."""
    if (not isinstance(relative, str) or not os.path.isabs(recorded) or os.path.exists(recorded)
            or os.path.basename(relative) != os.path.basename(recorded)):
        return None
    return os.path.normpath(os.path.join(os.path.abspath(folder), relative))


def _workload_spec(folder: Path, manifest: dict[str, Any]) -> tuple[str, str | None]:
    """The workload spec to rebuild a recipe from, and the moved file's path when one was tried: the recorded spec
    while its file exists; else the file at the place relative to the artifact where it was at export (the project
    moved together), when it is there."""
    from dlperf.workload.loader import split_canonical

    spec, relative = str(manifest["workload"]), manifest.get("workload_relative")
    parts = split_canonical(spec)
    if (parts is None or not isinstance(relative, str) or not os.path.isabs(parts[0]) or os.path.exists(parts[0])
            or os.path.basename(relative) != os.path.basename(parts[0])):  # not this recipe's file: edited
        return spec, None
    moved = os.path.normpath(os.path.join(os.path.abspath(folder), relative))
    if not os.path.isfile(moved):
        return spec, moved
    return moved + spec[len(parts[0]):], None


def artifact_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and p.name != MANIFEST)


def not_an_artifact(folder: Path) -> str | None:
    """Why `folder` is not a dlperf artifact (None when it is one): its manifest must read as one (a known engine,
    a format version) and the folder hold nothing but the manifest and the files it lists, so that replacing it
    can only delete what an export wrote."""
    file = folder / MANIFEST
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return f"it has no {MANIFEST}"
    except (OSError, ValueError) as exc:
        return f"its {MANIFEST} does not read as JSON ({type(exc).__name__})"
    if not isinstance(data, dict) or data.get("engine") not in ENGINES or "format_version" not in data:
        return f"its {MANIFEST} is not a dlperf manifest (a known engine and a format_version)"
    files = data.get("files")
    if not isinstance(files, list):
        return f"its {MANIFEST} lists no files"
    others = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST and p.name not in files)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        return f"it holds files an export does not write ({shown})"
    return None


def check_export_dir(dst: str | Path) -> Path:
    """Refuse, before any work, an export folder that cannot be written or whose contents would be lost: `dst`
    must be new, an empty folder, or a dlperf artifact (replaced by the export); its nearest existing parent
    must be a folder this process can create folders in."""
    if Path(dst).is_symlink():  # replacing an artifact would remove the link's target folder through it
        raise OptimizeError(f"--export '{dst}' is a symbolic link (to '{Path(dst).resolve()}'): give the folder it "
                            "points to, or a new path")
    dst = check_folder_path(dst, "--export")
    if dst.is_dir() and any(dst.iterdir()):
        why = not_an_artifact(dst)
        if why is not None:
            raise OptimizeError(f"--export folder '{dst}' is not empty and not a dlperf artifact ({why}), so "
                                "exporting would delete its contents: choose a new or empty folder")
    return dst


def check_apart(export_dir: str | Path, workdir: Path) -> None:
    """Refuse an export folder that is the search's working folder, or inside it, or holds it: the export replaces
    its folder's contents, and candidates are built and kept in the working folder."""
    export, work = Path(export_dir).resolve(), workdir.resolve()
    if export == work or work in export.parents or export in work.parents:
        raise OptimizeError(f"--export '{export_dir}' overlaps the search's working folder '{workdir}', where the "
                            "candidates are built: export to a folder outside it (or move the working folder with "
                            "--workdir)")


def check_folder_path(path: str | Path, option: str) -> Path:
    """`path` as a Path when it is a folder, or can be created as one (its nearest existing parent is a folder this
    process can make folders in: tried, and undone); else an OptimizeError naming `option`."""
    import tempfile

    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise OptimizeError(f"{option} '{path}' is a file, not a folder: choose a new or empty folder")
        return path
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OptimizeError(f"{option} '{path}': '{parent}' is a file, not a folder: choose another path")
    try:
        Path(tempfile.mkdtemp(prefix=".dlperf-check-", dir=parent)).rmdir()
    except OSError as exc:
        raise OptimizeError(f"{option} '{path}' cannot be created: no folder can be made in '{parent}' "
                            f"({exc.strerror or exc}): choose another path") from exc
    return path


def copy_artifact(src: Path, dst: Path, extra: dict[str, Any]) -> Path:
    """Copy a candidate's artifact folder to `dst` and merge `extra` (passes, metrics...) into its manifest. `dst`
    may be new, empty, or a dlperf artifact, which is replaced; anything else is refused (`check_export_dir`).

    The new artifact is written into a folder next to `dst` and swapped in whole, so an export that fails (the
    candidate's folder gone with its work folder, a full disk) leaves what `dst` held as it was: `dst` used to be
    emptied first, and a failed copy lost the earlier export and left part of the new one. A `dst` that cannot be
    renamed (a mount point: a container's volume) gets the finished copy's files in place; where no folder can be
    made next to it (it is writable, its parent is not), it is filled from the candidate's folder in place."""
    import shutil

    dst = check_export_dir(dst)
    existed = dst.is_dir()
    kept = "the artifact already there is unchanged" if existed and any(dst.iterdir()) else "nothing was written"
    # the candidate's folder is checked before anything in `dst` is touched
    if not Path(src).is_dir():
        raise OptimizeError(f"cannot export to '{dst}': the candidate's artifact '{src}' is gone (was the search's "
                            f"work folder removed?); {kept}")
    try:
        read_manifest(src)
    except OptimizeError as exc:
        raise OptimizeError(f"cannot export to '{dst}': the candidate's artifact is damaged ({exc}); {kept}") from exc
    target = Path(os.path.abspath(dst))  # "." has no name; its absolute path has
    staging = target.parent / f".{target.name}.dlperf-export-{os.getpid()}"
    old = staging.with_name(staging.name + "-old")
    in_place = False
    try:
        for leftover in (staging, old):  # from an export by a process of this id that was killed halfway
            if leftover.is_dir():
                shutil.rmtree(leftover)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            staging.mkdir()
        except PermissionError:
            staging, in_place = src, True
        if not in_place:
            shutil.copytree(src, staging, dirs_exist_ok=True)
            _finish_manifest(staging, target, extra)
            try:
                if existed:
                    target.rename(old)  # an empty folder or an earlier artifact (check_export_dir), kept until the swap
            except OSError:  # a mount point cannot be renamed (EBUSY)
                in_place = True
            else:
                try:
                    staging.rename(target)
                except OSError:
                    if existed:
                        old.rename(target)
                    raise
                shutil.rmtree(old, ignore_errors=True)
        if in_place:
            kept = "the folder may hold part of it: export again"
            for entry in target.iterdir():  # emptied, not removed: it could not be made again, or renamed
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            shutil.copytree(staging, target, dirs_exist_ok=True)
            if staging == src:
                _finish_manifest(target, target, extra)
            else:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        if staging not in (src, target):
            shutil.rmtree(staging, ignore_errors=True)
        errors = exc.args[0] if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) else []
        # copytree's Error lists (source, destination, reason) for every file it could not copy
        why = f"{errors[0][2]}" if errors else f"{exc.strerror or exc} ({exc.filename or dst})"
        raise OptimizeError(f"cannot export to '{dst}': {why}; {kept}") from exc
    return target  # absolute: a run stores it, and "out" meant nothing from another folder


def _finish_manifest(folder: Path, target: Path, extra: dict[str, Any]) -> None:
    """Merge `extra` into the manifest in `folder`, which will be the export `target`."""
    manifest = read_manifest(folder)
    manifest.update(extra)
    if manifest.get("engine") == "torch" and (relative := relative_workload(str(manifest["workload"]), target)):
        manifest["workload_relative"] = relative
    modules = manifest.get("pass_modules")
    if manifest.get("engine") == "torch" and isinstance(modules, list) and any(
            relative_file(str(m), target) for m in modules):
        manifest["pass_modules_relative"] = [relative_file(str(m), target) for m in modules]
    write_manifest(folder, {k: v for k, v in manifest.items() if k != "format_version"})


ZEROS_NOTE = " is measured on zeros of its manifest's input shapes, not its workload's inputs: "


def zero_inputs_note(workload: Any) -> str | None:
    """For an `artifact_workload` that runs on zeros (its workload does not load here), what to tell the user: `dlperf
    bench` of an artifact moved off the machine it was made on measured zeros without a word, and a model whose speed
    depends on its input values (a mask, a router, early exits) is not measured on zeros as on its data."""
    description = str(getattr(workload, "description", ""))
    if ZEROS_NOTE not in description:
        return None
    return f"{description}; a model whose time depends on its input values measures otherwise on its data"


def artifact_workload(folder: str | Path, threads: int | None = None, device: str | None = None) -> Any:
    """An exported artifact as a `Workload` for `dlperf bench DIR`: its model is the loaded artifact (`dlperf.load`;
    an engine artifact with `threads` intra-op threads, else its own capped at this machine's CPUs), its inputs those
    of the workload it was made from (the manifest's `workload`), else zeros of the manifest's input shapes, and its
    size an engine artifact's files, a torch recipe's rebuilt model's parameters and buffers. Profile, ab and
    optimize take the workload, not the artifact (`load_workload` says so): an engine's operators are invisible to
    torch's profiler and its threads are not torch's."""
    import torch
    from torch import nn

    from dlperf.measure.memory import parameter_bytes
    from dlperf.workload.base import Workload
    from dlperf.workload.loader import load_workload

    path = Path(folder)
    manifest = read_manifest(path)
    engine = str(manifest["engine"])

    class Artifact(nn.Module):
        """The loaded artifact behind nn.Module's interface; an engine artifact's size is its files' (it holds no
        torch weights), a torch recipe's the rebuilt model's: its files are the original weights, replayed on load
        (a dynamic int8 recipe read as its fp32 weights.pt)."""

        def __init__(self) -> None:
            super().__init__()
            self.fn = load_artifact(path, threads, device)
            if engine == "torch":
                self.dlperf_size_bytes = parameter_bytes(getattr(self.fn, "model", self.fn))
                self.dlperf_size_of = "the loaded model's parameters + buffers"
            else:
                self.dlperf_size_bytes = artifact_size(path)
                self.dlperf_size_of = "the artifact's files"
            self.dlperf_engine = engine  # bench: an engine other than torch runs threads of its own

        def forward(self, *inputs: Any) -> Any:
            return self.fn(*inputs)

    spec = manifest.get("workload")
    source: Any = None
    why = "its manifest names no workload"
    if isinstance(spec, str) and spec:
        try:
            source = load_workload(_workload_spec(path, manifest)[0] if engine == "torch" else spec)
        except WorkloadError as exc:
            source = None  # an engine artifact runs without its workload: zeros of its input shapes then
            why = f"its workload '{spec}' does not load here: {str(exc).splitlines()[0]}"
        if source is None and engine == "torch":
            load_torch(path, manifest)  # says why the recipe's workload does not load here
    entries = manifest.get("inputs") or []

    def zeros(batch: int) -> tuple[Any, ...]:
        out = []
        for e in entries:
            dims = [int(d) for d in e.get("shape", [])]
            if any(d < 0 for d in dims[1:]):
                raise WorkloadError(f"artifact '{path}': input '{e.get('name')}' has a free dimension other than the "
                                    f"batch ({dims}) and the workload it was made from does not load here, so there "
                                    "are no inputs to measure it with: run it where its workload loads")
            dtype = getattr(torch, str(e.get("dtype", "float32")), None)
            if not isinstance(dtype, torch.dtype):
                raise WorkloadError(f"artifact '{path}': input '{e.get('name')}' has dtype {e.get('dtype')!r}, which "
                                    "torch does not know")
            out.append(torch.zeros([batch, *dims[1:]], dtype=dtype))
        return tuple(out)

    if source is None and not entries:
        raise WorkloadError(f"artifact '{path}': its manifest lists no inputs and names no workload to make them")
    return Workload(
        name=f"{manifest.get('name') or (source.name if source is not None else path.name)} ({engine} artifact)",
        make_model=Artifact,
        make_inputs=source.example_inputs if source is not None else zeros,
        description=f"the artifact in {path}" if source is not None else f"the artifact in {path}{ZEROS_NOTE}{why}",
        source=str(path.resolve()),
        default_batch_size=int(manifest.get("batch_size") or (source.default_batch_size if source else 1)),
        input_names=tuple(str(e.get("name")) for e in entries) if entries else (),
    )
