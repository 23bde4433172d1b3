"""Live comparison over a window: the failures counted are the window's, a restart is caught between any two
scrapes, a window must be positive, and a window without traffic is named once."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")

from dlperf.compare.live import compare_live, compare_live_url
from dlperf.errors import ConfigError, ServingError
from dlperf.serve.metrics import Metrics

from .live_traffic import scrape, traffic

pytestmark = pytest.mark.unit


def test_the_failures_of_a_window_are_the_ones_in_it() -> None:
    """b failed 200 times before the window and never in it: the window's error rate is 0, and b is not called
    worse on errors it made before the window."""
    metrics = Metrics()
    traffic(metrics, "a", 500, 0.010, 0, seed=1)
    traffic(metrics, "b", 500, 0.010, 200, seed=2)
    earlier = scrape(metrics)
    pages = []
    for i in range(6):
        traffic(metrics, "a", 50, 0.010, 0, seed=10 + i)
        traffic(metrics, "b", 50, 0.010, 0, seed=20 + i)
        pages.append(scrape(metrics))
    result = compare_live(pages[-1], earlier=earlier, window_s=3, between=pages[:-1], control="a")
    b = next(v for v in result.variants if v.name == "b")
    assert (b.requests, b.failures, b.error_rate) == (300, {}, 0.0)
    assert result.tests[0].errors_verdict == "no significant difference"


def test_a_restart_between_two_scrapes_of_the_window_is_refused() -> None:
    """The server restarted after the first slice and answered more requests by the end than before: the first
    and last scrapes alone look like a window; the middle scrape shows the counters going back."""
    before = Metrics()
    traffic(before, "a", 500, 0.010, 0, seed=1)
    traffic(before, "b", 500, 0.010, 0, seed=2)
    restarted = Metrics()
    traffic(restarted, "a", 40, 0.010, 0, seed=3)
    traffic(restarted, "b", 40, 0.010, 0, seed=4)
    middle = scrape(restarted)
    traffic(restarted, "a", 600, 0.010, 0, seed=5)
    traffic(restarted, "b", 600, 0.010, 0, seed=6)
    with pytest.raises(ServingError, match=r"counters went back during the window \(variant \w: 500 requests"):
        compare_live(scrape(restarted), earlier=scrape(before), window_s=3.0, between=[middle] * 5)


@pytest.mark.parametrize("window_s", [0.0, -1.0])
def test_a_window_must_be_positive(window_s: float) -> None:
    """A window of 0 s read as no window: everything since the start, compared without a word. Refused before
    any scrape (the URL is never reached)."""
    with pytest.raises(ConfigError, match="the window must be positive"):
        compare_live_url("http://127.0.0.1:9", window_s=window_s)


def test_a_window_without_any_request_is_named_once() -> None:
    """When no variant had a request, "nothing to compare" says it; not also each variant as not compared with a
    question about --split, which holds for none of them."""
    metrics = Metrics()
    traffic(metrics, "a", 50, 0.010, 0, seed=1)
    traffic(metrics, "b", 50, 0.010, 0, seed=2)
    page = scrape(metrics)
    notes = compare_live(page, earlier=page, window_s=3.0, between=[page] * 5).notes
    assert notes == ["no variant answered or failed a request in the window: nothing to compare"]


def test_slices_where_the_control_had_no_request_are_left_out() -> None:
    """The variant answered in every slice, the control in every other one: the slices without the control's
    requests are not compared (and do not end the comparison in an error)."""
    metrics = Metrics()
    earlier = scrape(metrics)
    pages = []
    for i in range(8):
        traffic(metrics, "b", 30, 0.010, 0, seed=i)
        if i % 2:
            traffic(metrics, "a", 30, 0.010, 0, seed=100 + i)
        pages.append(scrape(metrics))
    test = compare_live(pages[-1], earlier=earlier, window_s=4, between=pages[:-1], control="a").tests[0]
    assert test.slices is not None and test.slices.slices == 4
    assert test.latency_verdict == "not enough requests"


def test_a_metrics_url_with_a_trailing_slash_is_taken_as_is() -> None:
    from dlperf.compare.live import metrics_url

    assert metrics_url("http://h:8000/metrics/") == "http://h:8000/metrics/"
    assert metrics_url("http://h:8000/") == "http://h:8000/metrics"
