"""`dlperf report` rendered in headless Chromium: no console errors, every plot drawn, a real screenshot.

Needs Debian's `chromium` package. Skipped only when it is missing AND $CI is unset; in CI it must run.
The page's own self-check (an inline script at the end of the body) sets `data-selfcheck="ok"` on <body>
when every `svg.plot` has a nonzero size and drawn marks and no script error happened; --dump-dom shows it.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import dlperf
from dlperf.cli.main import main
from dlperf.compare.ab import run_ab_recorded
from dlperf.compare.settings import parse_settings
from dlperf.store import Store

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("DLPERF_CHROMIUM") or next(
    (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("chromium is not installed (apt-get install chromium); required when $CI is set",
                allow_module_level=True)

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0")


def _chromium(tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None, "chromium is required in CI: apt-get install chromium"
    profile = tmp / f"profile-{name}"
    profile.mkdir()
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=180, check=False)


def _synthetic_runs(store: Store) -> None:
    """optimize, profile and load records as their commands store them, so every view is rendered."""
    opt = store.create_run("optimize", "zoo:mlp", {"metric_name": "accuracy"})
    store.finish_run(opt.id, {"metric_name": "accuracy", "higher_is_better": True})
    for name, latency, acc in (("fp32", 0.0012, 0.95), ("bf16", 0.0008, 0.948), ("int8", 0.0005, 0.91)):
        child = store.create_run("candidate", "zoo:mlp", parent_id=opt.id)
        store.finish_run(child.id, {"name": name, "latency_s": latency, "metric": acc})
    prof = store.create_run("profile", "zoo:mlp")
    store.finish_run(prof.id, {"verdict": "framework overhead dominates", "analyses": {
        "breakdown": {"step_s": 0.002, "forward_s": 0.0012, "framework_overhead_s": 0.0008},
        "operators": {"operators": [{"name": "aten::addmm", "self_s": 0.0009, "share": 0.45, "intensity": 30.0,
                                     "achieved_flops_s": 2e10, "bound": "compute", "pct_of_peak": 0.4}],
                      "peak_flops": {"fp32": 5e10}, "bandwidth_bytes_s": 1e10}}})
    load = store.create_run("load", "http://localhost:8000")
    store.finish_run(load.id, {"steps": [{"concurrency": c, "throughput_rps": t, "p50_s": a, "p99_s": b}
                                         for c, t, a, b in ((1, 400, 0.002, 0.004), (4, 1200, 0.003, 0.008))]})


@pytest.mark.slow
def test_report_renders_without_errors_and_draws_every_plot(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = Store(db)
    for _ in range(2):
        dlperf.bench("zoo:mlp", batch_sizes=(1, 8), min_duration_s=0.2, min_iters=20, store=store)
    run_ab_recorded(store, "zoo:mlp", parse_settings("batch_size=1"), parse_settings("batch_size=8"), blocks=4,
                    iters_per_block=5)
    _synthetic_runs(store)
    ids = [r.id for r in store.list(limit=20) if r.kind != "candidate"]
    html_path = tmp_path / "report.html"
    assert main(["report", *ids, "--history", "zoo:mlp", "-o", str(html_path), "--store", str(db)]) == 0
    page = html_path.resolve().as_uri()

    dom = _chromium(tmp_path, "dom", "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body is not None, dom.stdout[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    expected = len(re.findall(r'<svg class="plot"', html_path.read_text()))
    assert expected >= 12
    assert attrs.get("data-plots-total") == str(expected)
    assert attrs.get("data-plots-drawn") == str(expected)
    assert attrs.get("data-errors") == "0"
    assert attrs.get("data-selfcheck") == "ok"
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console

    shot = tmp_path / "report.png"
    result = _chromium(tmp_path, "shot", f"--screenshot={shot}", "--window-size=1280,2400", page)
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2400)
    assert len(data) > 50_000  # text, tables and plots, not a blank page
    assert [line for line in result.stderr.splitlines() if ":CONSOLE" in line] == []


def test_a_report_without_plots_passes_its_self_check(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = Store(db)
    run = store.create_run("calibrate", "cpu")
    store.finish_run(run.id, {"gemm_flops": {"fp32": 5e10}, "memory_bandwidth_bytes_s": 1e10, "threads": 2})
    html_path = tmp_path / "report.html"
    assert main(["report", run.id, "-o", str(html_path), "--store", str(db)]) == 0
    assert '<svg class="plot"' not in html_path.read_text()
    dom = _chromium(tmp_path, "dom", "--dump-dom", html_path.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body is not None, dom.stdout[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    # nothing to draw is not a failure: the check failed every report of only train or calibrate runs
    assert attrs.get("data-plots-total") == "0" and attrs.get("data-selfcheck") == "ok"


def test_a_long_workload_name_wraps_instead_of_widening_the_page(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = Store(db)
    run = store.create_run("calibrate", "zoo:" + "x" * 200 + "?option=" + "y" * 60)
    store.finish_run(run.id, {"gemm_flops": {"fp32": 5e10}, "memory_bandwidth_bytes_s": 1e10, "threads": 2})
    html_path = tmp_path / "report.html"
    assert main(["report", run.id, "-o", str(html_path), "--store", str(db)]) == 0
    dom = _chromium(tmp_path, "dom", "--window-size=1280,1000", "--dump-dom", html_path.resolve().as_uri())
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body is not None, dom.stdout[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    # the name (one unbroken word) made the Runs table and the header ~1900 px wide, the other columns off-page
    assert int(attrs["data-page-width"]) <= 1280
