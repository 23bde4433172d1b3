"""A candidate's artifact made the way a search makes it, for the artifact tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dlperf.optimize.evaluate import EvalSettings, evaluate_here
from dlperf.optimize.space import Candidate


def export_candidate(out: Path, cand: Candidate) -> Path:
    """Evaluate `cand` on zoo:mlp in this process (briefly) into `out`; its artifact folder."""
    settings = EvalSettings(source="zoo:mlp", batch_size=1, warmup_iters=1, min_duration_s=0.0, min_iters=1,
                            max_duration_s=1.0)
    evaluate_here({"settings": dataclasses.asdict(settings), "pipeline": cand.to_list(), "out_dir": str(out)},
                  lambda phase: None)
    return out / "artifact"
