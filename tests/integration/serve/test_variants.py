"""A/B variants behind one model name (sticky routing, per-variant metrics) and serving exported artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.serve.instances import ServedModel
from dlperf.serve.metrics import parse_variant_metrics
from dlperf.serve.server import start_in_thread
from dlperf.serve.service import ServeConfig, build_state

from .helpers import SIG, get_text

pytestmark = pytest.mark.integration

httpclient = pytest.importorskip("tritonclient.http")


def _scaled(factor: float) -> ServedModel:
    return ServedModel("scaled", SIG, lambda i: (lambda arrays: [arrays[0] * factor]))


def _input() -> Any:
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))
    return inp


def test_variants_split_traffic_stickily_and_label_their_metrics() -> None:
    config = ServeConfig(variants=(("a", "A"), ("b", "B")), split=(50, 50), port=0)
    state = build_state(config, {"A": _scaled(2.0), "B": _scaled(3.0)})
    # the adaptive wait counts the clients of both variants as one closed loop (test_batcher has why)
    a, b = (v.batcher for v in state.models["scaled"].variants)
    assert a.occupancy is not None and a.occupancy is b.occupancy
    with start_in_thread(config, state) as running:
        c = httpclient.InferenceServerClient(running.url)
        meta = c.get_model_metadata("scaled")
        assert meta["parameters"] == {"variants": ["a", "b"], "split": [50, 50]}

        answered: list[str] = []

        def variant_of(**kwargs: Any) -> str:
            y = float(c.infer("scaled", [_input()], **kwargs).as_numpy("y")[0, 0])
            answered.append({2.0: "a", 3.0: "b"}[y])
            return answered[-1]

        # sticky: one key always lands on one variant, by header or by request parameter
        for key in ("user-1", "user-2", "user-3", "user-4"):
            by_header = {variant_of(headers={"X-Routing-Key": key}) for _ in range(5)}
            by_param = {variant_of(parameters={"routing_key": key}) for _ in range(5)}
            assert len(by_header) == 1 and by_header == by_param
        # without a key both variants get traffic
        seen = [variant_of() for _ in range(40)]
        assert {"a", "b"} == set(seen)
        metrics = parse_variant_metrics(get_text(f"http://{running.url}/metrics"))
        assert set(metrics) == {"a", "b"}
        assert metrics["a"].success_total + metrics["b"].success_total == 80
        assert metrics["a"].success_total == answered.count("a")
        assert metrics["b"].success_total == answered.count("b")
        assert metrics["b"].request_duration.count == metrics["b"].success_total


def test_a_zero_weight_variant_gets_no_traffic() -> None:
    config = ServeConfig(variants=(("a", "A"), ("b", "B")), split=(100, 0), port=0)
    state = build_state(config, {"A": _scaled(2.0), "B": _scaled(3.0)})
    with start_in_thread(config, state) as running:
        c = httpclient.InferenceServerClient(running.url)
        ys = {float(c.infer("scaled", [_input()], headers={"X-Routing-Key": str(i)}).as_numpy("y")[0, 0])
              for i in range(20)}
        assert ys == {2.0}
        assert parse_variant_metrics(get_text(f"http://{running.url}/metrics"))["b"].requests_total == 0


def test_serves_a_directory_exported_by_optimize(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    artifact = pytest.importorskip("dlperf.optimize.artifact")
    from dlperf.workload import zoo

    model = zoo.get("mlp").build_model().eval()
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    manifest = {"engine": "torch", "format": artifact.TORCH_FORMAT, "files": ["weights.pt"], "workload": "zoo:mlp",
                "recipe": [], "batch_size": 1, "device": "cpu",
                "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 64]}],
                "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    config = ServeConfig(model=str(tmp_path), port=0, max_batch_size=4)
    with start_in_thread(config) as running:
        c = httpclient.InferenceServerClient(running.url)
        meta = c.get_model_metadata("mlp")
        assert meta["platform"] == "torch" and meta["inputs"][0]["shape"] == [-1, 64]
        x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
        inp = httpclient.InferInput("x", [3, 64], "FP32")
        inp.set_data_from_numpy(x)
        with torch.inference_mode():
            expected = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(c.infer("mlp", [inp]).as_numpy("logits"), expected, rtol=1e-5, atol=1e-6)


def test_an_artifact_is_served_under_the_name_given_and_a_malformed_manifest_is_refused(tmp_path: Path) -> None:
    from dlperf.errors import ConfigError
    from dlperf.serve.instances import load_served_model

    manifest = {"engine": "torch", "workload": "zoo:mlp",
                "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 64]}],
                "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert load_served_model(str(tmp_path), None, "cpu").name == "mlp"  # from the manifest's workload
    assert load_served_model(str(tmp_path), "encoder.v2", "cpu").name == "encoder.v2"  # was cut to "encoder"
    for broken, message in (([1, 2], "names no engine: the artifact is damaged; export it again"),
                            ({**manifest, "inputs": ["x"]}, "field 'inputs' is .*, not a list of {name, dtype, shape}"),
                            ({**manifest, "format_version": 99}, "newer than this dlperf reads")):
        (tmp_path / "manifest.json").write_text(json.dumps(broken))
        with pytest.raises(ConfigError, match=message):
            load_served_model(str(tmp_path), None, "cpu")
