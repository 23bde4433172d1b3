"""`dlperf compare --live` against a real `dlperf serve`: a server with --token (its /metrics wants the token
too), and Ctrl-C in a long window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from dlperf.cli.main import main  # noqa: E402
from dlperf.serve.server import start_in_thread  # noqa: E402
from dlperf.serve.service import ServeConfig, build_state  # noqa: E402
from tests.integration.compare.sleepy_served import sleepy as _sleepy  # noqa: E402
from tests.integration.compare.sleepy_served import two_variants_under_traffic  # noqa: E402

pytestmark = pytest.mark.integration


def test_a_server_with_a_token_is_compared_with_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ServeConfig(variants=(("fast", "A"), ("slow", "B")), split=(50, 50), port=0, max_batch_size=0,
                         token="sekret")
    state = build_state(config, {"A": _sleepy(0.001), "B": _sleepy(0.004)})
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
    with start_in_thread(config, state) as running:
        base = f"http://{running.url}"
        with httpx.Client(timeout=30, headers={"authorization": "Bearer sekret"}) as client:
            for _ in range(60):
                assert client.post(f"{base}/v2/models/sleepy/infer", json=body).status_code == 200
        # without the token: it said "Client error '401 Unauthorized' ... For more information check:
        # https://developer.mozilla.org/...; is `dlperf serve` running there?", and there was no --token to give
        assert main(["compare", "--live", running.url]) == 2
        err = capsys.readouterr().err
        assert ("it answered HTTP 401; the server was started with --token: give the same one with --token-file "
                "FILE (or --token)") in err
        assert "mozilla" not in err
        assert main(["compare", "--live", running.url, "--token", "wrong"]) == 2
        assert "HTTP 401; the --token given is not the server's" in capsys.readouterr().err
        assert main(["compare", "--live", base + "/v2", "--token", "sekret"]) == 2
        assert "HTTP 404; no metrics page at that path: give the server's base URL" in capsys.readouterr().err
        # the token from a file, as serve's --token-file takes it: a command line is readable by every user (ps)
        secret = tmp_path / "token"
        secret.write_text("  sekret\n")
        assert main(["compare", "--live", running.url, "--token-file", str(secret), "--json"]) == 0
        from_file = json.loads(capsys.readouterr().out)
        assert main(["compare", "--live", running.url, "--token-file", str(secret), "--token", "sekret"]) == 2
        assert "give either --token or --token-file, not both" in capsys.readouterr().err
        assert main(["compare", "--live", running.url, "--token-file", str(tmp_path / "missing")]) == 2
        assert f"--token-file '{tmp_path / 'missing'}' cannot be read" in capsys.readouterr().err
        assert main(["compare", "--live", running.url, "--token", "sekret", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sum(v["requests"] for v in from_file["variants"]) == 60
    assert sum(v["requests"] for v in data["variants"]) == 60
    assert {v["variant"] for v in data["variants"]} == {"fast", "slow"}


def test_token_goes_with_live(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "a", "b", "--token", "x"]) == 2
    assert "--token goes with --live URL" in capsys.readouterr().err
    assert main(["compare", "a", "b", "--token-file", "x"]) == 2
    assert "--token-file goes with --live URL" in capsys.readouterr().err


def test_ctrl_c_in_a_long_window_compares_what_was_scraped(capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import signal
    import threading

    with two_variants_under_traffic(0.001, 0.004) as (base, _):
        # a 60 s window is scraped every 3 s: Ctrl-C after the first two slices
        ctrl_c = threading.Timer(7.0, os.kill, (os.getpid(), signal.SIGINT))
        ctrl_c.start()
        try:
            # it printed "interrupted" and nothing else: the seconds scraped were thrown away
            rc = main(["compare", "--live", base, "--window", "60s", "--json"])
        finally:
            ctrl_c.cancel()
    assert rc == 130  # still ended by the Ctrl-C
    data = json.loads(capsys.readouterr().out)
    assert data["interrupted"] is True
    assert 6.0 < data["window_s"] < 30.0 and data["slices"] >= 2
    assert sum(v["requests"] for v in data["variants"]) > 0
    assert any(n.startswith("interrupted after ") and "of the 60 s window: this compares the" in n
               for n in data["notes"])
