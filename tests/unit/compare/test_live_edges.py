"""Live comparison edge cases: a restart inside the window, an unknown --model, a variant without traffic."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")

from dlperf.compare.live import compare_live
from dlperf.errors import ConfigError, ServingError
from dlperf.serve.metrics import Metrics

from .live_traffic import scrape, traffic

pytestmark = pytest.mark.unit


def test_a_server_restarted_inside_the_window_is_a_clear_error() -> None:
    before = Metrics()  # the first scrape: a server that had answered 500 requests per variant
    traffic(before, "a", 500, 0.010, seed=1)
    traffic(before, "b", 500, 0.010, seed=2)
    after = Metrics()  # the last: the restarted server, its counters from 0
    traffic(after, "a", 40, 0.010, seed=3)
    traffic(after, "b", 40, 0.010, seed=4)
    # it raised a ValueError from the error-rate test ("both samples need at least one trial"): a traceback
    with pytest.raises(ServingError, match=r"counters went back during the window \(variant a: 500 requests since "
                                           r"the start, then 40\): it restarted"):
        compare_live(scrape(after), earlier=scrape(before), window_s=5.0, between=[scrape(before)] * 5)


def test_an_unknown_model_names_the_served_ones() -> None:
    metrics = Metrics()
    traffic(metrics, "a", 10, 0.010, seed=1, model="mlp")
    traffic(metrics, "b", 10, 0.010, seed=2, model="mlp")
    # it said "the server reports none for model 'foo': start it with `dlperf serve --variant ...`", of a server
    # that had two variants
    with pytest.raises(ConfigError, match=r"^--model foo: the server has no model of that name; it serves 'mlp'$"):
        compare_live(scrape(metrics), model="foo")
    assert compare_live(scrape(metrics), model="mlp").tests[0].variant in ("a", "b")


def test_a_variant_without_requests_is_named_not_called_hard_to_detect() -> None:
    start = Metrics()
    start.recorder("m", "b")  # b is on the page, with no request
    traffic(start, "a", 10, 0.010, seed=1)
    first = scrape(start)
    traffic(start, "a", 300, 0.010, seed=2)
    result = compare_live(scrape(start), earlier=first, window_s=3.0, between=[first] * 5)
    assert [v.name for v in result.variants] == ["a", "b"]
    notes = result.findings
    assert not any("only 0 requests" in n for n in notes)
    assert not any("more traffic gives one" in n for n in notes)  # more traffic does not reach b
    assert ("variant b had no requests in the window, so it is not compared: does --split give it a weight above 0, "
            "and do the clients' routing keys reach it?") in notes


def test_a_p_value_below_a_float_s_range_prints_as_dlperf_check_prints_it() -> None:
    from dlperf.compare.live import VariantTest
    from dlperf.compare.stats import MannWhitney

    test = VariantTest("a", "b", MannWhitney(0.0, 2.6e-317, -38.0, 0.1, 7000, 800), None, 1.6, 0.05)
    assert test.latency_evidence() == "Mann-Whitney p<1e-300"  # it printed 'p=2.6e-317', a subnormal's digits
    assert VariantTest("a", "b", MannWhitney(0.0, 0.012, -2.5, 0.4, 70, 80), None, 1.1,
                       0.05).latency_evidence() == "Mann-Whitney p=0.012"
