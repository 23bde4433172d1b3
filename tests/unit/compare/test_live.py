"""Live A/B from a server's own /metrics page (rendered by dlperf.serve.metrics with synthetic traffic)."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")

from dlperf.compare.live import compare_live, metrics_url
from dlperf.errors import ConfigError
from dlperf.serve.metrics import Metrics

from .live_traffic import scrape, traffic

pytestmark = pytest.mark.unit


def test_slower_variant_with_more_errors_is_detected() -> None:
    metrics = Metrics()
    traffic(metrics, "a", 2000, 0.010, 4, seed=1)
    traffic(metrics, "b", 300, 0.020, 15, seed=2)
    result = compare_live(scrape(metrics))
    assert [v.name for v in result.variants] == ["a", "b"]  # control: most traffic
    a, b = result.variants
    assert a.requests == 2004 and b.requests == 315
    assert b.error_rate == pytest.approx(15 / 315)
    assert 0.0075 < a.p50_s < 0.015 and 0.015 < b.p50_s < 0.03
    test = result.tests[0]
    assert test.latency_verdict == "slower" and test.errors_verdict == "more errors"
    assert test.p50_ratio > 1.5
    assert "b vs a: latency slower" in result.findings[0]  # a property, as Diagnosis.findings (a method until 12-07)


def test_same_traffic_is_no_significant_difference() -> None:
    metrics = Metrics()
    traffic(metrics, "a", 1500, 0.010, 2, seed=3)
    traffic(metrics, "b", 1500, 0.010, 2, seed=4)
    test = compare_live(scrape(metrics)).tests[0]
    assert test.latency_verdict == "no significant difference"
    assert test.errors_verdict == "no significant difference"


def test_window_compares_only_new_requests() -> None:
    metrics = Metrics()
    traffic(metrics, "a", 500, 0.010, 0, seed=5)
    traffic(metrics, "b", 500, 0.010, 0, seed=6)
    earlier = scrape(metrics)
    pages = []
    for i in range(6):  # the window, scraped in 6 slices
        traffic(metrics, "a", 70, 0.010, 0, seed=7 + i)
        traffic(metrics, "b", 50, 0.030, 0, seed=17 + i)
        pages.append(scrape(metrics))
    rec = metrics.recorder("m", "a")
    for _ in range(10):  # ten batches of 4 in the window: its average batch, not the one since start (~1)
        rec.batch(4, 0, 1000, 0)
    result = compare_live(scrape(metrics), earlier=earlier, window_s=30, between=pages[:-1])
    assert {v.name: v.requests for v in result.variants} == {"a": 420, "b": 300}
    a = next(v for v in result.variants if v.name == "a")
    assert a.average_batch_size == pytest.approx((420 + 40) / (420 + 10))
    test = result.tests[0]
    assert test.latency_verdict == "slower"
    assert test.slices is not None and (test.slices.slices, test.slices.above) == (6, 6)
    assert test.slices.p_value == pytest.approx(2 / 64) and 2.5 < test.slices.geomean_ratio < 3.5
    assert "latencies above the control's in 6 of 6 slices, sign test p=0.031" in result.findings[0]
    assert "last 30 s, in 6 slices" in result.findings[-1]


def test_a_single_variant_is_a_clear_error() -> None:
    metrics = Metrics()
    traffic(metrics, "only", 10, 0.01, 0, seed=9)
    with pytest.raises(ConfigError, match=r"at least two variants.*--variant a=DIR_A"):
        compare_live(scrape(metrics))
    plain = Metrics()
    traffic(plain, "default", 10, 0.01, 0, seed=9)  # a server without --variant
    with pytest.raises(ConfigError, match="the server reports one model without variants"):
        compare_live(scrape(plain))


def test_metrics_url_accepts_the_base_url() -> None:
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"
    assert metrics_url("127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"  # as `dlperf load` takes it


def test_every_variant_with_few_requests_is_noted_the_control_too() -> None:
    metrics = Metrics()
    traffic(metrics, "a", 40, 0.010, 0, seed=16)
    traffic(metrics, "b", 30, 0.010, 0, seed=17)
    notes = compare_live(scrape(metrics)).notes
    assert "variant a has only 40 requests: differences are hard to detect" in notes
    assert "variant b has only 30 requests: differences are hard to detect" in notes


def test_failed_requests_are_left_out_of_the_latency_comparison() -> None:
    """An audit made variant b fail 44-64% of its requests fast (bad requests) while a and b ran the same
    model: b was "faster" (p50 x0.53, p=5.6e-41), since the request histogram held failures too. Latencies now
    come from the outcome="success" series; the failures still count in the error rates."""
    metrics = Metrics()
    traffic(metrics, "a", 1500, 0.010, 0, seed=10)
    traffic(metrics, "b", 1500, 0.010, 1500, seed=11)  # as many fast (1 ms) failures as answers
    result = compare_live(scrape(metrics))
    b = next(v for v in result.variants if v.name == "b")
    assert b.requests == 3000 and b.error_rate == pytest.approx(0.5)
    assert 0.0075 < b.p50_s < 0.015  # the answered requests' median, not dragged down to the failures' 1 ms
    test = result.tests[0]
    assert (test.control, test.variant) == ("b", "a")  # b has the most requests: the control
    assert test.latency_verdict == "no significant difference"
    assert test.errors_verdict == "fewer errors"
    assert not any("outcome label" in n for n in result.notes)


def test_a_server_without_the_outcome_label_is_compared_with_a_note() -> None:
    """Pages of a server from before the label: every request in the latencies, and the note says so."""
    metrics = Metrics()
    traffic(metrics, "a", 500, 0.010, 0, seed=12)
    traffic(metrics, "b", 500, 0.010, 0, seed=13)
    old_page = "\n".join(line.replace(',outcome="success"', "") for line in scrape(metrics).splitlines()
                         if 'outcome="failure"' not in line) + "\n"
    result = compare_live(old_page)
    assert {v.name: v.requests for v in result.variants} == {"a": 500, "b": 500}
    assert result.tests[0].latency_verdict == "no significant difference"
    assert any("no outcome label, so its latencies include failed requests" in n for n in result.notes)


def test_a_page_that_is_not_prometheus_text_is_a_clear_error() -> None:
    from dlperf.errors import ServingError

    with pytest.raises(ServingError, match="the metrics page is not Prometheus text"):
        compare_live("hi\n")


def test_the_request_histogram_adds_up_over_its_outcomes() -> None:
    from dlperf.serve.metrics import parse_variant_metrics

    metrics = Metrics()
    traffic(metrics, "a", 30, 0.010, 7, seed=14)
    traffic(metrics, "b", 5, 0.010, 0, seed=15)
    a = parse_variant_metrics(scrape(metrics))["a"]
    assert a.request_duration.count == 37 and a.success_duration.count == 30
    assert a.request_duration.buckets[-1] == (float("inf"), 37.0)  # one bucket per bound, both outcomes added
    assert len({le for le, _ in a.request_duration.buckets}) == len(a.request_duration.buckets)


@pytest.mark.parametrize("alpha", ["5", "-1", "0"])
def test_live_takes_only_a_significance_level_in_range(alpha: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--alpha 5 was taken with --live, and every window "differed"; refused before anything is read."""
    from dlperf.cli.main import main

    assert main(["compare", "--live", "http://127.0.0.1:9", "--alpha", alpha]) == 2
    err = capsys.readouterr().err
    assert f"--alpha must be in (0, 0.5), got {float(alpha)}" in err
    assert "cannot read metrics" not in err


