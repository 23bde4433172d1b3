"""A/B in production: compare the variants of a running `dlperf serve --variant a=.. --variant b=..`.

Everything comes from the server's own Prometheus metrics (dlperf.serve.metrics): per-variant latency
percentiles from the request-duration histogram (Prometheus' histogram_quantile interpolation), error
rates from the success and failure counters, and per variant against the control (`--control`, or the
variant with most requests): the latency verdict, and a test of the error rates (two-proportion z, or Fisher's
exact test for few events).
The counters are cumulative since the server started; `window_s` compares only what happened in the window.

The latency verdict. Requests close in time are not independent: each variant has its own queue and
instance threads, so a stall (another process on the CPU, a slow batch) delays a run of one variant's
requests together, and a test that counts requests as independent finds "differences" between identical
variants far more often than its level says (Mann-Whitney on 3 s windows of an A/A pair: 6 of 30 windows
at 5%). So a window is scraped in `slice_count(window_s)` slices and the unit of evidence is the slice: in
each slice where both variants answered requests, do the variant's latencies rank above the control's (the
Mann-Whitney probability P(variant > control) from the slice's bucket counts, above or below one half)? Under
no difference that is a fair coin in every slice, whatever the stalls inside a slice did and whatever the
split, and an exact two-sided sign test over the slices gives the p-value. (The slice's mean latencies were
compared until 2026-12-05: with an unequal split the few requests of the canary have a mean that, on skewed
latencies, falls below the control's more often than not: in simulated windows with 45 control and 2 canary
requests a slice, identical variants were called "faster" in 33% of windows, and a 30% slower canary was called
faster more often than slower.) Without a window (everything since the server
started) there are no slices and the verdict comes from Mann-Whitney U on the bucketed latencies, with
that caveat.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf._findings import Findings
from dlperf.compare.stats import MannWhitney, ProportionTest, mann_whitney_grouped, proportion_test
from dlperf.errors import ConfigError, ServingError
from dlperf.measure.stats import log_binomial_cdf

QUANTILES = (0.5, 0.9, 0.99)
SLICE_S = 0.5
"""The target slice length; a window has between MIN_SLICES and MAX_SLICES slices."""
MIN_SLICES, MAX_SLICES = 6, 20


def slice_count(window_s: float) -> int:
    """How many slices a window is scraped in: one per SLICE_S, at least 6 (the fewest whose exact sign
    test can reach p < 0.05) and at most 20."""
    return max(MIN_SLICES, min(MAX_SLICES, int(window_s / SLICE_S)))


@dataclass(frozen=True)
class SliceTest:
    """The exact two-sided sign test over a window's slices: in how many of the `slices` (those where both
    variants answered requests, less those where neither ranked above the other) the variant's latencies ranked
    above the control's (P(variant > control) > 1/2 from the slice's bucket counts)."""

    slices: int
    above: int
    p_value: float
    geomean_ratio: float
    """The geometric mean over the slices of (the variant's mean latency / the control's)."""

    @property
    def decidable(self) -> bool:
        """Whether this many slices can reach p < 0.05 at all (6 or more)."""
        return self.slices >= MIN_SLICES

    def to_dict(self) -> dict[str, Any]:
        return {"test": "sign-test-over-slices", "slices": self.slices, "above": self.above,
                "p_value": self.p_value, "geomean_ratio": self.geomean_ratio}


def sign_test(ratios: list[float], effect_ratios: list[float] | None = None) -> SliceTest:
    """Exact two-sided sign test of `ratios` against 1 (ties dropped); `geomean_ratio` is of `effect_ratios`
    (default `ratios`)."""
    signs = [r for r in ratios if r != 1.0]
    n = len(signs)
    above = sum(r > 1.0 for r in signs)
    tail = math.exp(log_binomial_cdf(min(above, n - above), n, 0.5)) if n else 1.0
    logs = [math.log(r) for r in (ratios if effect_ratios is None else effect_ratios) if r > 0]
    geomean = math.exp(sum(logs) / len(logs)) if logs else math.nan
    return SliceTest(n, above, min(1.0, 2.0 * tail), geomean)


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
    slices: SliceTest | None = None
    """The sign test over the window's slices, which decides the latency verdict when there is a window."""

    @property
    def latency_verdict(self) -> str:
        if self.slices is not None:
            if not self.slices.decidable:
                return "not enough requests"
            if self.slices.p_value >= self.alpha:
                return "no significant difference"
            return "slower" if self.slices.above * 2 > self.slices.slices else "faster"
        if self.latency is None:
            return "not enough requests"
        if self.latency.p_value >= self.alpha:
            return "no significant difference"
        return "slower" if self.latency.prob_greater > 0.5 else "faster"

    def latency_evidence(self) -> str:
        """The test behind the verdict, in words."""
        if self.slices is not None:
            s = self.slices
            return (f"latencies above the control's in {s.above} of {s.slices} slices, sign test p={s.p_value:.2g}"
                    if s.slices else "no slice with requests of both")
        if self.latency is None:
            return "no test"
        p = self.latency.p_value  # as `dlperf check` prints it: 'p=2.6e-317' was a subnormal float's digits
        return "Mann-Whitney p<1e-300" if p < 1e-300 else f"Mann-Whitney p={p:.2g}"

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
                "slice_test": self.slices.to_dict() if self.slices else None,
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
    slice_count: int = 0
    """Slices the window was scraped in (0 without a window)."""
    interrupted: KeyboardInterrupt | None = None
    """The Ctrl-C or SIGTERM that cut the window short; the comparison covers what was scraped until then."""

    @property
    def findings(self) -> Findings:
        """One line per variant against the control, then the notes; a property, as `Diagnosis`'s."""
        lines = []
        for t in self.tests:
            err_p = f"{t.errors.label} p={t.errors.p_value:.2g}" if t.errors else "no test"
            ratio = f"p50 x{t.p50_ratio:.3f}, " if math.isfinite(t.p50_ratio) else ""
            lines.append(f"{t.variant} vs {t.control}: latency {t.latency_verdict} ({ratio}{t.latency_evidence()}); "
                         f"error rate {t.errors_verdict} ({err_p})")
        if self.window_s:
            scope = (f"the last {round(self.window_s, 1):g} s, in {self.slice_count} slices (the latency verdict "
                     "counts slices, not requests, which a stall delays together)")
        else:
            scope = ("everything since the server started (requests counted as independent, which a stall makes "
                     "them not: give --window for a verdict over time slices)")
        lines.append(f"(from the server's histograms and counters over {scope}; latency resolution is the "
                     "histogram's buckets)")
        return Findings([*lines, *self.notes])

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "slices": self.slice_count, "interrupted": self.interrupted is not None,
                "variants": [v.to_dict() for v in self.variants],
                "tests": [t.to_dict() for t in self.tests], "notes": self.notes}


