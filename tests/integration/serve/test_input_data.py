"""`dlperf load --input-data` against a real dlperf server on 127.0.0.1: real digits sent round-robin, every
reply checked against the model's own outputs, a wrong expectation caught and failing the command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from dlperf.cli.main import main
from dlperf.errors import ConfigError, LoadGenError
from dlperf.loadgen.target import oip_target
from dlperf.serve.instances import ServedModel, Signature, TensorSpec
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig, build_state
from dlperf.store import Store
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.integration

ENTRIES = 20


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=16))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """The first digits of scikit-learn's set (64 pixels each, zoo:mlp's input) and the model's logits for
    each alone, computed here in the test's process."""
    x = load_digits().data[:ENTRIES].astype(np.float32)
    model = load_workload("zoo:mlp").build_model().eval()
    with torch.inference_mode():
        logits = torch.cat([model(torch.from_numpy(row[None])) for row in x]).numpy()
    return x, logits


def data_file(tmp_path: Path, x: np.ndarray, logits: np.ndarray) -> str:
    obj: dict[str, Any] = {"data": [{"x": row.tolist()} for row in x],
                           "validation_data": [{"logits": row.tolist()} for row in logits]}
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(obj))
    return str(path)


def run(server: Running, tmp_path: Path, *extra: str) -> tuple[int, Store]:
    store = tmp_path / "runs.db"
    code = main(["load", server.url, "--model", "mlp", "--requests", "120", "--duration", "20s",
                 "--window-s", "0.5", "--warmup-s", "0.2", "--json", "--store", str(store), *extra])
    return code, Store(store)


