"""Does `dlperf ab` say "no significant difference" when there is none, and find a real one?

One run prints, for one workload call (default zoo:mlp at batch 8):
  1. A/A: the same call as A and B, `trials` times: how often `dlperf ab`'s interleaved ABBA blocks (Yuen's
     interval of the 20%-trimmed geometric mean of the block ratios, 95%, 1% minimum effect) call a difference.
     The nominal rate is 5%; a test that counts correlated samples as independent finds far more.
  2. The same A/A pairs judged the naive way, as two runs measured one after the other would be, by a bare
     Mann-Whitney U over the per-call times (5%): what interleaving saves. (`dlperf compare RUN_A RUN_B` also asks
     the median ratio's interval to lie beyond its --min-effect, which this test does not.)
  3. Power: B = the call plus a spin of `--effect` (default 10%) of its median time: how often each way
     finds B slower.
The A/A and A/B trials alternate, so both see the same machine. Not a test: read the output.

    python benchmarks/ab_calibration.py [--workload zoo:mlp] [--batch 8] [--trials 40] [--effect 0.10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from dlperf.compare.stats import mann_whitney_u
from dlperf.measure.ab import SAME, SLOWER, ABConfig, ab_test
from dlperf.measure.clock import CpuClock
from dlperf.measure.timer import TimerConfig, time_callable
from dlperf.workload.loader import load_workload


def model_call(spec: str, batch: int) -> Callable[[], Any]:
    import torch

    workload = load_workload(spec)
    model = workload.build_model().eval()
    inputs = workload.example_inputs(batch)

    def call() -> Any:
        with torch.inference_mode():
            return model(*inputs)

    return call


def with_spin(fn: Callable[[], Any], extra_s: float) -> Callable[[], Any]:
    def call() -> Any:
        out = fn()
        end = time.perf_counter() + extra_s
        while time.perf_counter() < end:
            pass
        return out

    return call


def naive_slower(fn_a: Callable[[], Any], fn_b: Callable[[], Any], config: ABConfig) -> tuple[bool, bool]:
    """A measured, then B (as two runs): (a difference at 5%, B found slower at 5%)."""
    timer = TimerConfig(warmup_iters=config.warmup_iters, min_duration_s=0.0,
                        min_iters=config.blocks * config.iters_per_block)
    a = time_callable(fn_a, timer, CpuClock())
    b = time_callable(fn_b, timer, CpuClock())
    test = mann_whitney_u(b.samples_s, a.samples_s)
    return test.p_value < 0.05, test.p_value < 0.05 and test.prob_greater > 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="zoo:mlp")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--effect", type=float, default=0.10, help="B's extra time as a fraction of A's median")
    args = parser.parse_args()

    fn = model_call(args.workload, args.batch)
    config = ABConfig()
    median_s = statistics.median(time_callable(fn, TimerConfig(min_duration_s=0.5), CpuClock()).samples_s)
    slower_fn = with_spin(fn, args.effect * median_s)
    print(f"{args.workload} at batch {args.batch}: median call {median_s * 1e3:.3f} ms; {args.trials} trials of "
          f"{config.blocks} blocks x {config.iters_per_block} calls a side; B in the power trials: +{args.effect:.0%}")
    aa_ab = aa_naive = power_ab = power_naive = 0
    for i in range(args.trials):
        aa_ab += ab_test(fn, fn, config).verdict != SAME
        aa_naive += naive_slower(fn, fn, config)[0]
        power_ab += ab_test(fn, slower_fn, config).verdict == SLOWER
        power_naive += naive_slower(fn, slower_fn, config)[1]
        print(f"  trial {i + 1}/{args.trials}: A/A differences so far: ab {aa_ab}, naive {aa_naive}; "
              f"B found slower: ab {power_ab}, naive {power_naive}", flush=True)
    n = args.trials
    print(f"A/A, a 'difference' called (nominal 5%):   dlperf ab {aa_ab}/{n} ({aa_ab / n:.0%})   "
          f"two runs + Mann-Whitney {aa_naive}/{n} ({aa_naive / n:.0%})")
    print(f"B +{args.effect:.0%} found slower (power):        dlperf ab {power_ab}/{n} ({power_ab / n:.0%})   "
          f"two runs + Mann-Whitney {power_naive}/{n} ({power_naive / n:.0%})")
    verdict = "MET" if aa_ab / n <= 0.10 else "MISSED"
    print(f"target: dlperf ab's A/A rate near the nominal 5% (at most 10% over {n} trials): {verdict}")


if __name__ == "__main__":
    main()