def metrics_url(url: str) -> str:
    """The /metrics URL of a server given by its base URL, its metrics URL, or HOST:PORT (as `dlperf load`
    takes it: httpx refused a URL without a scheme)."""
    if "://" not in url:
        url = "http://" + url
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def fetch_metrics(url: str, timeout_s: float = 10.0, token: str | None = None) -> str:
    """GET the server's /metrics page (the URL may be the server's base URL); `token`: the bearer token of a
    server started with `--token`, which protects /metrics too."""
    import httpx

    target = metrics_url(url)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(target, timeout=timeout_s, headers=headers)
    except httpx.HTTPError as exc:
        raise ServingError(f"cannot read metrics from {target}: {exc}; is `dlperf serve` running there?") from exc
    if response.status_code == 200:
        return response.text
    # httpx's raise_for_status said "Client error '401 Unauthorized' ... For more information check:
    # https://developer.mozilla.org/..." and then asked whether dlperf serve was running, which it was
    if response.status_code in (401, 403):
        hint = ("the --token given is not the server's" if token else
                "the server was started with --token: give the same one with --token-file FILE (or --token)")
    elif response.status_code == 404:
        hint = "no metrics page at that path: give the server's base URL (http://HOST:PORT) or HOST:PORT"
    else:
        hint = "is `dlperf serve` running there?"
    raise ServingError(f"cannot read metrics from {target}: it answered HTTP {response.status_code}; {hint}")


def _bucket_counts(hist: Any) -> list[float]:
    counts, previous = [], 0.0
    for _, cumulative in hist.buckets:
        counts.append(max(cumulative - previous, 0.0))
        previous = cumulative
    return counts


