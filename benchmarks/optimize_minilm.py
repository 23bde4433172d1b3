"""Benchmark: `dlperf optimize` on zoo:minilm (batch 1, sequence 128, 2 threads), budget: fidelity >= 0.99.

Method:
1. The real search (dlperf.optimize.search.optimize, what `dlperf optimize --export DIR` runs): every
   candidate built, scored and timed in its own process with the same settings, scored with the
   workload's EvalSpec ("fidelity": mean cosine to the fp32 model's embeddings on 68 held-out sentences),
   constraint: metric drop <= 0.01 (the baseline scores 1.0). The search hands that budget to the int8
   passes whose `keep_fp32="auto"` keeps the most int8-sensitive layers fp32 only as far as it needs.
   By default the space is restricted to the int8 paths (`--passes`: the OpenVINO and ONNX Runtime
   engines, torch dynamic int8); `--passes all` searches every pass (compile, torchao: minutes more).
   The search confirms its winner by an interleaved A/B against the baseline and exports it.
2. The exported winner, loaded with `dlperf.load`, measured against eager fp32 (inference_mode)
   interleaved in this one process (dlperf.measure.ab): speedup with its 95% CI, and the loaded
   artifact's fidelity on the same held-out sentences, next to the target.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings

import optimize_common as common

TARGET_SPEEDUP = 3.0
TARGET_FIDELITY = 0.99
DEFAULT_PASSES = "openvino,onnxruntime,dynamic_int8"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--min-fidelity", type=float, default=TARGET_FIDELITY)
    parser.add_argument("--min-fidelity-worst", type=float, default=None,
                        help="the search's --min-fidelity-worst: every candidate's worst single input, and a row of "
                             "the table judging the winner's worst sentence (default: none, the worst is shown)")
    parser.add_argument("--passes", default=DEFAULT_PASSES,
                        help=f"passes the search may use, comma-separated, or 'all' (default {DEFAULT_PASSES})")
    parser.add_argument("--time-budget", type=float, default=1200.0, help="the search's time budget, seconds")
    parser.add_argument("--blocks", type=int, default=16, help="A/B blocks of the final measurement")
    parser.add_argument("--workdir", default=None, help="keep the candidates' artifacts here (default: a temp dir)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import torch

    from dlperf.workload.zoo import get, minilm

    torch.set_num_threads(args.threads)
    source = "zoo:minilm" if args.seq_len == 128 else f"zoo:minilm?seq_len={args.seq_len}"
    passes = None if args.passes == "all" else tuple(p.strip() for p in args.passes.split(",") if p.strip())
    max_drop = 1.0 - args.min_fidelity
    print(f"dlperf benchmark: dlperf optimize {source}, batch 1, sequence {args.seq_len}, {args.threads} threads")
    print(f"budget: fidelity (mean cosine to eager fp32 on {len(minilm.EVAL_SENTENCES)} held-out sentences) "
          f">= {args.min_fidelity}: metric drop <= {max_drop:g}; passes: {args.passes}")

    with tempfile.TemporaryDirectory(prefix="dlperf-bench-") as tmp:
        exported = common.search_and_load(source, args, passes, max_drop, tmp)
        if exported is None:
            return 1
        wl = get("minilm", seq_len=args.seq_len)
        model = wl.build_model().eval()
        x = wl.example_inputs(1)
        loaded = exported.loaded
        fidelity = minilm.fidelity(loaded, args.seq_len)
        worst = minilm.min_fidelity(loaded, args.seq_len)
        ab = common.measure_exported(model, loaded, x, args.blocks)
    common.print_side_by_side(ab, TARGET_SPEEDUP, fidelity, worst, args.min_fidelity,
                              f"the loaded artifact on the {len(minilm.EVAL_SENTENCES)} held-out sentences "
                              "(worst: the lowest single sentence)", args.min_fidelity_worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
