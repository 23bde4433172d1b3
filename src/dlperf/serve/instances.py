"""What is served: a model (workload or exported artifact) with its tensor signature, and the instance threads.

Each instance is a thread with its own copy of the model, looping: take a batch from the Batcher,
join the inputs (numpy), run the model (torch, under inference_mode), split the outputs back per
request. Threads, not processes: torch releases the GIL inside its kernels, so two instances overlap,
and a batch's tensors never cross a process boundary (docs/serve.md has the measurement).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlperf._device import check_device
from dlperf.errors import ConfigError, DlperfWarning, ServingError
from dlperf.serve.batcher import Batcher, Work
from dlperf.serve.metrics import DEFAULT_VARIANT, Recorder
from dlperf.serve.protocol import BF16, ProtocolError, Tensor, datatype_of_name, random_array
from dlperf.workload.names import tensor_name

log = logging.getLogger("dlperf.serve")

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]
"""One instance's model call: input arrays in signature order -> output arrays in signature order."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]
    """Full shape, as the model takes or gives it; -1 marks the batch dimension (first) and any variable
    dimension. Clients see `wire_shape` (the metadata)."""


def per_item(spec: TensorSpec, batching: bool) -> bool:
    """Whether `spec` holds one value per item of a model served with batching (shape [-1], e.g. a label per
    item). Triton's config cannot give such a tensor empty dims (its config check: "must specify 'dims'"): it is
    `dims: [1]` with `reshape: {shape: []}`, so its metadata (-1 plus the dims) says [-1, 1], a request sends
    [batch, 1] (Triton checks the shape against dims) and a reply carries [batch, 1]; the model sees [batch]."""
    return batching and spec.shape == (-1,)


def wire_shape(spec: TensorSpec, batching: bool) -> tuple[int, ...]:
    """The shape a client sees in the metadata and replies (`per_item` tensors: [-1, 1]); `spec.shape` is what the
    model takes and gives."""
    return (-1, 1) if per_item(spec, batching) else spec.shape


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec | None:
        return next((s for s in self.inputs if s.name == name), None)