def compare_live(text: str, *, model: str | None = None, alpha: float = 0.05, earlier: str | None = None,
                 window_s: float | None = None, control: str | None = None,
                 between: Sequence[str] = ()) -> LiveComparison:
    """Compare the variants on a /metrics page (`earlier`: a previous scrape to subtract) against `control`
    (a variant's name; None: the variant with most requests, which may change between runs when the split
    is even). `between`: the scrapes taken between `earlier` and `text`, in order; with `earlier`, the
    latency verdict is a sign test over the slices they cut the window into."""
    from dlperf.serve.metrics import DEFAULT_VARIANT, parse_variant_metrics

    try:
        parsed = parse_variant_metrics(text)
        before = parse_variant_metrics(earlier) if earlier is not None else {}
        middle = [parse_variant_metrics(page) for page in between]
    except ValueError as exc:  # prometheus_client's parser on a page that is not Prometheus text
        raise ServingError(f"the metrics page is not Prometheus text ({exc}): is `dlperf serve` running there?") \
            from exc
    if model is not None:
        models = sorted({v.model for v in parsed.values()})
        parsed = {k: v for k, v in parsed.items() if v.model == model}
        if not parsed and models:  # it said "the server reports none for model 'x': start it with --variant"
            raise ConfigError(f"--model {model}: the server has no model of that name; it serves "
                              f"{', '.join(repr(m) for m in models)}")
    if len(parsed) < 2:
        found = ", ".join(sorted(parsed)) or "none"
        if found == DEFAULT_VARIANT:
            found = "one model without variants"
        raise ConfigError(
            f"a live comparison needs at least two variants, the server reports {found}"
            + (f" for model '{model}'" if model else "")
            + ": start it with `dlperf serve --variant a=DIR_A --variant b=DIR_B --split 90:10`"
        )
    if earlier is not None:
        _check_one_replica([earlier, *between, text])
        _check_no_reset([before, *middle, parsed])
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
        errors = (proportion_test(sum(other.failures.values()), other.requests,
                                      sum(reference.failures.values()), reference.requests)
                  if other.requests and reference.requests else None)
        ratio = other.p50_s / reference.p50_s if reference.p50_s and not math.isnan(reference.p50_s) else math.nan
        if earlier is not None:
            per_slice = _slice_stats([before, *middle, parsed], other.name, reference.name, latencies)
            # the sign of P(variant > control) - 1/2, as a ratio to 1; the means' ratio only for the effect size
            slices = sign_test([2.0 * p for p, _ in per_slice], [r for _, r in per_slice])
        else:
            slices = None
        tests.append(VariantTest(reference.name, other.name, latency, errors, ratio, alpha, slices))
    in_window = " in the window" if earlier is not None else ""
    idle = [s.name for s in summaries if not s.requests]
    for summary in summaries:  # the control too: with an equal split it may have as few
        if 0 < summary.requests < 100:
            notes.append(f"variant {summary.name} has only {summary.requests:.0f} requests{in_window}: differences "
                         "are hard to detect")
    if idle and len(idle) < len(summaries):
        # "has only 0 requests: differences are hard to detect" and "more traffic gives one": nothing can be
        # compared with a variant that gets no requests, and more traffic does not reach it
        notes.append(f"variant{'s' if len(idle) > 1 else ''} {', '.join(idle)} had no requests{in_window}, so "
                     f"{'they are' if len(idle) > 1 else 'it is'} not compared: does --split give "
                     f"{'them' if len(idle) > 1 else 'it'} a weight above 0, and do the clients' routing keys reach "
                     f"{'them' if len(idle) > 1 else 'it'}?")
    if (earlier is not None and any(s.requests for s in summaries)
            and any(t.slices is not None and not t.slices.decidable and _has_requests(summaries, t)
                    for t in tests)):
        notes.append(f"fewer than {MIN_SLICES} slices had requests of both variants: no latency verdict; a longer "
                     "window or more traffic gives one")
    return LiveComparison(summaries, tests, window_s, notes, rule, len(between) + 1 if earlier is not None else 0)


def _has_requests(summaries: list[VariantSummary], test: VariantTest) -> bool:
    requests = {s.name: s.requests for s in summaries}
    return bool(requests.get(test.variant) and requests.get(test.control))


_REPLICA = re.compile(r'[{,]replica="([^"]*)"')


