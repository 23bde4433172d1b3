"""A candidate's memory as a deployment of its exported artifact would use it: peak RSS of a fresh process that loads
the artifact alone and runs the example inputs through it (`--objective memory`).

The candidate's own process holds torch, the original model (for the accuracy check and the paired timing), the
original weights kept for the export and what the conversion left in the heap: an ONNX Runtime MiniLM read 895 MiB
there against the torch baseline's 705 MiB, though ONNX Runtime alone runs it in 190 MiB. So the figure the memory
objective ranks by comes from a process started with "spawn" (a new interpreter, no torch preloaded) that imports
only what the artifact's engine needs: onnxruntime and numpy for an ONNX Runtime artifact, openvino and numpy for an
OpenVINO one, and for a torch artifact (a recipe: the workload's model rebuilt, its passes replayed) torch and the
workload, through `dlperf.load`, the same loader `dlperf serve` uses.

An artifact that runs on a GPU is also read for the process's GPU memory after its calls (`process_gpu_bytes`:
NVML's figure for the process, so ONNX Runtime's arena and TensorRT's engine count, not only torch's allocator),
which is what `--objective memory` ranks by on a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

INPUTS_FILE = "example_inputs.npz"
"""The candidate's example inputs as numpy arrays, next to its artifact: the fresh process reads them without
building the workload (which would import torch and the workload's libraries into an engine's process)."""

ENGINE_ALONE = {"onnxruntime": "onnxruntime and numpy", "openvino": "openvino and numpy"}
"""What the fresh process imports for an engine artifact; any other engine loads through `dlperf.load` (torch)."""


def save_inputs(inputs: Any, path: Path) -> bool:
    """Write a tuple of tensors as numpy arrays (arr_0, arr_1 ...); False when the inputs are not all tensors."""
    import numpy as np
    import torch

    if not isinstance(inputs, (tuple, list)) or not all(isinstance(x, torch.Tensor) for x in inputs):
        return False
    np.savez(path, *[x.detach().cpu().numpy() for x in inputs])
    return True


def measure_deployed(artifact_dir: Path, inputs_path: Path, calls: int, threads: int | None,
                     timeout_s: float = 300.0) -> dict[str, Any]:
    """Load the artifact in a fresh process, run `calls` calls on the saved inputs, and return its memory:
    `peak_rss_bytes` (the process's peak over its whole life: imports, loading, the calls), `start_rss_bytes` (the
    bare interpreter), `loaded_rss_bytes` (after loading), `imports` (what it imported for the artifact) and
    `torch_imported`. A failure is returned as {"error": ...}; the caller keeps its own figure then."""
    import multiprocessing as mp

    from dlperf.optimize.evaluate import _main_not_reimported

    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_deployed_entry, args=(writer, str(artifact_dir), str(inputs_path), calls, threads),
                       daemon=True, name="dlperf-deployed-memory")
    with _main_not_reimported():
        proc.start()
    writer.close()
    try:
        if not reader.poll(timeout_s):
            return {"error": f"the deployed-memory process gave no result within {timeout_s:.0f} s"}
        result: dict[str, Any] = reader.recv()
        return result
    except (EOFError, OSError):
        proc.join(timeout=5)
        return {"error": f"the deployed-memory process ended without a result (exit code {proc.exitcode})"}
    finally:
        reader.close()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)


def _deployed_entry(conn: Any, artifact_dir: str, inputs_path: str, calls: int, threads: int | None) -> None:
    """Runs in the fresh process: nothing of dlperf's that imports torch is imported before the artifact is loaded."""
    from dlperf.measure.memory import current_rss_bytes, peak_rss_since_start_bytes

    try:
        start = current_rss_bytes()
        manifest = json.loads((Path(artifact_dir) / "manifest.json").read_text())
        engine = str(manifest.get("engine", "torch"))
        t0 = time.perf_counter()
        run = _loader(engine)(Path(artifact_dir), manifest, inputs_path, threads)
        loaded = current_rss_bytes()
        for _ in range(max(1, calls)):
            run()
        gpu = process_gpu_bytes() if _on_gpu(manifest) else None
        result: dict[str, Any] = {
            "peak_rss_bytes": peak_rss_since_start_bytes(), "start_rss_bytes": start, "loaded_rss_bytes": loaded,
            "engine": engine, "imports": ENGINE_ALONE.get(engine, "torch and the workload (dlperf.load)"),
            "torch_imported": "torch" in sys.modules, "calls": max(1, calls), "wall_s": time.perf_counter() - t0,
            **({"gpu_bytes": gpu[0], "gpu_bytes_of": gpu[1]} if gpu is not None else {}),
        }
    except BaseException as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        conn.send(result)
    finally:
        conn.close()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()


