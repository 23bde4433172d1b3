"""`dlperf load`: generate load against a KServe v2 / OIP server, measure it, record it in the store."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dlperf.cli.common import (
    SIGTERM_EXIT,
    TOKEN_FILE_HELP,
    Terminated,
    add_json_argument,
    add_store_argument,
    bearer_token,
    duration_s,
    sigterm_interrupts,
)
from dlperf.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from dlperf.loadgen.generator import LevelResult, Slo

DEFAULT_DURATION_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="the server, e.g. 127.0.0.1:8000 or http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="the served model's name")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=_concurrency_levels, default=None, metavar="N[,N...]|START:END[:STEP]",
                      help="closed loop: keep N requests outstanding, one level per value; a range as "
                           "perf_analyzer's --concurrency-range, END included (default 1)")
    mode.add_argument("--rate", type=_rate_levels, default=None, metavar="R[,R...]|START:END[:STEP]",
                      help="open loop: send R requests per second, one level per value or per step of a range "
                           "(perf_analyzer's --request-rate-range); a request's latency counts from when it was "
                           "due, the generator's own lag behind its schedule included; with --find-peak the one "
                           "rate the search starts from, whose first trial must fit in 15 minutes without --duration")
    parser.add_argument("--arrivals", choices=["constant", "poisson", "trace"], default=None,
                        help="request-rate schedule (default constant, poisson with --find-peak as MLPerf's server "
                             "scenario; trace: with --request-intervals)")
    parser.add_argument("--request-intervals", default=None, metavar="FILE",
                        help="open loop on a recorded schedule (perf_analyzer's option): one gap between requests "
                             "per line, in microseconds, looped; sent at the trace's own mean rate, or scaled to "
                             "--rate (its bursts kept), or to each rate --find-peak tries")
    parser.add_argument("--duration", type=duration_s, default=None,
                        help="the most one level runs, e.g. 30s (default 30s; with --find-peak, at least long "
                             "enough for 459 requests at the tried rate)")
    parser.add_argument("--requests", type=int, default=None, help="the most requests one level sends")
    parser.add_argument("--window-s", type=float, default=2.0,
                        help="measurement window; a level ends when 3 windows agree within 10%% on throughput and "
                             "mean latency (default 2)")
    parser.add_argument("--stability-percentage", type=float, default=10.0, metavar="P",
                        help="how closely the last 3 windows' throughput and latency must agree, in %% of their "
                             "mean (perf_analyzer's option; default 10)")
    parser.add_argument("--stability-percentile", type=float, default=None, metavar="Q",
                        help="the windows agree on their Q-th percentile latency instead of the mean (perf_analyzer's "
                             "--percentile for stability); with a high Q give windows enough requests (--window-s)")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured warm-up per level (default 1)")
    parser.add_argument("--max-outstanding", type=int, default=1024, metavar="N",
                        help="open loop: requests in flight at most; a scheduled request beyond it is not sent "
                             "and counted as 'dropped' (MLPerf's server_max_async_queries; default 1024)")
    parser.add_argument("--request-timeout-s", type=float, default=60.0, metavar="S",
                        help="a request without a reply after S seconds counts as status 'timeout' (default 60)")
    parser.add_argument("--find-peak", action="store_true",
                        help="search the highest request rate whose p99 stays within --p99-ms (or the --slo-ms "
                             "percentile)")
    parser.add_argument("--p99-ms", type=float, default=None, metavar="X",
                        help="a p99 latency SLO: each level measures until MLPerf's early-stopping test decides it "
                             "(or its bound) and gets a verdict; exit code 1 unless every level passes (with "
                             "--find-peak, which needs it: unless some rate passes), so it gates CI")
    parser.add_argument("--slo-ms", type=float, default=None, metavar="X",
                        help="a latency SLO at another percentile than p99, with --slo-percentile (perf_analyzer's "
                             "--latency-threshold); judged as --p99-ms is")
    parser.add_argument("--slo-percentile", type=float, default=None, metavar="Q",
                        help="the percentile --slo-ms bounds, e.g. 90, 95, 99.9 (perf_analyzer's --percentile; "
                             "default 99). The early-stopping test needs more requests the higher Q: 459 for p99, "
                             "4603 for p99.9")
    parser.add_argument("--max-error-ratio", type=_error_ratio, default=None, metavar="R",
                        help="the largest share of failed requests (error statuses, timeouts, lost connections; not "
                             "'dropped') a level may have, 0 to 1: exit code 1 if a level has more (default 0: any "
                             "failed request fails the run, as perf_analyzer stops on one; 1: only a level where none "
                             "succeeded does)")
    parser.add_argument("--max-steps", type=_max_steps, default=10,
                        help="the most rates --find-peak tries, at least 1 (default 10)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="items per request (default 1, or the batch dimension --shape gives)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2",
                        help="full shape of an input with variable dimensions, batch dimension first for a model "
                             "that batches (e.g. --shape input_ids=8,128 sends batches of 8; unlike perf_analyzer's "
                             "--shape, which leaves it out; an input of one value per item, shape [-1, 1], takes "
                             "--shape scale=8)")
    parser.add_argument("--workload", default=None, metavar="SPEC",
                        help="send this workload's example inputs instead of random tensors")
    parser.add_argument("--input-data", action="append", default=[], metavar="random|zero|DIR|FILE.json",
                        help="perf_analyzer's input data: random (default), zero, a directory with one raw file "
                             "per input, or a JSON file {\"data\": [...], \"validation_data\": [...]} (repeatable); "
                             "entries are sent round-robin and replies checked against validation_data "
                             "(docs/serve.md); exit code 1 if a reply under load does not match, 2 if the test request "
                             "sent before the load does not (nothing is measured)")
    parser.add_argument("--rtol", type=float, default=None, metavar="R",
                        help="relative tolerance of floating-point outputs against --input-data's validation data "
                             "(default 1e-3)")
    parser.add_argument("--atol", type=float, default=None, metavar="A",
                        help="absolute tolerance of the same check (default 1e-5)")
    parser.add_argument("--string-length", type=int, default=None, metavar="N",
                        help="characters in each random BYTES element (default 128, as perf_analyzer)")
    parser.add_argument("--string-data", default=None, metavar="S",
                        help="send S in every BYTES element instead of random strings")
    parser.add_argument("--protocol", "-i", choices=["http", "grpc"], default="http",
                        help="grpc: send the requests to the server's gRPC endpoint (URL its host:port, e.g. dlperf "
                             "serve --grpc-port or Triton's 8001; perf_analyzer's -i; default http)")
    parser.add_argument("--streaming", action="store_true",
                        help="with --protocol grpc: send the requests on ModelStreamInfer streams, one per "
                             "connection, instead of unary ModelInfer calls (perf_analyzer's option)")
    parser.add_argument("--shared-memory", choices=["none", "system"], default="none",
                        help="system: put the inputs (and outputs) in POSIX shared memory registered with the server, "
                             "so requests carry only tensor descriptions (perf_analyzer's option; the server must "
                             "run on this host with --allow-client-shm; default none)")
    parser.add_argument("--output-shared-memory-size", type=int, default=102400, metavar="BYTES",
                        help="with --shared-memory system: bytes of each output's region (default 102400)")
    parser.add_argument("--priority", type=int, default=0, metavar="L",
                        help="send every request at priority level L, 0 to 2**64-1 (Triton's 'priority' parameter; "
                             "1 is the highest on a server with --priority-levels; default 0: none)")
    parser.add_argument("--collect-metrics", action="store_true",
                        help="read the server's Prometheus page during each level and report what it used: the "
                             "server process's CPU cores and peak RSS, and per GPU the mean utilization and power "
                             "and peak memory (perf_analyzer's option; Triton's nv_gpu_* gauges)")
    parser.add_argument("--metrics-url", default=None, metavar="URL",
                        help="with --collect-metrics: where the page is (default: /metrics of URL; Triton: "
                             "HOST:8002/metrics)")
    parser.add_argument("--metrics-interval-ms", type=float, default=1000.0, metavar="MS",
                        help="with --collect-metrics: time between readings (default 1000)")
    parser.add_argument("--csv", default=None, metavar="FILE",
                        help="also write the levels as perf_analyzer's -f CSV (same columns, microseconds)")
    parser.add_argument("--token", default=None,
                        help="bearer token of a protected server; a command line is visible to every user of the "
                             "host (ps): prefer --token-file")
    parser.add_argument("--token-file", default=None, metavar="FILE", help=TOKEN_FILE_HELP)
    parser.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs, >= 0 (default 0)")
    add_json_argument(parser)
    add_store_argument(parser)


MAX_LEVELS = 64
"""The most levels one --concurrency or --rate gives (a range without a step, e.g. 1:1000, is a mistake)."""


def _levels(text: str, kind: str) -> tuple[float, ...]:
    """'1,4,16', perf_analyzer's range 'START:END[:STEP]' (END included, STEP 1 by default), or both mixed:
    the levels in the order given. `kind` 'concurrency' takes whole numbers >= 1, 'rate' numbers > 0."""
    integer = kind == "concurrency"
    example = "1,4,16 or 1:16:4" if integer else "50,100 or 100:500:100"

    def number(part: str) -> float:
        try:
            value = float(int(part)) if integer else float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{part}' in '{text}' is not a {'whole ' if integer else ''}number; "
                                             f"write e.g. {example}") from None
        if value <= 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{kind} values must be positive, got '{part}' in '{text}'")
        return value

    levels: list[float] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        bounds = item.split(":")
        if len(bounds) == 1:
            levels.append(number(item))
            continue
        if len(bounds) > 3:
            raise argparse.ArgumentTypeError(f"'{item}' is not START:END[:STEP]; write e.g. {example}")
        start, end = number(bounds[0]), number(bounds[1])
        step = number(bounds[2]) if len(bounds) == 3 else 1.0
        if end < start:
            raise argparse.ArgumentTypeError(f"'{item}': END {bounds[1]} is below START {bounds[0]}")
        count = int((end - start) / step + 1e-9) + 1
        if len(levels) + count > MAX_LEVELS:
            raise argparse.ArgumentTypeError(f"'{text}' gives {len(levels) + count} levels, at most {MAX_LEVELS}: "
                                             "give a larger STEP")
        levels.extend(round(start + i * step, 9) for i in range(count))
    if not levels:
        raise argparse.ArgumentTypeError(f"no {kind} values in '{text}'; write e.g. {example}")
    if len(levels) > MAX_LEVELS:
        raise argparse.ArgumentTypeError(f"'{text}' gives {len(levels)} levels, at most {MAX_LEVELS}")
    return tuple(levels)


def _concurrency_levels(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in _levels(text, "concurrency"))


def _rate_levels(text: str) -> tuple[float, ...]:
    return _levels(text, "rate")


def _whole_number(text: str, minimum: int, what: str) -> int:
    """An argparse type: `text` as a whole number >= `minimum`; `what` says what the option is for."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number; give {what}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}; give {what}")
    return value


