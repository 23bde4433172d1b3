"""A/B in production: compare the variants of a running `dlperf serve --variant a=.. --variant b=..`.

Everything comes from the server's own Prometheus metrics (dlperf.serve.metrics): per-variant latency
percentiles from the request-duration histogram (Prometheus' histogram_quantile interpolation), error
rates from the success and failure counters, and per variant against the control (`--control`, or the
variant with most requests): Mann-Whitney U on the bucketed latencies and a two-proportion z-test on the error rates.
The counters are cumulative since the server started; `window_s` scrapes twice and compares only what
happened in between.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from dlperf.compare.stats import MannWhitney, ProportionTest, mann_whitney_grouped, two_proportion_test
from dlperf.errors import ConfigError, ServingError

QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class VariantSummary:
    name: str
    model: str
    requests: float
    successes: float
    failures: dict[str, float]
    p50_s: float
    p90_s: float
    p99_s: float
    mean_s: float
    average_batch_size: float

    @property
    def error_rate(self) -> float:
        return sum(self.failures.values()) / self.requests if self.requests else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.name, "model": self.model, "requests": self.requests, "successes": self.successes,
                "failures": self.failures, "error_rate": self.error_rate, "p50_s": self.p50_s, "p90_s": self.p90_s,
                "p99_s": self.p99_s, "mean_s": self.mean_s, "average_batch_size": self.average_batch_size}


@dataclass
class VariantTest:
    control: str
    variant: str
    latency: MannWhitney | None
    errors: ProportionTest | None
    p50_ratio: float
    alpha: float

    @property
    def latency_verdict(self) -> str:
        if self.latency is None:
            return "not enough requests"
        if self.latency.p_value >= self.alpha:
            return "no significant difference"
        return "slower" if self.latency.prob_greater > 0.5 else "faster"

    @property
    def errors_verdict(self) -> str:
        if self.errors is None:
            return "not enough requests"
        if self.errors.p_value >= self.alpha:
            return "no significant difference"
        return "more errors" if self.errors.rate_x > self.errors.rate_y else "fewer errors"

    def to_dict(self) -> dict[str, Any]:
        return {"control": self.control, "variant": self.variant, "p50_ratio": self.p50_ratio, "alpha": self.alpha,
                "latency_test": self.latency.to_dict() if self.latency else None,
                "latency_verdict": self.latency_verdict,
                "error_test": self.errors.to_dict() if self.errors else None, "errors_verdict": self.errors_verdict}


@dataclass
class LiveComparison:
    variants: list[VariantSummary]
    tests: list[VariantTest]
    window_s: float | None = None
    notes: list[str] = field(default_factory=list)
    control_rule: str = "the one with most requests"
    """How the control was chosen, for the table's title."""

    def findings(self) -> list[str]:
        lines = []
        for t in self.tests:
            lat = t.latency
            lat_p = f"Mann-Whitney p={lat.p_value:.2g}" if lat else "no test"
            err_p = f"z-test p={t.errors.p_value:.2g}" if t.errors else "no test"
            ratio = f"p50 x{t.p50_ratio:.3f}, " if math.isfinite(t.p50_ratio) else ""
            lines.append(f"{t.variant} vs {t.control}: latency {t.latency_verdict} ({ratio}{lat_p}); "
                         f"error rate {t.errors_verdict} ({err_p})")
        scope = f"the last {self.window_s:g} s" if self.window_s else "everything since the server started"
        lines.append(f"(from the server's histograms and counters over {scope}; latency resolution is the "
                     "histogram's buckets)")
        return [*lines, *self.notes]

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "variants": [v.to_dict() for v in self.variants],
                "tests": [t.to_dict() for t in self.tests], "notes": self.notes}