def _check_one_replica(pages: Sequence[str]) -> None:
    """Refuse scrapes of different replicas: behind `dlperf serve --ray` each /metrics page is the one replica's that
    answered it (its samples labelled `replica`), and the differences of two replicas' counters are no window's
    (they came out wrong, negative at times)."""
    seen = sorted({name for page in pages for name in _REPLICA.findall(page)})
    if len(seen) > 1:
        raise ServingError(
            f"the scrapes came from {len(seen)} replicas ({', '.join(seen)}): behind `dlperf serve --ray` each "
            "/metrics page is the one replica's that answered it, and the differences of two replicas' counters "
            "are not the window's; compare the variants on a server of one process (dlperf serve without --ray, or "
            "--ray --replicas 1)")


def _check_no_reset(pages: list[dict[str, Any]]) -> None:
    """Refuse a window over which a variant's cumulative counters went back: the differences of the scrapes
    would be negative (they ended in a ValueError from the error-rate test, or in negative request counts)."""
    for old, new in itertools.pairwise(pages):
        for name, vm in new.items():
            if name not in old:
                continue
            before, after = old[name].requests_total, vm.requests_total
            if after < before or vm.request_duration.count < old[name].request_duration.count:
                raise ServingError(
                    f"the server's counters went back during the window (variant {name}: {before:.0f} requests "
                    f"since the start, then {after:.0f}): it restarted, or the URL reaches more than one server "
                    "(replicas behind a load balancer, each with its own counters); compare again once it has been "
                    "up for the window, against one server's URL")


def _slice_stats(pages: list[dict[str, Any]], variant: str, control: str,
                 latencies: str) -> list[tuple[float, float]]:
    """Per slice between consecutive scrapes where both answered requests: P(variant's latency > control's)
    (Mann-Whitney's, ties in a bucket counted half) and the variant's mean latency over the control's."""
    out = []
    for old, new in itertools.pairwise(pages):
        hists = []
        for name in (variant, control):
            if name not in new:
                break
            hist = getattr(new[name], latencies)
            if name in old:
                hist = hist.minus(getattr(old[name], latencies))
            if hist.count <= 0 or hist.sum <= 0:
                break
            hists.append(hist)
        if len(hists) < 2:
            continue
        cx, cy = _bucket_counts(hists[0]), _bucket_counts(hists[1])
        if len(cx) != len(cy) or sum(cx) <= 0 or sum(cy) <= 0:
            continue
        ratio = (hists[0].sum / hists[0].count) / (hists[1].sum / hists[1].count)
        out.append((mann_whitney_grouped(cx, cy).prob_greater, ratio))
    return out


def compare_live_url(url: str, *, model: str | None = None, alpha: float = 0.05,
                     window_s: float | None = None, control: str | None = None,
                     token: str | None = None) -> LiveComparison:
    """Scrape `url` (in slices over `window_s`, when given) and compare its variants; `token`: the server's
    bearer token, when it was started with `--token`."""
    if window_s is not None and window_s <= 0:
        raise ConfigError(f"the window must be positive, got {window_s}")
    earlier = None
    between: list[str] = []
    interrupted: KeyboardInterrupt | None = None
    scraped_s = window_s
    if window_s:
        n = slice_count(window_s)
        earlier = fetch_metrics(url, token=token)
        start = time.monotonic()
        try:
            for i in range(1, n):  # on a fixed schedule: a slow scrape does not stretch the window
                time.sleep(max(0.0, start + window_s * i / n - time.monotonic()))
                between.append(fetch_metrics(url, token=token))
            time.sleep(max(0.0, start + window_s - time.monotonic()))
        except KeyboardInterrupt as exc:
            # Ctrl-C in a long window threw away the minutes scraped so far; as bench and load keep the levels they
            # finished, the comparison covers the window until the interrupt (and the command still exits 130/143)
            if not between:
                raise
            interrupted = exc
            scraped_s = time.monotonic() - start
    result = compare_live(fetch_metrics(url, token=token), model=model, alpha=alpha, earlier=earlier,
                          window_s=scraped_s, control=control, between=between)
    if interrupted is not None and window_s and scraped_s is not None:
        result.interrupted = interrupted
        scraped = f"{round(scraped_s, 1):g} s"
        result.notes.append(f"{str(interrupted) or 'interrupted'} after {scraped} of the {window_s:g} s window: this "
                            f"compares the {scraped} scraped")
    return result
