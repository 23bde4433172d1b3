"""The figures of the analyzers where a plausible slip would give a wrong number and no other test would notice: the
data wait and 'other' time of a step, the step the breakdown reports, device idle time, a step's memory peak, the
roofline of a bf16 operator, per-step FLOPs and the loader's suggestions (from a mutation-testing audit)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlperf.profile.analyzers import breakdown, dataloader, launch, memory, operators
from dlperf.profile.trace import TRAIN, KernelEvent, LoaderInfo, OpEvent
from tests.unit.profile.builders import CEILINGS, FakeCeilings, gemm, op, trace

pytestmark = pytest.mark.unit


def test_the_data_wait_is_the_profilers_data_phase_when_it_is_longer_than_the_measured_wait() -> None:
    """A step of 10 ms whose profiler data phase is 4 ms (the measured wait only 1 ms): the wait is 4 ms, the busy
    step 6 ms, of which forward is 5 ms and 1 ms no phase covers ('other'). Taking the measured wait alone, or
    counting the data phase as one of the busy step's phases, would give 'other' 4 ms or 0."""
    t = trace([op("aten::mm", 4000, 5000)], mode=TRAIN, data_wait_s=0.001,
              phase_us={"data": 4000.0, "forward": 5000.0})
    b = breakdown.analyze(t)
    assert b.data_wait_s == pytest.approx(0.004)
    assert b.forward_s == pytest.approx(0.005)
    assert b.other_s == pytest.approx(0.001)
    assert b.framework_overhead_s == pytest.approx(0.001)
    la = launch.analyze(t)
    assert la.busy_step_s == pytest.approx(0.006)


def test_the_breakdown_of_an_even_number_of_steps_is_the_lower_middle_one() -> None:
    t = trace([op("aten::mm", i * 10_000, 5000, step=i) for i in range(4)], steps=4)
    t.steps = [replace(s, wall_s=w) for s, w in zip(t.steps, (0.040, 0.010, 0.030, 0.020), strict=True)]
    assert breakdown.analyze(t).step_s == pytest.approx(0.020)


def test_profiling_overhead_is_over_the_median_unprofiled_step_and_the_mean_one_with_loader_workers() -> None:
    """One slow unprofiled step (40 ms among 10 ms ones) moves the mean, not the median; the median step is the
    figure of a step without workers, the mean the figure of one fed by loader workers (bimodal steps)."""
    t = trace([op("aten::mm", i * 10_000, 5000, step=i) for i in range(3)], steps=3)
    t.unprofiled_step_s = [0.010, 0.040, 0.010]
    assert breakdown.analyze(t).profiling_overhead == pytest.approx(1.0)

    info = LoaderInfo("DataLoader", True, num_workers=2, pin_memory=False, prefetch_factor=2,
                      persistent_workers=True, batch_size=8)
    fed = trace([op("aten::mm", i * 10_000 + 5000, 5000, step=i) for i in range(3)], steps=3, mode=TRAIN,
                loader=info, phase_us={"forward": 5000.0})
    # a batch ready in two steps, a 9 ms wait in the third
    fed.steps = [replace(s, data_wait_s=w) for s, w in zip(fed.steps, (0.0, 0.0, 0.009), strict=True)]
    fed.unprofiled_step_s = [0.010, 0.010, 0.040]
    fed.unprofiled_data_wait_s = [0.0, 0.0, 0.030]
    b = breakdown.analyze(fed)
    assert b.mean_step
    assert b.data_wait_s == pytest.approx(0.003)  # the mean wait; the median step's is 0
    assert b.profiling_overhead == pytest.approx(0.010 / 0.020)
    ld = dataloader.analyze(fed)
    assert ld.unprofiled_wait_share == pytest.approx(0.010 / 0.020)  # mean wait over mean step; the medians say 0


