"""What `dlperf load` builds before any load (`oip_target`) against real servers on 127.0.0.1: the headers and
inputs it sends, the options it refuses, and how it reads a plain KServe v2 server, which has no Triton /config."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.cli.main import main
from dlperf.errors import ConfigError, LoadGenError
from dlperf.loadgen.target import oip_target
from dlperf.serve.server import Running, start_in_thread
from dlperf.serve.service import ServeConfig
from dlperf.store import Store

from .helpers import get_text, mlp_reference

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=16))
    yield running
    running.stop()


def test_a_token_is_sent_only_where_one_is_given(server: Running) -> None:
    """Without --token no Authorization header goes out (not 'Bearer None'); with one, every request carries it."""
    plain = oip_target(server.url, "mlp")
    assert plain.headers == {} and b"authorization" not in plain.raw_request.lower()
    given = oip_target(server.url, "mlp", token="t0k")  # a server without a token ignores it
    assert given.headers == {"Authorization": "Bearer t0k"}
    assert b"\r\nAuthorization: Bearer t0k\r\n" in given.raw_request


def test_dlperf_load_sends_the_workload_s_example_inputs_at_the_batch_size(server: Running, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--workload without --shape: the workload's own inputs, made for --batch-size, one request of 4 items that the
    server runs as a batch of 4."""
    store = tmp_path / "runs.db"
    assert main(["load", server.url, "--model", "mlp", "--workload", "zoo:mlp", "--batch-size", "4",
                 "--concurrency", "1", "--requests", "20", "--duration", "5s", "--window-s", "0.5", "--warmup-s", "0.1",
                 "--json", "--store", str(store)]) == 0
    out = json.loads(capsys.readouterr().out)
    (level,) = out["levels"]
    assert level["errors"] == 0 and level["requests_ok"] > 0 and level["items_per_request"] == 4
    assert level["server"]["average_batch_size"] == pytest.approx(4.0)
    config = Store(store).get(out["run_id"]).config
    assert config["workload"] == "zoo:mlp" and config["batch_size"] == 4
    # one request sent over and over: its bytes (4 x 64 float32 and the headers), nothing checked in its replies
    assert config["distinct_requests"] == 1 and config["validated"] is False and config["tolerance"] is None
    assert 4 * 64 * 4 < config["request_bytes"] < 4 * 64 * 4 + 1024