@dataclass
class ServedModel:
    """A model ready to serve: its name, signature and a factory of per-instance runners."""

    name: str
    signature: Signature
    make_runner: Callable[[int], Runner]
    """make_runner(instance_index) -> a runner owning its own model copy."""
    source: str = ""
    platform: str = "pytorch"
    version: str = "1"
    batched: bool = True
    """False when the model has no batch dimension (then max batch size is forced to 0)."""
    engine_threads: int | None = None
    """An engine artifact's intra-op threads per instance (--threads, else the artifact's own); None for a
    model torch runs."""
    serial_setup: bool = False
    """Its instances build and warm up their runners one at a time (`_CUDA_SETUP`): a recipe that captures CUDA
    graphs (the cuda_graphs pass, whose capture in CUDA's global mode fails while another thread allocates or
    launches). Others, torch.compile's reduce-overhead included (its graph trees capture thread-locally), start
    at once."""
    batch_range: tuple[int, int] | None = None
    """The batch sizes its engine runs (a TensorRT artifact's), or None: any."""
    examples: Callable[[int], list[np.ndarray] | None] | None = None
    """examples(batch) -> the model's own example inputs at that batch size (a workload's `make_inputs`), which the
    warm-up runs, or None where they do not fit; None: random arrays of the signature. Random integers (0-99) made
    the warm-up of a model with an embedding of fewer rows fail with 'IndexError: index out of range in self' before
    the server could start."""

    def example_arrays(self, batch: int, seed: int = 0) -> list[np.ndarray]:
        """The warm-up's inputs: `examples`, else `random_arrays`. Called in an instance thread: the user's
        make_inputs may run torch's parallel kernels, which make the calling thread an OpenMP master for good."""
        own = self.examples(batch) if self.examples is not None else None
        return own if own is not None else self.random_arrays(batch, seed)

    def random_arrays(self, batch: int, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [random_array(s.datatype, _concrete(s.shape, batch), rng) for s in self.signature.inputs]


_CUDA_SETUP = threading.Lock()
"""Held by an instance building and warming up its runner where the model's `serial_setup` says so, so those of a
server's instances (and of its variants) run one at a time."""


def _concrete(shape: Sequence[int], batch: int) -> tuple[int, ...]:
    return tuple(batch if i == 0 and d == -1 else (1 if d == -1 else d) for i, d in enumerate(shape))


def load_served_model(spec: str, name: str | None = None, device: str = "cpu",
                      threads: int | None = None) -> ServedModel:
    """A workload spec (zoo:NAME, file.py[:name]) or a directory exported by `dlperf optimize --export`.
    `threads`: an engine artifact's threads per instance instead of the manifest's (--threads)."""
    path = Path(spec)
    if path.is_dir():
        if not (path / "manifest.json").exists():
            raise ConfigError(
                f"'{spec}' is a directory without manifest.json: point at a directory written by "
                "`dlperf optimize --export DIR`, or give a workload spec such as zoo:resnet18"
            )
        return _from_artifact(path, name, device, threads)
    if ":" not in spec and not spec.endswith(".py") and not path.exists():
        # neither a workload spec nor a folder: the loader would say "workload file ... does not exist"
        raise ConfigError(f"'{spec}' does not exist: give an artifact folder written by `dlperf optimize --export "
                          "DIR`, or a workload (zoo:NAME, `dlperf zoo` lists them; file.py:NAME)")
    return _from_workload(spec, name, device)


def _check_device(device: str) -> None:
    check_device(device)
    if not (device == "cpu" or device.startswith("cuda")):
        raise ConfigError(f"unknown device '{device}': use cpu, cuda or cuda:N")


def _from_workload(spec: str, name: str | None, device: str) -> ServedModel:
    import torch

    from dlperf.workload.loader import load_workload

    _check_device(device)
    workload = load_workload(spec)
    model = workload.build_model().eval().to(device)
    one = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in workload.example_inputs(1))
    two = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in workload.example_inputs(2))
    unserved = [f"input {i} is {type(x).__name__}" for i, x in enumerate(one) if not isinstance(x, torch.Tensor)]
    if unserved:  # a dict input crashed later with "AttributeError: 'dict' object has no attribute 'shape'"
        raise ServingError(f"workload '{workload.name}': {'; '.join(unserved)}: the inference protocol carries "
                           "tensors, so a served model takes each input as a tensor argument (model(x, mask), not "
                           "model({'x': x, ...})); serve a wrapper module whose forward takes the tensors and builds "
                           "the rest")
    returned = workload.check(model, one)
    out_one = _flatten_outputs(returned)
    out_two = _flatten_outputs(workload.check(model, two))
    _note_unserved_outputs(workload.name, returned, served=len(out_one))
    in_names = list(workload.input_names) or [tensor_name("input", i) for i in range(len(one))]
    out_names = _output_names(out_one, workload.output_names, _served_positions(returned))
    inputs = tuple(_spec(n, a, b) for n, a, b in zip(in_names, one, two, strict=False))
    outputs = tuple(_spec(n, a, b) for n, (_, a), (_, b) in zip(out_names, out_one, out_two, strict=False))
    batched = all(s.shape and s.shape[0] == -1 for s in inputs)
    models: dict[int, Any] = {0: model}
    lock = threading.Lock()

    def make_runner(index: int) -> Runner:
        with lock:
            m = models.get(index)
            if m is None:
                m = models[index] = copy.deepcopy(model)
        return _torch_runner(m, device)

    def examples(batch: int) -> list[np.ndarray]:
        with lock:  # the instances warm up at once; the user's make_inputs need not be thread-safe
            return [_to_numpy(x) for x in workload.example_inputs(batch)]

    # a URL path segment: 'minilm?seq_len=64' -> 'minilm'
    return ServedModel(name or workload.name.split("?")[0], Signature(inputs, outputs), make_runner,
                       source=workload.source or spec, batched=batched, examples=examples)


def _output_names(outputs: list[tuple[str | None, Any]], declared: Sequence[str],
                  positions: Sequence[int]) -> list[str]:
    """The served outputs' names: the workload's `output_names` by each tensor's position in what the model
    returned (`positions`: a `(logits, None, score)` served `score` as the name declared for the None), else the
    dict key, else `output__{i}`."""
    names = []
    for i, ((key, _), position) in enumerate(zip(outputs, positions, strict=True)):
        if position < len(declared):
            names.append(declared[position])
        elif key is not None:
            names.append(key)
        else:
            names.append(tensor_name("output", i))
    return names


def _spec(name: str, a: Any, b: Any) -> TensorSpec:
    """The spec of a tensor seen at batch 1 (`a`) and batch 2 (`b`): dimensions that differ are -1."""
    shape_a, shape_b = tuple(a.shape), tuple(b.shape)
    if len(shape_a) != len(shape_b):
        raise ServingError(f"tensor '{name}' changes rank with the batch size ({shape_a} vs {shape_b})")
    shape = tuple(-1 if x != y else int(x) for x, y in zip(shape_a, shape_b, strict=False))
    return TensorSpec(name, datatype_of_name(str(a.dtype)), shape)


