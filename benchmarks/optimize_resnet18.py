"""Benchmark: `dlperf optimize` on zoo:resnet18 (batch 1, 224x224, 2 threads), budget: output fidelity >= 0.99.

ResNet-18 here has random weights and no eval metric, so the search's metric is fidelity: the mean cosine
similarity of a candidate's outputs to the fp32 model's on 32 held-out inputs (not the calibration rows).
Method as in optimize_minilm.py: the real search (dlperf.optimize.search.optimize) over the engine passes
(ONNX Runtime / OpenVINO: fp32, dynamic int8, int8 weights, static int8 with per-channel weights and
accuracy-driven fp32 fallback) and channels_last by default (`--passes all`: every pass), constraint
metric drop <= 0.01; its confirmed winner exported, loaded back with `dlperf.load` and measured against
eager fp32 interleaved in this one process, with its fidelity on 32 other random images it never saw.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from typing import Any

import optimize_common as common

TARGET_SPEEDUP = 6.0
TARGET_FIDELITY = 0.99
DEFAULT_PASSES = "openvino,onnxruntime,channels_last"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-fidelity", type=float, default=TARGET_FIDELITY)
    parser.add_argument("--min-fidelity-worst", type=float, default=None,
                        help="the search's --min-fidelity-worst: every candidate's worst single input, and a row of "
                             "the table judging the winner's worst image (default: none, the worst is shown)")
    parser.add_argument("--passes", default=DEFAULT_PASSES,
                        help=f"passes the search may use, comma-separated, or 'all' (default {DEFAULT_PASSES})")
    parser.add_argument("--time-budget", type=float, default=1200.0, help="the search's time budget, seconds")
    parser.add_argument("--blocks", type=int, default=16, help="A/B blocks of the final measurement")
    parser.add_argument("--workdir", default=None, help="keep the candidates' artifacts here (default: a temp dir)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import torch

    from dlperf.passes.sensitivity import cosine_rows
    from dlperf.workload.zoo import get

    torch.set_num_threads(args.threads)
    passes = None if args.passes == "all" else tuple(p.strip() for p in args.passes.split(",") if p.strip())
    max_drop = 1.0 - args.min_fidelity
    print(f"dlperf benchmark: dlperf optimize zoo:resnet18, batch 1, 224x224, {args.threads} threads")
    print(f"budget: output fidelity (mean cosine to eager fp32 on held-out random images) >= {args.min_fidelity}: "
          f"metric drop <= {max_drop:g}; passes: {args.passes}")

    with tempfile.TemporaryDirectory(prefix="dlperf-bench-") as tmp:
        exported = common.search_and_load("zoo:resnet18", args, passes, max_drop, tmp)
        if exported is None:
            return 1
        wl = get("resnet18")
        model = wl.build_model().eval()
        x = wl.example_inputs(1)
        loaded = exported.loaded
        # Images neither the calibration nor the search's held-out set used (those come from example_inputs).
        g = torch.Generator().manual_seed(12345)
        images = [torch.randn(8, 3, 224, 224, generator=g) for _ in range(4)]
        with torch.inference_mode():
            reference = [model(b) for b in images]

        def fidelity(predict: Any) -> tuple[float, float]:
            with torch.inference_mode():
                sims = torch.cat([cosine_rows(predict(b), r) for b, r in zip(images, reference, strict=True)])
            return float(sims.mean()), float(sims.min())

        fid, worst = fidelity(loaded)
        ab = common.measure_exported(model, loaded, x, args.blocks)
    common.print_side_by_side(ab, TARGET_SPEEDUP, fid, worst, args.min_fidelity,
                              f"the loaded artifact on {sum(len(b) for b in images)} random images no step of "
                              "the search saw (worst: the lowest single image)", args.min_fidelity_worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
