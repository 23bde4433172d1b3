"""`dlperf compare --live` against a real `dlperf serve` with two variants (one sleeps 3x longer)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from dlperf.cli.main import main  # noqa: E402
from dlperf.serve.server import start_in_thread  # noqa: E402
from dlperf.serve.service import ServeConfig, build_state  # noqa: E402
from tests.integration.compare.sleepy_served import sleepy as _sleepy  # noqa: E402
from tests.integration.compare.sleepy_served import two_variants_under_traffic  # noqa: E402

pytestmark = pytest.mark.integration


def test_live_compare_finds_the_slower_variant(capsys: pytest.CaptureFixture[str]) -> None:
    config = ServeConfig(variants=(("fast", "A"), ("slow", "B")), split=(50, 50), port=0, max_batch_size=0)
    state = build_state(config, {"A": _sleepy(0.002), "B": _sleepy(0.006)})
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
    with start_in_thread(config, state) as running:
        base = f"http://{running.url}"
        with httpx.Client(timeout=30) as client:
            for _ in range(160):
                assert client.post(f"{base}/v2/models/sleepy/infer", json=body).status_code == 200
        assert main(["compare", "--live", base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    variants = {v["variant"]: v for v in data["variants"]}
    assert set(variants) == {"fast", "slow"}
    assert variants["fast"]["requests"] + variants["slow"]["requests"] == 160
    assert variants["slow"]["p50_s"] > variants["fast"]["p50_s"]
    test = data["tests"][0]
    slower = test["variant"] == "slow"
    assert test["latency_verdict"] == ("slower" if slower else "faster")
    assert test["latency_test"]["p_value"] < 1e-3
    assert test["errors_verdict"] == "no significant difference"


def test_a_window_is_decided_over_time_slices(capsys: pytest.CaptureFixture[str]) -> None:
    with two_variants_under_traffic(0.002, 0.006) as (base, statuses):
        assert main(["compare", "--live", base, "--window", "3s", "--control", "fast", "--json"]) == 0
    assert statuses and set(statuses) == {200}
    data = json.loads(capsys.readouterr().out)
    assert data["window_s"] == 3 and data["slices"] == 6
    test = data["tests"][0]
    assert test["variant"] == "slow" and test["slice_test"]["slices"] == 6
    # 3x the model time in every slice: slower in all six, the exact sign test's smallest p-value
    assert test["slice_test"]["above"] == 6 and test["slice_test"]["p_value"] == pytest.approx(2 / 64)
    assert test["latency_verdict"] == "slower"