def _flatten_outputs(out: Any) -> list[tuple[str | None, Any]]:
    """Model outputs as (key or None, tensor): a tensor, a tuple/list, or a mapping (incl. HF ModelOutput)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [(None, out)]
    if isinstance(out, dict) or (hasattr(out, "items") and hasattr(out, "keys")):
        return [(str(k), v) for k, v in out.items() if isinstance(v, torch.Tensor)]
    if isinstance(out, (tuple, list)):
        return [(None, v) for v in out if isinstance(v, torch.Tensor)]
    raise ServingError(f"the model returned {type(out).__name__}; serve models that return tensors, "
                       "tuples of tensors or dicts of tensors")


def _served_positions(out: Any) -> list[int]:
    """Where each tensor `_flatten_outputs` keeps stands in what the model returned (the same order)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [0]
    values = out.values() if isinstance(out, dict) or (hasattr(out, "items") and hasattr(out, "keys")) else out
    return [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]


def _note_unserved_outputs(name: str, out: Any, served: int) -> None:
    """A warning naming what of the model's output the server leaves out (a dict nested in a tuple, a plain value),
    or an error where that is all of it: a model returning `(logits, {"aux": t})` was served with `logits` alone,
    and one returning `[{"logits": t}]` with no output at all, without a word."""
    import torch

    if isinstance(out, torch.Tensor):
        return
    if isinstance(out, dict) or (hasattr(out, "items") and hasattr(out, "keys")):
        left = [f"'{k}' ({type(v).__name__})" for k, v in out.items() if not isinstance(v, torch.Tensor | None)]
    else:
        left = [f"{i} ({type(v).__name__})" for i, v in enumerate(out) if not isinstance(v, torch.Tensor | None)]
    if not left:
        return
    what = (f"workload '{name}': its model's output {', '.join(left)} is not a tensor, which the inference protocol "
            "cannot carry (a tensor, a tuple/list or a dict of tensors is served, nothing nested)")
    if not served:
        raise ServingError(f"{what}, and no output is left to serve: serve a wrapper module whose forward returns "
                           "the tensors")
    warnings.warn(f"{what}: it is left out of the served outputs; serve a wrapper module whose forward returns it "
                  "as tensors to have it", DlperfWarning, stacklevel=2)


def _to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same bits as ml_dtypes' (BF16)
        bits: np.ndarray = t.view(torch.int16).numpy()
        return bits.view(BF16)
    array: np.ndarray = t.numpy()
    return array


def _torch_runner(model: Any, device: str) -> Runner:
    import torch

    def to_tensor(a: np.ndarray) -> Any:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == BF16 else torch.from_numpy(a)

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        tensors = [to_tensor(a) for a in arrays]
        if device != "cpu":
            tensors = [t.to(device, non_blocking=True) for t in tensors]
        with torch.inference_mode():
            out = model(*tensors)
        return [_to_numpy(t) for _, t in _flatten_outputs(out)]

    return on_own_stream(run, device)