def test_real_data_is_sent_round_robin_and_every_reply_matches(server: Running, tmp_path: Path,
                                                              digits: tuple[np.ndarray, np.ndarray],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = data_file(tmp_path, *digits)
    # batch 4 joins 4 consecutive digits per request (5 distinct requests); concurrency 3 lets the server
    # batch requests together too: each reply must still hold its own digits' logits
    code, store = run(server, tmp_path, "--input-data", path, "--batch-size", "4", "--concurrency", "1,3")
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    for level in out["levels"]:
        assert level["statuses"] == {"200": level["requests_ok"]} and level["requests_ok"] > 0
    assert max(lv["server"]["average_batch_size"] for lv in out["levels"]) > 4  # requests were joined
    record = store.get(out["run_id"])
    assert record.config["input_data"] == [path]
    assert record.config["distinct_requests"] == 5 and record.config["validated"] is True
    # 5 bodies of 4 digits x 64 float32 pixels each, plus their HTTP and JSON headers
    assert 5 * 4 * 64 * 4 < record.config["request_bytes"] < 5 * (4 * 64 * 4 + 1024)


def test_a_reply_that_does_not_match_is_an_error_and_fails_the_command(
        server: Running, tmp_path: Path, digits: tuple[np.ndarray, np.ndarray],
        capsys: pytest.CaptureFixture[str]) -> None:
    x, logits = digits
    wrong = logits.copy()
    wrong[7, 3] += 1.0  # one digit's expectation off: only the requests that carry it may fail
    code, _ = run(server, tmp_path, "--input-data", data_file(tmp_path, x, wrong), "--concurrency", "2")
    captured = capsys.readouterr()
    assert code == 1
    level = json.loads(captured.out)["levels"][0]
    total = sum(level["statuses"].values())
    # request k sends digit k mod 20: between a twentieth of the measured requests, rounded, and one more
    assert total // ENTRIES <= level["statuses"]["mismatch"] <= total // ENTRIES + 2
    assert level["statuses"]["200"] == total - level["statuses"]["mismatch"]
    assert "output 'logits' differs from its validation data: element 3" in captured.err
    wrong_count = level["statuses"]["mismatch"]
    assert f"replies did not match the validation data at: concurrency 2 ({wrong_count})" in captured.err


def test_a_wider_tolerance_accepts_outputs_that_the_default_refuses(
        server: Running, tmp_path: Path, digits: tuple[np.ndarray, np.ndarray],
        capsys: pytest.CaptureFixture[str]) -> None:
    x, logits = digits
    off = logits * 1.01  # 1% off everywhere, as an fp16 or int8 model's outputs may be
    path = data_file(tmp_path, x, off)
    with pytest.raises(LoadGenError, match=r"\(rtol 0.001, atol 1e-05\)"):
        oip_target(server.url, "mlp", input_data=[path])
    code, store = run(server, tmp_path, "--input-data", path, "--rtol", "0.02", "--atol", "1e-4")
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and set(out["levels"][0]["statuses"]) == {"200"}
    assert store.get(out["run_id"]).config["tolerance"] == [0.02, 1e-4]
    with pytest.raises(ConfigError, match=r"--rtol 0\.02 apply to replies checked against validation data"):
        oip_target(server.url, "mlp", rtol=0.02)
    with pytest.raises(ConfigError, match="tolerances must be >= 0"):
        oip_target(server.url, "mlp", input_data=[path], atol=-1.0)


def test_the_test_request_is_checked_before_any_load(server: Running, tmp_path: Path,
                                                     digits: tuple[np.ndarray, np.ndarray]) -> None:
    x, logits = digits
    wrong = logits.copy()
    wrong[0, 0] += 1.0
    with pytest.raises(LoadGenError, match=r"did not match its validation data \(the first request, from the "
                                           r"first entries\): output 'logits'"):
        oip_target(server.url, "mlp", input_data=[data_file(tmp_path, x, wrong)])


def test_a_directory_and_zero_inputs(server: Running, tmp_path: Path, digits: tuple[np.ndarray, np.ndarray],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    x, logits = digits
    folder = tmp_path / "digit5"
    folder.mkdir()
    (folder / "x").write_bytes(x[5].astype("<f4").tobytes())
    (folder / "logits").write_bytes(logits[5].astype("<f4").tobytes())
    code, _ = run(server, tmp_path, "--input-data", str(folder), "--batch-size", "2")
    assert code == 0
    level = json.loads(capsys.readouterr().out)["levels"][0]
    assert level["statuses"] == {"200": level["requests_ok"]}
    target = oip_target(server.url, "mlp", input_data=["zero"], batch_size=3)
    assert len(target.requests) == 1 and target.expected == () and target.items_per_request == 3


@pytest.fixture(scope="module")
def text_server() -> Iterator[tuple[Running, list[bytes]]]:
    """A model with one BYTES input that answers each string's length and keeps what it was sent."""
    seen: list[bytes] = []
    signature = Signature((TensorSpec("text", "BYTES", (-1, 1)),), (TensorSpec("length", "INT64", (-1, 1)),))

    def make_runner(index: int) -> Any:
        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            strings = [bytes(v) for v in arrays[0].flat]
            seen.extend(strings)
            return [np.array([len(v) for v in strings], dtype=np.int64).reshape(-1, 1)]

        return run

    config = ServeConfig(model="strings", port=0, max_batch_size=8)
    state = build_state(config, {"strings": ServedModel("strings", signature, make_runner)})
    running = start_in_thread(config, state)
    yield running, seen
    running.stop()


@pytest.mark.parametrize(("extra", "expected"), [
    ((), None),  # perf_analyzer's default: random strings of 128 characters
    (("--string-length", "5"), None),
    (("--string-data", "héllo wörld"), "héllo wörld".encode()),
])
def test_random_bytes_inputs_follow_string_length_and_string_data(
        text_server: tuple[Running, list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        extra: tuple[str, ...], expected: bytes | None) -> None:
    running, seen = text_server
    seen.clear()
    store = tmp_path / "runs.db"
    code = main(["load", running.url, "--model", "strings", "--requests", "20", "--duration", "20s",
                 "--window-s", "0.5", "--warmup-s", "0.1", "--concurrency", "2", "--json", "--store", str(store),
                 *extra])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["levels"][0]["statuses"] == {"200": out["levels"][0]["requests_ok"]}
    assert len(seen) >= 20
    if expected is not None:
        assert set(seen) == {expected}
    else:
        length = int(extra[1]) if extra else 128
        assert {len(v) for v in seen} == {length} and all(v.isalnum() for v in seen)
    config = Store(store).get(out["run_id"]).config
    assert (config["string_length"], config["string_data"]) == (
        (int(extra[1]), None) if extra[:1] == ("--string-length",) else (None, extra[1]) if extra else (None, None))


def test_string_options_are_refused_where_they_would_change_nothing(
        server: Running, text_server: tuple[Running, list[bytes]]) -> None:
    running, _ = text_server
    with pytest.raises(ConfigError, match=r"--string-data applies to BYTES inputs; model 'mlp' has none \(x FP32\)"):
        oip_target(server.url, "mlp", string_data="x")
    with pytest.raises(ConfigError, match="with --input-data zero the inputs are given"):
        oip_target(running.url, "strings", input_data=["zero"], string_length=4)
    with pytest.raises(ConfigError, match="not both"):
        oip_target(running.url, "strings", string_length=4, string_data="x")
    with pytest.raises(ConfigError, match="--string-length must be >= 0, got -1"):
        oip_target(running.url, "strings", string_length=-1)
