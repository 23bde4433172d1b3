"""What an exported artifact's manifest says of it, in words: the startup lines of `dlperf serve` (which artifact,
from which optimize run, at what fidelity, whether its search figures were disturbed) and the notes on serving it
batched, read from the manifest on disk; the CLI prints them (STYLE.md: CLI modules hold no logic)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def artifact_lines(specs: Sequence[str]) -> list[str]:
    """For each exported artifact served, what it is and where it came from, from its manifest: the startup lines
    said `loading DIR`, `serving model 'minilm'` and `platform: torch` in the metadata, so nothing told the
    dynamic_int8 artifact an optimize run had picked from the fp32 model it replaced."""
    from dlperf.optimize.artifact import peek_manifest

    lines = []
    for spec in specs:
        manifest = peek_manifest(spec)
        if manifest is None:
            continue
        what = (f"{manifest.get('label') or 'baseline'} "
                f"({manifest.get('engine', '?')}, {manifest.get('precision', '?')})")
        origin = f" from `dlperf optimize {manifest['workload']}`" if manifest.get("workload") else ""
        run = f" (run {manifest['run_id']})" if manifest.get("run_id") else ""
        batch = f", chosen at batch {manifest['batch_size']}" if manifest.get("batch_size") else ""
        metrics = manifest.get("metrics") or {}
        metric = metrics.get("metric")
        scored = (f"; {metrics.get('metric_name') or 'metric'} {metric:.4f}" if isinstance(metric, (int, float))
                  else "")
        ab = metrics.get("ab")
        speedup = ab.get("speedup") if isinstance(ab, dict) else None
        confirmed = manifest.get("confirmed")
        verdict = ("" if confirmed is None else "; not confirmed faster by an A/B" if confirmed is not True else
                   f"; {speedup:.2f}x the baseline's speed by A/B" if isinstance(speedup, (int, float)) else
                   "; confirmed by A/B")
        disturbed = metrics.get("disturbed")
        if isinstance(disturbed, str) and disturbed:
            # the search's p50, p99 and items/s came from stalled calls (p99 2.03 s beside a p50 of 13.3 ms): not
            # quoted, and the manifest's are named as not the model's
            short = re.split(r" \(|: ", disturbed, maxsplit=1)[0]
            verdict += (f"; the search's own timing of it was disturbed ({short}): the manifest's p50, p99 and "
                        "throughput are not the model's")
        lines.append(f"artifact {spec}: {what}{origin}{run}{batch}{scored}{verdict}")
    return lines


PER_BATCH_QUANTIZED = {("onnxruntime", "int8-dynamic")}
"""(engine, precision) of artifacts whose activations are quantized with one scale over the whole batch."""


def batch_dependence_notes(specs: Sequence[str]) -> list[str]:
    """For artifacts whose outputs depend on the requests batched with them, what to know and do."""
    from dlperf.optimize.artifact import peek_manifest

    notes = []
    for spec in specs:
        manifest = peek_manifest(spec)
        if manifest is not None and (manifest.get("engine"), manifest.get("precision")) in PER_BATCH_QUANTIZED:
            notes.append(f"{spec} quantizes activations dynamically with one scale per batch, so a request's "
                         "outputs depend on the requests batched with it (a digits-cnn logit moved by 1.9 when batched "
                         "with an input 50 times larger); --max-batch-size 1 keeps each request's outputs its own")
    return notes
