"""Benchmark: optimize zoo:resnet18 (batch 1, 224x224, 2 threads) under an output-fidelity budget of 0.99.

ResNet-18 here has random weights and no metric, so fidelity = mean cosine similarity of the outputs to
the fp32 model's on random inputs the calibration never saw. Method as in optimize_minilm.py: candidates
from the engine passes (ONNX Runtime / OpenVINO, fp32 and static int8 with per-channel weights and
accuracy-driven fp32 fallback), the fastest within budget by a short interleaved A/B, then the exported
winner, loaded back through dlperf.optimize.artifact, measured against eager fp32 interleaved in one
process. Driven through dlperf.passes directly (apply_pass), not the dlperf.optimize search.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

TARGET_SPEEDUP = 6.0
TARGET_FIDELITY = 0.99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-fidelity", type=float, default=TARGET_FIDELITY)
    parser.add_argument("--calibration-samples", type=int, default=64)
    parser.add_argument("--blocks", type=int, default=16, help="A/B blocks of the final measurement")
    parser.add_argument("--quick", action="store_true", help="only the ONNX Runtime static int8 candidate")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import torch

    from dlperf.measure.ab import ABConfig, ab_test
    from dlperf.optimize import artifact
    from dlperf.passes.base import PassContext, apply_pass, initial_state
    from dlperf.passes.onnxruntime import OrtConfig
    from dlperf.passes.openvino import OpenVinoConfig
    from dlperf.passes.sensitivity import cosine_rows
    from dlperf.workload.zoo import get

    torch.set_num_threads(args.threads)
    wl = get("resnet18")
    state = initial_state(wl)
    ctx = PassContext(batch_size=1, threads=args.threads)
    x = wl.example_inputs(1)
    # Held-out random images (calibration uses the workload's own example batches of size 1, 2, 3 ...).
    g = torch.Generator().manual_seed(12345)
    held_out = [torch.randn(8, 3, 224, 224, generator=g) for _ in range(4)]
    with torch.inference_mode():
        reference = [state.predict(b) for b in held_out]

    def fidelity(predict: object) -> tuple[float, float]:
        with torch.inference_mode():
            sims = torch.cat([cosine_rows(predict(b), r) for b, r in zip(held_out, reference, strict=True)])  # type: ignore[operator]
        return float(sims.mean()), float(sims.min())

    max_drop = 1.0 - args.min_fidelity
    print(f"dlperf benchmark: optimize zoo:resnet18, batch 1, 224x224, {args.threads} threads")
    print("search: dlperf.passes driven directly (apply_pass), not the dlperf.optimize search")
    print(f"budget: output fidelity (mean cosine vs fp32 on {sum(len(b) for b in held_out)} held-out random images)"
          f" >= {args.min_fidelity}")
    n = args.calibration_samples
    candidates = [OrtConfig(precision="int8-static", keep_fp32="auto", max_metric_drop=max_drop, calibration_samples=n)]
    if not args.quick:
        candidates += [
            OpenVinoConfig(precision="int8-static", keep_fp32="auto", static_shape=True, max_metric_drop=max_drop,
                           calibration_samples=n),
            OrtConfig(),
        ]

    def eager() -> None:
        with torch.inference_mode():
            state.predict(*x)

    results = []
    print(f"\n{'candidate':<80} {'build_s':>8} {'fidelity':>9} {'speedup (quick A/B)':>22}")
    for config in candidates:
        t0 = time.perf_counter()
        try:
            built = apply_pass(config, state, ctx)
        except Exception as exc:  # a benchmark reports a failed candidate and goes on
            print(f"{config.label():<80} failed: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        build_s = time.perf_counter() - t0
        fid, _ = fidelity(built.predict)
        ok = fid >= args.min_fidelity
        speed = "-"
        if ok:
            quick = ab_test(eager, lambda b=built: b.predict(*x), ABConfig(blocks=6, iters_per_block=5))
            speed = f"{quick.speedup:.2f}x ({quick.speedup_ci[0]:.2f}-{quick.speedup_ci[1]:.2f})"
            results.append((quick.speedup, config, built))
        print(f"{config.label():<80} {build_s:>8.0f} {fid:>9.4f} {speed:>22}{'' if ok else '  over budget'}")
        for note in built.notes:
            if note.startswith(("int8 sensitivity", "mixed precision", "kept fp32")):
                print(f"    {note}")
    if not results:
        print("\nno candidate met the budget")
        return 1
    results.sort(key=lambda r: r[0], reverse=True)
    _, config, winner = results[0]
    print(f"\nwinner: {config.label()}")

    with tempfile.TemporaryDirectory(prefix="dlperf-bench-") as tmp:
        folder = Path(tmp)
        assert winner.exporter is not None
        artifact.write_manifest(folder, winner.exporter(folder))
        loaded = artifact.load_artifact(folder)
        files = sorted(p.name for p in folder.iterdir())
        fid, worst = fidelity(loaded)
        result = ab_test(eager, lambda: loaded(*x), ABConfig(blocks=args.blocks, iters_per_block=5))
    lo, hi = result.speedup_ci
    a_ms = result.a.summary()["p50_s"] * 1e3
    b_ms = result.b.summary()["p50_s"] * 1e3
    print(f"exported artifact: {', '.join(files)}")
    print(f"exported winner vs eager fp32 (interleaved A/B, {len(result.block_ratios)} paired blocks): "
          f"{result.speedup:.2f}x (95% CI {lo:.2f}-{hi:.2f}x), median {a_ms:.1f} ms -> {b_ms:.1f} ms")
    print(f"output fidelity of the exported winner: mean {fid:.4f} (target >= {args.min_fidelity}), "
          f"worst image {worst:.4f}")
    met = result.speedup >= TARGET_SPEEDUP and fid >= args.min_fidelity
    print(f"target >= {TARGET_SPEEDUP:.1f}x at fidelity >= {args.min_fidelity}: {'MET' if met else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
