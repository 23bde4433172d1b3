"""Serving on CUDA: correct results from a GPU instance, and the NVML gauges on /metrics."""

from __future__ import annotations

import re
import urllib.request

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
httpclient = pytest.importorskip("tritonclient.http")


def test_serves_on_cuda_and_exports_gpu_gauges() -> None:
    from dlperf.serve.metrics import GPU_METRIC_NAMES, TRITON_GPU_METRIC_NAMES, parse_variant_metrics
    from dlperf.serve.server import start_in_thread
    from dlperf.serve.service import ServeConfig
    from dlperf.workload import zoo

    config = ServeConfig(model="zoo:mlp", port=0, device="cuda", max_batch_size=8)
    with start_in_thread(config) as running:
        c = httpclient.InferenceServerClient(running.url)
        assert c.get_model_config("mlp")["instance_group"][0]["kind"] == "KIND_GPU"
        x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
        inp = httpclient.InferInput("x", [4, 64], "FP32")
        inp.set_data_from_numpy(x)
        got = c.infer("mlp", [inp]).as_numpy("logits")
        model = zoo.get("mlp").build_model().eval()
        with torch.inference_mode():
            expected = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
        with urllib.request.urlopen(f"http://{running.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        for name in GPU_METRIC_NAMES:
            assert f"\n{name}{{" in text, name
        # Triton's names, in the exact form perf_analyzer --collect-metrics parses
        for name in TRITON_GPU_METRIC_NAMES:
            assert re.search(rf'^{name}\{{gpu_uuid="GPU-[^"]+"\}} \d+(\.\d+)?(e[+-]?\d+)?$', text, re.M), name
        used = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("dlperf_gpu_memory_used_bytes{")]
        assert used and all(u > 0 for u in used)
        assert parse_variant_metrics(text)["default"].success_total == 1


def test_two_gpu_instances_on_their_own_streams_answer_concurrent_requests_correctly() -> None:
    """Each instance runs on a CUDA stream of its own (the legacy default stream serialized them): concurrent
    distinct requests still get their own, correct outputs."""
    from concurrent.futures import ThreadPoolExecutor

    from dlperf.serve.server import start_in_thread
    from dlperf.serve.service import ServeConfig
    from dlperf.workload import zoo

    model = zoo.get("mlp").build_model().eval()
    xs = [np.random.default_rng(i).standard_normal((3, 64)).astype(np.float32) for i in range(24)]
    config = ServeConfig(model="zoo:mlp", port=0, device="cuda", max_batch_size=8, instances=2)
    with start_in_thread(config) as running:
        def infer(x: np.ndarray) -> np.ndarray:
            c = httpclient.InferenceServerClient(running.url)
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            return c.infer("mlp", [inp]).as_numpy("logits")

        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(infer, xs))
    with torch.inference_mode():
        for x, y in zip(xs, got, strict=True):
            np.testing.assert_allclose(y, model(torch.from_numpy(x)).numpy(), rtol=1e-3, atol=1e-4)


def test_load_with_collect_metrics_reports_each_gpu(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dlperf.cli.main import main
    from dlperf.serve.server import start_in_thread
    from dlperf.serve.service import ServeConfig

    with start_in_thread(ServeConfig(model="zoo:mlp", port=0, device="cuda", max_batch_size=8)) as running:
        code = main(["load", running.url, "--model", "mlp", "--concurrency", "4", "--duration", "3s",
                     "--window-s", "0.5", "--warmup-s", "0.2", "--collect-metrics", "--metrics-interval-ms", "250",
                     "--json", "--store", f"{tmp_path}/r.db"])
    assert code == 0
    res = json.loads(capsys.readouterr().out)["levels"][0]["resources"]
    assert res["gpus"], "no nv_gpu_* readings"
    for uuid, gpu in res["gpus"].items():
        assert uuid.startswith("GPU-")
        assert 0.0 <= gpu["utilization"] <= 1.0
        assert 0 < gpu["memory_used_max_bytes"] <= gpu["memory_total_bytes"]


@pytest.mark.parametrize("visible", ["", "last"])
def test_gpu_gauges_list_only_the_gpus_cuda_visible_devices_names(visible: str) -> None:
    """The collector listed every GPU NVML knows, labelled with NVML's index, whatever the process could use."""
    import json
    import os
    import subprocess
    import sys

    import pynvml

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(count - 1))
    uuid = uuid if isinstance(uuid, str) else uuid.decode()
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           "CUDA_VISIBLE_DEVICES": "" if visible == "" else str(count - 1)}
    code = ("import json; from dlperf.serve.metrics import GpuCollector; "
            "print(json.dumps(sorted({tuple(s.labels.values()) for f in GpuCollector().collect() "
            "for s in f.samples if 'uuid' in s.labels and 'gpu' in s.labels})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    listed = [tuple(pair) for pair in json.loads(done.stdout)]
    assert listed == ([] if visible == "" else [("0", uuid)]), listed