def _seed(text: str) -> int:
    return _whole_number(text, 0, "a seed >= 0 for the random inputs, e.g. --seed 1")


def _error_ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a share between 0 and 1; give e.g. --max-error-ratio 0.01 "
                                         "to allow 1% of a level's requests to fail")
    return value


def _max_steps(text: str) -> int:
    return _whole_number(text, 1, "how many rates --find-peak may try, e.g. --max-steps 10")


def _shapes(items: list[str]) -> dict[str, Sequence[int]]:
    """--shape NAME=D1,D2,... values by input name; each input once. The dimensions are checked against the
    model's inputs by `oip_target`."""
    out: dict[str, Sequence[int]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            sep = ""
        if not sep or not name:
            raise ConfigError(f"--shape '{item}' is not NAME=D1,D2,...: write e.g. --shape input_ids=1,128")
        if name in out:
            raise ConfigError(f"--shape gives input '{name}' twice ({name}={','.join(map(str, out[name]))} and "
                              f"{item}): give each input's shape once")
        out[name] = shape
    return out


def _write_csv(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise ConfigError(f"--csv {path}: cannot write it ({exc.strerror}); the run is in the store: "
                          "`dlperf runs export`") from exc


def _slo(args: argparse.Namespace) -> Slo | None:
    """The SLO from --p99-ms, or from --slo-ms and --slo-percentile; None without either bound."""
    from dlperf.loadgen.generator import Slo

    if args.p99_ms is not None and args.slo_ms is not None:
        raise ConfigError("give the latency SLO once: --p99-ms X, or --slo-ms X with --slo-percentile Q")
    for option, value in (("--p99-ms", args.p99_ms), ("--slo-ms", args.slo_ms)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{option} must be a positive number of milliseconds, got {value:g}")
    if args.p99_ms is not None:
        if args.slo_percentile not in (None, 99.0):
            raise ConfigError(f"--p99-ms bounds the p99: for the p{args.slo_percentile:g} write "
                              f"--slo-ms {args.p99_ms:g} --slo-percentile {args.slo_percentile:g}")
        return Slo(args.p99_ms / 1000.0)
    if args.slo_ms is not None:
        return Slo(args.slo_ms / 1000.0, 99.0 if args.slo_percentile is None else args.slo_percentile)
    if args.slo_percentile is not None:
        raise ConfigError("--slo-percentile needs the bound it applies to: add --slo-ms X")
    return None


def run(args: argparse.Namespace) -> int:
    from dlperf.loadgen.generator import LoadConfig
    from dlperf.loadgen.target import oip_target

    slo = _slo(args)
    token = bearer_token(args.token, args.token_file)  # a file that cannot be read is refused before any load
    if args.find_peak and slo is None:
        raise ConfigError("--find-peak needs the latency SLO: add --p99-ms X (or --slo-ms X --slo-percentile Q)")
    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.priority < 0:
        raise ConfigError(f"--priority must be >= 0 (1 is the highest level, 0 sends none), got {args.priority}")
    from dlperf.serve.protocol import MAX_PRIORITY

    if args.priority > MAX_PRIORITY:
        raise ConfigError(f"--priority must be at most 2**64-1 = {MAX_PRIORITY} (a priority is an unsigned 64-bit "
                          f"integer; 1 is the highest level), got {args.priority}")
    if args.csv and not os.path.isdir(os.path.dirname(os.path.abspath(args.csv))):
        raise ConfigError(f"--csv {args.csv}: its folder does not exist")
    if args.csv and os.path.isdir(args.csv):  # found only after the whole measurement
        raise ConfigError(f"--csv {args.csv} is a folder: give a file name, e.g. {os.path.join(args.csv, 'load.csv')}")
    if not args.collect_metrics and (args.metrics_url is not None or args.metrics_interval_ms != 1000.0):
        raise ConfigError("--metrics-url and --metrics-interval-ms go with --collect-metrics: add it")
    if args.protocol == "grpc" and args.collect_metrics and args.metrics_url is None:
        raise ConfigError("with --protocol grpc, --collect-metrics needs --metrics-url: the Prometheus page is on "
                          "the server's HTTP port (e.g. --metrics-url 127.0.0.1:8000/metrics)")
    if args.metrics_url is not None:
        from dlperf.loadgen.client import parse_url

        parse_url(args.metrics_url)  # a URL it cannot read is refused before any load
    if args.streaming and args.protocol != "grpc":
        raise ConfigError("--streaming sends gRPC streams (ModelStreamInfer): add --protocol grpc (-i grpc)")
    if args.shared_memory == "none" and args.output_shared_memory_size != 102400:
        raise ConfigError("--output-shared-memory-size goes with --shared-memory system: add it")
    if args.arrivals is not None and args.concurrency:
        # it was taken and stored as the run's arrivals, which mean nothing in a closed loop
        raise ConfigError(f"--arrivals {args.arrivals} sets how an open loop's requests arrive (--rate, --find-peak); "
                          "--concurrency keeps N requests outstanding, each sent as the last one is answered: drop "
                          "--arrivals, or give --rate instead of --concurrency")
    if args.arrivals not in (None, "trace") and args.rate is None and not args.find_peak and not args.request_intervals:
        # without --concurrency too the load is the default closed loop at 1, and the arrivals were stored as its own
        raise ConfigError(f"--arrivals {args.arrivals} sets how an open loop's requests arrive, and no open loop was "
                          "asked for: add --rate R (requests per second) or --find-peak; without them the load keeps "
                          "one request outstanding (--concurrency 1)")
    if args.find_peak and args.concurrency:
        raise ConfigError("--find-peak searches request rates (open loop): drop --concurrency, or drop --find-peak "
                          "and give --p99-ms (or --slo-ms) to judge each concurrency level")
    if args.find_peak and args.max_error_ratio is not None:
        raise ConfigError("--max-error-ratio bounds a sweep's levels; --find-peak fails any rate with a failed request "
                          "on its own: drop --max-error-ratio")
    if args.find_peak and args.rate is not None and len(args.rate) > 1:
        raise ConfigError("with --find-peak, --rate is the one rate the search starts from; drop the others")
    intervals: tuple[float, ...] = ()
    rate: float | tuple[float, ...] | None = (
        args.rate[0] if args.rate and len(args.rate) == 1 else args.rate)  # one rate is recorded as a number
    if args.request_intervals:
        from dlperf.loadgen.generator import mean_rate, read_request_intervals

        if args.concurrency:
            raise ConfigError("--request-intervals is a request-rate schedule: drop --concurrency")
        if args.arrivals not in (None, "trace"):
            raise ConfigError(f"--request-intervals sets the arrivals to 'trace': drop --arrivals {args.arrivals}")
        intervals = read_request_intervals(args.request_intervals)
        if rate is None and not args.find_peak:
            rate = mean_rate(intervals)  # the trace as recorded
    config = LoadConfig(
        concurrency=args.concurrency or (1,), rate=None if args.find_peak else rate,
        # --find-peak is MLPerf LoadGen's server scenario, whose queries arrive as a Poisson process
        arrivals="trace" if intervals else (args.arrivals or ("poisson" if args.find_peak else "constant")),
        intervals_s=intervals,
        duration_s=args.duration if args.duration is not None else DEFAULT_DURATION_S, requests=args.requests,
        window_s=args.window_s, warmup_s=args.warmup_s, stability=args.stability_percentage / 100.0,
        stability_percentile=args.stability_percentile, seed=args.seed, max_outstanding=args.max_outstanding,
        request_timeout_s=args.request_timeout_s, collect_metrics=args.collect_metrics, metrics_url=args.metrics_url,
        metrics_interval_s=args.metrics_interval_ms / 1000.0, slo=slo,
    )
    if args.find_peak and args.rate and args.duration is None:
        from dlperf.loadgen.generator import check_start_rate

        assert slo is not None  # refused above without one
        check_start_rate(config, slo, args.rate[0])  # before any load: a trial of hours was started with no word
    inputs = None
    if args.workload and args.input_data:
        raise ConfigError("give either --workload (its example inputs) or --input-data, not both")
    if args.workload:
        from dlperf.workload.loader import load_workload

        inputs = load_workload(args.workload).example_inputs(args.batch_size or 1)
    shapes = _shapes(args.shape)
    with sigterm_interrupts():
        try:
            target = oip_target(args.url, args.model, batch_size=args.batch_size, token=token, inputs=inputs,
                                shapes=shapes, seed=args.seed,
                                parameters={"priority": args.priority} if args.priority else None,
                                input_data=args.input_data, string_length=args.string_length,
                                string_data=args.string_data, rtol=args.rtol, atol=args.atol,
                                shared_memory=args.shared_memory, output_shm_size=args.output_shared_memory_size,
                                protocol=args.protocol, streaming=args.streaming)
            try:
                return _measure(args, config, target, slo)
            finally:
                target.close()  # unregisters and unlinks the shared memory, also when interrupted
        except Terminated as exc:
            print(exc, file=sys.stderr)
            return SIGTERM_EXIT


def _measure(args: argparse.Namespace, config: Any, target: Any, slo: Slo | None) -> int:
    """Run the levels (or the peak search) against a ready target, record and print them; the exit code.
    Interrupted (Ctrl-C, SIGTERM), the levels finished so far are recorded, printed and written to --csv."""
    from dlperf.cli.common import console, error_console, open_store, print_json
    from dlperf.cli.progress import load_progress
    from dlperf.loadgen.generator import find_peak, run_load, verdict_dict
    from dlperf.loadgen.render import (
        gate_lines,
        level_line,
        mismatch_line,
        peak_lines,
        perf_analyzer_csv,
        setup_lines,
        verdict_line,
    )
    from dlperf.measure.env import capture_environment
    from dlperf.report.fit import indented_line

    out = console()
    err = error_console()
    store = open_store(args)
    settings: dict[str, Any] = {**config.to_dict(), "url": args.url, "model": args.model,
                                "batch_size": target.items_per_request, "workload": args.workload,
                                "input_data": args.input_data or ["random"],
                                "string_length": args.string_length, "string_data": args.string_data,
                                "distinct_requests": max(1, len(target.requests)), "validated": bool(target.expected),
                                "request_bytes": sum(map(len, target.requests or (target.raw_request,))),
                                "tolerance": list(target.tolerance) if target.expected else None,
                                "find_peak": args.find_peak, "priority": args.priority,
                                "max_error_ratio": None if args.find_peak else _max_error_ratio(args),
                                "request_intervals": args.request_intervals, "shared_memory": args.shared_memory,
                                "protocol": args.protocol, "streaming": args.streaming,
                                "duration_fitted": args.find_peak and args.duration is None,
                                # what the search started from and was allowed: its config could not be rerun
                                "start_rate": (args.rate[0] if args.rate else None) if args.find_peak else None,
                                "max_steps": args.max_steps if args.find_peak else None}
    if args.find_peak or config.mode == "rate":  # the default concurrency (1) was stored, and read as a level
        settings["concurrency"] = None
    if not args.json:
        for line in setup_lines(settings):
            out.print(line, markup=False)
    results: list[LevelResult] = []  # the levels (peak search: the steps) finished so far
    marks: list[dict[str, Any]] = []  # their verdicts (empty without an SLO), judged once per level
    run_: Any = None
    title = f"{args.model} at {args.url}" + (": rate search" if args.find_peak else "")
    try:
        with store.recording("load", f"{args.url}/{args.model}", settings, capture_environment().to_dict()) as run_:

            stored: list[dict[str, Any]] = []

            def finished(r: LevelResult) -> None:  # kept in the run's result at once: an interruption keeps it
                results.append(r)
                marks.append(verdict_dict(r, slo) if slo is not None else {})
                stored.append({**r.to_dict(), **marks[-1]})
                run_.result = {"levels": stored}

            if args.find_peak:
                assert slo is not None  # refused above without one

                with load_progress("rate") as (on_window, shown):
                    def on_step(s: LevelResult, ok: bool) -> None:
                        finished(s)
                        shown.print(f"  {s.level:.1f} req/s: {verdict_line(s, slo)}", markup=False)

                    peak = find_peak(
                        target, config, slo, start_rate=args.rate[0] if args.rate else None,
                        max_steps=args.max_steps, fit_duration=args.duration is None, on_window=on_window,
                        on_trial=lambda rate, bound_s: shown.print(
                            f"  trying {rate:.1f} req/s (at most {bound_s:.0f} s)", markup=False),
                        on_step=on_step,
                        on_probe=lambda rate: shown.print(
                            f"  start: {rate:.1f} req/s, the closed-loop throughput at concurrency 4", markup=False))
                peak_dict = peak.to_dict()  # each step's summary with its verdict
                run_.result = {"peak": peak_dict, **run_.result}
            else:
                q = slo.percentile if slo is not None else 99.0  # each level's line shows the judged percentile
                with load_progress(config.mode) as (on_window, shown):
                    def on_level(r: LevelResult) -> None:
                        finished(r)
                        shown.print(level_line(r, q), markup=False)

                    run_load(target, config, on_window=on_window, on_level=on_level)
    except KeyboardInterrupt:  # also Terminated (SIGTERM); the store has recorded the run as interrupted
        if run_ is not None:
            _interrupted(args, out, err, run_.id, results, marks, title, slo)
        raise
    # printed once the run is recorded as finished: a reader gone away (`| head`) made it a failed run
    # ("BrokenPipeError") with every level measured
    if args.json:
        print_json({"run_id": run_.id, **peak_dict} if args.find_peak else
                   {"run_id": run_.id, "levels": [{**r.summary(), **m} for r, m in zip(results, marks, strict=True)]})
    else:
        _print_levels(out, results, marks if not args.find_peak else [{}] * len(results), title, slo)
        if args.find_peak:  # peak_lines give the verdicts
            for line in peak_lines(peak):
                out.print(indented_line(line))
    _print_warnings(err, results)
    if not args.json:
        out.print(f"recorded as run {run_.id}", markup=False)
    if args.csv:  # after the run is stored: a file that cannot be written loses nothing
        _write_csv(args.csv, perf_analyzer_csv(results))
        err.print(f"wrote {args.csv} (perf_analyzer's CSV columns)", markup=False)
    wrong = mismatch_line(results)
    if wrong:
        err.print(wrong, markup=False)
        return 1
    if args.find_peak:  # the search fails rates with failed requests (or none answered) on purpose
        return _peak_exit(err, run_, slo, args.json)
    said = gate_lines(results, run_.result["levels"], _max_error_ratio(args), slo)
    for line in said:
        err.print(line, markup=False)
    return 1 if said else 0


def _max_error_ratio(args: argparse.Namespace) -> float:
    return 0.0 if args.max_error_ratio is None else float(args.max_error_ratio)


def _peak_exit(err: Console, run_: Any, slo: Slo | None, json_out: bool = False) -> int:
    """A peak search's exit code: 0 when some tried rate kept the SLO. With --json, where the search's own lines
    are not printed, a search stopped on an undecided trial says so here too (only "SLO not met" was said)."""
    assert slo is not None  # --find-peak is refused without one
    stopped = run_.result["peak"].get("undecided_at")
    if json_out and stopped is not None:
        from dlperf.loadgen.render import peak_outcome

        err.print(peak_outcome(None, slo, float(stopped), False)[0], markup=False)
    if run_.result["peak"]["peak_rate"] is not None:
        return 0
    decided = any(step.get("verdict") == "fail" for step in run_.result["peak"]["steps"])
    err.print(f"SLO not met: no tried rate kept {slo}" if decided else
              f"SLO not shown: no tried rate was decided at 99% confidence ({slo})", markup=False)
    return 1


def _print_levels(out: Console, results: Sequence[LevelResult], marks: Sequence[dict[str, Any]], title: str,
                  slo: Slo | None) -> None:
    """The levels table, what the server used, and each level's verdict where `marks` has one."""
    from dlperf.loadgen.render import level_text, levels_table, resource_lines, verdict_text
    from dlperf.report.fit import indented_line

    out.print(levels_table(list(results), title, slo))
    # indented lines keep their indent where they wrap (on 80 columns a verdict's end went to column 0)
    for line in resource_lines(list(results)):
        out.print(indented_line(line))
    for r, m in zip(results, marks, strict=True):
        if m:
            verdict = verdict_text(m["verdict"], m["verdict_reason"])
            out.print(indented_line(f"  {r.mode} {level_text(r.level)}: {verdict}"))


def _print_warnings(err: Console, results: Sequence[LevelResult]) -> None:
    from dlperf.loadgen.render import level_text

    for r in results:
        for warning in r.warnings:
            err.print(f"[yellow]warning[/] ({r.mode} {level_text(r.level)}): {warning}")


def _interrupted(args: argparse.Namespace, out: Console, err: Console, run_id: str,
                 results: Sequence[LevelResult], marks: Sequence[dict[str, Any]], title: str,
                 slo: Slo | None) -> None:
    """What an interrupted run shows: the levels it finished (table or --json, and --csv), and where it is."""
    from dlperf.cli.common import print_json
    from dlperf.loadgen.render import perf_analyzer_csv

    finished = f"{len(results)} level{'s' if len(results) != 1 else ''} finished"
    if results:
        if args.json:
            print_json({"run_id": run_id, "status": "interrupted",
                        "steps" if args.find_peak else "levels":
                            [{**r.summary(), **m} for r, m in zip(results, marks, strict=True)]})
        else:
            _print_levels(out, results, marks, f"{title} (interrupted, {finished})", slo)
        _print_warnings(err, results)
    err.print(f"interrupted: {finished}, recorded as run {run_id} (status interrupted)", markup=False)
    if args.csv and results:
        try:
            _write_csv(args.csv, perf_analyzer_csv(list(results)))
        except ConfigError as exc:
            err.print(f"error: {exc}", markup=False)
        else:
            err.print(f"wrote {args.csv} (perf_analyzer's CSV columns) for the finished levels", markup=False)