def _on_gpu(manifest: dict[str, Any]) -> bool:
    """Whether the artifact runs on a GPU (`artifact.artifact_device`'s rule, without importing what it imports)."""
    provider = str(manifest.get("provider") or "")
    return str(manifest.get("device") or ("cuda" if provider in ("cuda", "tensorrt") else "cpu")).startswith("cuda")


NVML_GPU_MEMORY = "NVML: the process's GPU memory after its calls (CUDA context, every allocator and engine)"
TORCH_GPU_MEMORY = ("torch's caching allocator, reserved peak (NVML did not list the process: no CUDA context or "
                    "engine memory in it)")


def process_gpu_bytes() -> tuple[int, str] | None:
    """This process's memory on the GPUs, and what the figure counts: NVML's for the process (its CUDA context,
    torch's cache, ONNX Runtime's arena, TensorRT's engine and workspace: torch's allocator sees only its own), which
    caching allocators keep at their peak; else, where NVML does not list it (it lists processes by the host's PIDs,
    which a container's PID namespace hides), torch's allocator's reserved peak; None without a GPU in use."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pid, used, listed = os.getpid(), 0, False
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if int(proc.pid) == pid and isinstance(proc.usedGpuMemory, int):
                    used, listed = used + int(proc.usedGpuMemory), True
        if listed:
            return used, NVML_GPU_MEMORY
    except Exception:  # no NVML (a driver without it, no pynvml): torch's figure, where torch ran on the GPU
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return sum(int(torch.cuda.max_memory_reserved(i)) for i in range(torch.cuda.device_count())), TORCH_GPU_MEMORY
    return None


def _loader(engine: str) -> Any:
    return {"onnxruntime": _onnxruntime_run, "openvino": _openvino_run}.get(engine, _torch_run)


def _arrays(inputs_path: str) -> list[Any]:
    import numpy as np

    with np.load(inputs_path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _onnxruntime_run(artifact_dir: Path, manifest: dict[str, Any], inputs_path: str, threads: int | None) -> Any:
    """The session `dlperf.load` makes (same provider, optimization level, threads, GPU and TensorRT profile and engine
    cache), fed numpy arrays."""
    from dlperf.passes._engine import IOSpec
    from dlperf.passes.onnxruntime import _session

    spec = IOSpec.from_manifest(manifest)
    sess = _session(artifact_dir / "model.onnx", str(manifest.get("provider", "cpu")),
                    str(manifest.get("opt_level", "all")), int(manifest.get("threads") or threads or 1),
                    str(manifest.get("device", "cpu")), spec.inputs, int(manifest.get("batch_size") or 1))
    feed = {s.name: a for s, a in zip(spec.inputs, _arrays(inputs_path), strict=True)}
    return lambda: sess.run(None, feed)


def _openvino_run(artifact_dir: Path, manifest: dict[str, Any], inputs_path: str, threads: int | None) -> Any:
    """The compiled models `dlperf.load` makes (threads, inference precision; the static-shape copy too where the
    artifact has one), fed numpy arrays."""
    import openvino as ov

    from dlperf.passes.openvino import _compile

    arrays = _arrays(inputs_path)
    n_threads = int(manifest.get("threads") or threads or 1)
    precision = str(manifest.get("inference_precision", "f32"))
    ov_model = ov.Core().read_model(str(artifact_dir / "model.xml"))
    compiled = _compile(ov_model, n_threads, precision)
    static = manifest.get("static_shapes")
    if static:  # `dlperf.load` compiles both and runs the static one on inputs of its shapes
        fixed = ov_model.clone()
        fixed.reshape({port: ov.PartialShape(list(s)) for port, s in zip(fixed.inputs, static, strict=False)})
        fixed_compiled = _compile(fixed, n_threads, precision)
        if [list(a.shape) for a in arrays] == [list(s) for s in static]:
            compiled = fixed_compiled
    request = compiled.create_infer_request()
    return lambda: request.infer(arrays)


def _torch_run(artifact_dir: Path, manifest: dict[str, Any], inputs_path: str, threads: int | None) -> Any:
    """`dlperf.load` (the workload's model rebuilt and its recipe replayed, or an engine dlperf runs through torch),
    called under no_grad as the candidate was timed."""
    import torch

    from dlperf.optimize.artifact import load_artifact

    if threads:
        torch.set_num_threads(threads)
    predict = load_artifact(str(artifact_dir))
    device = str(manifest.get("device", "cpu"))
    tensors = [torch.from_numpy(a).to(device) for a in _arrays(inputs_path)]

    def run() -> Any:
        with torch.no_grad():
            return predict(*tensors)

    return run