def metrics_url(url: str) -> str:
    """The /metrics URL of a server given by its base URL, its metrics URL, or HOST:PORT (as `dlperf load`
    takes it: httpx refused a URL without a scheme)."""
    if "://" not in url:
        url = "http://" + url
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def fetch_metrics(url: str, timeout_s: float = 10.0) -> str:
    """GET the server's /metrics page (the URL may be the server's base URL)."""
    import httpx

    target = metrics_url(url)
    try:
        response = httpx.get(target, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise ServingError(f"cannot read metrics from {target}: {exc}; is `dlperf serve` running there?") from exc
    return response.text


def _bucket_counts(hist: Any) -> list[float]:
    counts, previous = [], 0.0
    for _, cumulative in hist.buckets:
        counts.append(max(cumulative - previous, 0.0))
        previous = cumulative
    return counts


def compare_live(text: str, *, model: str | None = None, alpha: float = 0.05, earlier: str | None = None,
                 window_s: float | None = None, control: str | None = None) -> LiveComparison:
    """Compare the variants on a /metrics page (`earlier`: a previous scrape to subtract) against `control`
    (a variant's name; None: the variant with most requests, which may change between runs when the split
    is even)."""
    from dlperf.serve.metrics import DEFAULT_VARIANT, parse_variant_metrics

    try:
        parsed = parse_variant_metrics(text)
        before = parse_variant_metrics(earlier) if earlier is not None else {}
    except ValueError as exc:  # prometheus_client's parser on a page that is not Prometheus text
        raise ServingError(f"the metrics page is not Prometheus text ({exc}): is `dlperf serve` running there?") \
            from exc
    if model is not None:
        parsed = {k: v for k, v in parsed.items() if v.model == model}
    if len(parsed) < 2:
        found = ", ".join(sorted(parsed)) or "none"
        if found == DEFAULT_VARIANT:
            found = "one model without variants"
        raise ConfigError(
            f"a live comparison needs at least two variants, the server reports {found}"
            + (f" for model '{model}'" if model else "")
            + ": start it with `dlperf serve --variant a=DIR_A --variant b=DIR_B --split 90:10`"
        )
    summaries, hists = [], {}
    notes: list[str] = []
    # latencies of answered requests: with failures in, a variant that failed fast looked faster
    by_outcome = all(vm.success_duration.count or not vm.success_total for vm in parsed.values())
    if not by_outcome:
        notes.append("this server's request histogram has no outcome label, so its latencies include failed "
                     "requests (a variant that fails fast looks faster): compare with a newer dlperf serve")
    latencies = "success_duration" if by_outcome else "request_duration"
    for key, vm in parsed.items():
        hist = getattr(vm, latencies)
        success, failures = vm.success_total, dict(vm.failure_total)
        items, batches = vm.inference_count_total, vm.exec_count_total
        if key in before:
            old = before[key]
            hist = hist.minus(getattr(old, latencies))
            success -= old.success_total
            failures = {r: c - old.failure_total.get(r, 0.0) for r, c in failures.items()}
            items, batches = items - old.inference_count_total, batches - old.exec_count_total
        hists[key] = hist
        q = {qq: hist.quantile(qq) for qq in QUANTILES}
        summaries.append(VariantSummary(
            name=key, model=vm.model, requests=success + sum(failures.values()), successes=success,
            failures={r: c for r, c in failures.items() if c}, p50_s=q[0.5], p90_s=q[0.9], p99_s=q[0.99],
            mean_s=hist.sum / hist.count if hist.count else math.nan,
            average_batch_size=items / batches if batches else math.nan))  # in the window, when there is one
    summaries.sort(key=lambda s: (-s.requests, s.name))
    rule = "the one with most requests"
    if control is not None:
        if control not in hists:
            raise ConfigError(f"--control {control}: the server has no variant of that name"
                              + (f" for model '{model}'" if model else "")
                              + f"; it has {', '.join(sorted(hists))}")
        summaries.sort(key=lambda s: s.name != control)  # stable: the others stay by requests
        rule = f"{control}, as --control asked"
    reference = summaries[0]
    if not any(s.requests for s in summaries):
        notes.append("no variant answered or failed a request" + (" in the window" if window_s else "")
                     + ": nothing to compare")
    tests: list[VariantTest] = []
    for other in summaries[1:]:
        cx, cy = _bucket_counts(hists[other.name]), _bucket_counts(hists[reference.name])
        usable = len(cx) == len(cy) and sum(cx) > 0 and sum(cy) > 0
        latency = mann_whitney_grouped(cx, cy) if usable else None
        errors = (two_proportion_test(sum(other.failures.values()), other.requests,
                                      sum(reference.failures.values()), reference.requests)
                  if other.requests and reference.requests else None)
        ratio = other.p50_s / reference.p50_s if reference.p50_s and not math.isnan(reference.p50_s) else math.nan
        tests.append(VariantTest(reference.name, other.name, latency, errors, ratio, alpha))
    for summary in summaries:  # the control too: with an equal split it may have as few
        if summary.requests < 100:
            notes.append(f"variant {summary.name} has only {summary.requests:.0f} requests: differences are hard to "
                         "detect")
    return LiveComparison(summaries, tests, window_s, notes, rule)


def compare_live_url(url: str, *, model: str | None = None, alpha: float = 0.05,
                     window_s: float | None = None, control: str | None = None) -> LiveComparison:
    """Scrape `url` (twice, `window_s` apart, when given) and compare its variants."""
    if window_s is not None and window_s <= 0:
        raise ConfigError(f"the window must be positive, got {window_s}")
    earlier = None
    if window_s:
        earlier = fetch_metrics(url)
        time.sleep(window_s)
    return compare_live(fetch_metrics(url), model=model, alpha=alpha, earlier=earlier, window_s=window_s,
                        control=control)
