"""Synthetic served traffic for compare --live's unit tests: requests recorded into a real `Metrics`, read back as
the Prometheus page a server would give."""

from __future__ import annotations

import random

from dlperf.serve.metrics import Metrics


def traffic(metrics: Metrics, variant: str, n: int, median_s: float, failures: int = 0, seed: int = 0, *,
            model: str = "m", rng: random.Random | None = None) -> None:
    """`n` answered requests of about `median_s` each (lognormal, sigma 0.2) and `failures` failed ones, of
    `model`'s `variant`; drawn from `rng`, else from a generator seeded with `seed`."""
    rec = metrics.recorder(model, variant)
    draw = rng if rng is not None else random.Random(seed)
    for _ in range(n):
        ns = int(draw.lognormvariate(0, 0.2) * median_s * 1e9)
        rec.batch(1, 0, ns, 0)
        rec.success(ns, 0, (0, ns, 0))
    for _ in range(failures):
        rec.failure("BACKEND", 1_000_000)


def scrape(metrics: Metrics) -> str:
    return metrics.exposition()[0].decode()