def on_own_stream(run: Runner, device: str) -> Runner:
    """`run` on a CUDA stream of its own when `device` is CUDA, as Triton gives each instance: on the legacy default
    stream, which every thread shares, one instance's copies and kernels queued behind another's, and `.cpu()`
    waited for all of them, so a second instance could not overlap the first. Made in the instance's thread."""
    if not device.startswith("cuda"):
        return run
    import torch

    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))  # the weights' upload, queued on the default stream

    def on_stream(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.cuda.stream(stream):
            return run(arrays)  # .cpu() waits for this stream's work only

    return on_stream


def _from_artifact(path: Path, name: str | None, device: str, threads: int | None = None) -> ServedModel:
    from dlperf.errors import OptimizeError
    from dlperf.optimize.artifact import artifact_batch_range, check_artifact_device, own_threads, read_manifest

    try:
        manifest = read_manifest(path)  # the checks load_artifact makes again in each instance
    except OptimizeError as exc:
        raise ConfigError(str(exc)) from exc
    engine = str(manifest["engine"])

    def specs(key: str) -> tuple[TensorSpec, ...]:
        entries = manifest.get(key)
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise ConfigError(f"{path / 'manifest.json'} has no '{key}' list of {{name, dtype, shape}}")
        out = []
        for i, e in enumerate(entries):
            dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in e.get("shape", []))
            if dims and dims[0] != -1:
                dims = (-1, *dims[1:])  # exported artifacts take any batch size
            out.append(TensorSpec(str(e.get("name", f"{key[:-1]}__{i}")),
                                  datatype_of_name(str(e.get("dtype", "float32"))), dims))
        return tuple(out)

    signature = Signature(specs("inputs"), specs("outputs"))
    _check_device(device)
    try:  # an engine artifact runs where it was exported for; a torch recipe is rebuilt on `device`
        check_artifact_device(path, manifest, device)
    except OptimizeError as exc:
        raise ConfigError(str(exc)) from exc

    def make_runner(index: int) -> Runner:
        import torch

        from dlperf.optimize.artifact import load_artifact

        fn = load_artifact(path, threads, device)

        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            tensors = [torch.from_numpy(a) for a in arrays]
            if device != "cpu":
                tensors = [t.to(device) for t in tensors]
            with torch.inference_mode():
                out = fn(*tensors)
            return [np.asarray(t.detach().cpu().numpy()) for _, t in _flatten_outputs(out)]

        # a torch recipe or a Torch-TensorRT program on its own stream (Torch-TensorRT runs on the caller's current
        # stream); ONNX Runtime takes numpy and copies on streams of its own
        return on_own_stream(run, device) if engine in ("torch", "tensorrt") else run

    if name is None:  # a name from the manifest, made into one URL path segment; a given name is used as it is
        name = str(manifest.get("name") or manifest.get("workload") or path.name)
        name = Path(name.split("?")[0].replace("zoo:", "")).stem.replace(":", "_")
    model_name = name
    # as load_artifact runs it (its own, capped at this machine's CPUs); a torch artifact takes torch's threads
    own = own_threads(manifest) if engine != "torch" else None
    graphs = engine == "torch" and device.startswith("cuda") and any(
        isinstance(item, dict) and item.get("pass") == "cuda_graphs" for item in manifest.get("recipe") or [])
    return ServedModel(model_name, signature, make_runner, source=str(path), platform=engine, serial_setup=graphs,
                       batch_range=artifact_batch_range(manifest),
                       engine_threads=threads or own, examples=_artifact_examples(path, manifest, signature))


def _artifact_examples(path: Path, manifest: dict[str, Any],
                       signature: Signature) -> Callable[[int], list[np.ndarray] | None] | None:
    """The example inputs of the workload an artifact was exported from, cast to the artifact's datatypes, where
    that workload loads and its inputs at the batch fit the signature; None (random arrays) otherwise. An ONNX export
    of a model embedding 50 category ids failed its warm-up on random integers 0-99 ("indices element out of data
    bounds"). The workload is loaded and its inputs made at the first call, in an instance thread, as a workload's
    are (the user's code never runs torch's kernels on the main thread)."""
    from dlperf.optimize.artifact import _workload_spec
    from dlperf.serve.protocol import NUMPY_DTYPES
    from dlperf.workload.loader import load_workload

    if not isinstance(manifest.get("workload"), str) or not manifest["workload"]:
        return None
    lock = threading.Lock()
    loaded: list[Any] = []  # the workload, or the reason it cannot give the inputs

    def examples(batch: int) -> list[np.ndarray] | None:
        with lock:  # the instances warm up at once; the user's make_inputs need not be thread-safe
            try:
                if not loaded:
                    loaded.append(load_workload(_workload_spec(path, manifest)[0]))
                if isinstance(loaded[0], str):
                    return None
                arrays = [_to_numpy(x) for x in loaded[0].example_inputs(batch)]
                arrays = [a.astype(NUMPY_DTYPES[s.datatype], copy=False)
                          for a, s in zip(arrays, signature.inputs, strict=True)]
                if not all(a.ndim == len(s.shape) and all(d in (-1, n) for d, n in zip(s.shape, a.shape, strict=True))
                           for a, s in zip(arrays, signature.inputs, strict=True)):
                    raise ValueError(f"shapes {[list(a.shape) for a in arrays]} at batch {batch}")
                return arrays
            except Exception as exc:  # the user's code, moved or changed since the export: warm up as before
                log.info("artifact '%s' warms up on random inputs: the example inputs of its workload '%s' do not "
                         "serve (%s: %s)", path, manifest["workload"], type(exc).__name__, exc)
                loaded[:] = [f"{type(exc).__name__}: {exc}"]
                return None

    return examples


