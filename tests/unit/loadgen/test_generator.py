"""The load generator's pure parts: URL parsing, config checks, window agreement, pass rule, peak search."""

from __future__ import annotations

import dataclasses

import pytest

from dlperf.errors import ConfigError, LoadGenError
from dlperf.loadgen import generator
from dlperf.loadgen.client import build_request, parse_url
from dlperf.loadgen.generator import LevelResult, LoadConfig, _agree, _rate_warnings, find_peak, passes

pytestmark = pytest.mark.unit


def test_parse_url_accepts_host_port_with_or_without_scheme() -> None:
    assert parse_url("127.0.0.1:8000").authority == "127.0.0.1:8000"
    e = parse_url("http://localhost:9000/base/")
    assert (e.host, e.port, e.base_path) == ("localhost", 9000, "/base")
    with pytest.raises(LoadGenError, match="only http://"):
        parse_url("https://127.0.0.1:8000")


def test_build_request_has_length_and_headers() -> None:
    raw = build_request(parse_url("127.0.0.1:8000/b"), "POST", "/v2/models/m/infer", b"abc", {"X-A": "1"})
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /b/v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1:8000")
    assert b"Content-Length: 3" in head and b"X-A: 1" in head and body == b"abc"


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ConfigError, match="arrivals"):
        LoadConfig(arrivals="bursty")
    with pytest.raises(ConfigError, match="rate"):
        LoadConfig(rate=0)
    with pytest.raises(ConfigError, match="concurrency"):
        LoadConfig(concurrency=(0,))
    assert LoadConfig(rate=5).mode == "rate" and LoadConfig().mode == "concurrency"


def test_windows_agree_within_tolerance_on_throughput_and_latency() -> None:
    assert _agree([(100, 0.010), (105, 0.0104), (96, 0.0099)], 0.10)
    assert not _agree([(100, 0.010), (130, 0.010), (100, 0.010)], 0.10)
    assert not _agree([(100, 0.010), (100, 0.020), (100, 0.010)], 0.10)
    assert not _agree([(100, float("nan")), (100, 0.01), (100, 0.01)], 0.10)


def _level(rate: float, p99_s: float, errors: int = 0, send_rate: float | None = None) -> LevelResult:
    # 100 latencies whose 99th percentile (linear interpolation) is p99_s
    latencies = [int(p99_s * 0.5e9)] * 98 + [int(p99_s * 1e9)] * 2
    statuses = {"200": 100, **({"503": errors} if errors else {})}
    return LevelResult("rate", rate, 1, latencies, statuses, 1.0, True, [100.0],
                       send_rate=rate if send_rate is None else send_rate)


def test_pass_rule_needs_slo_no_errors_and_the_rate_really_sent() -> None:
    assert passes(_level(100, 0.05), 0.1)
    assert not passes(_level(100, 0.2), 0.1)
    assert not passes(_level(100, 0.05, errors=1), 0.1)
    assert not passes(_level(100, 0.05, send_rate=80), 0.1)


def test_find_peak_brackets_then_bisects(monkeypatch: pytest.MonkeyPatch) -> None:
    capacity = 300.0  # a synthetic server: p99 explodes past 300 req/s
    tried: list[float] = []

    def fake_run_level(target: object, config: LoadConfig, level: float, on_window: object = None) -> LevelResult:
        tried.append(level)
        return _level(level, 0.02 if level <= capacity else 1.0)

    monkeypatch.setattr(generator, "run_level", fake_run_level)
    peak = find_peak(object(), LoadConfig(), 0.1, start_rate=100, max_steps=12, tolerance=0.05)  # type: ignore[arg-type]
    assert tried[:3] == [100, 200, 400]  # doubled until the first failure
    assert peak.peak_rate is not None and 0.95 * capacity <= peak.peak_rate <= capacity
    assert all(peak.passed(s) == (s.level <= capacity) for s in peak.steps)
    assert peak.to_dict()["peak_rate"] == peak.peak_rate


def test_find_peak_halves_down_when_the_start_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generator, "run_level",
                        lambda t, c, level, on_window=None: _level(level, 0.02 if level <= 30 else 1.0))
    peak = find_peak(object(), LoadConfig(), 0.1, start_rate=100, max_steps=12)  # type: ignore[arg-type]
    assert [s.level for s in peak.steps][:3] == [100, 50, 25]
    assert peak.peak_rate is not None and 28.5 <= peak.peak_rate <= 30


def test_rate_warnings_say_when_the_generator_cannot_keep_up() -> None:
    r = _level(1000, 0.01, send_rate=700)
    _rate_warnings(r, 1000, [0.0] * 10, r.statuses)
    assert any("could not send 1000 req/s" in w for w in r.warnings)
    r = _level(100, 0.01)
    _rate_warnings(r, 100, [0.0] * 99 + [0.5], r.statuses)
    assert r.warnings == []
    _rate_warnings(r, 100, [0.5] * 100, r.statuses)
    assert any("fell behind" in w for w in r.warnings)


def test_level_summary_values() -> None:
    r = dataclasses.replace(_level(10, 0.04), measured_s=2.0, items_per_request=4)
    s = r.summary()
    assert s["throughput_rps"] == 50.0 and s["throughput_items_per_s"] == 200.0
    assert s["p99_s"] == pytest.approx(0.04)
    assert s["p50_s"] == pytest.approx(0.02)