def test_dlperf_load_sends_its_priority_in_every_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--priority 1 on a server with two priority levels: every request runs at level 1, none at the default 2."""
    with start_in_thread(ServeConfig(model="zoo:mlp", port=0, max_batch_size=16, priority_levels=2)) as running:
        assert main(["load", running.url, "--model", "mlp", "--priority", "1", "--requests", "10", "--duration", "3s",
                     "--window-s", "0.5", "--warmup-s", "0.1", "--json", "--store", str(tmp_path / "runs.db")]) == 0
        text = get_text(f"http://{running.url}/metrics")
    assert json.loads(capsys.readouterr().out)["levels"][0]["requests_ok"] == 10
    count = ("dlperf_inference_priority_request_duration_seconds_count"
             "{{model=\"mlp\",priority=\"{}\",variant=\"default\"}}")
    counts = {level: float(line.split()[-1]) for level in (1, 2) for line in text.splitlines()
              if line.startswith(count.format(level))}
    assert counts[1] >= 10 and counts[2] == 0


def test_inputs_that_cannot_be_sent_as_given_are_refused(server: Running) -> None:
    x = np.zeros((1, 64), np.float32)
    with pytest.raises(LoadGenError, match="model 'mlp' takes 1 inputs, the workload gives 2"):
        oip_target(server.url, "mlp", inputs=[x, x])
    with pytest.raises(ConfigError, match=r"give either --workload \(its example inputs\) or --input-data, not both"):
        oip_target(server.url, "mlp", inputs=[x], input_data=["zero"])


def test_tolerances_need_validation_data_and_zero_is_a_tolerance(server: Running, tmp_path: Path) -> None:
    """--rtol with --input-data zero, which has no outputs to check, would change nothing: refused. --rtol 0 with an
    --atol checks absolute differences only, and is taken."""
    with pytest.raises(ConfigError, match=r"--rtol 0\.1 apply to replies checked against validation data"):
        oip_target(server.url, "mlp", input_data=["zero"], rtol=0.1)
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    logits = mlp_reference()(x)
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"data": [{"x": row.tolist()} for row in x],
                                "validation_data": [{"logits": row.tolist()} for row in logits]}))
    target = oip_target(server.url, "mlp", input_data=[str(path)], rtol=0.0, atol=1e-3)
    assert target.tolerance == (0.0, 1e-3) and len(target.expected) == 3


META = json.dumps({"name": "m", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                   "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]}).encode()


@contextlib.contextmanager
def plain_kserve(routes: dict[str, tuple[int, bytes]]) -> Iterator[str]:
    """A server answering GETs (and POSTs) from `routes` (path -> status, body), 404 with a KServe error elsewhere; its
    host:port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = routes.get(self.path, (404, b'{"error": "no such endpoint"}'))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # an inference request: its body read, then answered from `routes` as a GET
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.do_GET()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("config", [None, b'{"name": "m"}', b'{"name": "m", "max_batch_size": "8"}'])
def test_a_plain_kserve_server_s_batch_dimension_is_read_from_its_shapes(config: bytes | None) -> None:
    """KServe v2 has no /config: where it is missing, or says no whole max_batch_size, every input starting with -1
    is a batch dimension, as the metadata reads. Read as none, --batch-size 4 was refused ('no batch dimension')."""
    routes = {"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, META)}
    if config is not None:
        routes["/v2/models/m/config"] = (200, config)
    with plain_kserve(routes) as url:
        assert oip_target(url, "m", batch_size=4, check=False).items_per_request == 4


def test_an_unknown_model_behind_a_path_is_not_blamed_on_the_path() -> None:
    """The hint that the URL's path goes before every endpoint's is for a /v2 that is not there; here /kserve/v2
    answered, and the model's 404 is the model's."""
    with plain_kserve({"/kserve/v2": (200, b"{}")}) as url, pytest.raises(LoadGenError) as info:
        oip_target(f"{url}/kserve", "nosuch", check=False)
    message = str(info.value)
    assert f"GET /kserve/v2/models/nosuch on {url} answered 404: no such endpoint" in message
    assert "goes before every endpoint's path" not in message and "is 'nosuch' the served model's name?" in message


def test_a_server_that_wants_a_token_says_so_and_one_without_shared_memory_is_refused_it() -> None:
    """A 401 on /v2 is the token's fault, said as such; --shared-memory system on a server whose extensions do not
    list it is refused before any region is made (the server answered the registration 400 later)."""
    token = "answered 401: unauthorized; the server requires a token: give it with --token-file FILE (or --token)"
    with plain_kserve({"/v2": (401, b'{"error": "unauthorized"}')}) as url, \
            pytest.raises(LoadGenError, match=re.escape(token)):
        oip_target(url, "m", check=False)
    routes = {"/v2": (200, b'{"extensions": ["statistics"]}'), "/v2/models/m": (200, META)}
    with plain_kserve(routes) as url, pytest.raises(LoadGenError, match="does not take system shared memory"):
        oip_target(url, "m", shared_memory="system", check=False)


def test_random_inputs_of_a_variable_dimension_need_its_shape() -> None:
    """An input [-1, -1] of a batching model: the batch is --batch-size, the other dimension only --shape can give
    (numpy was asked for an array of dimension -1)."""
    meta = json.dumps({"name": "m", "inputs": [{"name": "ids", "datatype": "INT64", "shape": [-1, -1]}],
                       "outputs": []}).encode()
    with plain_kserve({"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, meta)}) as url:
        with pytest.raises(LoadGenError, match=r"input 'ids' of model 'm' has a variable dimension \(\[-1, -1\]\): "
                                               "give its shape with --shape ids=D1,D2"):
            oip_target(url, "m", batch_size=2, check=False)
        assert oip_target(url, "m", shapes={"ids": [2, 16]}, check=False).items_per_request == 2


def test_a_plain_kserve_server_s_config_decides_the_batch_dimension_where_it_gives_one() -> None:
    """max_batch_size 0 in /config: an input [-1, 4] has a variable first dimension, no batch dimension; --shape
    x=3,4 is one item of 3 rows, and --batch-size 2 is refused (it was read from the shapes as a batch of 3)."""
    routes = {"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, META),
              "/v2/models/m/config": (200, b'{"name": "m", "max_batch_size": 0}')}
    with plain_kserve(routes) as url:
        assert oip_target(url, "m", shapes={"x": [3, 4]}, check=False).items_per_request == 1
        with pytest.raises(ConfigError, match=r"model 'm' has no batch dimension .* drop --batch-size 2"):
            oip_target(url, "m", shapes={"x": [3, 4]}, batch_size=2, check=False)


def test_a_string_length_of_zero_sends_empty_strings() -> None:
    meta = json.dumps({"name": "m", "inputs": [{"name": "s", "datatype": "BYTES", "shape": [-1, 2]}],
                       "outputs": []}).encode()
    with plain_kserve({"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, meta)}) as url:
        target = oip_target(url, "m", string_length=0, check=False)
    assert target.raw_request.endswith(b"\x00" * 8)  # two elements, each a 4-byte length of 0


def _sent_shapes(raw_request: bytes) -> dict[str, list[int]]:
    """Each input's shape in a prebuilt binary inference request."""
    head, body = raw_request.split(b"\r\n\r\n", 1)
    match = re.search(rb"Inference-Header-Content-Length: (\d+)", head)
    assert match is not None
    return {t["name"]: t["shape"] for t in json.loads(body[: int(match.group(1))])["inputs"]}


def test_a_per_item_input_s_batch_size_alone_is_sent_as_its_full_shape() -> None:
    """--shape scale=3 for an input [-1, 1] (one value per item) sends a [3, 1] tensor, not the [3] the server
    refuses."""
    meta = json.dumps({"name": "m", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]},
                                               {"name": "scale", "datatype": "FP32", "shape": [-1, 1]}],
                       "outputs": []}).encode()
    with plain_kserve({"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, meta)}) as url:
        target = oip_target(url, "m", shapes={"scale": [3]}, batch_size=3, check=False)
    assert target.items_per_request == 3 and _sent_shapes(target.raw_request) == {"x": [3, 4], "scale": [3, 1]}


def test_a_test_request_the_server_refuses_stops_the_load_before_it_starts() -> None:
    """A 400 to the one request sent before any load is an error naming the server's message, not a load of 400s."""
    routes = {"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, META),
              "/v2/models/m/infer": (400, b'{"error": "input x: expected 4 columns"}')}
    refused = "a test request to model 'm' failed with 400: input x: expected 4 columns"
    with plain_kserve(routes) as url, pytest.raises(LoadGenError, match=refused):
        oip_target(url, "m")


def test_a_workload_s_integer_inputs_are_sent_exactly() -> None:
    """Token ids past 2**24 stay themselves: only a bfloat16 tensor goes through float32 (numpy has no bfloat16), which
    would send 16777217 as 16777216."""
    import torch

    meta = json.dumps({"name": "m", "inputs": [{"name": "ids", "datatype": "INT64", "shape": [-1, 2]}],
                       "outputs": []}).encode()
    with plain_kserve({"/v2": (200, b'{"extensions": []}'), "/v2/models/m": (200, meta)}) as url:
        target = oip_target(url, "m", inputs=[torch.tensor([[2**24 + 1, 3]])], check=False)
    assert target.raw_request.endswith(np.array([[2**24 + 1, 3]], "<i8").tobytes())


def test_streaming_is_refused_over_http() -> None:
    with pytest.raises(ConfigError, match=r"--streaming sends gRPC streams \(ModelStreamInfer\): add --protocol grpc"):
        oip_target("127.0.0.1:1", "m", streaming=True)