def test_alpha_takes_a_percentage_as_check_s_options_do(capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    assert main(["compare", "--live", "http://127.0.0.1:9", "--alpha", "5%"]) == 2  # the server is not there
    err = capsys.readouterr().err
    assert "--alpha" not in err and "invalid" not in err  # it was "invalid float value: '5%'"


def test_control_names_the_reference_variant() -> None:
    """With an even split the variant with most requests changed from run to run; --control fixes it."""
    metrics = Metrics()
    traffic(metrics, "a", 300, 0.010, 0, seed=20)
    traffic(metrics, "b", 310, 0.020, 0, seed=21)
    traffic(metrics, "c", 305, 0.010, 0, seed=22)
    by_requests = compare_live(scrape(metrics))
    assert [t.control for t in by_requests.tests] == ["b", "b"]
    chosen = compare_live(scrape(metrics), control="a")
    assert [v.name for v in chosen.variants] == ["a", "b", "c"]  # the others still by requests
    assert [(t.variant, t.control) for t in chosen.tests] == [("b", "a"), ("c", "a")]
    assert chosen.tests[0].latency_verdict == "slower"
    assert chosen.control_rule == "a, as --control asked"
    with pytest.raises(ConfigError, match=r"--control d: the server has no variant of that name; it has a, b, c"):
        compare_live(scrape(metrics), control="d")


def test_control_needs_live(capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.main import main

    assert main(["compare", "r1", "r2", "--control", "a"]) == 2
    assert "--control goes with --live URL" in capsys.readouterr().err


def test_an_empty_window_prints_dashes_not_nan() -> None:
    from rich.console import Console

    from dlperf.report.compare_text import live_table

    metrics = Metrics()
    traffic(metrics, "a", 50, 0.010, 0, seed=23)
    traffic(metrics, "b", 50, 0.010, 0, seed=24)
    page = scrape(metrics)
    result = compare_live(page, earlier=page, window_s=5)  # nothing happened in between
    console = Console(record=True, width=120)
    console.print(live_table(result))
    for line in result.findings:
        console.print(line)
    text = console.export_text()
    assert "nan" not in text
    assert "no variant answered or failed a request in the window: nothing to compare" in text
    assert "b vs a: latency not enough requests (p50" not in text
    assert "b vs a: latency not enough requests (no slice with requests of both)" in text
    assert "fewer than 6 slices" not in text  # nothing happened: the note above says so


def test_scrapes_of_different_replicas_are_refused() -> None:
    """Behind `dlperf serve --ray` each /metrics page is the one replica's that answered it (labelled `replica`):
    the differences of two replicas' counters were taken as the window's (wrong, negative at times)."""
    from dlperf.errors import ServingError

    metrics = Metrics()
    traffic(metrics, "a", 300, 0.010, 0, seed=1)
    traffic(metrics, "b", 300, 0.010, 0, seed=2)
    earlier = scrape(metrics)
    traffic(metrics, "a", 200, 0.010, 0, seed=3)
    traffic(metrics, "b", 200, 0.010, 0, seed=4)
    later = scrape(metrics)

    def of(page: str, replica: str) -> str:
        return page.replace('{model="m"', f'{{replica="{replica}",model="m"')

    assert 'replica="r1"' in of(later, "r1")
    result = compare_live(of(later, "r1"), earlier=of(earlier, "r1"))  # one replica's pages: a window
    assert {v.name: v.requests for v in result.variants} == {"a": 200, "b": 200}
    with pytest.raises(ServingError, match=r"the scrapes came from 2 replicas \(r1, r2\).*without --ray"):
        compare_live(of(later, "r2"), earlier=of(earlier, "r1"))


@pytest.mark.parametrize(("interrupt", "code"), [(KeyboardInterrupt(), 130), (None, 0)])
def test_a_window_cut_short_still_prints_its_comparison_and_exits_as_the_interrupt(
        interrupt: KeyboardInterrupt | None, code: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C or SIGTERM during --window: what was compared is printed, and the exit code says it was cut short
    (130, SIGTERM's 143), not 0 as for a window that ran its length."""
    import json

    from dlperf.cli.common import Terminated
    from dlperf.cli.main import main
    from dlperf.compare import live

    metrics = Metrics()
    traffic(metrics, "a", 300, 0.010, 0, seed=30)
    traffic(metrics, "b", 300, 0.020, 0, seed=31)
    result = compare_live(scrape(metrics))
    monkeypatch.setattr(live, "compare_live_url", lambda *args, **kwargs: result)
    for cut, exit_code in ((interrupt, code), *([(Terminated("terminated by SIGTERM"), 143)] if interrupt else [])):
        result.interrupted = cut
        assert main(["compare", "--live", "http://127.0.0.1:9", "--window", "30s", "--json"]) == exit_code
        document = json.loads(capsys.readouterr().out)
        assert [v["variant"] for v in document["variants"]] == ["a", "b"]
        assert document["interrupted"] is (cut is not None)