# --- validation of one request against the signature ---------------------------------------------


def validate_inputs(model: ServedModel, inputs: list[Tensor],
                    max_batch: int) -> tuple[list[np.ndarray], int, tuple[Any, ...]]:
    """Arrays in signature order, the request's batch size, and its batching key; ProtocolError (400) if wrong."""
    by_name = {t.name: t for t in inputs}
    if len(by_name) != len(inputs):
        raise ProtocolError("the request names an input twice")
    unknown = [n for n in by_name if model.signature.input(n) is None]
    if unknown:
        expected = ", ".join(s.name for s in model.signature.inputs)
        raise ProtocolError(f"unknown input '{unknown[0]}' for model '{model.name}': its inputs are {expected}")
    arrays = []
    batch = None
    first = ""  # the input that set `batch`
    key: list[Any] = []
    batching = model.batched and max_batch > 0
    for spec in model.signature.inputs:
        tensor = by_name.get(spec.name)
        if tensor is None:
            raise ProtocolError(f"input '{spec.name}' of model '{model.name}' is missing from the request")
        if tensor.datatype != spec.datatype:
            raise ProtocolError(
                f"input '{spec.name}' has datatype {tensor.datatype}, model '{model.name}' expects {spec.datatype}"
            )
        shape, data = tensor.shape, tensor.data
        if per_item(spec, batching) and len(shape) == 2 and shape[1] == 1:
            # Triton's [batch, 1] (the metadata's [-1, 1]) to the model's [batch]; [batch] itself, which dlperf's
            # clients sent while the metadata said [-1], is taken as before
            shape, data = shape[:1], data.reshape(shape[:1])
        if len(shape) != len(spec.shape) or any(e != -1 and e != d for e, d in zip(spec.shape, shape, strict=False)):
            raise ProtocolError(
                f"input '{spec.name}' has shape {tensor.shape}, model '{model.name}' expects "
                f"{list(wire_shape(spec, batching))} (-1 = any size)"
            )
        if model.batched:
            if batch is None:
                batch, first = shape[0], spec.name
            elif shape[0] != batch:
                raise ProtocolError(f"inputs disagree on the batch size: '{spec.name}' has {shape[0]}, "
                                    f"'{first}' has {batch}")
            key.append((spec.name, tuple(shape[1:])))
        else:
            key.append((spec.name, tuple(shape)))
        arrays.append(data)
    items = batch if batch is not None else 1
    if items < 1:
        raise ProtocolError("the request's batch dimension is 0: send at least one item")
    if model.batched and max_batch > 0 and items > max_batch:
        raise ProtocolError(
            f"the request carries a batch of {items} items, above the server's max batch size {max_batch}: "
            "split it or restart the server with a larger --max-batch-size"
        )
    return arrays, items, tuple(key)


# --- instance threads --------------------------------------------------------------------------------