def test_device_idle_time_counts_overlapping_kernels_once() -> None:
    """Two kernels on two streams overlap for 2 ms: the device is busy 6 ms of the 10 ms step, idle 4 ms."""
    t = trace([op("aten::mm", 0, 100)])
    t.device = "cuda"
    t.kernels = [KernelEvent("gemm", 0.0, 4000.0, 0), KernelEvent("copy", 2000.0, 4000.0, 0)]
    assert breakdown.analyze(t).device_idle_s == pytest.approx(0.004)


def test_kernels_per_step_are_per_step() -> None:
    t = trace([op("aten::mm", 0, 100), op("aten::mm", 10_000, 100, step=1)], steps=2)
    t.device = "cuda"
    t.kernels = [KernelEvent("k", s * 10_000.0 + i * 100, 50.0, s) for s in range(2) for i in range(3)]
    assert launch.analyze(t).kernels_per_step == pytest.approx(3.0)


def test_a_steps_memory_peak_is_counted_from_the_level_it_started_at() -> None:
    """Step 0 allocates 300 bytes and keeps them (a cache); step 1 allocates 200 more and frees them. Each step's
    peak is over what was held when it started: 300 and 200, not 500 for step 1."""
    t = trace([op("aten::empty", 0, 10, mem=300), op("aten::empty", 10_000, 10, step=1, mem=200)], steps=2)
    t.memory.timeline = [(5000.0, 300), (15_000.0, 500), (18_000.0, 300)]
    assert memory.analyze(t).step_allocated_peak_bytes == 300


def test_device_memory_used_is_the_reserved_peak_over_the_devices_memory() -> None:
    """The allocator's reserved memory is what the device holds (the cache included), not the allocated peak."""
    t = trace([op("aten::mm", 0, 10)])
    t.memory.device_peak_allocated_bytes = 4 << 30
    t.memory.device_peak_reserved_bytes = 6 << 30
    t.memory.device_total_bytes = 8 << 30
    assert memory.analyze(t).device_used_fraction == pytest.approx(0.75)


def test_attention_and_convolution_backward_flops() -> None:
    """FLOPs the profiler does not give: attention's two matmuls (QK^T and attention x V) and a convolution's
    backward (the gradients of its input and of its weight, each as many multiply-adds as the forward)."""
    q = (2, 4, 128, 64)
    attn = op("aten::scaled_dot_product_attention", 0, 100, shapes=(q, q, q), dtypes=("float",) * 3)
    assert operators.op_bytes_and_flops(attn)[1] == pytest.approx(4.0 * 2 * 4 * 128 * 128 * 64)
    grad_out, inp, weight = (8, 16, 30, 30), (8, 3, 32, 32), (16, 3, 3, 3)
    conv = op("aten::convolution_backward", 0, 100, shapes=(grad_out, inp, weight), dtypes=("float",) * 3)
    assert operators.op_bytes_and_flops(conv)[1] == pytest.approx(2 * 2 * (8 * 16 * 30 * 30) * (3 * 3 * 3))


def test_an_operators_flops_are_per_step() -> None:
    t = trace([gemm(0, 5000), gemm(10_000, 5000, step=1)], steps=2)
    (stat,) = operators.analyze(t, CEILINGS).operators
    assert stat.calls_per_step == 1.0
    assert stat.flops == pytest.approx(2 * 256 * 512 * 512)
    assert stat.achieved_flops_s == pytest.approx(2 * 256 * 512 * 512 / 0.005)


BF16 = FakeCeilings({"fp32": 100e9, "bf16": 400e9}, 10e9)
"""fp32 ridge at 10 FLOP/B, bf16 ridge at 40 FLOP/B."""


def _bf16_gemm(start_us: float, m: int = 65536, k: int = 64, n: int = 64) -> OpEvent:
    return op("aten::addmm", start_us, 1000, flops=2 * m * k * n, shapes=((n,), (m, k), (k, n), (), ()),
              dtypes=("c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"))


def test_a_bf16_operator_is_placed_on_the_bf16_roofline() -> None:
    """A bf16 GEMM of ~32 FLOP/B is above the fp32 ridge (10) but below the bf16 one (40): bandwidth-bound. Its
    dtype is the one most of its calls ran in (two bf16 calls, one fp32)."""
    fp32_call = op("aten::addmm", 3000, 1000, flops=2 * 65536 * 64 * 64,
                   shapes=((64,), (65536, 64), (64, 64), (), ()),
                   dtypes=("float", "float", "float", "Scalar", "Scalar"))
    t = trace([_bf16_gemm(0), _bf16_gemm(1500), fp32_call])
    (stat,) = operators.analyze(t, BF16).operators
    assert stat.dtype == "bf16"
    assert stat.bound == operators.BANDWIDTH
    only_bf16 = trace([_bf16_gemm(0)])
    (s,) = operators.analyze(only_bf16, BF16).operators
    assert s.intensity is not None and 10 < s.intensity < 40
    assert s.bound == operators.BANDWIDTH and s.pct_of_peak == pytest.approx(s.bytes_moved / 0.001 / 10e9)
    # compute-bound at the bf16 peak: % of the bf16 ceiling, not of the fp32 one
    square = trace([_bf16_gemm(0, m=2048, k=2048, n=2048)])
    (c,) = operators.analyze(square, BF16).operators
    assert c.bound == operators.COMPUTE
    assert c.pct_of_peak == pytest.approx(2 * 2048**3 / 0.001 / 400e9)


def test_cache_residence_is_judged_per_call_not_per_step() -> None:
    """100 multiplies of 64 KiB a step: each call's data stays in cache though the step moves 12.8 MiB."""
    numel = 16 * 1024
    ops = [op("aten::mul", i * 40, 30, shapes=((numel,), (numel,)), dtypes=("float", "float")) for i in range(100)]
    (stat,) = operators.analyze(trace(ops), CEILINGS).operators
    assert stat.bytes_moved > operators.CACHE_RESIDENT_BYTES
    assert stat.bound == operators.CACHE_RESIDENT


def test_a_cuda_kernel_above_the_kernel_threshold_is_not_overhead() -> None:
    """On CUDA an operator is timed by its kernels, and tiny means under 10 µs of kernel, not the host's 20 µs."""
    numel = 4 << 20
    mul = replace(op("aten::mul", 0, 8, shapes=((numel,), (numel,)), dtypes=("float", "float")), device_us=15.0)
    t = trace([mul])
    t.device = "cuda"
    (stat,) = operators.analyze(t, CEILINGS).operators
    assert stat.bound != operators.OVERHEAD


def test_a_non_leaf_operator_that_spends_its_time_in_itself_counts_its_bytes() -> None:
    numel = 4 << 20
    mul = op("aten::mul", 0, 1000, shapes=((numel,), (numel,)), dtypes=("float", "float"), leaf=False)
    (stat,) = operators.analyze(trace([mul]), CEILINGS).operators
    assert stat.bytes_moved == pytest.approx(3 * numel * 4)
    assert stat.bound == operators.BANDWIDTH


def test_the_loader_gets_workers_at_a_fifth_of_the_step_waiting_and_two_on_one_core() -> None:
    info = LoaderInfo("DataLoader", True, num_workers=0, pin_memory=False, prefetch_factor=None,
                      persistent_workers=False, batch_size=16)
    t = trace([op("aten::add", 0, 10)], mode=TRAIN, data_wait_s=0.002, loader=info)
    assert dataloader.analyze(t).suggested.get("num_workers") == 2
    assert dataloader.suggested_workers(1, None) == 2  # one usable core: still two, so loading overlaps compute