class InstancePool:
    """`count` threads, each with its own runner, taking batches from `batcher` until it is closed."""

    def __init__(self, model: ServedModel, batcher: Batcher, recorder: Recorder, count: int = 1) -> None:
        if count < 1:
            raise ConfigError(f"--instances must be >= 1, got {count}")
        self.model = model
        self.batcher = batcher
        self.recorder = recorder
        self.count = count
        self._threads: list[threading.Thread] = []
        self.failures = _FailureLog()
        """The model's failed batches, logged (this pool's instances together)."""

    def start(self, warmup_batches: Sequence[int] = (1,),
              on_warmup: Callable[[int, int], None] | None = None) -> None:
        """Start the threads; each builds its runner and runs it once per warm-up batch size before it takes
        requests. Returns when all are warmed up; raises ServingError (and stops them) if one failed.
        `on_warmup(done, total)` after each warm-up call of any instance (from its thread; total = sizes x
        instances), for a progress display.

        The warm-up runs in the instance's own thread because that thread is the OpenMP master of the torch
        ops it runs: its thread team is created on its first parallel region, not in a user request."""
        ready = [threading.Event() for _ in range(self.count)]
        errors: list[BaseException | None] = [None] * self.count
        total = len(warmup_batches) * self.count
        done = [0]
        lock = threading.Lock()

        def warmed() -> None:
            if on_warmup is not None:
                with lock:
                    done[0] += 1
                    on_warmup(done[0], total)

        for i in range(self.count):
            t = threading.Thread(target=self._run, args=(i, tuple(warmup_batches), ready[i], errors, warmed),
                                 name=f"dlperf-instance-{self.model.name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        for event in ready:
            event.wait()
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            self.batcher.close()
            self.join()
            raise failed
        self.recorder.set_instances(self.count)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the threads to end (after batcher.close()); True if all ended."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _run(self, index: int, warmup_batches: tuple[int, ...], ready: threading.Event,
             errors: list[BaseException | None], warmed: Callable[[], None]) -> None:
        try:
            # a recipe capturing CUDA graphs one instance at a time: its capture (CUDA's global mode) fails while
            # another thread allocates or launches
            with _CUDA_SETUP if self.model.serial_setup else contextlib.nullcontext():
                runner = self._warmed_runner(index, warmup_batches, warmed)
        except BaseException as exc:
            errors[index] = exc
            ready.set()
            return
        ready.set()
        self._loop(runner)

    def _warmed_runner(self, index: int, warmup_batches: tuple[int, ...], warmed: Callable[[], None]) -> Runner:
        runner = self.model.make_runner(index)
        batching = self.model.batched and self.batcher.policy.max_batch_size > 0
        for b in warmup_batches:
            try:
                outputs = runner([np.array(a) for a in self.model.example_arrays(b)])
            except Exception as exc:
                hint = ""
                if b > 1 and (isinstance(exc, MemoryError) or "memory" in str(exc).lower()):
                    hint = (f" (the warm-up runs the batch sizes up to the max batch size, {max(warmup_batches)}, "
                            "before the server is ready: lower --max-batch-size)")
                raise ServingError(
                    f"model '{self.model.name}' failed its warm-up call at batch {b}: "
                    f"{type(exc).__name__}: {exc}{hint}"
                ) from exc
            if batching:
                self._check_batch_dimension(outputs, b)
            warmed()
        return runner

    def _check_batch_dimension(self, outputs: list[np.ndarray], batch: int) -> None:
        """Refuse to batch a model whose warm-up output does not follow the batch (a scalar, a pooled [1, N]): the
        server started, and `run_batch` failed every request with 500."""
        for spec, out in zip(self.model.signature.outputs, outputs, strict=False):
            if out.ndim == 0 or out.shape[0] != batch:
                raise ConfigError(
                    f"model '{self.model.name}' cannot be served with dynamic batching: at its warm-up call at batch "
                    f"{batch}, output '{spec.name}' has shape {list(out.shape)}, not a first dimension of {batch} "
                    "(the batch size), so every request would fail; serve it with --max-batch-size 0 (each request "
                    "runs alone and gets its outputs whole), or make the model keep the batch dimension"
                )

    def _loop(self, runner: Runner) -> None:
        while True:
            batch = self.batcher.next_batch()
            if batch is None:
                return
            try:
                run_batch(runner, batch, self.model, self.recorder,
                          unbatched=self.batcher.policy.max_batch_size == 0, failures=self.failures)
            finally:
                self.batcher.release(len(batch))
                del batch  # not kept (with its input arrays) while waiting for the next one


_IDS_LOGGED = 16
"""At most this many request ids of a failed batch are named in its log line."""