def test_an_int8_weight_linear_is_an_int8_matrix_product_on_the_roofline() -> None:
    """`quantized::linear_dynamic` (dlperf's dynamic_int8 pass) as torch 2.13's profiler records it: input [64, 256]
    float, the packed weight with no shape, no FLOPs; inside the call the int32 accumulator `empty_like([64, 512])`.
    It is 2 x 64 x 256 x 512 = 16.8 M integer operations, reading 64 KiB of input and 128 KiB of int8 weight and
    writing a 128 KiB output, held to the int8 peak (400 G in CEILINGS): 16.8 M in 100 us is 168 GOP/s, 42%. It read
    "bandwidth-bound, 0.0 FLOP/B" (an input's size moved, no FLOPs) at 4% of the bandwidth."""
    qlin = op("quantized::linear_dynamic", 1000, 100, self_us=98, leaf=False, shapes=((64, 256), (), ()),
              dtypes=("float", "ScriptObject", "Scalar"))
    inner = [op("aten::empty", 1001, 1, depth=1, shapes=((), (), (), (), (), ()), dtypes=("", "", "", "", "", "")),
             op("aten::empty_like", 1003, 1, depth=1, shapes=((64, 512), (), (), (), (), ()),
                dtypes=("float", "Scalar", "Scalar", "", "", "Scalar"))]
    row = next(s for s in operators.analyze(trace([qlin, *inner]), CEILINGS).operators
               if s.name == "quantized::linear_dynamic")
    assert row.flops == 2 * 64 * 256 * 512
    assert row.bytes_moved == 64 * 256 * 4 + 256 * 512 + 64 * 512 * 4
    assert row.dtype == "int8"
    assert row.bound == operators.COMPUTE
    assert row.pct_of_peak == pytest.approx(2 * 64 * 256 * 512 / 98e-6 / 400e9)
    # without the accumulator (another quantized engine) its FLOPs are not known: not placed on the roofline
    alone = operators.analyze(trace([qlin]), CEILINGS).operators[0]
    assert (alone.bound, alone.pct_of_peak, alone.intensity) == (operators.UNKNOWN, None, None)


def test_a_to_that_calls_nothing_moves_nothing_and_a_converting_one_moves_its_copy() -> None:
    """`x.to(torch.float32)` of a float32 [2048, 2048] returns x: a leaf `aten::to` of 1 us, which counted 16 MiB
    read and 16 MiB written ("23652.88 GB/s" in the operators table). One that converts bf16 to float calls
    `_to_copy` and `copy_`, and the copy's bytes are what moved: 8 MiB read, 16 MiB written."""
    noop = op("aten::to", 1000, 1, shapes=((2048, 2048), (), (), (), ()), dtypes=("float", "Scalar", "", "", ""))
    convert = [op("aten::to", 2000, 900, self_us=2, leaf=False, shapes=((2048, 2048), ()),
                  dtypes=("c10::BFloat16", "Scalar")),
               op("aten::copy_", 2005, 890, depth=1, shapes=((2048, 2048), (2048, 2048)),
                  dtypes=("float", "c10::BFloat16"))]
    rows = {s.name: s for s in operators.analyze(trace([noop, *convert]), CEILINGS).operators}
    assert rows["aten::to"].bytes_moved == 0
    assert rows["aten::to"].achieved_bytes_s is None
    assert rows["aten::copy_"].bytes_moved == 2048 * 2048 * (2 + 4)


def test_an_int8_matrix_product_the_profiler_gives_no_flops_is_counted_from_its_shapes() -> None:
    """`torch._int_mm` of int8 [256, 512] x [512, 128], as torch 2.13's profiler records it: no FLOPs. It is 2 x 256 x
    512 x 128 = 33.6 M integer operations, reading 128 KiB + 64 KiB of int8 and writing an int32 [256, 128] (128 KiB);
    in 200 us that is 168 GOP/s, 42% of the int8 peak. It read "0.0 FLOP/B (below the int8 ridge 139.8), 4% of its
    roofline ceiling", bandwidth-bound."""
    int_mm = op("aten::_int_mm", 1000, 200, shapes=((256, 512), (512, 128)), dtypes=("signed char", "signed char"))
    row = operators.analyze(trace([int_mm]), CEILINGS).operators[0]
    assert row.flops == 2 * 256 * 512 * 128
    assert row.bytes_moved == 256 * 512 + 512 * 128 + 256 * 128 * 4
    assert (row.dtype, row.bound) == ("int8", operators.COMPUTE)
    assert row.pct_of_peak == pytest.approx(2 * 256 * 512 * 128 / 200e-6 / 400e9)