class _FailureLog:
    """Logs a failed batch on the server, with the model's traceback; only the clients heard of it before (their
    500's message), and the traceback was lost. The same failure (type and message of the model's exception) is
    logged again at most every `every_s`, saying how many times it came meanwhile, so a model that fails every
    batch under load does not flood the log."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}
        """failure key -> (when it was last logged, how many times it came since without being logged)"""
        self._batch_only: dict[str, tuple[float | None, int, int, int]] = {}
        """model -> (when its batch-only failures were last logged, how many came since, their fewest and most
        requests)"""

    def report(self, error: ServingError, exc: BaseException, request_ids: Sequence[str] = (),
               retried: bool = False) -> bool:
        """Log `error` (with `exc`'s traceback) unless the same failure was logged within `every_s`; whether it was.
        `request_ids`: the ids of the failed batch's requests that had one, named in the log line only (the
        clients' 500 says nothing of the other requests in their batch), so that an operator told "request X got a
        500" finds its line. `retried`: the batch's requests are run again one at a time, so the batch's failure is
        a warning (whichever request fails alone is logged as an error of its own), counted apart."""
        key = f"{'retried ' * retried}{type(exc).__name__}: {exc}"
        now = self.clock()
        with self._lock:
            last, unlogged = self._seen.get(key, (None, 0))
            if last is not None and now - last < self.every_s:
                self._seen[key] = (last, unlogged + 1)
                return False
            if len(self._seen) > 1000:  # many distinct messages (each naming its own values): keep the set bounded
                self._seen.clear()
            self._seen[key] = (now, 0)
        since = "" if last is None or not unlogged else (
            f" (the same failure came {unlogged} more time(s) in the last {now - last:.0f} s)")
        shown = ", ".join(request_ids[:_IDS_LOGGED])
        more = f" and {len(request_ids) - _IDS_LOGGED} more" if len(request_ids) > _IDS_LOGGED else ""
        ids = f" [request id{'s' * (len(request_ids) > 1)}: {shown}{more}]" if request_ids else ""
        then = "; its requests are run again one at a time" if retried else ""
        log.log(logging.WARNING if retried else logging.ERROR, "%s%s%s%s", error, then, ids, since,
                exc_info=(type(exc), exc, exc.__traceback__))
        return True

    def batch_only(self, model: str, requests: int) -> bool:
        """A failed batch of `requests` requests of `model` each of which then succeeded alone: the model fails on
        batches, not on an input. Logged at the first such batch, then at most every `every_s` with how many came
        and their sizes, since each failure's own line (by its message) does not say that its requests succeeded
        alone; whether a line was written."""
        now = self.clock()
        with self._lock:
            last, count, low, high = self._batch_only.get(model, (None, 0, requests, requests))
            count, low, high = count + 1, min(low, requests), max(high, requests)
            if last is not None and now - last < self.every_s:
                self._batch_only[model] = (last, count, low, high)
                return False
            self._batch_only[model] = (now, 0, 2**31, 0)
        sizes = f"{low}" if low == high else f"{low}-{high}"
        if count == 1:
            what = f"a batch of {sizes} requests failed while each of its requests"
        else:
            since = "" if last is None else f" in the last {now - last:.0f} s"
            what = f"{count} batches of {sizes} requests failed{since} while each of their requests"
        log.warning("%s: %s succeeded alone: the model may not support batching (each such batch fails, then its "
                    "requests run one at a time: batch-1 throughput plus the failed batch); serve it with "
                    "--max-batch-size 1", model, what)
        return True


def run_batch(runner: Runner, batch: list[Work], model: ServedModel, recorder: Recorder | None = None,
              unbatched: bool = False, failures: _FailureLog | None = None) -> None:
    """Join, run, split; each request gets its slice or, if the batch fails, the error. Never raises.
    `unbatched` (--max-batch-size 0, Triton's max_batch_size 0: the first dimension is part of the tensor, not a
    batch): each request counts as one inference in the statistics, as Triton counts it. `failures`: where a failed
    batch is logged (an `InstancePool`'s, which logs a repeated failure once a minute); None logs each one.

    A failed batch of two or more requests runs each of them again alone, once, so that a request whose input
    makes the model raise fails only itself, with its own error, and the others get their answers (their queue
    time still ends where the failed batch began; their compute is their own run). Only after a failure: a batch
    that succeeds runs once, as before."""
    t0 = time.monotonic_ns()
    try:
        slices, items, t1, t2, t3 = _infer(runner, batch, model, unbatched)
    except Exception as exc:
        failed = exc
    else:
        _answer(batch, slices, items, recorder, unbatched, t0, t0, t1, t2, t3)
        return
    # outside the except block: the runs alone do not chain the batch's exception into their tracebacks
    _retry_alone(runner, batch, model, recorder, unbatched, failures or _FailureLog(every_s=0.0), failed, t0)


def _infer(runner: Runner, batch: list[Work], model: ServedModel,
           unbatched: bool) -> tuple[list[list[np.ndarray]], int, int, int, int]:
    """Run `batch` once: each request's slice of the outputs, the batch's items, and when the input was joined,
    the model returned and the outputs were split. Raises what the model (or the split of its outputs) raised."""
    clock = time.monotonic_ns
    items = sum(w.items for w in batch)
    n_inputs = len(batch[0].arrays)
    if len(batch) == 1:
        # the request's own arrays (views of its body, see app._read_body) when writable and aligned, else
        # a copy: torch refuses read-only memory
        arrays = [a if a.flags.writeable and a.flags.aligned else np.array(a) for a in batch[0].arrays]
    else:
        arrays = [np.concatenate([w.arrays[i] for w in batch]) for i in range(n_inputs)]
    t1 = clock()
    outputs = runner(arrays)
    t2 = clock()
    if len(outputs) != len(model.signature.outputs):
        raise ServingError(f"the model returned {len(outputs)} outputs, its signature has "
                           f"{len(model.signature.outputs)}")
    slices: list[list[np.ndarray]] = [[] for _ in batch]
    # without batching (--max-batch-size 0) a batch is one request, whose outputs go whole whatever their first
    # dimension, as under Triton's max_batch_size 0 (a detector's [boxes, 6] for a [1, 3, H, W] image)
    split = model.batched and not unbatched
    for spec, out in zip(model.signature.outputs, outputs, strict=False):
        if split and (out.ndim == 0 or out.shape[0] != items):
            raise ServingError(
                f"output '{spec.name}' has shape {list(out.shape)}, not a first dimension of {items} "
                "(the batch size): the model must keep the batch dimension, or be served with "
                "--max-batch-size 0 (each request runs alone and gets its outputs whole)"
            )
        start = 0
        for j, w in enumerate(batch):
            slices[j].append(out[start:start + w.items] if split else out)
            start += w.items
    return slices, items, t1, t2, clock()


def _answer(batch: list[Work], slices: list[list[np.ndarray]], items: int, recorder: Recorder | None,
            unbatched: bool, t0: int, t_run: int, t1: int, t2: int, t3: int) -> None:
    """Count the execution and finish each request with its slice. `t0`: where the requests left the queue;
    `t_run`, `t1`, `t2`, `t3`: when the run began (`t0` but for a request run again after its batch failed),
    joined its input, ran the model and split its outputs."""
    if recorder is not None:
        recorder.batch(len(batch) if unbatched else items, t1 - t_run, t2 - t1, t3 - t2)
    for w, result in zip(batch, slices, strict=False):
        w.result = result
        w.batch_size = items
        w.timings_ns = {"start": t0, "input": t1 - t_run, "infer": t2 - t1, "output": t3 - t2}
        w.finish()


def _retry_alone(runner: Runner, batch: list[Work], model: ServedModel, recorder: Recorder | None, unbatched: bool,
                 failures: _FailureLog, exc: Exception, t0: int) -> None:
    """After `batch` failed with `exc`: a single request gets the error; the requests of a larger batch are each
    run again alone, and only those that fail alone get an error, their own (one request's input that made the
    model raise failed every request batched with it, with that input's error)."""
    error = _batch_error(batch, model, recorder, exc)
    ids = [w.request_id for w in batch if w.request_id]
    if len(batch) == 1:
        failures.report(error, exc, ids)
        _fail(batch[0], error, t0)
        return
    failures.report(error, exc, ids, retried=True)
    if recorder is not None:
        recorder.batch_retried()
    alone_ok = 0
    for w in batch:
        t_run = time.monotonic_ns()
        try:
            slices, items, t1, t2, t3 = _infer(runner, [w], model, unbatched)
        except Exception as alone:
            error = _batch_error([w], model, recorder, alone)
            failures.report(error, alone, [w.request_id] if w.request_id else [])
            _fail(w, error, t0)
            continue
        _answer([w], slices, items, recorder, unbatched, t0, t_run, t1, t2, t3)
        alone_ok += 1
    if alone_ok == len(batch):
        failures.batch_only(f"model '{model.name}'{_variant_note(recorder)}", len(batch))


def _batch_error(batch: list[Work], model: ServedModel, recorder: Recorder | None, exc: Exception) -> ServingError:
    """The error every request of a failed `batch` gets: the model, the batch, its first request's shapes, and
    what was raised."""
    items = sum(w.items for w in batch)
    specs = model.signature.inputs
    shapes = ", ".join(f"{s.name}{list(a.shape)}" for s, a in zip(specs, batch[0].arrays, strict=False))
    return ServingError(
        f"model '{model.name}'{_variant_note(recorder)} failed on a batch of {items} item{'' if items == 1 else 's'} "
        f"({len(batch)} request{'' if len(batch) == 1 else 's'}; first request: {shapes}): "
        f"{type(exc).__name__}: {exc}"
    )


def _variant_note(recorder: Recorder | None) -> str:
    """The variant after a model's name, when the server has several (an A/B audit could not tell which one
    failed)."""
    return "" if recorder is None or recorder.variant == DEFAULT_VARIANT else f" (variant '{recorder.variant}')"


def _fail(w: Work, error: ServingError, t0: int) -> None:
    w.error = error
    w.error_reason = "BACKEND"
    w.batch_size = w.items
    w.timings_ns = {"start": t0, "end": time.monotonic_ns()}
    w.finish()
